package web

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"
)

// The HTTP face trusts nobody by default (see README.md, "Security: buyers,
// callbacks, operators"):
//
//   - a buyer is the subject of a signed bearer token (an HS256 JWT, auth.go),
//     never a field of the body;
//   - a payment callback carries an HMAC-SHA256 signature over its timestamp
//     and raw body (callback.go), checked before anything is parsed;
//   - POST /orders and the callbacks are idempotent under a key
//     (idempotency.go), and the front door limits the rate per buyer and per
//     address (ratelimit.go);
//   - the operator routes are served on a listener of their own, on a
//     loopback address, or on the buyers' address only with the operator
//     token (api.go).

// The environment variables the keys are read from (never flags: a
// process's flags are visible to every user of the machine).
const (
	// EnvBuyerKeys holds the keys of the buyers' tokens, comma-separated:
	// the first signs, every one verifies (rotation). At least 32 bytes
	// each.
	EnvBuyerKeys = "SECKILL_BUYER_TOKEN_KEYS"
	// EnvCallbackSecrets holds the payment provider's signing secrets,
	// comma-separated, one or two: a callback signed with either is
	// accepted (rotation); the example's payer signs with the first.
	EnvCallbackSecrets = "SECKILL_CALLBACK_SECRETS"
	// EnvOperatorToken holds the operator token; empty: the operator
	// routes are served on the operator listener only.
	EnvOperatorToken = "SECKILL_OPERATOR_TOKEN"
)

// Defaults of SecurityConfig.
const (
	DefaultTolerance      = 5 * time.Minute
	DefaultIdempotencyTTL = 24 * time.Hour
	defaultPendingLease   = 30 * time.Second
	DefaultBuyerRate      = 10
	DefaultAddrRate       = 200
	defaultTokenLeeway    = 30 * time.Second
	minKeyLen             = 32
	maxSecrets            = 2
)

// SecurityConfig is what the HTTP face is started with. The zero value
// means: random keys (fit for a run whose buyers and payer live in the
// same process, never for a service), no operator token, the defaults
// below.
type SecurityConfig struct {
	// BuyerKeys verify the buyers' HS256 tokens; the first signs the
	// tokens the example mints. Each at least 32 bytes. Defaults to one
	// random key.
	BuyerKeys [][]byte
	// CallbackSecrets verify the payment callbacks' signatures: one, or
	// two while a secret is rotated. The example's payer signs with the
	// first. Each at least 32 bytes. Defaults to one random secret.
	CallbackSecrets [][]byte
	// OperatorToken, when set, lets the operator routes be reached on the
	// buyers' address with "Authorization: Bearer <token>". Empty: they
	// are not served there at all.
	OperatorToken string
	// Tolerance is how far a callback's signed timestamp may be from now,
	// either way. Defaults to 5 minutes.
	Tolerance time.Duration
	// IdempotencyTTL is how long an answer stays stored under its
	// Idempotency-Key; it must cover the sale. Defaults to 24 hours.
	IdempotencyTTL time.Duration
	// PendingLease is how long a key whose first request has not finished
	// stays claimed (a retry meanwhile gets 409 in_progress). Defaults to
	// 30 seconds.
	PendingLease time.Duration
	// BuyerRate and AddrRate are the requests per second POST /orders
	// accepts per buyer and per client address; more get 429. Default to
	// 10 and 200; negative means no limit.
	BuyerRate, AddrRate int
}

// withDefaults fills the zero fields and checks the rest.
func (c SecurityConfig) withDefaults() (SecurityConfig, error) {
	var err error
	if len(c.BuyerKeys) == 0 {
		c.BuyerKeys = [][]byte{randomKey()}
	}
	if len(c.CallbackSecrets) == 0 {
		c.CallbackSecrets = [][]byte{randomKey()}
	}
	for _, k := range c.BuyerKeys {
		if len(k) < minKeyLen {
			err = errors.Join(err, fmt.Errorf("a buyer token key has %d bytes: at least %d are needed (e.g. openssl rand -hex 32)", len(k), minKeyLen))
		}
	}
	if len(c.CallbackSecrets) > maxSecrets {
		err = errors.Join(err, fmt.Errorf("%d callback secrets: one, or two while rotating", len(c.CallbackSecrets)))
	}
	for _, k := range c.CallbackSecrets {
		if len(k) < minKeyLen {
			err = errors.Join(err, fmt.Errorf("a callback secret has %d bytes: at least %d are needed (e.g. openssl rand -hex 32)", len(k), minKeyLen))
		}
	}
	if c.OperatorToken != "" && len(c.OperatorToken) < minKeyLen {
		err = errors.Join(err, fmt.Errorf("the operator token has %d bytes: at least %d are needed", len(c.OperatorToken), minKeyLen))
	}
	c.Tolerance = cmp.Or(c.Tolerance, DefaultTolerance)
	c.IdempotencyTTL = cmp.Or(c.IdempotencyTTL, DefaultIdempotencyTTL)
	c.PendingLease = cmp.Or(c.PendingLease, defaultPendingLease)
	if c.Tolerance < 0 || c.IdempotencyTTL < 0 || c.PendingLease < 0 {
		err = errors.Join(err, errors.New("negative tolerance, idempotency TTL or pending lease"))
	}
	c.BuyerRate = cmp.Or(c.BuyerRate, DefaultBuyerRate)
	c.AddrRate = cmp.Or(c.AddrRate, DefaultAddrRate)
	return c, err
}

func randomKey() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k) // never fails (crypto/rand)
	return []byte(hex.EncodeToString(k))
}

// SecurityFromEnv reads the keys from EnvBuyerKeys, EnvCallbackSecrets and
// EnvOperatorToken. With required (a service: -serve), the buyer keys and
// the callback secrets must be set; else a missing one is left to
// withDefaults (random).
func SecurityFromEnv(required bool) (SecurityConfig, error) {
	var c SecurityConfig
	split := func(v string) [][]byte {
		var out [][]byte
		for p := range strings.SplitSeq(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, []byte(p))
			}
		}
		return out
	}
	c.BuyerKeys = split(os.Getenv(EnvBuyerKeys))
	c.CallbackSecrets = split(os.Getenv(EnvCallbackSecrets))
	c.OperatorToken = strings.TrimSpace(os.Getenv(EnvOperatorToken))
	if required {
		var err error
		if len(c.BuyerKeys) == 0 {
			err = errors.Join(err, fmt.Errorf("set %s to the key of the buyers' tokens (e.g. export %s=$(openssl rand -hex 32))", EnvBuyerKeys, EnvBuyerKeys))
		}
		if len(c.CallbackSecrets) == 0 {
			err = errors.Join(err, fmt.Errorf("set %s to the payment provider's signing secret (e.g. export %s=$(openssl rand -hex 32))", EnvCallbackSecrets, EnvCallbackSecrets))
		}
		if err != nil {
			return c, err
		}
	}
	return c.withDefaults()
}

// Loopback reports whether addr (host:port) is on a loopback address.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// KeyTool prints a buyer token for buyer (when not 0) and the signature
// header of the callback body read from in (when sign), with the keys of
// the environment.
func KeyTool(in io.Reader, out io.Writer, buyer int64, ttl time.Duration, sign bool) error {
	sec, err := SecurityFromEnv(false)
	if err != nil {
		return err
	}
	if buyer != 0 {
		if os.Getenv(EnvBuyerKeys) == "" {
			return fmt.Errorf("-mint-token: set %s to the service's buyer token key", EnvBuyerKeys)
		}
		tok, err := MintBuyerToken(sec.BuyerKeys[0], buyer, ttl)
		if err != nil {
			return err
		}
		fmt.Fprintln(out, tok)
	}
	if sign {
		if os.Getenv(EnvCallbackSecrets) == "" {
			return fmt.Errorf("-sign-callback: set %s to the provider's signing secret", EnvCallbackSecrets)
		}
		body, err := io.ReadAll(io.LimitReader(in, 1<<20))
		if err != nil {
			return err
		}
		fmt.Fprintln(out, SignCallback(time.Now(), body, sec.CallbackSecrets[0]))
	}
	return nil
}
