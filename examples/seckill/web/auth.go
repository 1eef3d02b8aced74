package web

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// A buyer proves who they are with a bearer token, an HS256 JWT signed with
// one of the service's buyer keys (SecurityConfig.BuyerKeys):
//
//	Authorization: Bearer <JWT>
//	  header  {"alg": "HS256", "typ": "JWT"}
//	  claims  {"iss": "seckill", "aud": "seckill-orders", "sub": "<buyer id>",
//	           "iat": …, "exp": …}
//
// The buyer id is the subject, a positive decimal integer; nothing in a
// request body names the buyer. The token must be signed with HS256 (no
// other algorithm, "none" least of all), carry an expiry, and be issued by
// and for this service. In a deployment the login service mints the tokens
// with the same key; the example mints them for its own buyers.

// The claims a buyer token must carry.
const (
	TokenIssuer   = "seckill"
	TokenAudience = "seckill-orders"
)

var (
	errNoToken  = errors.New(`no buyer token: send "Authorization: Bearer <token>"`)
	errBadToken = errors.New("the buyer token is not valid")
)

// MintBuyerToken signs a token for buyer with key, valid for ttl.
func MintBuyerToken(key []byte, buyer int64, ttl time.Duration) (string, error) {
	if buyer <= 0 {
		return "", fmt.Errorf("buyer id %d: must be positive", buyer)
	}
	now := time.Now()
	return jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Issuer: TokenIssuer, Audience: jwt.ClaimStrings{TokenAudience}, Subject: strconv.FormatInt(buyer, 10),
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}).SignedString(key)
}

// bearer returns the token of an "Authorization: Bearer …" header.
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	const prefix = "bearer "
	if len(h) <= len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", false
	}
	return strings.TrimSpace(h[len(prefix):]), true
}

// buyerOf returns the buyer a request's token names: errNoToken without a
// token, errBadToken (wrapping the reason) when it does not verify.
func (g *guard) buyerOf(r *http.Request) (int64, error) {
	tok, ok := bearer(r)
	if !ok {
		return 0, errNoToken
	}
	if len(tok) > 4096 {
		return 0, fmt.Errorf("%w: too long", errBadToken)
	}
	keys := make([]jwt.VerificationKey, len(g.cfg.BuyerKeys))
	for i, k := range g.cfg.BuyerKeys {
		keys[i] = k
	}
	var claims jwt.RegisteredClaims
	_, err := jwt.ParseWithClaims(tok, &claims, func(*jwt.Token) (any, error) { return jwt.VerificationKeySet{Keys: keys}, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}), jwt.WithExpirationRequired(),
		jwt.WithIssuer(TokenIssuer), jwt.WithAudience(TokenAudience), jwt.WithLeeway(defaultTokenLeeway))
	if err != nil {
		return 0, fmt.Errorf("%w: %v", errBadToken, err)
	}
	id, err := strconv.ParseInt(claims.Subject, 10, 64)
	if err != nil || id <= 0 || strconv.FormatInt(id, 10) != claims.Subject {
		return 0, fmt.Errorf("%w: the subject %q is not a buyer id", errBadToken, claims.Subject)
	}
	return id, nil
}

// operatorOK reports whether a request carries the operator token
// (compared in constant time, over digests so that the length leaks
// nothing either). Without a configured token nothing is an operator.
func (g *guard) operatorOK(r *http.Request) bool {
	if g.cfg.OperatorToken == "" {
		return false
	}
	tok, ok := bearer(r)
	if !ok {
		return false
	}
	a, b := sha256.Sum256([]byte(tok)), sha256.Sum256([]byte(g.cfg.OperatorToken))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}
