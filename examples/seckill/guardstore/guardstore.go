package guardstore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Store keeps what the HTTP face remembers between requests: the
// signatures already used, the rate windows and the idempotency records.
// It is Redis on the real stack (every key on its own: fine on Redis
// Cluster) and an in-process map with -stack memory, with the same
// semantics. Keys are hashed: a client's key never becomes a Redis key.
type Store interface {
	// UseOnce reports whether key is used for the first time within ttl.
	// One call is one use: a command the client sends again after a lost
	// answer does not make the call's own first use a replay.
	UseOnce(ctx context.Context, key string, ttl time.Duration) (bool, error)
	// Hit counts one request in each key's fixed window of length window
	// and, when claim is not nil, runs it, all in one round trip; for a
	// key over its limit it returns how long until its window ends (> 0),
	// else 0.
	Hit(ctx context.Context, keys []string, limits []int, window time.Duration, claim *Claim) ([]time.Duration, error)
	// Settle replaces pending by final for ttl (final "" deletes), only
	// if key still holds pending; false when it did not (the lease ran out
	// and another request took the key). A settle sent again after a lost
	// answer finds final and answers true again.
	Settle(ctx context.Context, key, pending, final string, ttl time.Duration) (bool, error)
}

// Claim claims an idempotency key: it stores pending under key for
// lease unless key holds a value. Claimed tells whether it stored; else
// Held is the value held. Pending must be unique to the request (the
// guard puts a random owner in it): key holding pending counts as claimed,
// so that a claim the client sends again after a lost answer finds its
// own claim, not a request in progress.
type Claim struct {
	Key, Pending string
	Lease        time.Duration
	Fingerprint  string // of the request, as in pending

	Claimed bool
	Held    string
}

// Key is the store's key for a client-chosen key in a namespace.
func Key(prefix, ns, key string) string {
	h := sha256.Sum256([]byte(key))
	return prefix + ns + ":" + hex.EncodeToString(h[:])
}

// Redis is [Store] on Redis.
type Redis struct{ rdb redis.UniversalClient }

// NewRedis returns the store on rdb.
func NewRedis(rdb redis.UniversalClient) Redis { return Redis{rdb} }

var (
	// hitScript: KEYS window; ARGV limit, window (ms). 0 when within the
	// limit, else the window's remaining milliseconds.
	hitScript = redis.NewScript(`
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if n <= tonumber(ARGV[1]) then return 0 end
local t = redis.call('PTTL', KEYS[1])
if t <= 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  t = tonumber(ARGV[2])
end
return t
`)
	// useOnceScript: KEYS key; ARGV token (random, one per call), ttl
	// (ms). 1 when the key was absent (now it holds token) or holds token
	// (the same call sent again: its answer was lost), else 0.
	useOnceScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if v == ARGV[1] then return 1 end
return 0
`)
	// claimScript: KEYS key; ARGV pending, lease (ms). The value held, or
	// nil when pending was stored or was there already (the same claim
	// sent again).
	claimScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then return false end
if v then return v end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false
`)
	// settleScript: KEYS key; ARGV pending, final ("" deletes), ttl (ms).
	// 1 when key held pending, or holds final already (the same settle
	// sent again), else 0.
	settleScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] then
  if ARGV[2] ~= '' and v == ARGV[2] then return 1 end
  return 0
end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
return 1
`)
)

// UseOnce implements [Store]. The key holds a random token of the call,
// so that the script go-redis sends again after a lost answer (the same
// bytes, the same token) finds the call's own use and answers true again;
// another call, with another token, is the replay.
func (s Redis) UseOnce(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	return s.useOnce(ctx, key, rand.Text(), ttl)
}

// useOnce is UseOnce with the call's token.
func (s Redis) useOnce(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	n, err := useOnceScript.Run(ctx, s.rdb, []string{key}, token, ttl.Milliseconds()).Int64()
	return n == 1, err
}

// Hit implements [Store].
func (s Redis) Hit(ctx context.Context, keys []string, limits []int, window time.Duration, claim *Claim) ([]time.Duration, error) {
	if len(keys) == 1 && claim == nil { // EVALSHA, falling back to EVAL
		ms, err := hitScript.Run(ctx, s.rdb, keys, limits[0], window.Milliseconds()).Int64()
		return []time.Duration{time.Duration(ms) * time.Millisecond}, err
	}
	// Several keys, in several slots on a Cluster: one pipeline (EVAL:
	// a pipeline cannot fall back from a NOSCRIPT).
	cmds := make([]*redis.Cmd, len(keys))
	var claimCmd *redis.Cmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = hitScript.Eval(ctx, p, []string{k}, limits[i], window.Milliseconds())
		}
		if claim != nil {
			claimCmd = claimScript.Eval(ctx, p, []string{claim.Key}, claim.Pending, claim.Lease.Milliseconds())
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) { // Nil: the claim stored
		return nil, err
	}
	out := make([]time.Duration, len(keys))
	for i, c := range cmds {
		ms, err := c.Int64()
		if err != nil {
			return nil, err
		}
		out[i] = time.Duration(ms) * time.Millisecond
	}
	if claim != nil {
		v, err := claimCmd.Text()
		switch {
		case errors.Is(err, redis.Nil):
			claim.Claimed = true
		case err != nil:
			return nil, err
		default:
			claim.Held = v
		}
	}
	return out, nil
}

// Settle implements [Store].
func (s Redis) Settle(ctx context.Context, key, pending, final string, ttl time.Duration) (bool, error) {
	n, err := settleScript.Run(ctx, s.rdb, []string{key}, pending, final, ttl.Milliseconds()).Int64()
	return n == 1, err
}

// Memory is [Store] in process, for -stack memory.
type Memory struct {
	mu     sync.Mutex
	vals   map[string]memValue
	sweeps int
}

type memValue struct {
	v   string
	n   int
	exp time.Time
}

// NewMemory returns an empty in-process store.
func NewMemory() *Memory { return &Memory{vals: map[string]memValue{}} }

// get returns key's live value; the caller holds mu. Now and then it drops
// the expired ones, so the map does not grow without bound.
func (s *Memory) get(key string, now time.Time) (memValue, bool) {
	if s.sweeps++; s.sweeps >= 4096 {
		s.sweeps = 0
		for k, v := range s.vals {
			if !now.Before(v.exp) {
				delete(s.vals, k)
			}
		}
	}
	v, ok := s.vals[key]
	if ok && !now.Before(v.exp) {
		delete(s.vals, key)
		return memValue{}, false
	}
	return v, ok
}

// UseOnce implements [Store].
func (s *Memory) UseOnce(_ context.Context, key string, ttl time.Duration) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if _, ok := s.get(key, now); ok {
		return false, nil
	}
	s.vals[key] = memValue{v: "1", exp: now.Add(ttl)}
	return true, nil
}

// Hit implements [Store].
func (s *Memory) Hit(_ context.Context, keys []string, limits []int, window time.Duration, claim *Claim) ([]time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	out := make([]time.Duration, len(keys))
	for i, key := range keys {
		v, ok := s.get(key, now)
		if !ok {
			v = memValue{exp: now.Add(window)}
		}
		v.n++
		s.vals[key] = v
		if v.n > limits[i] {
			out[i] = max(v.exp.Sub(now), time.Millisecond)
		}
	}
	if claim != nil {
		if v, ok := s.get(claim.Key, now); ok {
			claim.Held = v.v
		} else {
			s.vals[claim.Key] = memValue{v: claim.Pending, exp: now.Add(claim.Lease)}
			claim.Claimed = true
		}
	}
	return out, nil
}

// Settle implements [Store].
func (s *Memory) Settle(_ context.Context, key, pending, final string, ttl time.Duration) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if v, ok := s.get(key, now); !ok || v.v != pending {
		return false, nil
	}
	if final == "" {
		delete(s.vals, key)
	} else {
		s.vals[key] = memValue{v: final, exp: now.Add(ttl)}
	}
	return true, nil
}
