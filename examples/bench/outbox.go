package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/outbox"
)

type outboxResult struct {
	relayRate, rawRate   float64 // events/s
	relayTxRate          float64 // events/s, the relay in InTx mode
	riverRate            float64 // jobs/s, the best of riverWorkers
	riverRates           map[int]float64
	drainSmall           float64 // relay events/s draining smallBacklog pending events
	drainLarge           float64 // relay events/s draining o.backlog pending events
	claimNone, claimHist time.Duration
}

// riverWorkers are the River MaxWorkers settings tried; the best counts.
var riverWorkers = []int{1000, 4000}

// smallBacklog is the backlog the drain at scale is compared with.
const smallBacklog = 10_000

// fillSQL inserts $2 PENDING events (status 20 and sent when $3) with
// ORDER_CREATED-sized payloads; $1 makes the dedup keys unique. The event
// ids ascend in insertion order, as Enqueue's UUIDv7 ids do ($4 numbers
// the fill), so the claim reads the heap in the order it was written, as
// it does for enqueued events.
const fillSQL = `INSERT INTO {s}.event_outbox (event_id, dedup_key, aggregate_type, aggregate_id, topic, tag, message_key,
    schema_version, payload, status, sent_at)
SELECT format('%s-0000-7000-8000-%s', lpad(to_hex($4::int), 8, '0'), lpad(to_hex(g), 12, '0'))::uuid,
       'BENCH:' || $1::text || ':' || g, 'ORDER', g::text, 'ORDER_EVENT', 'ORDER_CREATED', g::text, 1,
       jsonb_build_object('order_id', g, 'reservation_id', gen_random_uuid(), 'user_id', g, 'activity_id', 1,
                          'sku_id', 1, 'amount', 9900, 'currency', 'CNY'),
       CASE WHEN $3 THEN 20 ELSE 0 END, CASE WHEN $3 THEN statement_timestamp() END
FROM generate_series(1, $2::int) AS g`

// The hand-written relay loop: a SKIP LOCKED claim, then one mark-sent
// UPDATE for the whole batch.
const (
	rawClaimSQL = `WITH candidates AS (
	SELECT event_id FROM {s}.event_outbox
	WHERE status IN (0, 30) AND available_at <= statement_timestamp()
	ORDER BY available_at, created_at, event_id
	FOR UPDATE SKIP LOCKED
	LIMIT $1
)
UPDATE {s}.event_outbox AS o
SET status = 10, locked_by = $2, locked_at = statement_timestamp(), updated_at = statement_timestamp()
FROM candidates AS c
WHERE o.event_id = c.event_id
RETURNING o.event_id, o.topic, o.tag, o.message_key, o.schema_version, o.payload, o.headers, o.retry_count, o.max_retry`
	rawSentSQL = `UPDATE {s}.event_outbox
SET status = 20, sent_at = statement_timestamp(), locked_by = NULL, locked_at = NULL, last_error = NULL,
    updated_at = statement_timestamp()
WHERE event_id = ANY($1) AND status = 10 AND locked_by = $2`
)

// tputSchema is the schema of the throughput runs and of the drain at
// scale.
const tputSchema = "bench_outbox"

func runOutbox(ctx context.Context, pool *pgxpool.Pool, o options) (outboxResult, error) {
	var res outboxResult
	ob := &outboxBench{pool: pool, o: o}

	// Throughput: relay vs hand-written loop, interleaved, each on a table
	// emptied first.
	st, err := ob.setup(ctx, tputSchema)
	if err != nil {
		return res, err
	}
	if err := riverSetup(ctx, pool); err != nil {
		return res, fmt.Errorf("river: %w", err)
	}
	if err := ob.throughput(ctx, st, &res); err != nil {
		return res, err
	}
	if _, err := pool.Exec(ctx, "DROP SCHEMA "+riverSchema+" CASCADE"); err != nil {
		return res, err
	}
	if err := ob.drainAtScale(ctx, st, &res); err != nil {
		return res, err
	}
	if err := ob.claimLatency(ctx, &res); err != nil {
		return res, err
	}
	return res, nil
}

// outboxBench runs the outbox measures on one pool.
type outboxBench struct {
	pool  *pgxpool.Pool
	o     options
	fills int // fills so far: numbers the event ids of the next one
}

// setup creates schema afresh with the outbox's migrations and returns
// its store.
func (ob *outboxBench) setup(ctx context.Context, schema string) (*outbox.Store, error) {
	if _, err := ob.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		return nil, err
	}
	if _, err := migrate.Apply(ctx, ob.pool, schema, outbox.Migrations); err != nil {
		return nil, err
	}
	return outbox.New(outbox.Config{Schema: schema})
}

// fill inserts n events into schema's outbox: SENT when sent, else
// PENDING.
func (ob *outboxBench) fill(ctx context.Context, schema string, n int, sent bool) error {
	ob.fills++
	_, err := ob.pool.Exec(ctx, sqlFor(schema, fillSQL), uuid.NewString(), n, sent, ob.fills)
	return err
}

// refill empties schema's outbox, fills it with n PENDING events (250,000
// per statement) and analyses it.
func (ob *outboxBench) refill(ctx context.Context, schema string, n int) error {
	if _, err := ob.pool.Exec(ctx, sqlFor(schema, "TRUNCATE {s}.event_outbox")); err != nil {
		return err
	}
	for left := n; left > 0; left -= 250_000 {
		if err := ob.fill(ctx, schema, min(left, 250_000), false); err != nil {
			return err
		}
	}
	_, err := ob.pool.Exec(ctx, sqlFor(schema, "VACUUM ANALYZE {s}.event_outbox"))
	return err
}

// throughputKinds name the three drains throughput interleaves.
var throughputKinds = []string{"relay", "relay InTx", "raw loop"}

// throughput measures River, the relay in lease mode, the relay in InTx
// mode and the raw loop, o.rounds times each, into res.
func (ob *outboxBench) throughput(ctx context.Context, st *outbox.Store, res *outboxResult) error {
	o := ob.o
	riverN, riverT := map[int]int64{}, map[int]time.Duration{}
	var n [3]int64 // per kind of throughputKinds
	var t [3]time.Duration
	for r := range o.rounds {
		for _, w := range riverWorkers {
			d, err := drainRiver(ctx, ob.pool, o.events, w)
			if err != nil {
				return fmt.Errorf("river: %w", err)
			}
			riverN[w], riverT[w] = riverN[w]+int64(o.events), riverT[w]+d
			fmt.Fprintf(stderr, "bench: outbox round %d/%d  river %d workers %7.0f jobs/s\n", r+1, o.rounds, w, float64(o.events)/d.Seconds())
		}
		// The relay in lease mode, the relay in InTx mode and the raw
		// loop, in an order that rotates with the round.
		for i := range 3 {
			kind := (r + i) % 3
			d, err := ob.drainOnce(ctx, st, kind)
			if err != nil {
				return err
			}
			n[kind], t[kind] = n[kind]+int64(o.events), t[kind]+d
			fmt.Fprintf(stderr, "bench: outbox round %d/%d  %-10s %7.0f events/s\n", r+1, o.rounds, throughputKinds[kind], float64(o.events)/d.Seconds())
		}
	}
	res.relayRate = float64(n[0]) / t[0].Seconds()
	res.relayTxRate = float64(n[1]) / t[1].Seconds()
	res.rawRate = float64(n[2]) / t[2].Seconds()
	res.riverRates = map[int]float64{}
	for _, w := range riverWorkers {
		res.riverRates[w] = float64(riverN[w]) / riverT[w].Seconds()
		res.riverRate = max(res.riverRate, res.riverRates[w])
	}
	return nil
}

// drainOnce fills the throughput table with o.events PENDING events and
// drains it with the kind of throughputKinds.
func (ob *outboxBench) drainOnce(ctx context.Context, st *outbox.Store, kind int) (time.Duration, error) {
	o := ob.o
	if _, err := ob.pool.Exec(ctx, sqlFor(tputSchema, "TRUNCATE {s}.event_outbox")); err != nil {
		return 0, err
	}
	if err := ob.fill(ctx, tputSchema, o.events, false); err != nil {
		return 0, err
	}
	if _, err := ob.pool.Exec(ctx, sqlFor(tputSchema, "VACUUM ANALYZE {s}.event_outbox")); err != nil {
		return 0, err
	}
	switch kind {
	case 0:
		return drainWithRelays(ctx, ob.pool, st, o, o.events, false)
	case 1:
		return drainWithRelays(ctx, ob.pool, st, o, o.events, true)
	default:
		return drainWithLoop(ctx, ob.pool, tputSchema, o)
	}
}

// drainAtScale measures the relay on a backlog of o.backlog pending events
// against smallBacklog (the median of 3), each on a freshly filled and
// analysed table.
func (ob *outboxBench) drainAtScale(ctx context.Context, st *outbox.Store, res *outboxResult) error {
	var small []float64
	for range 3 {
		r, err := ob.drainBacklog(ctx, st, smallBacklog)
		if err != nil {
			return err
		}
		small = append(small, r)
	}
	slices.Sort(small)
	res.drainSmall = small[1]
	fmt.Fprintf(stderr, "bench: draining %d pending events\n", ob.o.backlog)
	var err error
	if res.drainLarge, err = ob.drainBacklog(ctx, st, ob.o.backlog); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "bench: drain %7.0f events/s from %d pending, %7.0f from %d (median of 3)\n", res.drainLarge, ob.o.backlog, res.drainSmall, smallBacklog)
	return nil
}

// drainBacklog fills the throughput table with n PENDING events and
// returns the relay's events/s draining them.
func (ob *outboxBench) drainBacklog(ctx context.Context, st *outbox.Store, n int) (float64, error) {
	if err := ob.refill(ctx, tputSchema, n); err != nil {
		return 0, err
	}
	d, err := drainWithRelays(ctx, ob.pool, st, ob.o, n, false)
	return float64(n) / d.Seconds(), err
}

// claimLatency measures the claim's p50 with and without SENT history
// into res.
func (ob *outboxBench) claimLatency(ctx context.Context, res *outboxResult) error {
	o := ob.o
	none, err := ob.setup(ctx, "bench_outbox_none")
	if err != nil {
		return err
	}
	hist, err := ob.setup(ctx, "bench_outbox_history")
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "bench: inserting %d SENT events of history\n", o.history)
	for left := o.history; left > 0; left -= 250_000 {
		if err := ob.fill(ctx, "bench_outbox_history", min(left, 250_000), true); err != nil {
			return err
		}
	}
	// Statistics as a running outbox has them (autovacuum analyses the
	// table): taken with one batch in it, so that neither table's plans are
	// built for an empty table.
	for _, s := range []string{"bench_outbox_none", "bench_outbox_history"} {
		if err := ob.fill(ctx, s, o.batch, false); err != nil {
			return err
		}
		if _, err := ob.pool.Exec(ctx, sqlFor(s, "VACUUM ANALYZE {s}.event_outbox")); err != nil {
			return err
		}
		if _, err := ob.pool.Exec(ctx, sqlFor(s, "UPDATE {s}.event_outbox SET status = 20, sent_at = statement_timestamp() WHERE status = 0")); err != nil {
			return err
		}
	}
	latNone, latHist, err := ob.probeClaims(ctx, none, hist)
	if err != nil {
		return err
	}
	res.claimNone, res.claimHist = median(latNone), median(latHist)
	fmt.Fprintf(stderr, "bench: claim p50 %.2f ms without history, %.2f ms with %d SENT rows\n", ms(res.claimNone), ms(res.claimHist), o.history)
	return nil
}

// probeClaims times o.claimProbes claims of a fresh batch on each of none
// and hist, alternating which goes first.
func (ob *outboxBench) probeClaims(ctx context.Context, none, hist *outbox.Store) (latNone, latHist []time.Duration, err error) {
	o := ob.o
	for i := range o.claimProbes {
		for j, s := range []*outbox.Store{none, hist} {
			if (i+j)%2 == 1 { // alternate which goes first
				s = []*outbox.Store{hist, none}[j]
			}
			if err := ob.fill(ctx, s.Schema(), o.batch, false); err != nil {
				return nil, nil, err
			}
			t0 := time.Now()
			c, err := s.ClaimOutboxBatch(ctx, ob.pool, "bench-probe", o.batch)
			d := time.Since(t0)
			if err != nil {
				return nil, nil, err
			}
			if len(c.Messages) != o.batch {
				return nil, nil, fmt.Errorf("claim probe got %d events, want %d", len(c.Messages), o.batch)
			}
			if _, err := s.Mark(ctx, ob.pool, outbox.Outcome{Lease: c.Lease, Sent: ids(c.Messages)}); err != nil {
				return nil, nil, err
			}
			if s == none {
				latNone = append(latNone, d)
			} else {
				latHist = append(latHist, d)
			}
		}
	}
	return latNone, latHist, nil
}

func ids(ms []outbox.Message) []uuid.UUID {
	out := make([]uuid.UUID, len(ms))
	for i, m := range ms {
		out[i] = m.EventID
	}
	return out
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// drainWithRelays runs o.relays outbox relays (in InTx mode when inTx)
// until events events are
// published, then checks that every one of them was published and that the
// table holds nothing but SENT events.
func drainWithRelays(ctx context.Context, pool *pgxpool.Pool, st *outbox.Store, o options, events int, inTx bool) (time.Duration, error) {
	var n atomic.Int64
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	target := int64(events)
	var mu sync.Mutex
	seen := make(map[uuid.UUID]struct{}, events)
	pub := func(_ context.Context, msgs []outbox.Message) []error {
		mu.Lock()
		for _, m := range msgs {
			seen[m.EventID] = struct{}{}
		}
		mu.Unlock()
		if n.Add(int64(len(msgs))) >= target {
			select {
			case <-done:
			default:
				close(done)
			}
		}
		return make([]error, len(msgs))
	}
	var wg sync.WaitGroup
	start := time.Now()
	for i := range o.relays {
		r, err := outbox.NewRelay(pool, outbox.RelayConfig{
			Store: st, Publish: pub, Owner: fmt.Sprintf("bench-relay-%d", i), BatchSize: o.batch,
			PollInterval: 5 * time.Millisecond, MaxPollInterval: 20 * time.Millisecond, DisableListen: true, InTx: inTx,
		})
		if err != nil {
			return 0, err
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = r.Run(rctx) }()
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
	// The last batch is published; it is marked when the relay returns.
	cancel()
	wg.Wait()
	d := time.Since(start)
	if err := ctx.Err(); err != nil {
		return d, err
	}
	var left, sent int64
	if err := pool.QueryRow(ctx, sqlFor(st.Schema(), "SELECT count(*) FILTER (WHERE status <> 20), count(*) FILTER (WHERE status = 20) FROM {s}.event_outbox")).Scan(&left, &sent); err != nil {
		return d, err
	}
	if left != 0 || sent != target || int64(len(seen)) != target {
		return d, fmt.Errorf("relay drained %d distinct events, %d SENT, %d not SENT; want %d, %d, 0", len(seen), sent, left, target, target)
	}
	return d, nil
}

// drainWithLoop runs o.relays hand-written claim + mark-sent loops until a
// claim finds nothing.
func drainWithLoop(ctx context.Context, pool *pgxpool.Pool, schema string, o options) (time.Duration, error) {
	var wg sync.WaitGroup
	errc := make(chan error, o.relays)
	start := time.Now()
	for i := range o.relays {
		owner := fmt.Sprintf("bench-loop-%d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				rows, err := pool.Query(ctx, sqlFor(schema, rawClaimSQL), o.batch, owner)
				if err != nil {
					errc <- err
					return
				}
				var batch []uuid.UUID
				for rows.Next() {
					var (
						id                     uuid.UUID
						topic, key             string
						tag                    *string
						ver, retries, maxRetry int32
						payload, headers       []byte
					)
					if err := rows.Scan(&id, &topic, &tag, &key, &ver, &payload, &headers, &retries, &maxRetry); err != nil {
						rows.Close()
						errc <- err
						return
					}
					batch = append(batch, id)
				}
				if err := rows.Err(); err != nil {
					errc <- err
					return
				}
				if len(batch) == 0 {
					return
				}
				if _, err := pool.Exec(ctx, sqlFor(schema, rawSentSQL), batch, owner); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	d := time.Since(start)
	select {
	case err := <-errc:
		return d, err
	default:
	}
	var left int64
	if err := pool.QueryRow(ctx, sqlFor(schema, "SELECT count(*) FROM {s}.event_outbox WHERE status <> 20")).Scan(&left); err != nil {
		return d, err
	}
	if left != 0 {
		return d, fmt.Errorf("raw loop left %d events unsent", left)
	}
	return d, nil
}
