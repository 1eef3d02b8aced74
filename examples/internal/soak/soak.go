// Package soak is the sustained-load run of the seckill example flow: round
// after round of new buyers on one SKU (its four hot bucket rows updated all
// run long), double clicks, payments and timeout cancels, the
// outbox relayed, and after every round the retention jobs (inbox purge,
// outbox purge; or, with Config.Archive, the archives that move the rows
// to the history tables, after an optional preloaded history of
// Config.Backlog rows) while autovacuum runs. After each round it samples what
// must stay bounded: the size of the purged tables and of the hot
// inventory rows, and the cost of an outbox claim. The drill TestSoak runs
// it briefly and asserts the bounds against the run's own start; the
// program examples/soak runs it for as long as asked and prints every
// sample.
package soak

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/examples/internal/orderid"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/outbox"
)

// ServerSettings make autovacuum keep up with a short soak on a throwaway
// server: it looks every second and acts on small tables.
var ServerSettings = []string{
	"autovacuum_naptime=1",
	"autovacuum_vacuum_threshold=50",
	"autovacuum_vacuum_scale_factor=0.02",
	"autovacuum_vacuum_insert_threshold=200",
	"autovacuum_analyze_threshold=50",
	"autovacuum_analyze_scale_factor=0.02",
}

// Config of a soak run. Zero values mean the defaults.
type Config struct {
	Pool   *pgxpool.Pool
	Schema string // defaults to "soak"
	// Rounds to run; 0 means until Duration has passed.
	Rounds   int
	Duration time.Duration
	Users    int // buyers per round; defaults to 300
	Workers  int // consumers; defaults to 8
	// Sample, when set, is called with every round's sample.
	Sample func(Sample)
	// Archive makes the retention jobs archive (inbox.Store.Archive,
	// outbox.Store.ArchiveSent) instead of purge. Defaults to false.
	Archive bool
	// Backlog, with Archive, preloads that many rows of history before the
	// first round (half SENT events, half processed inbox rows, all 30
	// days old), which the first round's retention moves. Defaults to 0.
	Backlog int64
	// ArchiveBatch is the archives' batch size. Defaults to 1000.
	ArchiveBatch int
}

// Sample is what one round leaves behind, measured after its purges.
type Sample struct {
	// Flow is the run's flow, for an audit.
	Flow    *flow.Service `json:"-"`
	Round   int
	Elapsed time.Duration
	Orders  int64 // all orders so far (orders are business data: never purged)
	// Rows and total sizes (table + indexes + TOAST) of the purged tables
	// and of the hot bucket table.
	InboxRows, OutboxRows                int64
	InboxBytes, OutboxBytes, BucketBytes int64
	DeadInbox, DeadOutbox                int64 // dead tuples waiting for vacuum
	Purged                               int64 // inbox and outbox rows purged this round
	Archived                             int64 // inbox and outbox rows archived this round (Config.Archive)
	RetentionWAL                         int64 // bytes of WAL the round's purge or archive wrote
	RetentionTime                        time.Duration
	DeadBuckets                          int64 // dead tuples of the hot bucket table
	BucketUpdates, BucketHOTUpdates      int64 // updates of the hot bucket table so far, and how many of them were HOT
	// BucketVersionBytes are the bytes the hot bucket table's row versions
	// (live and dead, not yet pruned) take, from pgstattuple; -1 when the
	// extension could not be created. Unlike BucketBytes it does not count
	// free pages: PostgreSQL 15 and older extend a table by 20 pages for
	// each backend waiting to extend it, so a few updates racing for a new
	// page can add a few hundred kB at once that later updates reuse.
	BucketVersionBytes int64
	Autovacuums        int64 // autovacuum runs on the three tables so far
	ClaimBlocks        int64 // buffers one outbox claim touches (heap and index, the fewest of 3)
	ClaimLatency       time.Duration
	PlaceP50, PlaceP99 time.Duration // the round's order transactions
	Redelivered        int64
}

func (s Sample) String() string {
	return fmt.Sprintf("round %4d  %8s  orders %7d  inbox %5d rows %7s (dead %5d)  outbox %5d rows %7s (dead %5d)  buckets %7s (versions %7d B, dead %4d, updates %6d, HOT %6d)  purged %6d  archived %8d in %8s (WAL %5d B/row)  autovacuums %4d  claim %3d blocks %8s  place p50 %8s p99 %8s",
		s.Round, s.Elapsed.Round(time.Second), s.Orders, s.InboxRows, kb(s.InboxBytes), s.DeadInbox, s.OutboxRows, kb(s.OutboxBytes), s.DeadOutbox,
		kb(s.BucketBytes), s.BucketVersionBytes, s.DeadBuckets, s.BucketUpdates, s.BucketHOTUpdates, s.Purged, s.Archived, s.RetentionTime.Round(time.Millisecond), s.WALPerRow(), s.Autovacuums, s.ClaimBlocks, s.ClaimLatency.Round(time.Microsecond),
		s.PlaceP50.Round(time.Microsecond), s.PlaceP99.Round(time.Microsecond))
}

func kb(b int64) string { return fmt.Sprintf("%dkB", b/1024) }

// Run runs the soak and returns its samples. It stops at ctx's end too
// (returning the samples so far and ctx's error).
func Run(ctx context.Context, cfg Config) ([]Sample, error) {
	if cfg.Pool == nil {
		return nil, errors.New("soak: Pool is required")
	}
	if cfg.Schema == "" {
		cfg.Schema = "soak"
	}
	if cfg.Users <= 0 {
		cfg.Users = 300
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 8
	}
	if cfg.Rounds <= 0 && cfg.Duration <= 0 {
		return nil, errors.New("soak: set Rounds or Duration")
	}
	if cfg.ArchiveBatch <= 0 {
		cfg.ArchiveBatch = 1000
	}
	if cfg.Backlog > 0 && !cfg.Archive {
		return nil, errors.New("soak: Backlog needs Archive")
	}
	svc, err := newFlow(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	// pgstattuple (shipped with PostgreSQL's contrib modules) measures the
	// bucket table's row versions; without it BucketVersionBytes is -1.
	_, err = cfg.Pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pgstattuple`)
	versions := err == nil
	if cfg.Backlog > 0 {
		if err := preload(ctx, cfg); err != nil {
			return nil, fmt.Errorf("soak: %w", err)
		}
	}
	start := time.Now()
	var samples []Sample
	var ids orderid.Generator
	for round := 1; ; round++ {
		if cfg.Rounds > 0 && round > cfg.Rounds || cfg.Rounds <= 0 && time.Since(start) >= cfg.Duration {
			return samples, nil
		}
		s, err := runRound(ctx, cfg, svc, round, &ids)
		if err == nil {
			err = measureVersions(ctx, cfg, versions, &s)
		}
		if err != nil {
			return samples, fmt.Errorf("soak: round %d: %w", round, err)
		}
		s.Elapsed = time.Since(start)
		samples = append(samples, s)
		if cfg.Sample != nil {
			cfg.Sample(s)
		}
	}
}

// SKUStock is the soak SKU's stock: more than any run sells, so every
// buyer's first click gets an order (the hot bucket rows are updated all
// run long).
const SKUStock = 1 << 30

func newFlow(ctx context.Context, cfg Config) (*flow.Service, error) {
	return flow.New(ctx, cfg.Pool, flow.Config{Schema: cfg.Schema, Item: flow.SKU{
		ActivityID: 1, SKUID: 1000, Title: "soak phone", UnitPrice: 1999, Currency: "CNY", Stock: SKUStock, Buckets: 4,
	}})
}

func runRound(ctx context.Context, cfg Config, svc *flow.Service, round int, ids *orderid.Generator) (Sample, error) {
	s := Sample{Round: round, Flow: svc}
	// The relay runs through the round and stops before the measurements.
	stopRelay, err := startRelay(ctx, cfg, svc, round)
	if err != nil {
		return s, err
	}
	defer stopRelay()

	jobs, err := roundJobs(cfg, svc, round, ids)
	if err != nil {
		return s, err
	}
	created, err := placeOrders(ctx, cfg, svc, jobs, &s)
	if err != nil {
		return s, err
	}
	if err := payEveryOther(ctx, svc, created); err != nil {
		return s, err
	}
	for {
		n, err := svc.CancelExpired(ctx, 200)
		if err != nil {
			return s, fmt.Errorf("cancel sweep: %w", err)
		}
		if n == 0 {
			break
		}
	}
	// Drain the outbox, then stop the relay.
	if err := waitOutboxDrained(ctx, cfg, svc); err != nil {
		return s, err
	}
	stopRelay()

	// Retention: everything processed or sent before now goes.
	cut := time.Now().Add(time.Millisecond)
	if err := retain(ctx, cfg, svc, cut, &s); err != nil {
		return s, err
	}
	if err := measure(ctx, cfg, svc, &s); err != nil {
		return s, err
	}
	return s, nil
}

// startRelay starts the round's outbox relay (a publisher that accepts
// everything); stop ends it and waits until it returned. stop may be
// called more than once.
func startRelay(ctx context.Context, cfg Config, svc *flow.Service, round int) (stop func(), err error) {
	rctx, stopRelay := context.WithCancel(ctx)
	relay, err := outbox.NewRelay(cfg.Pool, outbox.RelayConfig{
		Store: svc.Outbox, Owner: fmt.Sprintf("soak-relay-%d", round), BatchSize: 100,
		PollInterval: 10 * time.Millisecond, MaxPollInterval: 100 * time.Millisecond,
		Publish: func(context.Context, []outbox.Message) []error { return nil },
	})
	if err != nil {
		stopRelay()
		return nil, err
	}
	relayDone := make(chan struct{})
	go func() { defer close(relayDone); _ = relay.Run(rctx) }()
	return func() { stopRelay(); <-relayDone }, nil
}

// job is one delivery of an order message.
type job struct {
	id   uuid.UUID
	body []byte
	m    flow.OrderMessage
}

// roundJobs are the round's orders, shuffled: every buyer once, every
// 10th twice; every 5th order already expired (the canceller takes it).
func roundJobs(cfg Config, svc *flow.Service, round int, ids *orderid.Generator) ([]job, error) {
	now := time.Now()
	var jobs []job
	for u := range cfg.Users {
		for k := 0; k < 1+boolInt(u%10 == 9); k++ {
			m := flow.OrderMessage{
				RequestID: uuid.Must(uuid.NewV7()), ReservationID: uuid.Must(uuid.NewV7()), OrderID: ids.Next(),
				ActivityID: svc.Item.ActivityID, SKUID: svc.Item.SKUID, UserID: int64(round)*1_000_000 + int64(u), Bucket: int16(len(jobs) % 4),
				UnitPrice: svc.Item.UnitPrice, Currency: svc.Item.Currency, SKUTitle: svc.Item.Title,
				ReservedAt: now, ReservationTo: now.Add(15 * time.Minute), OrderExpireAt: now.Add(time.Hour),
			}
			if len(jobs)%5 == 4 {
				m.OrderExpireAt = now.Add(-time.Second)
			}
			body, err := json.Marshal(m)
			if err != nil {
				return nil, err
			}
			jobs = append(jobs, job{id: uuid.Must(uuid.NewV7()), body: body, m: m})
		}
	}
	rand.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	return jobs, nil
}

// placer is what cfg.Workers consumers placing orders gather.
type placer struct {
	mu          sync.Mutex
	lat         []time.Duration
	created     []int64
	redelivered atomic.Int64
	firstErr    error
}

// placeOrders places every job with cfg.Workers consumers, and sets s's
// order latencies and redeliveries. It returns the ids of the orders
// created.
func placeOrders(ctx context.Context, cfg Config, svc *flow.Service, jobs []job, s *Sample) ([]int64, error) {
	ch := make(chan job)
	var p placer
	var wg sync.WaitGroup
	for range cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range ch {
				p.place(ctx, svc, j)
			}
		}()
	}
	for _, j := range jobs {
		select {
		case ch <- j:
		case <-ctx.Done():
		}
	}
	close(ch)
	wg.Wait()
	if p.firstErr != nil {
		return nil, p.firstErr
	}
	s.Redelivered = p.redelivered.Load()
	lat := p.lat
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) > 0 {
		s.PlaceP50, s.PlaceP99 = lat[len(lat)/2], lat[len(lat)*99/100]
	}
	return p.created, nil
}

// place delivers j until it is placed, at least once: a failed delivery
// comes again, up to 20 times.
func (p *placer) place(ctx context.Context, svc *flow.Service, j job) {
	for attempt := 1; ; attempt++ {
		t0 := time.Now()
		out, err := svc.PlaceOrder(ctx, j.id, j.body)
		d := time.Since(t0)
		if err == nil {
			p.mu.Lock()
			p.lat = append(p.lat, d)
			if out.Code == flow.CodeOrderCreated && !out.Duplicate {
				p.created = append(p.created, out.OrderID)
			}
			p.mu.Unlock()
			return
		}
		if ctx.Err() != nil || errors.Is(err, flow.ErrPoison) || attempt == 20 {
			p.mu.Lock()
			p.firstErr = cmpErr(p.firstErr, fmt.Errorf("place order %d: %w", j.m.OrderID, err))
			p.mu.Unlock()
			return
		}
		p.redelivered.Add(1) // at least once: the message comes again
		time.Sleep(time.Duration(attempt) * 5 * time.Millisecond)
	}
}

// payEveryOther pays every 2nd order created.
func payEveryOther(ctx context.Context, svc *flow.Service, created []int64) error {
	for i, id := range created {
		if i%2 == 1 {
			continue
		}
		_, err := svc.Pay(ctx, flow.Payment{OrderID: id, ProviderTradeNo: fmt.Sprintf("T%d", id), CallbackID: fmt.Sprintf("CB%d", id),
			Amount: svc.Item.UnitPrice, Currency: svc.Item.Currency})
		if err != nil {
			return fmt.Errorf("pay %d: %w", id, err)
		}
	}
	return nil
}

// waitOutboxDrained waits until the outbox has nothing pending, sending
// or to retry.
func waitOutboxDrained(ctx context.Context, cfg Config, svc *flow.Service) error {
	for {
		st, err := svc.Outbox.Stats(ctx, cfg.Pool)
		if err != nil {
			return err
		}
		if st.Pending+st.Sending+st.Retry == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// measureVersions fills s.BucketVersionBytes (-1 without pgstattuple).
func measureVersions(ctx context.Context, cfg Config, available bool, s *Sample) error {
	s.BucketVersionBytes = -1
	if !available {
		return nil
	}
	err := cfg.Pool.QueryRow(ctx, `SELECT tuple_len + dead_tuple_len FROM pgstattuple($1::regclass)`,
		pgx.Identifier{cfg.Schema, "sku_inventory"}.Sanitize()).Scan(&s.BucketVersionBytes)
	if err != nil {
		return fmt.Errorf("bucket row versions: %w", err)
	}
	return nil
}

// measure fills the sizes, dead tuples, autovacuum count and claim cost.
func measure(ctx context.Context, cfg Config, svc *flow.Service, s *Sample) error {
	q := func(sql string) string { return fmt.Sprintf(sql, pgx.Identifier{cfg.Schema}.Sanitize()) }
	rel := func(t string) string { return pgx.Identifier{cfg.Schema, t}.Sanitize() }
	if err := cfg.Pool.QueryRow(ctx, q(`SELECT (SELECT count(*) FROM %[1]s.orders), (SELECT count(*) FROM %[1]s.consumer_inbox), (SELECT count(*) FROM %[1]s.event_outbox),
			pg_total_relation_size($1::regclass), pg_total_relation_size($2::regclass), pg_total_relation_size($3::regclass)`),
		rel("consumer_inbox"), rel("event_outbox"), rel("sku_inventory")).
		Scan(&s.Orders, &s.InboxRows, &s.OutboxRows, &s.InboxBytes, &s.OutboxBytes, &s.BucketBytes); err != nil {
		return fmt.Errorf("sizes: %w", err)
	}
	if err := cfg.Pool.QueryRow(ctx, `SELECT coalesce(sum(n_dead_tup) FILTER (WHERE relname = 'consumer_inbox'), 0), coalesce(sum(n_dead_tup) FILTER (WHERE relname = 'event_outbox'), 0),
			coalesce(sum(n_dead_tup) FILTER (WHERE relname = 'sku_inventory'), 0), coalesce(sum(autovacuum_count), 0),
			coalesce(sum(n_tup_upd) FILTER (WHERE relname = 'sku_inventory'), 0), coalesce(sum(n_tup_hot_upd) FILTER (WHERE relname = 'sku_inventory'), 0)
		FROM pg_stat_user_tables WHERE schemaname = $1 AND relname IN ('consumer_inbox', 'event_outbox', 'sku_inventory')`, cfg.Schema).
		Scan(&s.DeadInbox, &s.DeadOutbox, &s.DeadBuckets, &s.Autovacuums, &s.BucketUpdates, &s.BucketHOTUpdates); err != nil {
		return fmt.Errorf("table stats: %w", err)
	}
	// The claim's cost: buffers of event_outbox (heap and indexes) that
	// one ClaimOutboxBatch touches, from the server's own I/O statistics
	// on a connection of its own; the fewest of three tries, so that an
	// autovacuum passing by does not count.
	conn, err := cfg.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	blocks := func() (int64, error) {
		// Flush this backend's pending statistics, then read them.
		if _, err := conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			return 0, err
		}
		if _, err := conn.Exec(ctx, `SELECT 1`); err != nil {
			return 0, err
		}
		var n int64
		err := conn.QueryRow(ctx, `SELECT coalesce(heap_blks_read + heap_blks_hit, 0) + coalesce(idx_blks_read + idx_blks_hit, 0)
			FROM pg_statio_user_tables WHERE relid = $1::regclass`, rel("event_outbox")).Scan(&n)
		return n, err
	}
	s.ClaimBlocks = -1
	for range 3 {
		before, err := blocks()
		if err != nil {
			return fmt.Errorf("claim cost: %w", err)
		}
		t0 := time.Now()
		if _, err := svc.Outbox.ClaimOutboxBatch(ctx, conn, "soak-probe", 100); err != nil {
			return fmt.Errorf("claim probe: %w", err)
		}
		d := time.Since(t0)
		after, err := blocks()
		if err != nil {
			return fmt.Errorf("claim cost: %w", err)
		}
		if s.ClaimBlocks < 0 || after-before < s.ClaimBlocks {
			s.ClaimBlocks, s.ClaimLatency = after-before, d
		}
	}
	return nil
}
