package guardstore

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/seckillkit/seckill/examples/internal/stackharness"
)

// testRedis starts a throwaway redis-server and returns its client and a
// key prefix of the test's own.
func testRedis(t *testing.T) (*redis.Client, string) {
	t.Helper()
	return stackharness.RedisClient(t), "test:" + uuid.NewString()[:8] + ":"
}

// TestRedisUseOnceSentTwice: go-redis sends a command again when its
// answer was lost (a read timeout, a dropped connection). The same call
// sent twice (the same token) is still the signature's first use; another
// call with the same signature (a second delivery) is the replay.
func TestRedisUseOnceSentTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testRedis(t)
	s := NewRedis(rdb)
	key := Key(prefix, "sig", "a signature")
	for i, attempt := range []string{"sent", "sent again"} {
		first, err := s.useOnce(ctx, key, "token-of-the-call", time.Minute)
		if err != nil || !first {
			t.Fatalf("the same use %s (%d): first=%v, %v; want its first use", attempt, i, first, err)
		}
	}
	if first, err := s.UseOnce(ctx, key, time.Minute); err != nil || first {
		t.Fatalf("a second delivery of the signature: first=%v, %v; want a replay", first, err)
	}
	if first, err := s.UseOnce(ctx, Key(prefix, "sig", "another signature"), time.Minute); err != nil || !first {
		t.Fatalf("another signature: first=%v, %v; want its first use", first, err)
	}
}

// TestUseOnceReplay: on both stores, a key's second use within ttl is a
// replay and its use after ttl is a first use again.
func TestUseOnceReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testRedis(t)
	for name, s := range map[string]Store{"redis": NewRedis(rdb), "memory": NewMemory()} {
		t.Run(name, func(t *testing.T) {
			key := Key(prefix+name+":", "sig", "s")
			for i, want := range []bool{true, false, false} {
				if first, err := s.UseOnce(ctx, key, 200*time.Millisecond); err != nil || first != want {
					t.Fatalf("use %d: first=%v, %v; want %v", i+1, first, err, want)
				}
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				first, err := s.UseOnce(ctx, key, 200*time.Millisecond)
				if err != nil {
					t.Fatal(err)
				}
				if first {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the key was not used afresh 10s after its ttl of 200ms ran out")
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// TestRedisClaimSentTwice: the claim of an idempotency key sent twice
// (the same pending) is still claimed, not a request in progress; another
// request's claim of the key finds the first one's pending.
func TestRedisClaimSentTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testRedis(t)
	s := NewRedis(rdb)
	key := Key(prefix, "idem:orders", "k1")
	hit := func(pending string) Claim {
		t.Helper()
		c := Claim{Key: key, Pending: pending, Lease: time.Minute, Fingerprint: "fp"}
		if _, err := s.Hit(ctx, []string{Key(prefix, "rate", "a")}, []int{100}, time.Minute, &c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, attempt := range []string{"sent", "sent again"} {
		if c := hit(`{"fp":"fp","owner":"o1"}`); !c.Claimed {
			t.Fatalf("the same claim %s: held %q; want it claimed", attempt, c.Held)
		}
	}
	if c := hit(`{"fp":"fp","owner":"o2"}`); c.Claimed || c.Held != `{"fp":"fp","owner":"o1"}` {
		t.Fatalf("another request's claim: %+v; want the first request's pending held", c)
	}
}

// TestRedisSettleSentTwice: a settle sent twice answers true both times;
// a settle of another pending does not overwrite the key.
func TestRedisSettleSentTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testRedis(t)
	s := NewRedis(rdb)
	key := Key(prefix, "idem:orders", "k1")
	c := Claim{Key: key, Pending: "pending", Lease: time.Minute}
	if _, err := s.Hit(ctx, []string{Key(prefix, "rate", "a")}, []int{100}, time.Minute, &c); err != nil || !c.Claimed {
		t.Fatalf("claim: %+v, %v", c, err)
	}
	for _, attempt := range []string{"sent", "sent again"} {
		if ok, err := s.Settle(ctx, key, "pending", "final", time.Minute); err != nil || !ok {
			t.Fatalf("the same settle %s: %v, %v; want true", attempt, ok, err)
		}
	}
	if ok, err := s.Settle(ctx, key, "another pending", "another final", time.Minute); err != nil || ok {
		t.Fatalf("the settle of another pending: %v, %v; want false", ok, err)
	}
	if v, err := rdb.Get(ctx, key).Result(); err != nil || v != "final" {
		t.Fatalf("the key holds %q, %v; want final", v, err)
	}
}

// losingProxy passes TCP between go-redis and a redis-server, and loses
// the server's next answer once armed: it reads the answer and cuts the
// client's connection instead of passing it on.
type losingProxy struct {
	ln    net.Listener
	to    string
	armed atomic.Bool
	lost  atomic.Int32
	wg    sync.WaitGroup
}

func startLosingProxy(t *testing.T, to string) *losingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &losingProxy{ln: ln, to: to}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() { defer p.wg.Done(); p.serve(c) }()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *losingProxy) serve(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", p.to)
	if err != nil {
		return
	}
	defer s.Close()
	go func() { // client to server; ends when either side closes
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			if err != nil {
				s.Close()
				return
			}
			if _, err := s.Write(buf[:n]); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 4096)
	for {
		n, err := s.Read(buf)
		if err != nil {
			return
		}
		if p.armed.CompareAndSwap(true, false) {
			p.lost.Add(1)
			return // the answer is lost; the connection is cut
		}
		if _, err := c.Write(buf[:n]); err != nil {
			return
		}
	}
}

// TestRedisUseOnceAnswerLost: the answer to UseOnce is lost on the way
// (the connection cut after the server ran it); go-redis sends it again on
// a new connection, and the callback's first delivery is still its first
// use.
func TestRedisUseOnceAnswerLost(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rdb, prefix := testRedis(t)
	p := startLosingProxy(t, rdb.Options().Addr)
	via := redis.NewClient(&redis.Options{Addr: p.ln.Addr().String(), MaxRetries: 3})
	defer via.Close()
	s := NewRedis(via)
	// Warm up: the connection is open and the script is in the server's
	// cache, so the next command is the EVALSHA alone.
	if _, err := s.UseOnce(ctx, Key(prefix, "sig", "warm-up"), time.Minute); err != nil {
		t.Fatal(err)
	}
	key := Key(prefix, "sig", "a signature")
	p.armed.Store(true)
	first, err := s.UseOnce(ctx, key, time.Minute)
	if p.lost.Load() != 1 {
		t.Fatalf("the proxy lost %d answers, want 1", p.lost.Load())
	}
	if err != nil || !first {
		t.Fatalf("a first delivery whose answer was lost and sent again: first=%v, %v; want its first use", first, err)
	}
	if first, err := s.UseOnce(ctx, key, time.Minute); err != nil || first {
		t.Fatalf("a second delivery: first=%v, %v; want a replay", first, err)
	}
}
