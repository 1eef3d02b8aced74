package outbox

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/migrate"
)

// Defaults of [RelayConfig].
const (
	defaultBatchSize       = 100
	defaultPollInterval    = 100 * time.Millisecond
	defaultMaxPollInterval = 5 * time.Second
	defaultLease           = 30 * time.Second
	defaultShutdownTimeout = 10 * time.Second
)

// RelayConfig configures a [Relay]. The zero value (plus Publish) is
// valid and means defaults.
type RelayConfig struct {
	// Store runs the statements. Defaults to a Store of Config{} (schema
	// "seckill").
	Store *Store
	// Publish sends the claimed messages to the broker. Required.
	//
	// It publishes msgs and reports per message: it returns nil when
	// every message was published, or a slice of len(msgs) errors where
	// errs[i] == nil means msgs[i] was published (acknowledged by the
	// broker). A slice of another length counts as "all failed". ctx is
	// cancelled when the relay stops and carries a deadline of the relay's
	// lease; a message published after its lease expired may be published
	// twice. Publish must be safe to call again with the same message:
	// delivery is at least once, consumers must be idempotent.
	//
	// A relay calls it from its Run goroutine, one batch at a time, with
	// no transaction open (the claim has committed), or, in InTx mode,
	// inside the open transaction that holds the batch locked; relays
	// sharing a function call it concurrently. It may block until ctx
	// ends; a panic is recovered and counts as every message failed.
	Publish func(ctx context.Context, msgs []Message) []error
	// Owner identifies this relay in locked_by; it must be unique among the
	// relays of one outbox. Defaults to "hostname-pid-random".
	Owner string
	// BatchSize is the number of events claimed at a time. Defaults to 100.
	BatchSize int
	// PollInterval is the wait after a claim found nothing; it doubles on
	// every further empty claim up to MaxPollInterval and resets when
	// events arrive or a NOTIFY wakes the relay. Defaults to 100ms.
	PollInterval time.Duration
	// MaxPollInterval caps the idle wait. Defaults to 5s (raised to
	// PollInterval when smaller).
	MaxPollInterval time.Duration
	// Lease is how long a claim may stay unfinished before any relay
	// recovers it, and the deadline of Publish. It must exceed the slowest
	// publish you accept. Defaults to 30s.
	Lease time.Duration
	// RecoverInterval is how often the relay recovers expired leases (of any
	// relay). Defaults to Lease/2.
	RecoverInterval time.Duration
	// Backoff gives the delay before the next attempt after attempt number
	// attempt (1 for the first) failed. Defaults to exponential: 1s after the first
	// failed attempt, doubling up to 5 minutes, with ±20% jitter.
	Backoff func(attempt int) time.Duration
	// DisableListen turns the LISTEN/NOTIFY wake-up off; the relay then
	// only polls. LISTEN holds one pool connection for the relay's lifetime
	// (taken out of the pool, closed at the end); behind a PgBouncer in
	// transaction mode LISTEN does not work: set DisableListen. Defaults to
	// false.
	DisableListen bool
	// ShutdownTimeout bounds each claim and mark statement, which are not
	// interrupted by the cancellation of Run's ctx (so that a claim the
	// server ran is always marked or released): it is how long a stopping
	// relay may take to finish its in-flight batch. Defaults to 10s.
	ShutdownTimeout time.Duration
	// Logger receives warnings and errors, among them every failed cycle.
	// Defaults to slog.Default().
	Logger *slog.Logger
	// MaxConsecutiveFailures, when positive, is how many cycles in a row
	// (a claim with the marks of its batch) may fail before [Relay.Run]
	// gives up and returns an error matching [ErrRelayFailing] that wraps
	// the last failure. The cycles are spaced by the poll backoff
	// (PollInterval doubling up to MaxPollInterval): with the defaults, 30
	// cycles take about two minutes. A failed publish is not a failed
	// cycle: its events are marked for a retry. Defaults to 0: Run does
	// not give up on a database that may come back (a failover, a
	// restart); every failed cycle is logged, and [Relay.Failing] reports
	// the failures in a row to a health check.
	MaxConsecutiveFailures int
	// Observer is told of each batch (claimed, then marked) and each
	// lease recovery, after the statement committed (see [Observer]).
	// Its nil hooks (all of them by default) do nothing.
	Observer Observer
	// InTx publishes each batch inside the transaction that claims it:
	// the batch is locked (SELECT … FOR UPDATE SKIP LOCKED, nothing
	// written), published, marked SENT or failed, and committed. Each
	// event is then written once instead of twice (no SENDING version and
	// no lease), which drains a backlog faster, and a relay that dies or
	// loses its connection mid-batch leaves its events ready at once (the
	// locks go with the transaction) instead of after the Lease. When the
	// COMMIT fails, nothing is marked and the batch is published again:
	// delivery stays at least once.
	//
	// The price is a transaction open for the length of Publish: it holds
	// a pool connection and holds back VACUUM's horizon meanwhile. Use it
	// with a publisher that answers in milliseconds (an in-process
	// channel, a broker with asynchronous acknowledgements), not one that
	// may take seconds. Lease stays Publish's deadline. BatchStart fires
	// before anything is committed; BatchEnd after the COMMIT (Released
	// counts the events left untouched by a stopping relay). Relays in
	// both modes can share one outbox. Defaults to false.
	InTx bool
}

// defaultBackoff is exponential: 1s after the first failed attempt, doubling
// up to 5 minutes, with ±20% jitter so that failed events spread out.
func defaultBackoff(attempt int) time.Duration {
	d := 5 * time.Minute
	if attempt < 1 {
		attempt = 1
	}
	if attempt <= 9 {
		d = min(d, time.Second<<(attempt-1))
	}
	return time.Duration(float64(d) * (0.8 + 0.4*mrand.Float64()))
}

// Relay claims ready events, publishes them through [RelayConfig].Publish and marks
// the outcome, recovers expired leases, and waits (NOTIFY or polling) when
// there is nothing to do. Run as many relays as you like, in as many
// processes: SKIP LOCKED hands each event to one of them at a time.
//
// # Draining a backlog
//
// Every claimed event leaves a dead entry at the head of idx_outbox_ready
// until VACUUM removes it, so a claim that always started from the head
// would walk over everything claimed before it: draining 1,000,000 pending
// events ran at 0.76 of the rate for 10,000 that way. While its claims come
// back full, a relay therefore starts each claim after the last index key
// it claimed (a range scan). It claims from the head again when a claim
// comes back short and at least once a second, so an event that sorts
// behind the cursor — its transaction committed after later-stamped ones,
// or the next event of an ordering key whose previous event another relay
// held — waits at most about a second longer. [Store.ClaimOutboxBatch]
// always claims from the head.
//
// # Lifecycle
//
// [Relay.Run] runs the relay until its ctx is cancelled and returns only
// then, after the in-flight batch is marked (published events SENT) and the
// rest released back to RETRY (available at once, no attempt counted), and
// after every goroutine it started has ended. A Relay can be Run again
// after Run returned, but not twice at once.
type Relay struct {
	pool    *pgxpool.Pool
	store   *Store
	cfg     RelayConfig
	log     *slog.Logger
	obs     Observer
	running atomic.Bool

	listening atomic.Bool
	onIdle    func(listening bool)               // test hook
	onWait    func(wait, interval time.Duration) // test hook

	cursor   claimCursor // used by the Run goroutine only
	noCursor bool        // test and bench hook: every claim from the head

	health struct { // what Failing reports
		sync.Mutex
		failed int   // cycles failed in a row
		last   error // the last failure
	}
}

// Failing reports how many cycles of the relay (a claim with the marks of
// its batch) failed in a row, and the last failure: 0 and nil while the
// relay works (or before it ran), which a health check can poll. A cycle
// that succeeds resets both. Safe to call from any goroutine.
func (r *Relay) Failing() (inARow int, last error) {
	r.health.Lock()
	defer r.health.Unlock()
	return r.health.failed, r.health.last
}

// cycle records a cycle's outcome for Failing and returns the failures in
// a row.
func (r *Relay) cycle(err error) int {
	r.health.Lock()
	defer r.health.Unlock()
	if err == nil {
		r.health.failed, r.health.last = 0, nil
	} else {
		r.health.failed++
		r.health.last = err
	}
	return r.health.failed
}

// NewRelay validates cfg and returns a relay that uses pool. It starts
// nothing, but checks the store's schema ([Store.Check], in queries
// bounded by ShutdownTimeout): a schema without the outbox table gives a
// *migrate.NotMigratedError (matching migrate.ErrNotMigrated) naming the
// schema and the fix. (The store's Config.Citus shapes only the enqueue,
// which a relay does not run: a mismatch is not the relay's error.) When
// the database cannot answer (it is down, say), NewRelay does not fail:
// [Relay.Run] meets the same conditions and reports them.
func NewRelay(pool *pgxpool.Pool, cfg RelayConfig) (*Relay, error) {
	if pool == nil {
		return nil, invalid("pool", "nil")
	}
	if cfg.Publish == nil {
		return nil, invalid("RelayConfig.Publish", "nil")
	}
	for name, d := range map[string]time.Duration{
		"PollInterval": cfg.PollInterval, "MaxPollInterval": cfg.MaxPollInterval, "Lease": cfg.Lease,
		"RecoverInterval": cfg.RecoverInterval, "ShutdownTimeout": cfg.ShutdownTimeout,
	} {
		if d < 0 {
			return nil, invalid("RelayConfig."+name, "negative (%v)", d)
		}
	}
	if cfg.MaxConsecutiveFailures < 0 {
		return nil, invalid("RelayConfig.MaxConsecutiveFailures", "negative (%d)", cfg.MaxConsecutiveFailures)
	}
	if cfg.BatchSize < 0 || cfg.BatchSize > 1<<31-1 {
		return nil, invalid("RelayConfig.BatchSize", "out of range (%d)", cfg.BatchSize)
	}
	if cfg.Store == nil {
		s, err := New(Config{})
		if err != nil {
			return nil, err
		}
		cfg.Store = s
	}
	if cfg.Owner == "" {
		cfg.Owner = defaultOwner()
	}
	if err := checkText("RelayConfig.Owner", cfg.Owner, maxOwnerLen, true); err != nil {
		return nil, err
	}
	cfg.BatchSize = cmp.Or(cfg.BatchSize, defaultBatchSize)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, defaultPollInterval)
	cfg.MaxPollInterval = max(cmp.Or(cfg.MaxPollInterval, defaultMaxPollInterval), cfg.PollInterval)
	cfg.Lease = cmp.Or(cfg.Lease, defaultLease)
	cfg.RecoverInterval = cmp.Or(cfg.RecoverInterval, cfg.Lease/2)
	cfg.ShutdownTimeout = cmp.Or(cfg.ShutdownTimeout, defaultShutdownTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	err := cfg.Store.Check(ctx, pool)
	cancel()
	if errors.Is(err, migrate.ErrNotMigrated) {
		return nil, err
	}
	if cfg.Backoff == nil {
		cfg.Backoff = defaultBackoff
	}
	r := &Relay{pool: pool, store: cfg.Store, cfg: cfg, log: cfg.Logger, obs: cfg.Observer}
	if r.log == nil {
		r.log = slog.Default()
	}
	r.log = r.log.With("component", "outbox.relay", "owner", cfg.Owner, "schema", cfg.Store.schema)
	return r, nil
}

func defaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return ownerID(host, os.Getpid(), b)
}

// ownerID is host, pid and rnd in hex, joined by dashes, with host cut
// so that the whole fits in maxOwnerLen bytes.
func ownerID(host string, pid int, rnd []byte) string {
	suffix := fmt.Sprintf("-%d-%s", pid, hex.EncodeToString(rnd))
	if len(host)+len(suffix) > maxOwnerLen {
		host = host[:maxOwnerLen-len(suffix)]
	}
	return host + suffix
}

// Run runs the relay until ctx is cancelled, then finishes its in-flight
// batch (see the type's Lifecycle section) and returns nil. A failed cycle
// (a claim or a mark the database refused) is logged and retried after
// the poll backoff, and counted by [Relay.Failing]; with
// RelayConfig.MaxConsecutiveFailures set, after that many in a row Run
// returns an error matching [ErrRelayFailing] that wraps the last one. A
// schema without the outbox table (a *migrate.NotMigratedError,
// migrate.ErrNotMigrated) ends Run at once with that error: it does not
// go away by waiting. It returns [ErrRelayRunning] at once when the relay
// is already running.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return ErrRelayRunning
	}
	defer r.running.Store(false)

	wake := make(chan struct{}, 1)
	var wg sync.WaitGroup
	lctx, stopListen := context.WithCancel(ctx)
	defer func() {
		stopListen()
		wg.Wait()
	}()
	if !r.cfg.DisableListen {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.listen(lctx, wake)
		}()
	}

	interval := r.cfg.PollInterval
	nextRecover := time.Now()
	for ctx.Err() == nil {
		if !time.Now().Before(nextRecover) {
			r.recoverExpired(ctx)
			nextRecover = time.Now().Add(r.cfg.RecoverInterval)
		}
		n, err := r.runBatch(ctx)
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			r.store.fail.Explain(&err)
		}
		failed := r.cycle(err)
		if err != nil {
			r.log.ErrorContext(ctx, "outbox relay: batch failed", "err", err, "failed_in_a_row", failed)
			if errors.Is(err, migrate.ErrNotMigrated) {
				return fmt.Errorf("outbox relay: %w", err)
			}
			if m := r.cfg.MaxConsecutiveFailures; m > 0 && failed >= m {
				return fmt.Errorf("%w: %d cycles failed in a row, the last: %w", ErrRelayFailing, failed, err)
			}
		}
		if err == nil && n > 0 {
			interval = r.cfg.PollInterval
			continue // more may be ready
		}
		if r.onIdle != nil {
			r.onIdle(r.listening.Load())
		}
		wait := min(interval, time.Until(nextRecover))
		if r.onWait != nil {
			r.onWait(wait, interval)
		}
		t := time.NewTimer(max(wait, 0))
		select {
		case <-ctx.Done():
		case <-wake:
			interval = r.cfg.PollInterval
		case <-t.C:
			if err != nil || wait == interval {
				interval = min(2*interval, r.cfg.MaxPollInterval)
			}
		}
		t.Stop()
	}
	return nil
}

func (r *Relay) recoverExpired(ctx context.Context) {
	const limit = 1000
	for {
		rec, err := r.store.Recover(ctx, r.pool, Lease{}, r.cfg.Lease, limit)
		if err != nil {
			if ctx.Err() == nil {
				r.log.ErrorContext(ctx, "outbox relay: recover expired leases", "err", err)
			}
			return
		}
		if len(rec) > 0 {
			dead := 0
			for _, x := range rec {
				if x.Status == StatusDead {
					dead++
				}
			}
			r.obs.recoverEnd(ctx, RelayEvent{Owner: r.cfg.Owner, Recovered: len(rec), Dead: dead})
			r.log.WarnContext(ctx, "outbox relay: recovered expired leases", "count", len(rec), "dead", dead,
				"first_event", rec[0].EventID, "first_owner", rec[0].LockedBy)
		}
		if len(rec) < limit {
			return
		}
	}
}

// runBatch claims, publishes and marks one batch. It returns the number of
// events claimed.
func (r *Relay) runBatch(ctx context.Context) (int, error) {
	if r.cfg.InTx {
		return r.runBatchInTx(ctx)
	}
	start := time.Now()
	// The claim is not interrupted by ctx: a claim cut off after the server
	// ran it would leave its events SENDING until the lease expires.
	// Instead, a claim that completes after ctx ended is released at once.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.ShutdownTimeout)
	r.cursor.fromHead(start)
	claim, err := r.store.claimAfter(cctx, r.pool, r.cfg.Owner, r.cfg.BatchSize, &r.cursor)
	cancel()
	r.claimed(len(claim.Messages), start, err)
	if err != nil {
		return 0, err
	}
	n := len(claim.Messages)
	if n == 0 {
		return 0, nil
	}
	octx := r.obs.batchStart(ctx, RelayEvent{Owner: r.cfg.Owner, Messages: claim.Messages})
	end := RelayEvent{Owner: r.cfg.Owner, Claimed: n}

	errs, stopping := r.publishUnlessStopping(ctx, start, claim.Messages)

	// Mark even when ctx has ended, within ShutdownTimeout.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.ShutdownTimeout)
	defer cancel()
	var sent, release []Message
	var failures []Failure
	for i, m := range claim.Messages {
		switch {
		case errs[i] == nil:
			sent = append(sent, m)
		case stopping:
			release = append(release, m)
		default:
			failures = append(failures, Failure{EventID: m.EventID, Err: errs[i], Backoff: r.cfg.Backoff(m.Attempt)})
		}
	}
	var errOut error
	if len(sent) > 0 {
		res, err := r.store.Mark(mctx, r.pool, Outcome{Lease: claim.Lease, Sent: ids(sent)})
		end.Published = res.Marked
		errOut = errors.Join(errOut, r.markErr("mark sent", err))
	}
	if len(failures) > 0 {
		res, err := r.store.Mark(mctx, r.pool, Outcome{Lease: claim.Lease, Failed: failures})
		end.Failed, end.Dead = res.Marked, res.Dead
		if res.Dead > 0 {
			r.log.WarnContext(ctx, "outbox relay: events dead after their last attempt", "count", res.Dead)
		}
		errOut = errors.Join(errOut, r.markErr("mark failed", err))
	}
	if len(release) > 0 {
		res, err := r.store.Mark(mctx, r.pool, Outcome{Lease: claim.Lease, Released: ids(release)})
		end.Released = res.Marked
		errOut = errors.Join(errOut, r.markErr("release", err))
	}
	end.Err, end.Elapsed = errOut, time.Since(start)
	r.obs.batchEnd(octx, end)
	return n, errOut
}

// claimed sets where the next claim starts, after a claim that started at
// start and returned n events or failed with err.
func (r *Relay) claimed(n int, start time.Time, err error) {
	if err != nil || r.noCursor {
		r.cursor.set = false
		return
	}
	r.cursor.next(n, r.cfg.BatchSize, start)
}

// markErr logs a lost lease (the events stay published-at-least-once: a
// newer claim owns them) and passes other errors on.
func (r *Relay) markErr(op string, err error) error {
	var lost *Error
	if errors.Is(err, ErrLeaseLost) && errors.As(err, &lost) {
		r.log.Warn("outbox relay: lease lost before marking; events will be published again",
			"op", op, "count", len(lost.Lost), "err", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

func ids(ms []Message) []uuid.UUID {
	out := make([]uuid.UUID, len(ms))
	for i, m := range ms {
		out[i] = m.EventID
	}
	return out
}

// publishUnlessStopping publishes msgs, or, when ctx has ended, fails each
// with ctx's error without publishing. stopping reports whether ctx had
// ended by the time Publish returned: the failed messages are then to be
// handed back unattempted, not marked failed.
func (r *Relay) publishUnlessStopping(ctx context.Context, claimed time.Time, msgs []Message) (errs []error, stopping bool) {
	if ctx.Err() == nil {
		errs = r.publish(ctx, claimed, msgs)
	} else {
		errs = make([]error, len(msgs))
		for i := range errs {
			errs[i] = ctx.Err()
		}
	}
	return errs, ctx.Err() != nil
}

// publish calls the publisher with the lease as deadline and turns a panic or a
// malformed result into per-message errors.
func (r *Relay) publish(ctx context.Context, claimed time.Time, msgs []Message) (errs []error) {
	pctx, cancel := context.WithDeadline(ctx, claimed.Add(r.cfg.Lease))
	defer cancel()
	all := func(err error) []error {
		errs := make([]error, len(msgs))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	defer func() {
		if p := recover(); p != nil {
			r.log.ErrorContext(ctx, "outbox relay: publisher panicked", "panic", p)
			errs = all(fmt.Errorf("outbox: publisher panicked: %v", p))
		}
	}()
	errs = r.cfg.Publish(pctx, msgs)
	switch {
	case errs == nil:
		return make([]error, len(msgs))
	case len(errs) != len(msgs):
		return all(fmt.Errorf("outbox: publisher returned %d results for %d messages", len(errs), len(msgs)))
	}
	return errs
}

// listen keeps a LISTEN connection open and signals wake on every
// notification (and after every (re)connect, for what arrived meanwhile).
func (r *Relay) listen(ctx context.Context, wake chan<- struct{}) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := r.listenOnce(ctx, wake)
		r.listening.Store(false)
		if ctx.Err() != nil {
			return
		}
		r.log.WarnContext(ctx, "outbox relay: LISTEN connection lost, polling meanwhile", "err", err, "retry_in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		backoff = min(2*backoff, 10*time.Second)
	}
}

func (r *Relay) listenOnce(ctx context.Context, wake chan<- struct{}) error {
	pc, err := r.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	conn := pc.Hijack() // a LISTENing session must not go back to the pool
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{r.store.channel}.Sanitize()); err != nil {
		return err
	}
	r.listening.Store(true)
	signal(wake)
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		signal(wake)
	}
}

func signal(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
