package web

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/seckillkit/seckill/examples/seckill/guardstore"
)

// POST /orders takes an Idempotency-Key header (the IETF httpapi draft,
// with Stripe's semantics), and a payment callback's callback_id is its
// key:
//
//   - the first request under a key runs, and its answer is stored under
//     the key (202, 200 and the definite refusals: 404, 409, 410, 422;
//     not a 5xx, 503, 429 or 403, which a retry should run again);
//   - a request with the same key and the same body gets that answer
//     again, byte for byte (the same request, reservation and order ids),
//     with "Idempotent-Replayed: true";
//   - the same key with another body is 422 idempotency_mismatch;
//   - while the first request still runs, the same key is 409 in_progress
//     with Retry-After.
//
// Keys are per buyer (two buyers may pick the same key) and per route. A
// key is at most 255 printable ASCII characters, bare or as a quoted
// structured-field string. The records live in the front door's Redis for
// SecurityConfig.IdempotencyTTL (24 hours by default: it must cover the
// sale), in process with -stack memory. Once a request has claimed its
// key, it runs to its end even if the client goes away, so that the retry
// finds its answer.

// The headers of an idempotent request and of a replayed answer.
const (
	IdempotencyHeader = "Idempotency-Key"
	ReplayedHeader    = "Idempotent-Replayed"
)

// The statuses of the answers' "status" field that idempotency adds.
const (
	StatusMismatch   = "idempotency_mismatch" // 422
	StatusInProgress = "in_progress"          // 409
)

// idemRecord is what the store holds under a key: pending (Owner set)
// while the first request runs, then its answer.
type idemRecord struct {
	Fingerprint string `json:"fp"`
	Owner       string `json:"owner,omitempty"`
	Done        bool   `json:"done,omitempty"`
	Code        int    `json:"code,omitempty"`
	RetryAfter  string `json:"retry_after,omitempty"`
	Body        []byte `json:"body,omitempty"`
}

// idempotencyKey validates an Idempotency-Key header value.
func idempotencyKey(v string) (string, bool) {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	if v == "" || len(v) > 255 {
		return "", false
	}
	for i := range len(v) {
		if v[i] < 0x20 || v[i] > 0x7e || v[i] == '"' || v[i] == '\\' {
			return "", false
		}
	}
	return v, true
}

// storable reports whether an answer is stored under its key.
func storable(code int) bool {
	switch code {
	case http.StatusOK, http.StatusAccepted, http.StatusNotFound, http.StatusConflict, http.StatusGone, http.StatusUnprocessableEntity:
		return true
	}
	return false
}

// capture is a ResponseWriter that keeps the answer, to store it.
type capture struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (c *capture) Header() http.Header { return c.header }
func (c *capture) WriteHeader(code int) {
	if c.code == 0 {
		c.code = code
	}
}
func (c *capture) Write(b []byte) (int, error) {
	if c.code == 0 {
		c.code = http.StatusOK
	}
	return c.body.Write(b)
}

// newClaim prepares the claim of key in namespace ns for a request whose
// raw body is body.
func (g *guard) newClaim(r *http.Request, ns, key string, body []byte) *guardstore.Claim {
	fp := sha256.New()
	fp.Write([]byte(r.Method + " " + r.URL.Path + "\n"))
	fp.Write(body)
	owner := make([]byte, 16)
	_, _ = rand.Read(owner)
	rec := idemRecord{Fingerprint: hex.EncodeToString(fp.Sum(nil)), Owner: hex.EncodeToString(owner)}
	pending, _ := json.Marshal(rec)
	return &guardstore.Claim{Key: guardstore.Key(g.prefix, "idem:"+ns, key), Pending: string(pending), Lease: g.cfg.PendingLease, Fingerprint: rec.Fingerprint}
}

// idempotent runs h once for a claim the store ran (guard.allow): see
// above.
func (g *guard) idempotent(w http.ResponseWriter, r *http.Request, claim *guardstore.Claim, h func(ctx context.Context, w http.ResponseWriter)) {
	if !claim.Claimed {
		var rec idemRecord
		if err := json.Unmarshal([]byte(claim.Held), &rec); err != nil {
			g.internalError(w, r, errors.Join(errors.New("idempotency record unreadable"), err))
			return
		}
		switch {
		case rec.Fingerprint != claim.Fingerprint:
			g.idemOutcomes.Inc(1, "conflict")
			writeError(w, http.StatusUnprocessableEntity, StatusMismatch, "this "+IdempotencyHeader+" was used with another request body")
		case !rec.Done:
			g.idemOutcomes.Inc(1, "in_progress")
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusConflict, StatusInProgress, "the first request with this "+IdempotencyHeader+" is still running; retry")
		default:
			g.idemOutcomes.Inc(1, "replayed")
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set(ReplayedHeader, "true")
			if rec.RetryAfter != "" {
				w.Header().Set("Retry-After", rec.RetryAfter)
			}
			w.WriteHeader(rec.Code)
			_, _ = w.Write(rec.Body)
		}
		return
	}
	g.idemOutcomes.Inc(1, "first")
	// The claimed request runs to its end even if the client leaves: its
	// retry must find the answer, not a half-done click.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), g.cfg.PendingLease)
	defer cancel()
	c := &capture{header: http.Header{}}
	h(ctx, c)
	if c.code == 0 {
		c.code = http.StatusOK
	}
	final := ""
	if storable(c.code) {
		rec := idemRecord{Fingerprint: claim.Fingerprint, Done: true, Code: c.code, RetryAfter: c.header.Get("Retry-After"), Body: c.body.Bytes()}
		b, _ := json.Marshal(rec)
		final = string(b)
	}
	if ok, err := g.stores.Settle(ctx, claim.Key, claim.Pending, final, g.cfg.IdempotencyTTL); err != nil || !ok {
		g.log.WarnContext(ctx, "idempotency record not settled", "ok", ok, "error", err)
	}
	for k, v := range c.header {
		w.Header()[k] = v
	}
	w.WriteHeader(c.code)
	_, _ = w.Write(c.body.Bytes())
}

// keyOf reads a request's Idempotency-Key: "" when there is none, false
// (and 400 answered) when it is not a valid key.
func keyOf(w http.ResponseWriter, r *http.Request) (string, bool) {
	vs := r.Header.Values(IdempotencyHeader)
	if len(vs) == 0 {
		return "", true
	}
	k, ok := idempotencyKey(strings.TrimSpace(vs[0]))
	if !ok || len(vs) > 1 {
		writeError(w, http.StatusBadRequest, "invalid", IdempotencyHeader+" must be one value of 1 to 255 printable ASCII characters")
		return "", false
	}
	return k, true
}
