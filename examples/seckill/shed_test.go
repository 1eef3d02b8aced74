package main

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill/examples/internal/proccpu"
	"github.com/seckillkit/seckill/internal/pgtest"
)

// BenchmarkRefusedClick puts the two ways of refusing a click while the
// order queue is full side by side in one run, on Redis and JetStream of
// the benchmark's own: shed at the door (-shed-for, a refused publish
// then refuses the next clicks at once) and the whole way (-shed-for 0:
// each click is checked by the guard, reserved, refused by the queue,
// released and settled). Each POST /orders comes from its own buyer with
// its own Idempotency-Key, one after another. It reports the CPU per
// refused click of this process (the service and the client), of
// redis-server and of nats-server (from /proc).
//
//	cd examples && go test -run '^$' -bench BenchmarkRefusedClick -benchtime 3000x ./seckill/
func BenchmarkRefusedClick(b *testing.B) {
	for _, shedFor := range []time.Duration{time.Hour, 0} {
		b.Run(map[bool]string{true: "shed", false: "whole-way"}[shedFor > 0], func(b *testing.B) {
			ctx := pgtest.Context(b, 10*time.Minute)
			cfg := smallConfig(b)
			cfg.Stock, cfg.Buckets = 10*b.N+100, 8
			srv := useStack(b, &cfg, stackReal, true)
			cfg.QueueDepth, cfg.Consumers, cfg.ShedFor = 1, 0, shedFor // nobody drains the queue
			a, err := newAPI(ctx, pgtest.Pool(b), cfg, nil)
			if err != nil {
				b.Fatal(err)
			}
			hs := serveTest(b, a)
			defer func() { hs.Close(); a.Close() }()
			click := func(buyer int64) int {
				req := testRequest(b, ctx, buyer, "POST", hs.URL+"/orders", map[string]any{})
				req.Header.Set("Idempotency-Key", uuid.NewString())
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.StatusCode
			}
			for i := range 2 { // the first fills the queue, the second is refused by it
				if code, want := click(int64(i+1)), []int{http.StatusAccepted, http.StatusServiceUnavailable}[i]; code != want {
					b.Fatalf("click %d: %d, want %d", i+1, code, want)
				}
			}
			cpu := func() (self, redis, nats time.Duration) {
				self, err := proccpu.Self()
				if err != nil {
					b.Fatal(err)
				}
				r, ok1 := proccpu.Of(srv.redis.PID())
				n, ok2 := proccpu.Of(srv.nats.PID())
				if !ok1 || !ok2 {
					b.Fatal("cannot read the servers' CPU time from /proc")
				}
				return self, r, n
			}
			s0, r0, n0 := cpu()
			b.ResetTimer()
			for i := range b.N {
				if code := click(int64(i + 3)); code != http.StatusServiceUnavailable {
					b.Fatalf("click on a full queue: %d, want 503", code)
				}
			}
			b.StopTimer()
			s1, r1, n1 := cpu()
			per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
			b.ReportMetric(per(s1-s0), "service+client-µs/click")
			b.ReportMetric(per(r1-r0), "redis-µs/click")
			b.ReportMetric(per(n1-n0), "nats-µs/click")
			if shed, busy := a.s.stats.shed.Load(), a.s.stats.busy.Load(); (shedFor > 0) != (shed == int64(b.N)) || busy < 1 {
				b.Fatalf("clicks shed %d, refused by the queue %d, of %d", shed, busy, b.N)
			}
		})
	}
}
