package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/examples/seckill/broker"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/examples/seckill/frontdoor"
	"github.com/seckillkit/seckill/examples/seckill/guardstore"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/order"
)

// API is the HTTP face of a [Service]: what a real seckill service would
// expose. It has two faces: the buyers' (ServeHTTP: orders and payment
// callbacks, every request authenticated) and the operators' (Operator:
// the page, the audit, the reconciliation, the figures), served on a
// listener of their own. On the buyers' face the operator routes answer
// only to the operator token (404 when none is configured). Every request
// runs in a span continuing the caller's trace (traceparent) or starting
// one (Service.Traced).
type API struct {
	s   Service
	g   *guard
	mon *Monitor // the operator page: GET / and GET /events; nil without
	// buyers and operators are the two faces behind the tracing
	// middleware.
	buyers, operators http.Handler
}

// New builds the two faces of s, secured by cfg (its zero fields get the
// defaults SecurityConfig names). With page, the operators' face serves
// the operator page, whose Monitor samples s until Close (or ctx ends).
func New(ctx context.Context, s Service, cfg SecurityConfig, page bool) (*API, error) {
	g, err := newGuard(s, cfg)
	if err != nil {
		return nil, err
	}
	a := &API{s: s, g: g}
	buyers, operators := http.NewServeMux(), http.NewServeMux()
	buyers.HandleFunc("POST /orders", a.placeOrder)
	buyers.HandleFunc("GET /orders/{request_id}", a.orderStatus)
	buyers.HandleFunc("POST /payments/callback", a.paymentCallback)
	op := map[string]http.Handler{
		"GET /audit":     http.HandlerFunc(a.audit),
		"GET /stats":     http.HandlerFunc(a.stats),
		"GET /reconcile": http.HandlerFunc(a.reconcile),
		"GET /metrics":   s.Metrics(),
	}
	if page {
		a.mon = StartMonitor(ctx, s)
		op["GET /{$}"] = http.HandlerFunc(a.mon.ServePage)
		op["GET /events"] = http.HandlerFunc(a.mon.ServeEvents)
	}
	for pattern, h := range op {
		operators.Handle(pattern, h)
		buyers.Handle(pattern, a.operatorOnly(h))
	}
	a.buyers, a.operators = s.Traced(buyers), s.Traced(operators)
	return a, nil
}

// Close stops the operator page's sampling and ends its event streams;
// calling it again is a no-op.
func (a *API) Close() {
	if a.mon != nil {
		a.mon.Close()
	}
}

// Monitor is the operator page's monitor (nil without the page).
func (a *API) Monitor() *Monitor { return a.mon }

// Security is the face's live security configuration, with its
// defaults. Changing its keys between requests rotates them (what the
// rotation tests do; a service would restart with the new environment).
func (a *API) Security() *SecurityConfig { return &a.g.cfg }

// ServeHTTP serves the buyers' face.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.buyers.ServeHTTP(w, r) }

// Operator is the operators' face, for a listener of its own (on a
// loopback address: it asks for no credentials).
func (a *API) Operator() http.Handler { return a.operators }

// operatorOnly serves h on the buyers' face to the operator token alone:
// 404 when no token is configured (the route is not there), 401 without it.
func (a *API) operatorOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case a.g.cfg.OperatorToken == "":
			writeError(w, http.StatusNotFound, "unknown", "not found")
		case !a.g.operatorOK(r):
			a.g.refusedOperators.Inc(1)
			unauthorized(w, `Bearer realm="seckill-operator"`, "operator routes need the operator token")
		default:
			h.ServeHTTP(w, r)
		}
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, status, msg string) {
	writeJSON(w, code, map[string]string{"status": status, "error": msg})
}

// StatusUnavailable: 503, the front door (or the store of the HTTP face)
// cannot answer now; retry after Retry-After.
const StatusUnavailable = "unavailable"

// authBuyer returns the buyer of a request's token; false (and 401
// answered, counted) when there is none or it does not verify.
func (a *API) authBuyer(w http.ResponseWriter, r *http.Request) (int64, bool) {
	buyer, err := a.g.buyerOf(r)
	if err != nil {
		a.refuseBuyer(w, err)
		return 0, false
	}
	return buyer, true
}

// refuseBuyer answers 401 for a token buyerOf refused, and counts it.
func (a *API) refuseBuyer(w http.ResponseWriter, err error) {
	reason := "invalid"
	if errors.Is(err, errNoToken) {
		reason = "missing"
	}
	a.g.refusedBuyers.Inc(1, reason)
	unauthorized(w, `Bearer realm="seckill"`, err.Error())
}

// orderRequest is POST /orders' body: empty, or a JSON object naming the item
// (both fields optional: the item on sale). The buyer is the token's
// subject, never a field.
type orderRequest struct {
	ActivityID int64 `json:"activity_id"`
	SKUID      int64 `json:"sku_id"`
}

// placeOrder: POST /orders, "Authorization: Bearer <buyer token>", body
// empty or {"activity_id": …, "sku_id": …}, optional Idempotency-Key. 202
// when queued; 410 sold out; 409 already reserved by this buyer (or
// in_progress: the same key still running); 503 busy (the queue is full,
// or was a moment ago: then before the guard and the front door)
// or unavailable (the front door is down or being rebuilt), with
// Retry-After; 403 the sale is not open; 404 no such item on sale; 400
// invalid; 401 no or a bad token; 413 body too large; 422 the key was used
// with another body; 429 rate limited, with Retry-After.
func (a *API) placeOrder(w http.ResponseWriter, r *http.Request) {
	buyer, err := a.g.buyerOf(r)
	if err != nil {
		if a.g.allow(w, r, 0, nil) { // a bad token counts against its address
			a.refuseBuyer(w, err)
		}
		return
	}
	if a.s.Shed() { // the queue was full a moment ago: refuse before any store is asked
		busy(w)
		return
	}
	key, ok := keyOf(w, r)
	if !ok {
		return
	}
	body, ok := readBody(w, r, 1<<12)
	if !ok {
		return
	}
	if len(bytes.TrimSpace(body)) > 0 {
		var in orderRequest
		d := json.NewDecoder(bytes.NewReader(body))
		d.DisallowUnknownFields()
		if err := d.Decode(&in); err != nil || d.More() {
			writeError(w, http.StatusBadRequest, "invalid",
				`body must be empty or {"activity_id": <id>, "sku_id": <id>}; the buyer is the bearer token's subject`)
			return
		}
		if (in.ActivityID != 0 && in.ActivityID != a.s.Flow().Item.ActivityID) || (in.SKUID != 0 && in.SKUID != a.s.Flow().Item.SKUID) {
			writeError(w, http.StatusNotFound, "unknown_item", "no such item on sale")
			return
		}
	}
	var claim *guardstore.Claim
	if key != "" {
		claim = a.g.newClaim(r, "orders:"+strconv.FormatInt(buyer, 10), key, body)
	}
	if !a.g.allow(w, r, buyer, claim) { // the limits and the key's claim: one round trip
		return
	}
	run := func(ctx context.Context, w http.ResponseWriter) { a.click(ctx, w, r, buyer) }
	if claim == nil {
		run(r.Context(), w)
		return
	}
	a.g.idempotent(w, r, claim, run)
}

// ReservationSink, in a request's context, receives the reservation a
// click made: the example's in-process buyers hand it to the scanner that
// re-sends reservations.
type ReservationSink struct{}

func (a *API) click(ctx context.Context, w http.ResponseWriter, r *http.Request, buyer int64) {
	res, err := a.s.Click(ctx, buyer)
	switch {
	case errors.Is(err, frontdoor.ErrSoldOut):
		writeError(w, http.StatusGone, "sold_out", err.Error())
	case errors.Is(err, frontdoor.ErrAlreadyBought):
		writeError(w, http.StatusConflict, "already_reserved", err.Error())
	case errors.Is(err, frontdoor.ErrSaleClosed):
		writeError(w, http.StatusForbidden, "closed", err.Error())
	case errors.Is(err, broker.ErrBusy):
		busy(w)
	case errors.Is(err, frontdoor.ErrDown):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, StatusUnavailable, "the front door is unavailable, try again")
	case err != nil:
		a.g.internalError(w, r, err)
	default:
		if sink, ok := ctx.Value(ReservationSink{}).(*frontdoor.Reservation); ok {
			*sink = res
		}
		writeJSON(w, http.StatusAccepted, map[string]any{
			"status": "queued", "request_id": res.RequestID, "reservation_id": res.ReservationID, "order_id": res.OrderID,
			"trace_id": trace.SpanContextFromContext(ctx).TraceID().String(),
		})
	}
}

// busy answers a click the full queue refuses: 503, Retry-After.
func busy(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "1")
	writeError(w, http.StatusServiceUnavailable, "busy", "the queue is full, try again")
}

// orderStatus: GET /orders/{request_id}, "Authorization: Bearer <buyer
// token>". The order when it exists; else the reservation's fate
// (rejected, with the reason) or "queued". Another buyer's request is 404,
// as an unknown one; 401 no or a bad token.
func (a *API) orderStatus(w http.ResponseWriter, r *http.Request) {
	buyer, ok := a.authBuyer(w, r)
	if !ok {
		return
	}
	reqID, err := uuid.Parse(r.PathValue("request_id"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid", "request id must be a UUID")
		return
	}
	o, err := a.s.Flow().Orders.Get(r.Context(), a.s.Flow().Pool, seckill.Request{RequestID: reqID})
	if err == nil && o.UserID == buyer {
		writeJSON(w, http.StatusOK, map[string]any{
			"status": o.Status.String(), "order_id": o.OrderID, "order_no": o.OrderNo, "amount": o.TotalAmount,
			"currency": o.Currency, "expire_at": o.ExpireAt,
		})
		return
	}
	if err == nil {
		writeError(w, http.StatusNotFound, "unknown", "no such request")
		return
	}
	if !errors.Is(err, order.ErrNotFound) {
		a.g.internalError(w, r, err)
		return
	}
	resID, ok, err := a.s.FrontDoor().ReservationOf(r.Context(), reqID)
	if err != nil {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, StatusUnavailable, "the front door is unavailable, try again")
		return
	}
	if !ok {
		writeError(w, http.StatusNotFound, "unknown", "no such request")
		return
	}
	res, err := a.s.Flow().Inventory.GetReservation(r.Context(), a.s.Flow().Pool, resID)
	switch {
	case errors.Is(err, inventory.ErrReservationNotFound):
		writeJSON(w, http.StatusOK, map[string]any{"status": "queued"})
	case err != nil:
		a.g.internalError(w, r, err)
	case res.UserID != buyer:
		writeError(w, http.StatusNotFound, "unknown", "no such request")
	case res.Status == inventory.StatusRejected:
		writeJSON(w, http.StatusOK, map[string]any{"status": "rejected", "reason": res.FailureCode})
	default:
		writeJSON(w, http.StatusOK, map[string]any{"status": "queued"})
	}
}

// paymentCallback: POST /payments/callback, signed (Seckill-Signature, see
// callback.go) by the payment provider. 200 with what happened (paid,
// duplicate: the callback id or trade number seen before, with the first
// payment's id; refund); 401 unsigned, badly signed, expired or replayed
// (nothing parsed, nothing written); 404 unknown order; 422 amount or
// currency mismatch, or a callback id seen before with another payment
// (idempotency_mismatch); 400 invalid; 413 body too large.
func (a *API) paymentCallback(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r, 1<<14)
	if !ok {
		return
	}
	reason, err := a.g.verifyCallback(r.Context(), r.Header.Get(SignatureHeader), body)
	if err != nil {
		a.g.storeDown(w, r, "signature store", err)
		return
	}
	if reason != "" {
		a.g.refusedCallbacks.Inc(1, reason)
		w.Header().Set("WWW-Authenticate", SignatureHeader)
		writeJSON(w, http.StatusUnauthorized, map[string]string{"status": statusUnauthorized, "reason": reason,
			"error": "the callback's signature is " + reason})
		return
	}
	var p flow.Payment
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	if err := d.Decode(&p); err != nil || d.More() {
		writeError(w, http.StatusBadRequest, "invalid", `body must be {"order_id", "provider_trade_no", "callback_id", "amount", "currency"}`)
		return
	}
	res, err := a.s.RecordPayment(r.Context(), p)
	switch {
	case errors.Is(err, order.ErrInvalidArgument):
		writeError(w, http.StatusBadRequest, "invalid", err.Error())
	case errors.Is(err, order.ErrNotFound):
		writeError(w, http.StatusNotFound, "unknown_order", "no such order")
	case errors.Is(err, order.ErrMismatch):
		writeError(w, http.StatusUnprocessableEntity, "mismatch", err.Error())
	case err != nil:
		a.g.internalError(w, r, err)
	default:
		if res.Kind == order.PaymentDuplicate {
			same, err := a.samePayment(r.Context(), p, res.PaymentID)
			if err != nil {
				a.g.internalError(w, r, err)
				return
			}
			if !same {
				writeError(w, http.StatusUnprocessableEntity, StatusMismatch, "this callback id or trade number was recorded with another payment")
				return
			}
		}
		out := map[string]any{"result": PaymentResults[res.Kind], "order_status": res.Order.Status.String(), "payment_id": res.PaymentID}
		if res.Refund != nil {
			out["refund"] = res.Refund
		}
		writeJSON(w, http.StatusOK, out)
	}
}

// samePayment reports whether the payment recorded as id is the one p
// describes (a redelivery), not another payment under the same callback id
// or trade number.
func (a *API) samePayment(ctx context.Context, p flow.Payment, id uuid.UUID) (bool, error) {
	recs, err := a.s.Flow().Orders.Payments(ctx, a.s.Flow().Pool, p.OrderID)
	if err != nil {
		return false, err
	}
	for _, rec := range recs {
		if rec.PaymentID == id {
			return rec.ProviderTradeNo == p.ProviderTradeNo && rec.CallbackID == p.CallbackID && rec.Amount == p.Amount &&
				(p.Currency == "" || rec.Currency == p.Currency), nil
		}
	}
	return false, nil
}

// PaymentResults names the payment outcomes in the API.
var PaymentResults = map[order.PaymentKind]string{
	order.PaymentPaid:        "paid",
	order.PaymentDuplicate:   "duplicate",
	order.PaymentAfterCancel: "refund_after_cancel",
	order.PaymentOnPaidOrder: "refund_already_paid",
}

// audit: GET /audit. Every invariant, checked now in one snapshot of the
// database; 200 when all hold, 500 otherwise. The service is live (orders,
// payments, the canceller and the relays may be working), so a check exact
// only at rest that does not hold is reported skipped, not failed
// ("skipped": true, the work pending in its detail); the others are as
// strict as ever. GET /audit?at_rest=true judges every check: ask it only
// when nothing is in flight. The answer has "passed", "mode" ("live" or
// "at_rest"), "skipped" (how many checks) and "checks" (each with "at_rest"
// and "skipped").
func (a *API) audit(w http.ResponseWriter, r *http.Request) {
	atRest := r.URL.Query().Get("at_rest") == "true"
	checks, err := a.s.AuditNow(r.Context(), !atRest)
	if err != nil {
		a.g.internalError(w, r, err)
		return
	}
	passed := flow.Passed(checks)
	code := http.StatusOK
	if !passed {
		code = http.StatusInternalServerError
	}
	mode := "live"
	if atRest {
		mode = "at_rest"
	}
	writeJSON(w, code, map[string]any{"passed": passed, "mode": mode, "skipped": Skipped(checks), "checks": checks})
}

// stats: GET /stats: Service.Stats; 503 when a store it reads cannot
// answer.
func (a *API) stats(w http.ResponseWriter, r *http.Request) {
	st, err := a.s.Stats(r.Context())
	switch {
	case errors.Is(err, ErrUnavailable):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, StatusUnavailable, "the front door is unavailable, try again")
	case err != nil:
		a.g.internalError(w, r, err)
	default:
		writeJSON(w, http.StatusOK, st)
	}
}

// reconcile: GET /reconcile. The three-way reconciliation, now, with the
// three reconciliation reports (orders, ledger, events; "reports"): 200 when
// every difference is explained (work in flight shows as explained
// differences), 500 otherwise. The three stores cannot be read at one
// instant: while the sale runs, a unit can move between two reads and look
// unexplained, so an unexplained result is read again, up to three times,
// 100ms apart; a difference that stays is reported.
func (a *API) reconcile(w http.ResponseWriter, r *http.Request) {
	rec, err := a.s.ReconcileSettled(r.Context())
	if err != nil {
		a.g.internalError(w, r, err)
		return
	}
	code := http.StatusOK
	if !rec.Passed() {
		code = http.StatusInternalServerError
	}
	writeJSON(w, code, map[string]any{"passed": rec.Passed(), "reconciliation": rec})
}
