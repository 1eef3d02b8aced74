package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/examples/internal/orderid"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/internal/roundtrip"
	"github.com/seckillkit/seckill/pgtx"
)

// An order is one fresh order message: every one has a new user, request,
// reservation, message and order id, so every transaction takes the fresh
// path (stock is plentiful).
type orderMsg struct {
	id  uuid.UUID
	m   flow.OrderMessage
	raw []byte // the JSON body (the kit decodes it, as the example does)
}

// variant runs one order transaction.
type variant struct {
	name string
	// place runs the transaction for one message and reports whether it
	// created the order.
	place func(ctx context.Context, svc *flow.Service, o orderMsg) error
	// cfg adjusts the flow configuration (kit variants only).
	cfg func(*flow.Config)
	// tokens marks a variant whose SKU is provisioned as inventory tokens:
	// the bucket count does not apply, so it runs only in the cells of the
	// first bucket count, reported as "tokens".
	tokens bool
}

// allVariants are the variants -variants can name: raw, the limits
// (limit-min, limit-full: one statement, implicit commit), seed and kit,
// the kit with one of its optimisations switched off, for comparison, and
// the kit selling a SKU of inventory tokens (kit-tokens).
func allVariants() []variant {
	return []variant{
		{name: "raw", place: placeRaw},
		{name: "limit-min", place: placeLimitMin},
		{name: "limit-full", place: placeLimitFull},
		{name: "seed", place: placeSeed},
		{name: "kit", place: placeKit},
		{name: "kit-notify", place: placeKit, cfg: func(c *flow.Config) { c.Notify = true }},
		{name: "kit-ungated", place: placeKit, cfg: func(c *flow.Config) { c.BucketConcurrency = -1 }},
		{name: "kit-tokens", place: placeKit, cfg: withTokens, tokens: true},
	}
}

// tokenStock is the stock of the kit-tokens SKU: one token row per unit,
// provisioned for every run, far more than a run sells.
const tokenStock = 200_000

// withTokens makes the flow's SKU one of inventory tokens (inventory.SKU's
// Tokens): one row per unit, claimed with FOR UPDATE SKIP LOCKED.
func withTokens(c *flow.Config) {
	c.Item.Tokens, c.Item.Buckets, c.Item.Stock = true, 1, tokenStock
}

// placeKit is examples/seckill's consumer: flow.Service.PlaceOrder.
func placeKit(ctx context.Context, svc *flow.Service, o orderMsg) error {
	out, err := svc.PlaceOrder(ctx, o.id, o.raw)
	if err != nil {
		return err
	}
	if out.Code != flow.CodeOrderCreated {
		return fmt.Errorf("kit: outcome %+v, want %s", out, flow.CodeOrderCreated)
	}
	return nil
}

// sqlFor substitutes the quoted schema into a statement (built once per
// schema and cached).
var sqlCache sync.Map // schema + "\x00" + template → string

func sqlFor(schema, tmpl string) string {
	k := schema + "\x00" + tmpl
	if v, ok := sqlCache.Load(k); ok {
		return v.(string)
	}
	s := strings.ReplaceAll(tmpl, "{s}", pgx.Identifier{schema}.Sanitize())
	sqlCache.Store(k, s)
	return s
}

const rawAllocateSQL = `UPDATE {s}.sku_inventory
SET available_stock = available_stock - 1, allocated_stock = allocated_stock + 1,
    version = version + 1, updated_at = statement_timestamp()
WHERE activity_id = $1 AND sku_id = $2 AND bucket_no = $3 AND available_stock >= 1
RETURNING available_stock + 1, available_stock, allocated_stock - 1, allocated_stock`

const rawOrderSQL = `INSERT INTO {s}.orders (order_id, order_no, request_id, reservation_id, source_message_id,
    activity_id, sku_id, user_id, inventory_bucket, quantity, unit_price, total_amount, currency, status, expire_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 1, $10, $10, $11, 10, $12)
ON CONFLICT DO NOTHING
RETURNING order_id`

// placeRaw: the minimal transaction, one statement per round trip: BEGIN,
// conditional bucket UPDATE, order INSERT, COMMIT.
func placeRaw(ctx context.Context, svc *flow.Service, o orderMsg) error {
	m := o.m
	return pgx.BeginFunc(ctx, svc.Pool, func(tx pgx.Tx) error {
		var ba, aa, bl, al int32
		if err := tx.QueryRow(ctx, sqlFor(svc.Schema, rawAllocateSQL), m.ActivityID, m.SKUID, m.Bucket).Scan(&ba, &aa, &bl, &al); err != nil {
			return fmt.Errorf("raw allocate: %w", err)
		}
		var id int64
		if err := tx.QueryRow(ctx, sqlFor(svc.Schema, rawOrderSQL), m.OrderID, orderid.FormatNo(m.OrderID), m.RequestID, m.ReservationID, o.id,
			m.ActivityID, m.SKUID, m.UserID, m.Bucket, m.UnitPrice, m.Currency, m.OrderExpireAt).Scan(&id); err != nil {
			return fmt.Errorf("raw order: %w", err)
		}
		return nil
	})
}

// The textbook statements (variant "seed"), one per step, written
// against the kit's DDL.
const (
	seedInboxSQL = `INSERT INTO {s}.consumer_inbox (consumer_group, message_id, topic, tag, message_key, ref,
    payload_hash, status, result_code, result_payload)
VALUES ($1, $2, $3, $4, $5, $5, $6, 20, 'ORDER_CREATED', $7)
ON CONFLICT (consumer_group, message_id) DO NOTHING`
	seedReservationSQL = `INSERT INTO {s}.inventory_reservation (reservation_id, request_id, first_message_id, activity_id,
    sku_id, user_id, inventory_bucket, quantity, status, redis_reserved_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, 1, 0, $8, $9)
ON CONFLICT DO NOTHING`
	seedLockSQL = `SELECT request_id, activity_id, sku_id, user_id, inventory_bucket, quantity, order_id, status, version
FROM {s}.inventory_reservation WHERE reservation_id = $1 FOR UPDATE`
	seedItemSQL = `INSERT INTO {s}.order_items (order_id, line_no, activity_id, sku_id, sku_title, quantity, unit_price, line_amount)
VALUES ($1, 1, $2, $3, $4, 1, $5, $5)`
	seedLedgerSQL = `INSERT INTO {s}.inventory_ledger (idempotency_key, reservation_id, order_id, source_message_id,
    activity_id, sku_id, user_id, inventory_bucket, ledger_type, available_delta, allocated_delta,
    before_available, after_available, before_allocated, after_allocated, reason)
VALUES ('ALLOCATE:' || $1::uuid::text, $1::uuid, $2, $3, $4, $5, $6, $7, 10, -1, 1, $8, $9, $10, $11, 'ORDER_CREATED')
ON CONFLICT (idempotency_key) DO NOTHING`
	seedMarkOrderedSQL = `UPDATE {s}.inventory_reservation
SET status = 10, order_id = $2, ordered_at = statement_timestamp(), version = version + 1, updated_at = statement_timestamp()
WHERE reservation_id = $1 AND status = 0`
	seedOutboxSQL = `INSERT INTO {s}.event_outbox (event_id, dedup_key, aggregate_type, aggregate_id, topic, tag,
    message_key, schema_version, payload, status)
VALUES ($1, 'ORDER_CREATED:' || $2::int8::text, 'ORDER', $2::int8::text, 'ORDER_EVENT', 'ORDER_CREATED', $2::int8::text, 1, $3::jsonb, 0)
ON CONFLICT (dedup_key) DO NOTHING`
)

var errSeedBranch = errors.New("seed: not the fresh path")

// placeSeed is the textbook fresh path, one statement per round trip:
// BEGIN, SET LOCAL timeouts, inbox, reservation insert, reservation lock,
// order, bucket decrement, item, ledger, reservation ORDERED, outbox,
// COMMIT (12 round trips).
func placeSeed(ctx context.Context, svc *flow.Service, o orderMsg) error {
	m := o.m
	s := svc.Schema
	return pgx.BeginTxFunc(ctx, svc.Pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '2s'; SET LOCAL statement_timeout = '5s'"); err != nil {
			return err
		}
		result, _ := json.Marshal(flow.Outcome{Code: flow.CodeOrderCreated, OrderID: m.OrderID})
		tag, err := tx.Exec(ctx, sqlFor(s, seedInboxSQL), flow.ConsumerGroup, o.id, flow.OrderTopic, flow.OrderTag,
			m.ReservationID.String(), inbox.HashPayload(o.raw), result)
		if err != nil {
			return fmt.Errorf("seed inbox: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return errSeedBranch
		}
		if _, err := tx.Exec(ctx, sqlFor(s, seedReservationSQL), m.ReservationID, m.RequestID, o.id, m.ActivityID, m.SKUID,
			m.UserID, m.Bucket, m.ReservedAt, m.ReservationTo); err != nil {
			return fmt.Errorf("seed reservation: %w", err)
		}
		var (
			req            uuid.UUID
			act, sku, user int64
			bucket, qty    int16
			orderID        *int64
			status         int16
			version        int64
		)
		if err := tx.QueryRow(ctx, sqlFor(s, seedLockSQL), m.ReservationID).Scan(&req, &act, &sku, &user, &bucket, &qty, &orderID, &status, &version); err != nil {
			return fmt.Errorf("seed lock reservation: %w", err)
		}
		if status != 0 {
			return errSeedBranch
		}
		var id int64
		if err := tx.QueryRow(ctx, sqlFor(s, rawOrderSQL), m.OrderID, orderid.FormatNo(m.OrderID), m.RequestID, m.ReservationID, o.id,
			m.ActivityID, m.SKUID, m.UserID, m.Bucket, m.UnitPrice, m.Currency, m.OrderExpireAt).Scan(&id); err != nil {
			return fmt.Errorf("seed order: %w", err)
		}
		var ba, aa, bl, al int32
		if err := tx.QueryRow(ctx, sqlFor(s, rawAllocateSQL), m.ActivityID, m.SKUID, m.Bucket).Scan(&ba, &aa, &bl, &al); err != nil {
			return fmt.Errorf("seed allocate: %w", err)
		}
		if _, err := tx.Exec(ctx, sqlFor(s, seedItemSQL), m.OrderID, m.ActivityID, m.SKUID, m.SKUTitle, m.UnitPrice); err != nil {
			return fmt.Errorf("seed item: %w", err)
		}
		if _, err := tx.Exec(ctx, sqlFor(s, seedLedgerSQL), m.ReservationID, m.OrderID, o.id, m.ActivityID, m.SKUID, m.UserID, m.Bucket,
			ba, aa, bl, al); err != nil {
			return fmt.Errorf("seed ledger: %w", err)
		}
		if tag, err := tx.Exec(ctx, sqlFor(s, seedMarkOrderedSQL), m.ReservationID, m.OrderID); err != nil || tag.RowsAffected() != 1 {
			return fmt.Errorf("seed mark ordered: %v (%d rows)", err, tag.RowsAffected())
		}
		payload, _ := json.Marshal(map[string]any{"order_id": m.OrderID, "reservation_id": m.ReservationID, "user_id": m.UserID,
			"activity_id": m.ActivityID, "sku_id": m.SKUID, "amount": m.UnitPrice, "currency": m.Currency})
		if _, err := tx.Exec(ctx, sqlFor(s, seedOutboxSQL), uuid.Must(uuid.NewV7()), m.OrderID, payload); err != nil {
			return fmt.Errorf("seed outbox: %w", err)
		}
		return nil
	})
}

// cellResult is one variant's figures in one cell of one round.
type cellResult struct {
	orders    int64
	errors    int64
	elapsed   time.Duration
	lat       []time.Duration
	rt        int64 // round trips counted by the tracer
	lockWaits waitSample
	cpu       time.Duration // the process's CPU time (user + system) during the run
	serverCPU time.Duration // with options.measure: the servers' CPU time during the run
	walBytes  int64         // with options.measure: the WAL written during the run
}

// runCell runs one variant for d with c consumers against a freshly
// provisioned SKU of svc.
func runCell(ctx context.Context, svc *flow.Service, v variant, c int, d time.Duration, ids *orderid.Generator,
	users *atomic.Int64, rt *roundtrip.Counter, sampler *waitSampler) (cellResult, error) {
	item := svc.Item
	mk := func() (orderMsg, error) {
		u := users.Add(1)
		now := time.Now()
		m := flow.OrderMessage{
			RequestID: uuid.Must(uuid.NewV7()), ReservationID: uuid.Must(uuid.NewV7()), OrderID: ids.Next(),
			ActivityID: item.ActivityID, SKUID: item.SKUID, UserID: u, Bucket: int16(u % int64(item.Buckets)),
			UnitPrice: item.UnitPrice, Currency: item.Currency, SKUTitle: item.Title,
			ReservedAt: now, ReservationTo: now.Add(15 * time.Minute), OrderExpireAt: now.Add(time.Hour),
		}
		raw, err := json.Marshal(m)
		return orderMsg{id: uuid.Must(uuid.NewV7()), m: m, raw: raw}, err
	}
	var (
		mu       sync.Mutex
		res      cellResult
		firstErr error
		wg       sync.WaitGroup
	)
	cctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	stopSampling := sampler.start(ctx)
	rt0 := rt.Load()
	cpu0 := processCPU()
	start := time.Now()
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			var n, nerr int64
			for cctx.Err() == nil {
				o, err := mk()
				if err != nil {
					panic(err)
				}
				t0 := time.Now()
				// The transaction runs to its end even when the cell's time
				// is up, so that every counted round trip belongs to a
				// counted order.
				err = v.place(context.WithoutCancel(cctx), svc, o)
				if err != nil {
					nerr++
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("%s: %w", v.name, err)
					}
					mu.Unlock()
					continue
				}
				lat = append(lat, time.Since(t0))
				n++
			}
			mu.Lock()
			res.orders += n
			res.errors += nerr
			res.lat = append(res.lat, lat...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.cpu = processCPU() - cpu0
	res.rt = rt.Load() - rt0
	res.lockWaits = stopSampling()
	if res.errors > 0 && res.orders == 0 {
		return res, firstErr
	}
	if firstErr != nil {
		fmt.Fprintf(stderr, "bench: %s: %d transactions failed, first: %v\n", v.name, res.errors, firstErr)
	}
	return res, nil
}

// processCPU is the CPU time (user + system) the process has used so far:
// around a variant's run, the client's CPU cost of its orders (plus the
// wait sampler's few queries, the same for every variant).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// waitSampler samples pg_stat_activity of the bench's backends every few
// milliseconds from a connection of its own.
type waitSampler struct {
	conn *pgx.Conn
	app  string
}

// waitSample is what the sampling saw: the mean number of backends waiting
// on a heavyweight lock, and every wait event's count.
type waitSample struct {
	samples   int
	lockWait  int
	active    int
	waitCount map[string]int
}

func (w waitSample) meanLockWaiters() float64 {
	if w.samples == 0 {
		return 0
	}
	return float64(w.lockWait) / float64(w.samples)
}

func (w *waitSample) add(o waitSample) {
	w.samples += o.samples
	w.lockWait += o.lockWait
	w.active += o.active
	if w.waitCount == nil {
		w.waitCount = map[string]int{}
	}
	for k, v := range o.waitCount {
		w.waitCount[k] += v
	}
}

const waitSQL = `SELECT coalesce(wait_event_type, 'CPU') || ':' || coalesce(wait_event, '-'), count(*)
FROM pg_stat_activity
WHERE application_name = $1 AND state IN ('active', 'idle in transaction') AND pid <> pg_backend_pid()
GROUP BY 1`

func (s *waitSampler) start(ctx context.Context) (stop func() waitSample) {
	done := make(chan waitSample)
	quit := make(chan struct{})
	go func() {
		res := waitSample{waitCount: map[string]int{}}
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				done <- res
				return
			case <-ctx.Done():
				<-quit
				done <- res
				return
			case <-t.C:
			}
			rows, err := s.conn.Query(ctx, waitSQL, s.app)
			if err != nil {
				continue
			}
			res.samples++
			for rows.Next() {
				var ev string
				var n int
				if rows.Scan(&ev, &n) == nil {
					res.waitCount[ev] += n
					res.active += n
					if strings.HasPrefix(ev, "Lock:") {
						res.lockWait += n
					}
				}
			}
			rows.Close()
		}
	}()
	return func() waitSample { close(quit); return <-done }
}

// newPool is the one pool every variant uses.
func newPool(ctx context.Context, url string, size int, rt *roundtrip.Counter) (*pgxpool.Pool, error) {
	return newPoolWith(ctx, url, size, rt, nil)
}

// newPoolWith is newPool with extra run-time parameters (SET at
// connection start).
func newPoolWith(ctx context.Context, url string, size int, rt *roundtrip.Counter, params map[string]string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(size)
	cfg.MinConns = int32(size)
	cfg.ConnConfig.Tracer = rt
	cfg.ConnConfig.RuntimeParams["application_name"] = benchApp
	for k, v := range params {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

const benchApp = "seckill-bench"

var _ = pgtx.Options{}
