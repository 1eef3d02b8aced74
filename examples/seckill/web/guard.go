package web

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"

	"github.com/seckillkit/seckill/examples/seckill/guardstore"
)

// guard is the HTTP face's security: the keys, the store of what it
// remembers between requests, and the counters of what it refused.
type guard struct {
	cfg    SecurityConfig
	stores guardstore.Store
	prefix string // of the store's keys
	log    *slog.Logger
	// unavailable tells an error of an unreachable database (503).
	unavailable func(error) bool

	refusedCallbacks Counter // by reason
	refusedBuyers    Counter // by reason
	refusedOperators Counter
	rateLimited      Counter // by scope
	idemOutcomes     Counter // by outcome
	internalErrors   Counter
}

// newGuard builds the guard of s's HTTP face, on s's guard store (the
// front door's Redis on the real stack, an in-process map in memory). cfg
// gets its defaults.
func newGuard(s Service, cfg SecurityConfig) (*guard, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	g := &guard{cfg: cfg, log: s.Logger(), unavailable: s.DatabaseUnavailable}
	g.stores, g.prefix = s.GuardStore()
	g.refusedCallbacks = s.NewCounter("seckill.callbacks_refused",
		"Payment callbacks refused with 401 before anything was parsed or written, by reason (missing, malformed, expired, wrong, replayed).", "reason")
	g.refusedBuyers = s.NewCounter("seckill.buyer_auth_refused",
		"Buyer requests refused with 401: no bearer token, or one that does not verify.", "reason")
	g.refusedOperators = s.NewCounter("seckill.operator_auth_refused",
		"Operator routes asked on the buyers' address without the operator token (401).")
	g.rateLimited = s.NewCounter("seckill.rate_limited", "POST /orders refused with 429, by scope (buyer, address).", "scope")
	g.idemOutcomes = s.NewCounter("seckill.idempotency",
		"Requests under an idempotency key by outcome: first, replayed (the stored answer), conflict (422: another body), in_progress (409).", "outcome")
	g.internalErrors = s.NewCounter("seckill.http_internal_errors", "500 answers (each logged with its error_id).")
	return g, nil
}

// The statuses of the answers' "status" field that the guard adds.
const (
	statusUnauthorized = "unauthorized" // 401
	statusRateLimited  = "rate_limited" // 429
	statusTooLarge     = "too_large"    // 413
)

// storeDown answers 503 when the guard's store cannot answer: the
// request did not reach the front door; retry.
func (g *guard) storeDown(w http.ResponseWriter, r *http.Request, what string, err error) {
	g.log.WarnContext(r.Context(), what+" unavailable", "error", err)
	w.Header().Set("Retry-After", "1")
	writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": StatusUnavailable, "reason": "store",
		"error": "the " + what + " is unavailable, try again"})
}

// unauthorized answers 401 with a challenge naming the scheme.
func unauthorized(w http.ResponseWriter, scheme, msg string) {
	w.Header().Set("WWW-Authenticate", scheme)
	writeError(w, http.StatusUnauthorized, statusUnauthorized, msg)
}

// internalError answers 500 with an error id and logs the error under it:
// the client sees the id, never the internal text (which may hold SQL). A
// database that cannot be reached (a failover under way, a connection
// cut, a COMMIT whose outcome is unknown: Service.DatabaseUnavailable) is
// answered 503 with Retry-After instead: the request may be sent again,
// and a repeated order or payment is met by its idempotency key.
func (g *guard) internalError(w http.ResponseWriter, r *http.Request, err error) {
	g.internalErrors.Inc(1)
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	g.log.ErrorContext(r.Context(), "request failed", "error_id", id, "method", r.Method, "path", r.URL.Path, "error", err)
	if g.unavailable(err) {
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": StatusUnavailable, "reason": "database",
			"error": "the database is unavailable, try again", "error_id": id})
		return
	}
	writeJSON(w, http.StatusInternalServerError, map[string]string{"status": "error", "error": "internal error", "error_id": id})
}

// readBody reads a request's whole body, at most limit bytes: false (and
// 413 or 400 answered) when it is longer or cannot be read.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, bool) {
	if r.Body == nil {
		return nil, true
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, statusTooLarge, fmt.Sprintf("the body exceeds %d bytes", limit))
		return nil, false
	case err != nil:
		writeError(w, http.StatusBadRequest, "invalid", "the body could not be read")
		return nil, false
	}
	return body, true
}

// clientAddr is the address a request came from: the connection's peer.
// (Behind a proxy, put its rate limit there, or derive the address from
// the header the proxy sets, trusting it from the proxy alone.)
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
