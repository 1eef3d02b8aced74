package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill/examples/seckill/broker"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/examples/seckill/frontdoor"
	"github.com/seckillkit/seckill/examples/seckill/web"
	"github.com/seckillkit/seckill/order"
)

// client is how the default run's buyers and payment provider reach the
// service: through the buyers' face of the HTTP API, in process (forty
// thousand buyers at once need no sockets), as a real client would: each
// buyer with a bearer token of their own and from an address of their
// own, every click under an Idempotency-Key, every callback signed.
type client struct {
	h      http.Handler // the buyers' face
	key    []byte       // signs the buyers' tokens
	secret []byte       // signs the callbacks
	tokens sync.Map     // buyer → token
}

func newClient(a *web.API) *client {
	return &client{h: a, key: a.Security().BuyerKeys[0], secret: a.Security().CallbackSecrets[0]}
}

// token returns buyer's bearer token, minted once.
func (c *client) token(buyer int64) (string, error) {
	if t, ok := c.tokens.Load(buyer); ok {
		return t.(string), nil
	}
	t, err := web.MintBuyerToken(c.key, buyer, time.Hour)
	if err != nil {
		return "", err
	}
	c.tokens.Store(buyer, t)
	return t, nil
}

// do runs one request through the handler.
func (c *client) do(req *http.Request) (int, http.Header, map[string]any) {
	rec := httptest.NewRecorder()
	c.h.ServeHTTP(rec, req)
	var out map[string]any
	d := json.NewDecoder(rec.Body)
	d.UseNumber()
	_ = d.Decode(&out)
	return rec.Code, rec.Header(), out
}

// click is one buyer pressing "buy": POST /orders, with the errors of
// service.click for the answers (broker.ErrBusy also for 429 and 409
// in_progress, after waiting for Retry-After). key is the click's
// Idempotency-Key: a retry of the same click sends the same key.
func (c *client) click(ctx context.Context, buyer int64, key string) (frontdoor.Reservation, error) {
	tok, err := c.token(buyer)
	if err != nil {
		return frontdoor.Reservation{}, err
	}
	var res frontdoor.Reservation
	req, err := http.NewRequestWithContext(context.WithValue(ctx, web.ReservationSink{}, &res), "POST", "/orders", http.NoBody)
	if err != nil {
		return frontdoor.Reservation{}, err
	}
	req.RemoteAddr = fmt.Sprintf("10.%d.%d.%d:40000", byte(buyer>>16), byte(buyer>>8), byte(buyer))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set(web.IdempotencyHeader, key)
	code, h, out := c.do(req)
	switch status, _ := out["status"].(string); {
	case code == http.StatusAccepted:
		if res.RequestID == uuid.Nil { // a replayed answer: the ids only
			res.RequestID, _ = uuid.Parse(fmt.Sprint(out["request_id"]))
			res.ReservationID, _ = uuid.Parse(fmt.Sprint(out["reservation_id"]))
			res.OrderID, _ = strconv.ParseInt(fmt.Sprint(out["order_id"]), 10, 64)
			res.UserID = buyer
		}
		return res, nil
	case code == http.StatusGone:
		return res, frontdoor.ErrSoldOut
	case code == http.StatusConflict && status == "already_reserved":
		return res, frontdoor.ErrAlreadyBought
	case code == http.StatusForbidden:
		return res, frontdoor.ErrSaleClosed
	case code == http.StatusServiceUnavailable && status == web.StatusUnavailable && out["reason"] != "store":
		return res, frontdoor.ErrDown
	case code == http.StatusServiceUnavailable:
		return res, broker.ErrBusy
	case code == http.StatusTooManyRequests || (code == http.StatusConflict && status == web.StatusInProgress):
		wait, _ := strconv.Atoi(h.Get("Retry-After"))
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(time.Duration(max(wait, 1)) * time.Second):
		}
		return res, broker.ErrBusy
	}
	return res, fmt.Errorf("POST /orders: %d %v", code, out)
}

// pay is the provider's callback for p, signed now: POST
// /payments/callback, delivered again (signed afresh) after a 503 or a
// same-second replay refusal, as a provider retries. Other refusals are
// errors.
func (c *client) pay(ctx context.Context, p flow.Payment) (order.PaymentResult, error) {
	var res order.PaymentResult
	body, err := json.Marshal(p)
	if err != nil {
		return res, err
	}
	var out map[string]any
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, "POST", "/payments/callback", bytes.NewReader(body))
		if err != nil {
			return res, err
		}
		req.Header.Set(web.SignatureHeader, web.SignCallback(time.Now(), body, c.secret))
		var code int
		code, _, out = c.do(req)
		var wait time.Duration
		switch {
		case code == http.StatusUnauthorized && out["reason"] == web.SigReplayed && attempt < 60:
			// The same callback signed within the same second is the same
			// signature, used already: deliver it again in a later
			// second, as a provider retries a refused delivery. The jitter
			// parts two deliveries of one callback retrying in step (a
			// duplicate callback during a database outage), which would
			// otherwise sign the same second again and again.
			wait = time.Until(time.Now().Truncate(time.Second).Add(time.Second)) + rand.N(900*time.Millisecond)
		case code == http.StatusServiceUnavailable && attempt < 60:
			// The service cannot check the signature now: retry, as a
			// provider does, signed afresh.
			wait = time.Second
		}
		if wait > 0 {
			select {
			case <-ctx.Done():
				return res, ctx.Err()
			case <-time.After(wait):
			}
			continue
		}
		if code != http.StatusOK {
			return res, fmt.Errorf("POST /payments/callback: %d %v", code, out)
		}
		break
	}
	res.PaymentID, _ = uuid.Parse(fmt.Sprint(out["payment_id"]))
	for k, v := range web.PaymentResults {
		if v == out["result"] {
			res.Kind = k
		}
	}
	return res, nil
}
