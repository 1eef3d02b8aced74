package pgtx

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// BatchSender is what [RunBatch] takes as db: a *pgxpool.Pool or a
// *pgx.Conn (RunBatch acquires a pool's connection itself, tells a break
// before sending from one after, and rolls back the failed transaction a
// raising statement leaves on the connection; any other type is rejected
// with [ErrInvalidOptions]).
type BatchSender interface {
	// SendBatch sends b's statements (RunBatch's BEGIN, SET LOCALs, the
	// caller's statements and COMMIT) in one pipeline and returns their
	// results in order. It is called once per attempt, from the goroutine
	// that called RunBatch, and may block until ctx ends.
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// StatementError is returned by [RunBatch] when a statement of the batch
// raised an error: the server skipped the rest of the batch, COMMIT
// included, so nothing of the transaction committed. It unwraps to the
// server's error (a *pgconn.PgError), so [Classify], [UniqueViolationOf]
// and errors.As work on it. When the statement belongs to a call marked by
// [NameCall] (as the one-batch helpers of this module mark theirs), Call
// names that call and Err is the call's classified error, so errors.Is
// matches the helper's sentinel (for example inventory.ErrSoldOut).
type StatementError struct {
	// Index is the statement's position in the caller's batch, from 0; -1
	// when the error came before the first statement ran: BEGIN, a SET
	// LOCAL, or the preparation round trip pgx makes for statements it
	// has not described yet (a syntax error, an unknown table), where the
	// server does not say which statement it was.
	Index int
	// Call names the call the statement belongs to ([NameCall]), for
	// example "inventory.Store.QueueAllocateBucketOrAbort(ALLOCATE:…)"; ""
	// for a statement queued without a name. With Index -1 it is the
	// call whose classification recognised the error, if any.
	Call string
	// SQL is the statement's text ("" when Index is -1).
	SQL string
	// Err is the server's error, as the call classified it when it has a
	// name.
	Err error
}

// Error names the failing call (or gives the statement's index when it
// has no name, or says that the batch failed before its first statement
// ran) and its error; it does not include the SQL text.
func (e *StatementError) Error() string {
	if e.Call != "" {
		return fmt.Sprintf("pgtx: batch call %s failed, nothing committed: %v", e.Call, e.Err)
	}
	if e.Index < 0 {
		return fmt.Sprintf("pgtx: batch failed before its first statement ran: %v", e.Err)
	}
	return fmt.Sprintf("pgtx: batch statement %d failed, nothing committed: %v", e.Index, e.Err)
}

// Unwrap returns the server's error.
func (e *StatementError) Unwrap() error { return e.Err }

// ResultError is returned by [RunBatch] when a result callback of the
// batch (QueuedQuery.Exec, Query or QueryRow) returned an error of its
// own — one that is not a statement's server error — while the
// transaction went on to commit. The callbacks run as the results arrive,
// after COMMIT was sent, so they cannot stop it. [Classify] reports
// Committed for a ResultError: the transaction committed.
type ResultError struct {
	// Index is the statement's position in the caller's batch, from 0.
	Index int
	// Call names the call the statement belongs to ([NameCall]); "" for
	// a statement queued without a name.
	Call string
	// Err is the callback's error.
	Err error
}

// Error says that the transaction committed and names the call (or gives
// the statement's index) and the callback's error.
func (e *ResultError) Error() string {
	if e.Call != "" {
		return fmt.Sprintf("pgtx: the transaction committed, but the result callback of batch call %s failed: %v", e.Call, e.Err)
	}
	return fmt.Sprintf("pgtx: the transaction committed, but the result callback of batch statement %d failed: %v", e.Index, e.Err)
}

// Unwrap returns the callback's error.
func (e *ResultError) Unwrap() error { return e.Err }

// RunBatch sends BEGIN, the statements of b and COMMIT to the server in
// one round trip (one pipeline: pgx's batch, ended by a single Sync), so
// that the locks the statements take are held only while the server
// executes the rest of the batch and flushes the commit, never across a
// client round trip.
//
// Every statement that raises an error aborts the whole transaction: the
// server skips the rest of the batch, COMMIT included, and RunBatch
// returns a *[StatementError] naming the statement, or the helper call it
// belongs to ([NameCall]), with the call's classified error (and rolls
// the connection's failed transaction back). A condition that must stop the
// transaction therefore has to raise in SQL (a unique index, a CHECK, a
// PL/pgSQL function that raises a SQLSTATE of its own) — a statement that
// merely affects zero rows does not stop it. The caller can then run its
// general path (e.g. [RunInTx] with statements that branch on results).
//
// The result callbacks of b's queued queries (QueuedQuery.Exec, Query,
// QueryRow) run in order as the results arrive; they should only read
// (scan into variables). Their errors do not stop the COMMIT already
// sent: see [ResultError]. When the batch fails (a statement raises, the
// connection breaks), the callback of the statement being read sees the
// failure, and the callbacks of the statements after it are not run.
//
// opts applies as for [RunInTx]: the isolation level, access and
// deferrable modes in BEGIN, LockTimeout and StatementTimeout as SET
// LOCALs in the same pipeline, a serialization failure (40001) or a
// deadlock (40P01) retried with backoff up to MaxAttempts (the batch is
// sent again as it is), the Observer's events, and ResolveCommit.
// DeferBegin has no meaning here (BEGIN always travels with the batch).
//
// COMMIT's outcome is classified as in [RunInTx]. A break before the
// batch left the client (the pool could not hand out a connection, the
// connection was closed, nothing was written) means nothing committed. A
// break after it left, before COMMIT's answer arrived, is
// [ErrCommitOutcomeUnknown] (a *[CommitError]), never retried. With
// opts.ResolveCommit, the batch also reads the transaction id just before
// COMMIT, in a statement whose answer the server sends before it runs
// COMMIT; when that answer arrived before the break, RunBatch asks
// pg_xact_status as RunInTx does. When it did not (the break came before
// the server executed the batch, or the id's answer was lost with it), the
// outcome stays unknown: the resolution needs the id.
//
// b holds the transaction's statements only: a statement that would end
// the transaction before RunBatch's COMMIT (COMMIT, END, ROLLBACK, ABORT,
// PREPARE TRANSACTION; ROLLBACK TO a savepoint is fine), found at the start
// of any statement of a queued text, is refused with [ErrInvalidOptions]
// before anything is sent.
//
// RunBatch returns nil exactly when the transaction committed (and every
// callback returned nil). Every error except an unknown outcome and a
// *ResultError means nothing of it committed ([ErrorClass.NotCommitted]). b is not
// modified; an empty batch is an error.
func RunBatch(ctx context.Context, db BatchSender, opts Options, b *pgx.Batch) error {
	o, err := opts.withDefaults()
	if err != nil {
		return err
	}
	if db == nil {
		return fmt.Errorf("%w: db is nil", ErrInvalidOptions)
	}
	switch db.(type) {
	case *pgxpool.Pool, *pgx.Conn:
	default:
		return fmt.Errorf("%w: db is a %T, not a *pgxpool.Pool or *pgx.Conn", ErrInvalidOptions, db)
	}
	if b == nil || len(b.QueuedQueries) == 0 {
		return fmt.Errorf("%w: the batch is empty", ErrInvalidOptions)
	}
	for i, qq := range b.QueuedQueries {
		if kw := endsTx(qq.SQL); kw != "" {
			return fmt.Errorf("%w: statement %d of the batch is %s, which would end the transaction before RunBatch's COMMIT "+
				"(the statements after it would run outside it, and RunBatch could not tell what committed); queue the transaction's statements only", ErrInvalidOptions, i, kw)
		}
	}
	if err := o.defaultResolveDB(db); err != nil {
		return err
	}
	r := runner{o: o, start: time.Now(), batch: true, begin: o.txOptions(), setLocals: o.setLocals()}
	return r.retry(ctx, func(int) error { return r.batchOnce(ctx, db, b) })
}

// batchOnce sends the batch once and classifies what came back.
func (r *runner) batchOnce(ctx context.Context, db BatchSender, b *pgx.Batch) error {
	var conn *pgx.Conn
	switch d := db.(type) {
	case *pgxpool.Pool:
		pc, err := d.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("pgtx: acquire a connection: %w", err)
		}
		defer pc.Release()
		conn, db = pc.Conn(), pc.Conn()
	case *pgx.Conn:
		conn = d
	}
	if conn != nil && conn.PgConn().IsClosed() {
		return fmt.Errorf("pgtx: send batch: %w", pgconn.ErrConnClosed)
	}
	br := &batchReader{r: r, ctx: ctx, conn: conn, caller: b}
	br.layout(b)
	br.br = db.SendBatch(ctx, br.nb)
	return br.read()
}

// batchReader reads the results of one attempt's batch: BEGIN, the SET
// LOCALs, the caller's statements, the transaction id's read (with
// ResolveCommit) and COMMIT, in that order.
type batchReader struct {
	r      *runner
	ctx    context.Context
	conn   *pgx.Conn  // the connection the batch goes on (RunBatch takes only a pool or a conn)
	caller *pgx.Batch // the caller's batch, not modified
	nb     *pgx.Batch // the batch sent
	br     pgx.BatchResults

	first, end int // the caller's statements are nb.QueuedQueries[first:end]
	capture    int // the transaction id's read; -1 without ResolveCommit
	commit     int // COMMIT

	xid      uint64
	timeline string
	xidRead  bool
	cbErr    error // the first error a caller's callback returned on its own
	cbIndex  int
	received bool // some answer of the server arrived
}

// layout builds the batch to send around the caller's statements.
func (s *batchReader) layout(b *pgx.Batch) {
	o := s.r.o
	nb := &pgx.Batch{}
	nb.BeginTx(o.modes())
	queueSetLocals(nb, s.r.setLocals)
	s.first = len(nb.QueuedQueries)
	for _, qq := range b.QueuedQueries {
		// Copies: a failure clears the callbacks of the statements the
		// server skipped, which pgx would otherwise call from Close.
		cp := *qq
		nb.QueuedQueries = append(nb.QueuedQueries, &cp)
	}
	s.end = len(nb.QueuedQueries)
	s.capture = -1
	if o.ResolveCommit {
		s.capture = len(nb.QueuedQueries)
		nb.Queue(qBatchCaptureXID)
	}
	s.commit = len(nb.QueuedQueries)
	nb.Queue(qCommit)
	s.nb = nb
}

// isCaller reports whether statement i is one of the caller's.
func (s *batchReader) isCaller(i int) bool { return i >= s.first && i < s.end }

// broken reports whether the connection is known to be closed.
func (s *batchReader) broken() bool { return s.conn != nil && s.conn.PgConn().IsClosed() }

// read reads the results in order and returns the attempt's error.
func (s *batchReader) read() error {
	for i, qq := range s.nb.QueuedQueries {
		tag, err := s.result(i, qq)
		var pgErr *pgconn.PgError
		var fail error // the attempt's error, once known
		switch {
		case err == nil:
			s.received = true
			if i == s.commit && tag.String() == "ROLLBACK" {
				fail = &CommitError{Err: pgx.ErrTxCommitRollback, XID: s.xid}
			}
		case errors.As(err, &pgErr):
			// The server raised: it skips the rest of the batch up to the
			// Sync, COMMIT included.
			fail = s.raised(i, qq, err)
		case s.isCaller(i) && !s.broken() && s.ctx.Err() == nil:
			// The caller's callback failed on its own; the results go on.
			// The first such error is reported.
			if s.cbErr == nil {
				s.cbErr, s.cbIndex = err, i-s.first
			}
		case !s.received && commitNeverLeft(err, false):
			// Nothing was written: the batch never left the client.
			fail = fmt.Errorf("pgtx: send batch: %w", err)
		default:
			return s.lost(i, err)
		}
		if fail != nil {
			s.dropCallbacks(i)
			_ = s.br.Close()
			s.r.rollbackFailed(s.ctx, s.conn)
			return fail
		}
	}
	// COMMIT's answer arrived: the transaction committed, whatever Close
	// (the Sync's answer) reports; a connection it leaves broken is
	// discarded by the pool or closed.
	_ = s.br.Close()
	if s.cbErr != nil {
		call, err := callOf(s.cbErr)
		return &ResultError{Index: s.cbIndex, Call: call, Err: err}
	}
	return nil
}

// result reads the result of statement i (running the caller's callback
// for the caller's statements).
func (s *batchReader) result(i int, qq *pgx.QueuedQuery) (pgconn.CommandTag, error) {
	switch {
	case i == s.capture:
		var err error
		s.xid, s.timeline, s.xidRead, err = readBatchXID(s.br)
		return pgconn.CommandTag{}, err
	case s.isCaller(i):
		if qq.Fn != nil {
			return pgconn.CommandTag{}, qq.Fn(callbackResults{s.br})
		}
		_, err := s.br.Exec()
		return pgconn.CommandTag{}, err
	}
	return s.br.Exec()
}

// raised returns the attempt's error for a server error that statement i
// raised.
func (s *batchReader) raised(i int, qq *pgx.QueuedQuery, err error) error {
	switch {
	case i == s.commit:
		return &CommitError{Err: err, XID: s.xid}
	case i < s.first:
		call, err := classifyUnplaced(s.caller, err)
		return &StatementError{Index: -1, Call: call, Err: withContextEnd(s.ctx, err)}
	case i == s.capture:
		return fmt.Errorf("pgtx: read transaction id: %w", err)
	}
	call, err := callOf(err)
	return &StatementError{Index: i - s.first, Call: call, SQL: qq.SQL, Err: withContextEnd(s.ctx, err)}
}

// lost handles a break after the batch left the client, before COMMIT's
// answer arrived: the outcome is unknown, unless the resolution finds it.
func (s *batchReader) lost(i int, err error) error {
	ce := &CommitError{Err: err, XID: s.xid, Unknown: true, timeline: s.timeline}
	s.dropCallbacks(i)
	_ = s.br.Close()
	s.r.commitLost = true
	if !s.r.o.ResolveCommit {
		return ce
	}
	if !s.xidRead {
		ce.Resolution = "the transaction id never arrived"
		return ce
	}
	return s.r.resolve(s.ctx, ce)
}

// dropCallbacks clears the callbacks of the statements after i, which the
// server skipped (pgx would otherwise call them from Close).
func (s *batchReader) dropCallbacks(i int) {
	for _, rest := range s.nb.QueuedQueries[i+1:] {
		rest.Fn = nil
	}
}

// readBatchXID reads the answer of qBatchCaptureXID: the transaction id
// (0 when none was assigned), the server's timeline, and whether the row
// arrived at all.
func readBatchXID(br pgx.BatchResults) (xid uint64, timeline string, read bool, err error) {
	rows, err := br.Query()
	if err != nil {
		return 0, "", false, err
	}
	defer rows.Close()
	var s, tl *string
	if rows.Next() {
		var pad *string
		if err := rows.Scan(&s, &tl, &pad); err != nil {
			return 0, "", false, err
		}
		read = true
		if tl != nil {
			timeline = *tl
		}
		if s != nil {
			if xid, err = strconv.ParseUint(*s, 10, 64); err != nil {
				return 0, "", false, err
			}
		}
	}
	// The padding row may be cut off by a break: the id, once read, stays
	// read (the caller resolves it).
	for rows.Next() {
	}
	return xid, timeline, read, rows.Err()
}

// rollbackFailed ends the failed transaction a raising statement left on
// conn (the Sync after an error in an explicit transaction leaves it
// open, in the failed state).
func (r *runner) rollbackFailed(ctx context.Context, conn *pgx.Conn) {
	if conn == nil || conn.PgConn().IsClosed() || conn.PgConn().TxStatus() == 'I' {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.o.RollbackTimeout)
	defer cancel()
	if _, err := conn.Exec(rctx, qRollback); err != nil {
		// A connection that cannot roll back is closed: the server ends
		// the transaction.
		_ = conn.Close(rctx)
	}
}
