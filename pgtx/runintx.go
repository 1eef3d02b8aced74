package pgtx

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Defaults of [Options], documented on its fields.
const (
	defaultMaxAttempts     = 5
	defaultBaseBackoff     = 10 * time.Millisecond
	defaultMaxBackoff      = 1 * time.Second
	defaultRollbackTimeout = 5 * time.Second
	defaultResolveTimeout  = 10 * time.Second
)

// Options configure [RunInTx]. The zero value means: Read Committed, the
// server's timeouts, up to 5 attempts, no resolution of
// unknown commits.
type Options struct {
	// IsoLevel is the isolation level. Defaults to pgx.ReadCommitted.
	IsoLevel pgx.TxIsoLevel
	// AccessMode is the access mode. Defaults to the server's (read write).
	AccessMode pgx.TxAccessMode
	// DeferrableMode is the deferrable mode (meaningful for Serializable
	// read-only transactions). Defaults to the server's.
	DeferrableMode pgx.TxDeferrableMode

	// LockTimeout, when positive, is applied with SET LOCAL lock_timeout
	// (set_config('lock_timeout', ms, true), sent with BEGIN, in the same
	// round trip): a statement waiting longer than this for a lock fails
	// with 55P03
	// ([ErrorClass.LockTimeout]). Defaults to 0: the server's setting. Whole
	// milliseconds; a positive value below 1ms counts as 1ms.
	LockTimeout time.Duration
	// StatementTimeout, when positive, is applied with SET LOCAL
	// statement_timeout, as LockTimeout is ([ErrorClass.StatementTimeout]).
	// Defaults to 0: the server's setting.
	StatementTimeout time.Duration

	// MaxAttempts bounds how many times fn runs. Defaults to 5; 1
	// disables retries.
	MaxAttempts int
	// BaseBackoff is the wait before the second attempt; it doubles with
	// every further attempt, up to MaxBackoff, and each wait is drawn at
	// random from its upper half (jitter). Defaults to 10ms.
	BaseBackoff time.Duration
	// MaxBackoff caps the wait between attempts. Defaults to 1s.
	MaxBackoff time.Duration

	// RollbackTimeout bounds ROLLBACK, which runs on a context detached
	// from the caller's cancellation so that a cancelled caller still
	// releases its locks promptly. Defaults to 5s.
	RollbackTimeout time.Duration

	// ResolveCommit enables the resolution of unknown commits. Before
	// COMMIT, RunInTx reads the transaction id (one more round trip); if
	// COMMIT's outcome is unknown it asks pg_xact_status on another
	// connection: committed → RunInTx returns nil; aborted → a
	// *CommitError that is not unknown; in progress → it asks again until
	// decided or ResolveTimeout passes; anything else → the error stays
	// [ErrCommitOutcomeUnknown]. The server's timeline is read with the
	// transaction id (in the same query): after a failover the promoted
	// standby may never have received the COMMIT and may reuse the id, so
	// when the server asked is on another timeline the outcome stays
	// unknown; a server still in recovery (a standby) is asked again until
	// ResolveTimeout. A transaction without an id before COMMIT cannot be
	// asked about: it stays unknown (its id may be assigned at COMMIT, as
	// for a NOTIFY, or live on another node, as on Citus), unless
	// AccessMode is pgx.ReadOnly, whose outcome cannot matter (RunInTx
	// returns nil). Defaults to false.
	ResolveCommit bool
	// ResolveDB runs the resolution query. Defaults to db when db is a
	// [Querier] (a *pgxpool.Pool is: it hands out a healthy connection).
	// Set it when db is a single *pgx.Conn, which is closed once its
	// COMMIT fails.
	ResolveDB Querier
	// ResolveTimeout bounds the resolution, which runs on a context
	// detached from the caller's cancellation (a cancelled caller is a
	// common cause of unknown commits). Defaults to 10s.
	ResolveTimeout time.Duration

	// DeferBegin sends BEGIN (and the SET LOCALs) with fn's first
	// statement instead of in a round trip of its own, when db is a
	// *pgxpool.Pool or a *pgx.Conn: a transaction whose fn sends one
	// batch takes two round trips (the batch, COMMIT) instead of three,
	// and one running n statements one by one takes n+1 instead of n+2.
	// The first statement travels behind BEGIN when it is a SendBatch, or
	// an Exec, Query or QueryRow with arguments (pgx's Batch.BeginTx);
	// other first calls (Prepare, CopyFrom, Begin, LargeObjects, Conn, a
	// statement without arguments or with pgx query options) begin the
	// transaction on their own first; LargeObjects and Conn, which take
	// no context, begin it with RunInTx's ctx. A fn that sends nothing sends no
	// BEGIN and no COMMIT. The isolation level applies as usual: a
	// transaction's snapshot is taken by its first statement, not by
	// BEGIN. Defaults to false.
	DeferBegin bool

	// Name labels the transaction in the Observer's events.
	Name string
	// Observer's hooks, those set, are told of the call, each attempt
	// (with its outcome, retry and lost COMMIT) and the call's outcome
	// (see [Observer]). Defaults to none (the zero Observer).
	Observer Observer
}

func (o Options) withDefaults() (Options, error) {
	bad := func(field string, v any) (Options, error) {
		return o, fmt.Errorf("%w: %s = %v must not be negative", ErrInvalidOptions, field, v)
	}
	switch {
	case o.MaxAttempts < 0:
		return bad("MaxAttempts", o.MaxAttempts)
	case o.BaseBackoff < 0:
		return bad("BaseBackoff", o.BaseBackoff)
	case o.MaxBackoff < 0:
		return bad("MaxBackoff", o.MaxBackoff)
	case o.LockTimeout < 0:
		return bad("LockTimeout", o.LockTimeout)
	case o.StatementTimeout < 0:
		return bad("StatementTimeout", o.StatementTimeout)
	case o.RollbackTimeout < 0:
		return bad("RollbackTimeout", o.RollbackTimeout)
	case o.ResolveTimeout < 0:
		return bad("ResolveTimeout", o.ResolveTimeout)
	}
	// pgx splices a mode that is not one of its constants into BEGIN's
	// text: only pgx's constants are allowed.
	switch o.IsoLevel {
	case "", pgx.Serializable, pgx.RepeatableRead, pgx.ReadCommitted, pgx.ReadUncommitted:
	default:
		return o, fmt.Errorf("%w: unknown IsoLevel %q", ErrInvalidOptions, o.IsoLevel)
	}
	switch o.AccessMode {
	case "", pgx.ReadWrite, pgx.ReadOnly:
	default:
		return o, fmt.Errorf("%w: unknown AccessMode %q", ErrInvalidOptions, o.AccessMode)
	}
	switch o.DeferrableMode {
	case "", pgx.Deferrable, pgx.NotDeferrable:
	default:
		return o, fmt.Errorf("%w: unknown DeferrableMode %q", ErrInvalidOptions, o.DeferrableMode)
	}
	if o.IsoLevel == "" {
		o.IsoLevel = pgx.ReadCommitted
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = defaultMaxAttempts
	}
	if o.BaseBackoff == 0 {
		o.BaseBackoff = defaultBaseBackoff
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = defaultMaxBackoff
	}
	if o.MaxBackoff < o.BaseBackoff {
		o.MaxBackoff = o.BaseBackoff
	}
	if o.RollbackTimeout == 0 {
		o.RollbackTimeout = defaultRollbackTimeout
	}
	if o.ResolveTimeout == 0 {
		o.ResolveTimeout = defaultResolveTimeout
	}
	return o, nil
}

// modes returns the modes of BEGIN, which pgx renders as one of its fixed
// texts (the modes are checked against pgx's constants above).
func (o Options) modes() pgx.TxOptions {
	return pgx.TxOptions{IsoLevel: o.IsoLevel, AccessMode: o.AccessMode, DeferrableMode: o.DeferrableMode}
}

// txOptions returns the BEGIN of a transaction begun in a round trip of
// its own: pgx's text for o's modes and, when timeouts are set, the SET
// LOCALs after it in the same simple-protocol message, so that they cost
// no round trip and no describe in any exec mode. That message takes no
// bind parameters: the milliseconds are inlined into the named statements
// as integer literals (sqlfile's Inline writes digits only).
func (o Options) txOptions() pgx.TxOptions {
	opts := o.modes()
	sets := o.setLocals()
	if len(sets) == 0 {
		return opts
	}
	b := &pgx.Batch{}
	b.BeginTx(opts) // queues pgx's BEGIN for the modes, the text its BeginTx sends
	msg := []string{b.QueuedQueries[0].SQL}
	for _, s := range sets {
		msg = append(msg, statements.Inline(s.name, s.ms))
	}
	opts.BeginQuery = strings.Join(msg, "; ")
	return opts
}

// setLocal is one SET LOCAL of a timeout: a named statement of
// sql/begin.sql (its name and text) and its value in whole milliseconds.
type setLocal struct {
	name, sql string
	ms        int64
}

// setLocals returns the SET LOCALs of the timeouts, in the order they are
// sent after BEGIN.
func (o Options) setLocals() []setLocal {
	var sets []setLocal
	for _, s := range []struct {
		name, sql string
		d         time.Duration
	}{{"set_lock_timeout", qSetLockTimeout, o.LockTimeout}, {"set_statement_timeout", qSetStatementTimeout, o.StatementTimeout}} {
		if s.d > 0 {
			sets = append(sets, setLocal{name: s.name, sql: s.sql, ms: max(s.d.Milliseconds(), 1)})
		}
	}
	return sets
}

// queueSetLocals queues sets on b, in a pipeline behind BEGIN: their
// milliseconds are bind parameters.
func queueSetLocals(b *pgx.Batch, sets []setLocal) {
	for _, s := range sets {
		b.Queue(s.sql, strconv.FormatInt(s.ms, 10))
	}
}

// backoff returns the wait before attempt+1 after attempt failed: drawn at
// random from [d/2, d] where d = base·2^(attempt-1), capped at maxWait.
func backoff(attempt int, base, maxWait time.Duration) time.Duration {
	d := base
	for i := 1; i < attempt && d < maxWait; i++ {
		if d > maxWait/2 { // doubling would pass the cap (or overflow)
			d = maxWait
			break
		}
		d *= 2
	}
	d = min(d, maxWait)
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

// RunInTx runs fn in a transaction begun on db and commits it.
//
// The transaction is Read Committed unless opts says otherwise; LockTimeout
// and StatementTimeout are applied with SET LOCAL in the BEGIN round trip.
// fn must not commit or roll back tx itself, and must be safe to run again:
// when fn, or COMMIT, fails with a serialization failure (40001) or a
// deadlock (40P01) — and only then — the whole transaction is rolled back
// and run again, after a jittered exponential backoff that ends early if
// ctx does, up to opts.MaxAttempts times. After the last attempt the error
// matches [ErrTooManyAttempts] and unwraps to the last cause. Errors must be
// wrapped with %w for the retry to see them.
//
// Any other error from fn rolls the transaction back and is returned as it
// is. A panic in fn rolls back and is re-raised. ROLLBACK runs on a context
// detached from ctx's cancellation, bounded by opts.RollbackTimeout.
//
// A failed COMMIT returns a *[CommitError]. When the server answered (an
// error, or a rollback because the transaction had failed) or the COMMIT
// never left the client, the transaction is known not to have committed.
// Otherwise — a broken connection, a timeout or a cancellation during
// COMMIT — its outcome is unknown: the error matches
// [ErrCommitOutcomeUnknown] and is never retried, since running fn again
// could apply it twice. Set opts.ResolveCommit to have RunInTx find out
// from the server (see [Options.ResolveCommit]).
//
// RunInTx returns nil exactly when the transaction committed. Every error
// except an unknown outcome means nothing of it committed
// ([ErrorClass.NotCommitted]).
func RunInTx(ctx context.Context, db TxBeginner, opts Options, fn func(pgx.Tx) error) error {
	o, err := opts.withDefaults()
	if err != nil {
		return err
	}
	if db == nil {
		return fmt.Errorf("%w: db is nil", ErrInvalidOptions)
	}
	if fn == nil {
		return fmt.Errorf("%w: fn is nil", ErrInvalidOptions)
	}
	if err := o.defaultResolveDB(db); err != nil {
		return err
	}
	r := runner{o: o, start: time.Now(), begin: o.txOptions(), setLocals: o.setLocals()}
	return r.retry(ctx, func(int) error { return r.once(ctx, db, fn) })
}

// defaultResolveDB sets ResolveDB to db when ResolveCommit needs it and
// the caller left it unset; db must then be a Querier.
func (o *Options) defaultResolveDB(db any) error {
	if !o.ResolveCommit || o.ResolveDB != nil {
		return nil
	}
	q, ok := db.(Querier)
	if !ok {
		return fmt.Errorf("%w: ResolveCommit needs ResolveDB when db is not a Querier", ErrInvalidOptions)
	}
	o.ResolveDB = q
	return nil
}

// retry runs once for attempt 1, 2, … until it succeeds, fails with an
// error that is not retryable, or the attempts or ctx run out, reporting
// each step to the Observer. It is the loop RunInTx and RunBatch share. A
// *ResultError (the transaction committed, a result callback failed)
// counts as committed.
func (r *runner) retry(ctx context.Context, once func(attempt int) error) (err error) {
	o := r.o
	obs := o.Observer
	octx, attempts := ctx, 0
	if obs.observesCall() {
		octx = obs.txStart(ctx, r.event())
		defer func() {
			e := r.event()
			e.Attempt, e.Err, e.Elapsed = attempts, err, time.Since(r.start)
			if p := recover(); p != nil {
				e.Err = fmt.Errorf("pgtx: fn panicked: %v", p)
				obs.txEnd(octx, e)
				panic(p)
			}
			obs.txEnd(octx, e)
		}()
	}
	for attempt := 1; ; attempt++ {
		attempts = attempt
		retry, wait, err := r.attempt(octx, once, attempt)
		if !retry {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("pgtx: %w while waiting to retry (after attempt %d: %w)", ctx.Err(), attempt, err)
		case <-t.C:
		}
	}
}

// attempt runs one attempt between its AttemptStart and AttemptEnd and
// decides whether another follows (after wait).
func (r *runner) attempt(octx context.Context, once func(attempt int) error, attempt int) (retry bool, wait time.Duration, err error) {
	o := r.o
	r.commitLost = false
	if obs := o.Observer; obs.observesAttempt() {
		e := r.event()
		e.Attempt = attempt
		actx := obs.attemptStart(octx, e)
		start := time.Now()
		defer func() {
			e.Err, e.Retry, e.Backoff, e.CommitLost, e.Elapsed = err, retry, wait, r.commitLost, time.Since(start)
			if p := recover(); p != nil {
				e.Err = fmt.Errorf("pgtx: fn panicked: %v", p)
				obs.attemptEnd(actx, e)
				panic(p)
			}
			obs.attemptEnd(actx, e)
		}()
	}
	err = once(attempt)
	switch {
	case err == nil || !Classify(err).Retryable:
		return false, 0, err
	case attempt >= o.MaxAttempts:
		return false, 0, &attemptsError{attempts: attempt, err: err}
	}
	return true, backoff(attempt, o.BaseBackoff, o.MaxBackoff), err
}

// event returns an Event with the call's fields set.
func (r *runner) event() Event {
	return Event{Name: r.o.Name, Batch: r.batch, IsoLevel: r.o.IsoLevel, MaxAttempts: r.o.MaxAttempts}
}

// attemptsError is the error of a call whose last allowed attempt failed
// with a retryable error: it matches [ErrTooManyAttempts] and unwraps to
// the last attempt's error.
type attemptsError struct {
	attempts int
	err      error
}

func (e *attemptsError) Error() string {
	return fmt.Sprintf("pgtx: gave up after %d attempts: %v", e.attempts, e.err)
}

func (e *attemptsError) Unwrap() []error { return []error{ErrTooManyAttempts, e.err} }

type runner struct {
	o     Options
	start time.Time
	batch bool // RunBatch
	// begin is the BEGIN of a transaction in a round trip of its own (with
	// the SET LOCALs in the same message), setLocals the SET LOCALs alone,
	// queued behind BEGIN in a pipeline.
	begin     pgx.TxOptions
	setLocals []setLocal
	// commitLost: the current attempt sent COMMIT and its answer was lost.
	commitLost bool
}

func (r *runner) rollback(ctx context.Context, tx pgx.Tx) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.o.RollbackTimeout)
	defer cancel()
	// A failed ROLLBACK closes the connection, which ends the transaction
	// on the server: there is nothing more to do with its error.
	_ = tx.Rollback(rctx)
}

func (r *runner) once(ctx context.Context, db TxBeginner, fn func(pgx.Tx) error) (err error) {
	var tx pgx.Tx
	var deferred *deferredTx
	if bb, ok := db.(batchBeginner); ok && r.o.DeferBegin {
		deferred = &deferredTx{ctx: ctx, db: bb, begin: r.begin, setLocals: r.setLocals}
		tx = deferred
	} else if tx, err = db.BeginTx(ctx, r.begin); err != nil {
		return err
	}
	finished := false
	defer func() {
		if finished {
			return
		}
		p := recover()
		r.rollback(ctx, tx)
		if p != nil {
			panic(p)
		}
	}()
	if err := fn(tx); err != nil {
		return withContextEnd(ctx, err)
	}
	if deferred != nil {
		switch {
		case deferred.first():
			// fn sent nothing: there is no transaction to commit.
			finished = true
			deferred.end = true
			return nil
		case deferred.err != nil:
			// BEGIN failed (fn ignored the error): nothing committed.
			return deferred.err
		}
	}
	var xid uint64
	var timeline *string
	if r.o.ResolveCommit {
		var s *string
		if err := tx.QueryRow(ctx, qCaptureXID).Scan(&s, &timeline); err != nil {
			return fmt.Errorf("pgtx: read transaction id: %w", err)
		}
		if s != nil {
			if xid, err = strconv.ParseUint(*s, 10, 64); err != nil {
				return fmt.Errorf("pgtx: parse transaction id %q: %w", *s, err)
			}
		}
	}
	finished = true
	closedBefore := tx.Conn().PgConn().IsClosed()
	cerr := tx.Commit(ctx)
	if cerr == nil {
		return nil
	}
	ce := &CommitError{Err: cerr, XID: xid}
	if timeline != nil {
		ce.timeline = *timeline
	}
	if commitNeverLeft(cerr, closedBefore) {
		return ce
	}
	ce.Unknown = true
	r.commitLost = true
	if !r.o.ResolveCommit {
		return ce
	}
	return r.resolve(ctx, ce)
}

// commitNeverLeft reports whether a failed COMMIT is known not to have
// committed: the server answered with an error or a rollback, or the
// COMMIT was never sent.
//
// pgconn.SafeToRetry alone cannot tell the last case: when the connection
// breaks while the answer to a sent query is awaited, pgconn (v5.12) can
// report the read failure as a "conn closed" lock error whose SafeToRetry
// is true (see jackc/pgx#2428). So a "conn closed" error counts as never
// sent only if the connection was already closed before Commit was called.
func commitNeverLeft(err error, closedBefore bool) bool {
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr), errors.Is(err, pgx.ErrTxCommitRollback):
		return true
	case closedBefore:
		return true
	case errors.Is(err, pgconn.ErrConnClosed):
		return false
	}
	return pgconn.SafeToRetry(err)
}

// errInRecovery marks a resolution answered by a standby.
var errInRecovery = errors.New("pgtx: the server is in recovery")

// resolve asks the server what became of ce.XID, on the timeline where it
// was read.
func (r *runner) resolve(ctx context.Context, ce *CommitError) error {
	if ce.XID == 0 {
		// No transaction id before COMMIT. That does not mean the
		// transaction had no effect: COMMIT itself assigns the id of a
		// transaction that only sent NOTIFY, and on Citus a write routed
		// to a worker leaves the coordinator without one. Only a read-only
		// transaction (which can neither write nor NOTIFY) is provably the
		// same whether it committed or not.
		if r.o.AccessMode == pgx.ReadOnly {
			return nil
		}
		ce.Resolution = "no transaction id before COMMIT"
		return ce
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.o.ResolveTimeout)
	defer cancel()
	wait := 5 * time.Millisecond
	for {
		var status, timeline *string
		err := r.o.ResolveDB.QueryRow(rctx, qResolveXID, strconv.FormatUint(ce.XID, 10)).Scan(&status, &timeline)
		switch {
		case err != nil:
			ce.Resolution = "error: " + err.Error()
		case timeline == nil:
			// A standby: it may not have replayed the outcome yet, and it
			// is not where the transaction would be found after a
			// failover. Ask again (a promotion ends this).
			ce.Resolution = "the server asked is in recovery"
			err = errInRecovery
		case *timeline != ce.timeline:
			// A failover (or a point-in-time recovery) happened since the
			// transaction id was read: the server asked may never have
			// received the COMMIT, and may since have given the same id to
			// another transaction. Its pg_xact_status says nothing about
			// this one.
			ce.Resolution = fmt.Sprintf("timeline changed from %s to %s since the transaction id was read (failover)", ce.timeline, *timeline)
			return ce
		case status == nil:
			ce.Resolution = "status no longer known (xid too old)"
		case *status == "committed":
			return nil
		case *status == "aborted":
			ce.Unknown = false
			ce.Resolution = "aborted"
			return ce
		default: // "in progress": COMMIT is still being processed
			ce.Resolution = *status
			t := time.NewTimer(wait)
			select {
			case <-rctx.Done():
				t.Stop()
				return ce
			case <-t.C:
			}
			wait = min(2*wait, 200*time.Millisecond)
			continue
		}
		if rctx.Err() != nil || err == nil {
			return ce
		}
		// A query error (e.g. the pool handed out a connection that broke
		// in the same fault): try again until the deadline.
		t := time.NewTimer(wait)
		select {
		case <-rctx.Done():
			t.Stop()
			return ce
		case <-t.C:
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}
