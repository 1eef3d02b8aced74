package main

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// The front door limits POST /orders per client address and per buyer: at
// most securityConfig.AddrRate and BuyerRate requests in a one-second
// window. More get 429 with Retry-After (whole seconds until the window
// ends). The windows live in the front door's Redis (in process with
// -stack memory), so every instance of the service shares them; both are
// counted in one round trip. A request without a valid token counts
// against its address alone.

// Rate-limit scopes, as counted in seckill_rate_limited_total.
const (
	scopeBuyer   = "buyer"
	scopeAddress = "address"
)

// rateWindow is the length of a rate-limit window.
const rateWindow = time.Second

// allow counts one request of the client's address and, when buyer is
// not 0, of the buyer, each against its limit per second; false when one
// is over (and 429 answered) or the store failed (503 answered, with
// "reason": "store": a limit that cannot be checked is not waived).
func (g *guard) allow(w http.ResponseWriter, r *http.Request, buyer int64) bool {
	var keys []string
	var limits []int
	var scopes []string
	if g.cfg.AddrRate >= 0 {
		keys, limits, scopes = append(keys, storeKey(g.prefix, "rate:"+scopeAddress, clientAddr(r))), append(limits, g.cfg.AddrRate), append(scopes, scopeAddress)
	}
	if buyer != 0 && g.cfg.BuyerRate >= 0 {
		keys, limits, scopes = append(keys, storeKey(g.prefix, "rate:"+scopeBuyer, strconv.FormatInt(buyer, 10))), append(limits, g.cfg.BuyerRate), append(scopes, scopeBuyer)
	}
	if len(keys) == 0 {
		return true
	}
	waits, err := g.stores.hit(r.Context(), keys, limits, rateWindow)
	if err != nil {
		g.storeDown(w, r, "rate limit", err)
		return false
	}
	for i, wait := range waits {
		if wait <= 0 {
			continue
		}
		g.rateLimited.inc(1, scopes[i])
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		writeError(w, http.StatusTooManyRequests, statusRateLimited, fmt.Sprintf("more than %d requests per second for this %s", limits[i], scopes[i]))
		return false
	}
	return true
}
