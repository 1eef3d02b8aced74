package web

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/seckillkit/seckill/examples/seckill/guardstore"
)

// The front door limits POST /orders per client address and per buyer: at
// most SecurityConfig.AddrRate and BuyerRate requests in a one-second
// window. More get 429 with Retry-After (whole seconds until the window
// ends). The windows live in the front door's Redis (in process with
// -stack memory), so every instance of the service shares them; both are
// counted in one round trip. A request without a valid token counts
// against its address alone.

// Rate-limit scopes, as counted in seckill_rate_limited_total.
const (
	ScopeBuyer   = "buyer"
	ScopeAddress = "address"
)

// rateWindow is the length of a rate-limit window.
const rateWindow = time.Second

// allow counts one request of the client's address and, when buyer is
// not 0, of the buyer, each against its limit per second, and runs claim
// (may be nil) in the same round trip; false when a limit is over (and
// 429 answered; the claim, if it stored, is given back) or the store
// failed (503 answered, with "reason": "store": a limit that cannot be
// checked is not waived).
func (g *guard) allow(w http.ResponseWriter, r *http.Request, buyer int64, claim *guardstore.Claim) bool {
	var keys []string
	var limits []int
	var scopes []string
	if g.cfg.AddrRate >= 0 {
		keys, limits, scopes = append(keys, guardstore.Key(g.prefix, "rate:"+ScopeAddress, clientAddr(r))), append(limits, g.cfg.AddrRate), append(scopes, ScopeAddress)
	}
	if buyer != 0 && g.cfg.BuyerRate >= 0 {
		keys, limits, scopes = append(keys, guardstore.Key(g.prefix, "rate:"+ScopeBuyer, strconv.FormatInt(buyer, 10))), append(limits, g.cfg.BuyerRate), append(scopes, ScopeBuyer)
	}
	if len(keys) == 0 && claim == nil {
		return true
	}
	waits, err := g.stores.Hit(r.Context(), keys, limits, rateWindow, claim)
	if err != nil {
		g.storeDown(w, r, "rate limit", err)
		return false
	}
	for i, wait := range waits {
		if wait <= 0 {
			continue
		}
		if claim != nil && claim.Claimed {
			if _, err := g.stores.Settle(r.Context(), claim.Key, claim.Pending, "", 0); err != nil {
				g.log.WarnContext(r.Context(), "idempotency claim not given back; it lapses with its lease", "error", err)
			}
		}
		g.rateLimited.Inc(1, scopes[i])
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		writeError(w, http.StatusTooManyRequests, statusRateLimited, fmt.Sprintf("more than %d requests per second for this %s", limits[i], scopes[i]))
		return false
	}
	return true
}
