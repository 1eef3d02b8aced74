package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
)

// floorResult is what the parts around PostgreSQL cost at the least, per
// operation, with no work of the service's own: CPU µs of this process
// (the client side, and the HTTP server's) and of the server process.
type floorResult struct {
	httpUS             float64 // one POST answered 202: client and server, both in this process
	redisUS, redisSrv  float64 // one EVALSHA of a one-command script: all, and redis-server's share
	natsUS, natsSrv    float64 // one JetStream message published (PubAck), pulled and acked: all, nats-server's share
	httpN, redisN, jsN int64   // operations measured
}

// Per order the stack makes one click's HTTP request, three Redis scripts
// (the idempotency guard's claim and settle, the front door's reserve) and
// two JetStream messages (the order message, the ORDER_CREATED event).
const (
	floorRedisPerOrder = 3
	floorJSPerOrder    = 2
)

// perOrder is the floor of one order: its HTTP request, Redis scripts and
// JetStream messages at their least.
func (f floorResult) perOrder() float64 {
	return f.httpUS + floorRedisPerOrder*f.redisUS + floorJSPerOrder*f.natsUS
}

// floorWorkers is the closed-loop concurrency of each floor measurement.
const floorWorkers = 64

// measureFloor measures, for d each, on the throwaway redis-server and
// nats-server of sr (before the service starts), the least CPU the stack's
// parts around PostgreSQL take per operation: a POST answered 202 by an
// HTTP server in this process (no handler work), an EVALSHA of a script
// of one INCR, and a JetStream message published with its PubAck to a
// file-storage stream, pulled continuously and acked.
func (sr *stackRun) measureFloor(ctx context.Context, d time.Duration) (floorResult, error) {
	var f floorResult
	var err error
	if f.httpUS, f.httpN, err = floorHTTP(ctx, d); err != nil {
		return f, fmt.Errorf("floor, HTTP: %w", err)
	}
	if f.redisUS, f.redisSrv, f.redisN, err = floorRedis(ctx, sr.redis.URL, sr.redis.PID(), d); err != nil {
		return f, fmt.Errorf("floor, Redis: %w", err)
	}
	if f.natsUS, f.natsSrv, f.jsN, err = floorJetStream(ctx, sr.nats.URL, sr.nats.PID(), d); err != nil {
		return f, fmt.Errorf("floor, JetStream: %w", err)
	}
	return f, nil
}

// closedLoop runs op from floorWorkers goroutines until d has passed and
// returns how many calls succeeded, with the CPU of this process and of
// server (0: none) over that time.
func closedLoop(ctx context.Context, d time.Duration, server int, op func(context.Context) error) (n int64, self, srv time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		wg    sync.WaitGroup
		count atomic.Int64
		first atomic.Pointer[error]
	)
	self0, srv0 := processCPU(), processCPUOf(server)
	for range floorWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := op(ctx); err != nil {
					if ctx.Err() == nil {
						first.CompareAndSwap(nil, &err)
					}
					return
				}
				count.Add(1)
			}
		}()
	}
	wg.Wait()
	if e := first.Load(); e != nil {
		return 0, 0, 0, *e
	}
	return count.Load(), processCPU() - self0, processCPUOf(server) - srv0, nil
}

// floorHTTP: a server in this process that answers every POST /orders 202
// with a small JSON body, and the load generator's client (a connection
// per click in flight, the bearer token and Idempotency-Key headers).
func floorHTTP(ctx context.Context, d time.Duration) (float64, int64, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, err
	}
	body := []byte(`{"status":"accepted","request_id":"` + uuid.NewString() + `"}`)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write(body)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	load := clickLoad{url: "http://" + ln.Addr().String() + "/orders", client: newLoadClient()}
	defer load.client.CloseIdleConnections()
	token := "Bearer " + strings.Repeat("t", 160) // as long as a buyer token
	n, self, _, err := closedLoop(ctx, d, 0, func(ctx context.Context) error {
		if code := load.click(ctx, token); code != http.StatusAccepted {
			return fmt.Errorf("answer %d", code)
		}
		return nil
	})
	return ratio(float64(self.Microseconds()), float64(n)), n, err
}

// floorRedis: EVALSHA of a script of one INCR, on a key per worker.
func floorRedis(ctx context.Context, url string, pid int, d time.Duration) (all, server float64, n int64, err error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return 0, 0, 0, err
	}
	opt.PoolSize = floorWorkers
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	script := redis.NewScript(`return redis.call('INCR', KEYS[1])`)
	if err := script.Load(ctx, rdb).Err(); err != nil {
		return 0, 0, 0, err
	}
	var worker atomic.Int64
	n, self, srv, err := closedLoop(ctx, d, pid, func(ctx context.Context) error {
		key := fmt.Sprintf("bench:floor:%d", worker.Add(1)%floorWorkers)
		return script.EvalSha(ctx, rdb, []string{key}).Err()
	})
	per := func(t time.Duration) float64 { return ratio(float64(t.Microseconds()), float64(n)) }
	return per(self + srv), per(srv), n, err
}

// floorJetStream: messages published with their PubAck to a file-storage
// work-queue stream (a Nats-Msg-Id each, as the service's) while 16
// workers pull them continuously (batch 4) and ack each.
func floorJetStream(ctx context.Context, url string, pid int, d time.Duration) (all, server float64, n int64, err error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return 0, 0, 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, 0, 0, err
	}
	name, subject := "BENCH_FLOOR", "bench.floor"
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject},
		Storage: jetstream.FileStorage, Retention: jetstream.WorkQueuePolicy, Duplicates: 2 * time.Minute}); err != nil {
		return 0, 0, 0, err
	}
	defer func() { _ = js.DeleteStream(context.WithoutCancel(ctx), name) }()
	cons, err := js.CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{Durable: "floor", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		return 0, 0, 0, err
	}
	var acked atomic.Int64
	var iters []jetstream.MessagesContext
	for range 16 {
		it, err := cons.Messages(jetstream.PullMaxMessages(4))
		if err != nil {
			return 0, 0, 0, err
		}
		iters = append(iters, it)
		go func() {
			for {
				msg, err := it.Next()
				if err != nil {
					return
				}
				if msg.Ack() == nil {
					acked.Add(1)
				}
			}
		}()
	}
	defer func() {
		for _, it := range iters {
			it.Stop()
		}
	}()
	body := []byte(`{"reservation_id":"` + uuid.NewString() + `","user_id":1,"bucket_no":7}`)
	self0, srv0 := processCPU(), processCPUOf(pid)
	published, _, _, err := closedLoop(ctx, d, 0, func(ctx context.Context) error {
		_, err := js.Publish(ctx, subject, body, jetstream.WithMsgID(uuid.NewString()))
		return err
	})
	if err != nil {
		return 0, 0, 0, err
	}
	deadline := time.Now().Add(time.Minute)
	for acked.Load() < published && time.Now().Before(deadline) { // every published message pulled and acked
		time.Sleep(5 * time.Millisecond)
	}
	if got := acked.Load(); got < published {
		return 0, 0, 0, fmt.Errorf("%d of %d messages acked within a minute", got, published)
	}
	self, srv := processCPU()-self0, processCPUOf(pid)-srv0
	per := func(t time.Duration) float64 { return ratio(float64(t.Microseconds()), float64(published)) }
	return per(self + srv), per(srv), published, nil
}

// reportFloor prints the floor, and the most stack_vs_kit can be over it:
// the kit's CPU per order over the kit's, plus the stack's PostgreSQL work
// beyond the kit's (the relays' claim and mark of each event, the event
// consumers' inbox, the operator view), plus the floor, at the saturated
// rate s.
func reportFloor(out io.Writer, f *floorResult, kit [2]kitResult, s *rateResult) {
	if f == nil || s == nil {
		return
	}
	_, kitCPU, kitPG, _ := kitMean(kit)
	pgExtra := s.perOrder(s.cpu[cpuPostgres]) - kitPG
	fmt.Fprint(out, "\n## The floor: what the parts around PostgreSQL cost at the least\n\n")
	fmt.Fprintln(out, "| part | CPU µs per operation (all) | of it the server's | operations measured | per order | CPU µs per order |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|")
	fmt.Fprintf(out, "| HTTP POST answered 202 (client and server, this process) | %.1f | n/a | %d | 1 | %.0f |\n", f.httpUS, f.httpN, f.httpUS)
	fmt.Fprintf(out, "| Redis EVALSHA, one INCR (go-redis and redis-server) | %.1f | %.1f | %d | %d | %.0f |\n", f.redisUS, f.redisSrv, f.redisN, floorRedisPerOrder, floorRedisPerOrder*f.redisUS)
	fmt.Fprintf(out, "| JetStream message: publish with PubAck, pull, ack (nats.go and nats-server) | %.1f | %.1f | %d | %d | %.0f |\n", f.natsUS, f.natsSrv, f.jsN, floorJSPerOrder, floorJSPerOrder*f.natsUS)
	fmt.Fprintf(out, "| **the floor of one order** | | | | | **%.0f** |\n", f.perOrder())
	fmt.Fprintf(out, "\nkit alone, CPU µs/order: %.0f; the stack's PostgreSQL beyond the kit's, at %d/s offered: %.0f µs/order (%.0f − %.0f)\n",
		kitCPU, s.offered, pgExtra, s.perOrder(s.cpu[cpuPostgres]), kitPG)
	fmt.Fprintf(out, "the most stack_vs_kit can be with the service's own code free: %.0f / (%.0f + %.0f + %.0f) = %.2f\n",
		kitCPU, kitCPU, max(pgExtra, 0), f.perOrder(), floorBound(kitCPU, pgExtra, f.perOrder()))
}

// floorBound is the most stack_vs_kit can be on cores both keep busy: the
// kit's CPU per order over the stack's least, the kit's work plus the
// stack's PostgreSQL work beyond it plus the floor of the parts around it.
func floorBound(kitCPU, pgExtra, floor float64) float64 {
	return ratio(kitCPU, kitCPU+max(pgExtra, 0)+floor)
}
