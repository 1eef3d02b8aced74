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
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/pgtx"
)

// floorResult is what the parts around PostgreSQL cost at the least, per
// operation, with no work of the service's own: CPU µs of this process
// (the client side, and the HTTP server's) and of the server process.
type floorResult struct {
	httpUS             float64 // one POST answered 202: client and server, both in this process
	redisUS, redisSrv  float64 // one EVALSHA of a one-command script: all, and redis-server's share
	natsUS, natsSrv    float64 // one JetStream message published (PubAck), pulled and acked: all, nats-server's share
	relayUS, relayPG   float64 // one event claimed and marked SENT by the outbox relays (a bulk drain): all, PostgreSQL's share
	inboxUS, inboxPG   float64 // one event claimed with its result in a consumer's inbox, floorEventBatch per transaction: all, PostgreSQL's share
	httpN, redisN, jsN int64   // operations measured
	relayN, inboxN     int64
}

// Per order the stack makes, beside the kit's order transaction, one
// click's HTTP request, three Redis scripts (the idempotency guard's claim
// and settle, the front door's reserve), two JetStream messages (the order
// message, the ORDER_CREATED event), and relays and consumes one event.
const (
	floorRedisPerOrder = 3
	floorJSPerOrder    = 2
)

// perOrder is the floor of one order: its HTTP request, Redis scripts and
// JetStream messages at their least.
func (f floorResult) perOrder() float64 {
	return f.httpUS + floorRedisPerOrder*f.redisUS + floorJSPerOrder*f.natsUS + f.relayUS + f.inboxUS
}

// floorWorkers is the closed-loop concurrency of each floor measurement.
const floorWorkers = 64

// measureFloor measures, for d each, on the throwaway servers of sr
// (before the service starts), the least CPU the stack's work beyond the
// kit's order transaction takes per operation: a POST answered 202 by an
// HTTP server in this process (no handler work), an EVALSHA of a script
// of one INCR, a JetStream message published with its PubAck to a
// file-storage stream, pulled continuously and acked, an event relayed
// from the outbox (claimed and marked SENT in batches, a no-op publisher)
// and an event claimed with its result in an inbox (in batches, as the
// service's event consumers claim them under load).
func (sr *stackRun) measureFloor(ctx context.Context, d time.Duration, events int) (floorResult, error) {
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
	if f.relayUS, f.relayPG, f.relayN, err = sr.floorRelay(ctx, events); err != nil {
		return f, fmt.Errorf("floor, outbox relay: %w", err)
	}
	if f.inboxUS, f.inboxPG, f.inboxN, err = sr.floorInbox(ctx, d); err != nil {
		return f, fmt.Errorf("floor, inbox: %w", err)
	}
	return f, nil
}

// closedLoop runs op from floorWorkers goroutines until d has passed and
// returns how many calls succeeded, with the CPU of this process and of
// server (0: none) over that time.
func closedLoop(ctx context.Context, d time.Duration, server int, op func(context.Context) error) (n int64, self, srv time.Duration, err error) {
	return closedLoopN(ctx, d, floorWorkers, server, op)
}

// closedLoopN is closedLoop from workers goroutines.
func closedLoopN(ctx context.Context, d time.Duration, workers, server int, op func(context.Context) error) (n int64, self, srv time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		wg    sync.WaitGroup
		count atomic.Int64
		first atomic.Pointer[error]
	)
	self0, srv0 := processCPU(), processCPUOf(server)
	for range workers {
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

// floorEvents is how many events the relay floor drains in -stack.
const floorEvents = 40_000

// pgCPU is the CPU time of every PostgreSQL node's tree so far.
func (sr *stackRun) pgCPU(ctx context.Context) (time.Duration, error) {
	cpu, _, err := sr.readNodes(ctx)
	var sum time.Duration
	for _, c := range cpu {
		sum += c
	}
	return sum, err
}

// floorRelay drains events PENDING events of a new outbox with the
// service's two relays (batch 200, lease mode, a publisher that does
// nothing): the CPU of PostgreSQL and of this process per event.
func (sr *stackRun) floorRelay(ctx context.Context, events int) (all, pg float64, n int64, err error) {
	o := sr.o
	o.relays, o.batch = 2, 200
	ob := &outboxBench{pool: sr.pool, o: o}
	const schema = "bench_stack_floor_outbox"
	st, err := ob.setup(ctx, schema)
	if err != nil {
		return 0, 0, 0, err
	}
	defer sr.pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") //nolint:errcheck // best effort
	if err := ob.refill(ctx, schema, events); err != nil {
		return 0, 0, 0, err
	}
	pg0, err := sr.pgCPU(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	self0 := processCPU()
	if _, err := drainWithRelays(ctx, sr.pool, st, o, events, false); err != nil {
		return 0, 0, 0, err
	}
	pg1, err := sr.pgCPU(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	self := processCPU() - self0
	per := func(t time.Duration) float64 { return ratio(float64(t.Microseconds()), float64(events)) }
	return per(pg1 - pg0 + self), per(pg1 - pg0), int64(events), nil
}

// floorEventBatch is the events the floor claims per inbox transaction:
// the service's default -event-batch, the batch its event consumers claim
// under load, when events wait in their pull.
const floorEventBatch = 16

// floorInbox claims new events with their result in a new inbox, in
// batches of floorEventBatch, each batch in its own transaction behind a
// deferred BEGIN (two round trips), from 16 workers for d: the CPU of
// PostgreSQL and of this process per event.
func (sr *stackRun) floorInbox(ctx context.Context, d time.Duration) (all, pg float64, n int64, err error) {
	const schema = "bench_stack_floor_inbox"
	if _, err := sr.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
		return 0, 0, 0, err
	}
	defer sr.pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") //nolint:errcheck // best effort
	if _, err := migrate.Apply(ctx, sr.pool, schema, inbox.Migrations); err != nil {
		return 0, 0, 0, err
	}
	st, err := inbox.New(inbox.Config{Schema: schema})
	if err != nil {
		return 0, 0, 0, err
	}
	body := []byte(`{"order_id":1}`)
	hash := inbox.HashPayload(body)
	pg0, err := sr.pgCPU(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	batches, self, _, err := closedLoopN(ctx, d, 16, 0, func(ctx context.Context) error {
		return pgtx.RunInTx(ctx, sr.pool, pgtx.Options{DeferBegin: true}, func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			claims := make([]inbox.Claim, floorEventBatch)
			for i := range claims {
				m := inbox.Message{Group: "floor-consumer", MessageID: uuid.Must(uuid.NewV7()), Topic: "ORDER_EVENT", Tag: "ORDER_CREATED",
					PayloadHash: hash, Result: &inbox.Result{Code: "BUYER_NOTIFIED"}}
				if err := st.QueueClaimMessage(b, m, &claims[i], pgtx.Return); err != nil {
					return err
				}
			}
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return err
			}
			for _, c := range claims {
				if !c.Fresh {
					return fmt.Errorf("a new message id claimed as a duplicate")
				}
			}
			return nil
		})
	})
	if err != nil {
		return 0, 0, 0, err
	}
	pg1, err := sr.pgCPU(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	n = batches * floorEventBatch
	per := func(t time.Duration) float64 { return ratio(float64(t.Microseconds()), float64(n)) }
	return per(pg1 - pg0 + self), per(pg1 - pg0), n, nil
}

// reportFloor prints the floor, and the most stack_vs_kit can be over it:
// the kit's CPU per order over the kit's plus the floor. Beside it, the
// stack's PostgreSQL work beyond the kit's at the saturated rate s.
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
	fmt.Fprintf(out, "| outbox event relayed: claimed, published to nothing, marked SENT, in batches of 200 (PostgreSQL and the relays) | %.1f | %.1f | %d | 1 | %.0f |\n", f.relayUS, f.relayPG, f.relayN, f.relayUS)
	fmt.Fprintf(out, "| event claimed with its result in an inbox, %d per transaction (PostgreSQL and the consumer) | %.1f | %.1f | %d | 1 | %.0f |\n", floorEventBatch, f.inboxUS, f.inboxPG, f.inboxN, f.inboxUS)
	fmt.Fprintf(out, "| **the floor of one order beyond the kit's transaction** | | | | | **%.0f** |\n", f.perOrder())
	fmt.Fprintf(out, "\nkit alone, CPU µs/order: %.0f (PostgreSQL %.0f). At %d/s offered the stack's PostgreSQL took %.0f µs/order, %.0f beyond the kit's; the floor's PostgreSQL part: %.0f\n",
		kitCPU, kitPG, s.offered, s.perOrder(s.cpu[cpuPostgres]), pgExtra, f.relayPG+f.inboxPG)
	fmt.Fprintf(out, "the most stack_vs_kit can be on cores both keep busy, with the service's own code free: %.0f / (%.0f + %.0f) = %.2f\n",
		kitCPU, kitCPU, f.perOrder(), floorBound(kitCPU, f.perOrder()))
}

// floorBound is the most stack_vs_kit can be on cores both keep busy: the
// kit's CPU per order over the stack's least, the kit's work plus the
// floor of the work beyond it.
func floorBound(kitCPU, floor float64) float64 {
	return ratio(kitCPU, kitCPU+floor)
}
