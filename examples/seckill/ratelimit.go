package main

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// The front door limits POST /orders per client address (before the token
// is even read) and per buyer (once it is): at most securityConfig.AddrRate
// and BuyerRate requests in a one-second window. More get 429 with
// Retry-After (whole seconds until the window ends). The windows live in
// the front door's Redis (in process with -stack memory), so every
// instance of the service shares them.

// Rate-limit scopes, as counted in seckill_rate_limited_total.
const (
	scopeBuyer   = "buyer"
	scopeAddress = "address"
)

// rateWindow is the length of a rate-limit window.
const rateWindow = time.Second

// allow counts one request of id in scope against limit per second; false
// when it is over (and 429 answered) or the store failed (503 answered:
// a limit that cannot be checked is not waived).
func (g *guard) allow(w http.ResponseWriter, r *http.Request, scope, id string, limit int) bool {
	if limit < 0 {
		return true
	}
	wait, err := g.stores.hit(r.Context(), storeKey(g.prefix, "rate:"+scope, id), limit, rateWindow)
	if err != nil {
		g.log.WarnContext(r.Context(), "rate limit unavailable", "scope", scope, "error", err)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, statusUnavailable, "the front door is unavailable, try again")
		return false
	}
	if wait <= 0 {
		return true
	}
	g.rateLimited.inc(1, scope)
	w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
	writeError(w, http.StatusTooManyRequests, statusRateLimited, fmt.Sprintf("more than %d requests per second for this %s", limit, scope))
	return false
}
