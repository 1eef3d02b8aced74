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

func runOutbox(ctx context.Context, pool *pgxpool.Pool, o options) (outboxResult, error) {
	var res outboxResult
	setup := func(schema string) (*outbox.Store, error) {
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			return nil, err
		}
		if _, err := migrate.Apply(ctx, pool, schema, outbox.Migrations); err != nil {
			return nil, err
		}
		return outbox.New(outbox.Config{Schema: schema})
	}
	fills := 0
	fill := func(schema string, n int, sent bool) error {
		fills++
		_, err := pool.Exec(ctx, sqlFor(schema, fillSQL), uuid.NewString(), n, sent, fills)
		return err
	}

	// Throughput: relay vs hand-written loop, interleaved, each on a table
	// emptied first.
	const tput = "bench_outbox"
	st, err := setup(tput)
	if err != nil {
		return res, err
	}
	if err := riverSetup(ctx, pool); err != nil {
		return res, fmt.Errorf("river: %w", err)
	}
	riverN, riverT := map[int]int64{}, map[int]time.Duration{}
	var relayN, relayTxN, rawN int64
	var relayT, relayTxT, rawT time.Duration
	for r := range o.rounds {
		for _, w := range riverWorkers {
			d, err := drainRiver(ctx, pool, o.events, w)
			if err != nil {
				return res, fmt.Errorf("river: %w", err)
			}
			riverN[w], riverT[w] = riverN[w]+int64(o.events), riverT[w]+d
			fmt.Fprintf(stderr, "bench: outbox round %d/%d  river %d workers %7.0f jobs/s\n", r+1, o.rounds, w, float64(o.events)/d.Seconds())
		}
		// The relay in lease mode, the relay in InTx mode and the raw
		// loop, in an order that rotates with the round.
		for i := range 3 {
			kind := (r + i) % 3
			if _, err := pool.Exec(ctx, sqlFor(tput, "TRUNCATE {s}.event_outbox")); err != nil {
				return res, err
			}
			if err := fill(tput, o.events, false); err != nil {
				return res, err
			}
			if _, err := pool.Exec(ctx, sqlFor(tput, "VACUUM ANALYZE {s}.event_outbox")); err != nil {
				return res, err
			}
			var d time.Duration
			switch kind {
			case 0:
				d, err = drainWithRelays(ctx, pool, st, o, o.events, false)
				relayN, relayT = relayN+int64(o.events), relayT+d
			case 1:
				d, err = drainWithRelays(ctx, pool, st, o, o.events, true)
				relayTxN, relayTxT = relayTxN+int64(o.events), relayTxT+d
			default:
				d, err = drainWithLoop(ctx, pool, tput, o)
				rawN, rawT = rawN+int64(o.events), rawT+d
			}
			if err != nil {
				return res, err
			}
			name := []string{"relay", "relay InTx", "raw loop"}[kind]
			fmt.Fprintf(stderr, "bench: outbox round %d/%d  %-10s %7.0f events/s\n", r+1, o.rounds, name, float64(o.events)/d.Seconds())
		}
	}
	res.relayRate = float64(relayN) / relayT.Seconds()
	res.relayTxRate = float64(relayTxN) / relayTxT.Seconds()
	res.rawRate = float64(rawN) / rawT.Seconds()
	res.riverRates = map[int]float64{}
	for _, w := range riverWorkers {
		res.riverRates[w] = float64(riverN[w]) / riverT[w].Seconds()
		res.riverRate = max(res.riverRate, res.riverRates[w])
	}
	if _, err := pool.Exec(ctx, "DROP SCHEMA "+riverSchema+" CASCADE"); err != nil {
		return res, err
	}

	// Drain at scale: the relay on a backlog of o.backlog pending events
	// against smallBacklog, each on a freshly filled and analysed table.
	drain := func(n int) (float64, error) {
		if _, err := pool.Exec(ctx, sqlFor(tput, "TRUNCATE {s}.event_outbox")); err != nil {
			return 0, err
		}
		for left := n; left > 0; left -= 250_000 {
			if err := fill(tput, min(left, 250_000), false); err != nil {
				return 0, err
			}
		}
		if _, err := pool.Exec(ctx, sqlFor(tput, "VACUUM ANALYZE {s}.event_outbox")); err != nil {
			return 0, err
		}
		d, err := drainWithRelays(ctx, pool, st, o, n, false)
		return float64(n) / d.Seconds(), err
	}
	var small []float64
	for range 3 {
		r, err := drain(smallBacklog)
		if err != nil {
			return res, err
		}
		small = append(small, r)
	}
	slices.Sort(small)
	res.drainSmall = small[1]
	fmt.Fprintf(stderr, "bench: draining %d pending events\n", o.backlog)
	if res.drainLarge, err = drain(o.backlog); err != nil {
		return res, err
	}
	fmt.Fprintf(stderr, "bench: drain %7.0f events/s from %d pending, %7.0f from %d (median of 3)\n", res.drainLarge, o.backlog, res.drainSmall, smallBacklog)

	// Claim latency with and without SENT history.
	none, err := setup("bench_outbox_none")
	if err != nil {
		return res, err
	}
	hist, err := setup("bench_outbox_history")
	if err != nil {
		return res, err
	}
	fmt.Fprintf(stderr, "bench: inserting %d SENT events of history\n", o.history)
	for left := o.history; left > 0; left -= 250_000 {
		if err := fill("bench_outbox_history", min(left, 250_000), true); err != nil {
			return res, err
		}
	}
	// Statistics as a running outbox has them (autovacuum analyses the
	// table): taken with one batch in it, so that neither table's plans are
	// built for an empty table.
	for _, s := range []string{"bench_outbox_none", "bench_outbox_history"} {
		if err := fill(s, o.batch, false); err != nil {
			return res, err
		}
		if _, err := pool.Exec(ctx, sqlFor(s, "VACUUM ANALYZE {s}.event_outbox")); err != nil {
			return res, err
		}
		if _, err := pool.Exec(ctx, sqlFor(s, "UPDATE {s}.event_outbox SET status = 20, sent_at = statement_timestamp() WHERE status = 0")); err != nil {
			return res, err
		}
	}
	var latNone, latHist []time.Duration
	for i := range o.claimProbes {
		for j, s := range []*outbox.Store{none, hist} {
			if (i+j)%2 == 1 { // alternate which goes first
				s = []*outbox.Store{hist, none}[j]
			}
			if err := fill(s.Schema(), o.batch, false); err != nil {
				return res, err
			}
			t0 := time.Now()
			c, err := s.ClaimOutboxBatch(ctx, pool, "bench-probe", o.batch)
			d := time.Since(t0)
			if err != nil {
				return res, err
			}
			if len(c.Messages) != o.batch {
				return res, fmt.Errorf("claim probe got %d events, want %d", len(c.Messages), o.batch)
			}
			if _, err := s.Mark(ctx, pool, outbox.Outcome{Lease: c.Lease, Sent: ids(c.Messages)}); err != nil {
				return res, err
			}
			if s == none {
				latNone = append(latNone, d)
			} else {
				latHist = append(latHist, d)
			}
		}
	}
	res.claimNone, res.claimHist = median(latNone), median(latHist)
	fmt.Fprintf(stderr, "bench: claim p50 %.2f ms without history, %.2f ms with %d SENT rows\n", ms(res.claimNone), ms(res.claimHist), o.history)
	return res, nil
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
