package web

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/seckillkit/seckill/examples/seckill/guardstore"
)

// A payment callback is signed by the provider, as payment providers sign
// their webhooks:
//
//	Seckill-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>[,v1=<hex …>]
//
// where each v1 is HMAC-SHA256(secret, "<t>." + raw body) under one of the
// provider's secrets (SecurityConfig.CallbackSecrets). The service checks
// the header before it parses a byte of the body: some v1 must match under
// some active secret (compared in constant time), t must be within the
// tolerance of now (either way), and a signature may be used once (a
// replay within the tolerance is refused as well; the provider signs every
// delivery afresh). Anything else is 401 and writes nothing.

// SignatureHeader names the callbacks' signature header.
const SignatureHeader = "Seckill-Signature"

// The reasons a callback's signature is refused, as counted in
// seckill_callbacks_refused_total.
const (
	SigMissing   = "missing"   // no header
	SigMalformed = "malformed" // not t=…,v1=…
	SigExpired   = "expired"   // t outside the tolerance
	SigWrong     = "wrong"     // no v1 matches under any active secret
	SigReplayed  = "replayed"  // this signature was used before
)

// MACHex is the hex HMAC-SHA256 of "<t>." + body under secret.
func MACHex(secret []byte, t int64, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(strconv.FormatInt(t, 10)))
	m.Write([]byte{'.'})
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// SignCallback returns the Seckill-Signature value for body at t, one v1
// per secret (a provider rotating its secret signs with both).
func SignCallback(t time.Time, body []byte, secrets ...[]byte) string {
	ts := t.Unix()
	var b strings.Builder
	b.WriteString("t=" + strconv.FormatInt(ts, 10))
	for _, s := range secrets {
		b.WriteString(",v1=" + MACHex(s, ts, body))
	}
	return b.String()
}

// verifyCallback checks a callback's signature header against its raw
// body; "" when it holds (and the signature is now used), else the reason.
func (g *guard) verifyCallback(ctx context.Context, header string, body []byte) (reason string, err error) {
	if header == "" {
		return SigMissing, nil
	}
	if len(header) > 1024 {
		return SigMalformed, nil
	}
	var (
		ts   int64
		sigs []string
		seen bool
	)
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		switch {
		case !ok:
			return SigMalformed, nil
		case k == "t":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || seen || n <= 0 {
				return SigMalformed, nil
			}
			ts, seen = n, true
		case k == "v1":
			if len(v) != 2*sha256.Size {
				return SigMalformed, nil
			}
			sigs = append(sigs, v)
		}
		// Other schemes (v0, a future v2) are ignored, as providers do.
	}
	if !seen || len(sigs) == 0 {
		return SigMalformed, nil
	}
	if d := time.Since(time.Unix(ts, 0)); d > g.cfg.Tolerance || d < -g.cfg.Tolerance {
		return SigExpired, nil
	}
	match := ""
	for _, secret := range g.cfg.CallbackSecrets {
		want := []byte(MACHex(secret, ts, body))
		for _, s := range sigs {
			if hmac.Equal(want, []byte(strings.ToLower(s))) {
				match = string(want)
			}
		}
	}
	if match == "" {
		return SigWrong, nil
	}
	// Used once: remembered for twice the tolerance (a timestamp is
	// accepted up to the tolerance either side of now).
	first, err := g.stores.UseOnce(ctx, guardstore.Key(g.prefix, "sig", match), 2*g.cfg.Tolerance)
	if err != nil {
		return "", err
	}
	if !first {
		return SigReplayed, nil
	}
	return "", nil
}
