package pgtx

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// batchBeginner is what a deferred BEGIN needs of db: *pgxpool.Pool and
// *pgx.Conn have both methods.
type batchBeginner interface {
	TxBeginner
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// deferredTx is the pgx.Tx that fn receives with [Options.DeferBegin]. It
// sends nothing until fn's first statement; that statement, or batch, goes
// out in one pipeline behind BEGIN and the SET LOCALs (pgx's
// Batch.BeginTx), and the transaction pgx begins there serves every later
// call. Calls that cannot travel in a pipeline (Prepare, CopyFrom, Begin,
// LargeObjects, Conn, and Exec or Query without arguments, which pgx may
// send with the simple protocol, or with pgx query options) begin the
// transaction on their own first, as RunInTx without DeferBegin does.
//
// pgx.Tx is implemented by hand, so a method pgx adds to the interface
// must be added here on purpose: the assertion below stops the build, and
// TestDeferredTxCoversPgxTx names the method.
type deferredTx struct {
	// ctx is RunInTx's context: LargeObjects and Conn take none, so a
	// BEGIN they send goes out with it (its deadline, cancellation and
	// values, as a tracer sees them), never with context.Background().
	ctx       context.Context
	db        batchBeginner
	begin     pgx.TxOptions // BEGIN with the SET LOCALs, for a BEGIN of its own
	setLocals []setLocal    // the SET LOCALs alone, for a pipelined BEGIN
	tx        pgx.Tx        // the transaction, once begun
	err       error         // why beginning it failed
	end       bool          // committed or rolled back before anything was sent
}

var _ pgx.Tx = (*deferredTx)(nil)

// begun reports whether a transaction exists on the server side (or was
// attempted): false means fn sent nothing at all.
func (d *deferredTx) begun() bool { return d.tx != nil || d.err != nil }

// beginBatch returns a batch that begins the transaction and then runs
// queries.
func (d *deferredTx) beginBatch(queries []*pgx.QueuedQuery) *pgx.Batch {
	nb := &pgx.Batch{}
	nb.BeginTx(pgx.TxOptions{IsoLevel: d.begin.IsoLevel, AccessMode: d.begin.AccessMode, DeferrableMode: d.begin.DeferrableMode})
	queueSetLocals(nb, d.setLocals)
	nb.QueuedQueries = append(nb.QueuedQueries, queries...)
	return nb
}

// send sends queries behind BEGIN and reads BEGIN's results. On success
// the returned results hold the queries' results; on failure they have
// been closed and d.err says why.
func (d *deferredTx) send(ctx context.Context, queries []*pgx.QueuedQuery) (pgx.BatchResults, error) {
	nb := d.beginBatch(queries)
	br := d.db.SendBatch(ctx, nb)
	d.tx = br.Tx()
	for range len(nb.QueuedQueries) - len(queries) {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			d.err = fmt.Errorf("pgtx: begin: %w", err)
			return nil, d.err
		}
	}
	return br, nil
}

// ensure begins the transaction on its own when nothing was sent yet.
func (d *deferredTx) ensure(ctx context.Context) error {
	switch {
	case d.end:
		return pgx.ErrTxClosed
	case d.err != nil:
		return d.err
	case d.tx != nil:
		return nil
	}
	tx, err := d.db.BeginTx(ctx, d.begin)
	if err != nil {
		d.err = fmt.Errorf("pgtx: begin: %w", err)
		return d.err
	}
	d.tx = tx
	return nil
}

// pipelined reports whether a statement with args can travel behind BEGIN
// in a batch exactly as it would have been sent on its own: with
// arguments (so pgx uses the extended protocol, which allows one statement
// only, or its simple-protocol mode alike in both) and without pgx query
// options, which a batch does not take.
func pipelined(args []any) bool {
	if len(args) == 0 {
		return false
	}
	switch args[0].(type) {
	case pgx.QueryExecMode, pgx.QueryResultFormats, pgx.QueryResultFormatsByOID, pgx.QueryRewriter:
		return false
	}
	return true
}

func (d *deferredTx) first() bool { return !d.begun() && !d.end }

// SendBatch sends b; the first statement of the transaction takes BEGIN
// along in the same round trip.
func (d *deferredTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if !d.first() {
		if err := d.ensure(ctx); err != nil {
			return pgx.FailedBatchResults(b, err)
		}
		return d.tx.SendBatch(ctx, b)
	}
	br, err := d.send(ctx, b.QueuedQueries)
	if err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return plainBatchResults{br}
}

// plainBatchResults hides the transaction of the batch that began it: to
// fn it is an ordinary batch inside the transaction.
type plainBatchResults struct{ pgx.BatchResults }

func (plainBatchResults) Tx() pgx.Tx { return nil }

// Exec runs sql; as the first statement it takes BEGIN along.
func (d *deferredTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if !d.first() || !pipelined(args) {
		if err := d.ensure(ctx); err != nil {
			return pgconn.CommandTag{}, err
		}
		return d.tx.Exec(ctx, sql, args...)
	}
	br, err := d.send(ctx, []*pgx.QueuedQuery{{SQL: sql, Arguments: args}})
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	cerr := br.Close()
	if err != nil {
		return tag, err // as pgx returns it; Close would repeat it
	}
	return tag, cerr
}

// Query runs sql; as the first statement it takes BEGIN along.
func (d *deferredTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if !d.first() || !pipelined(args) {
		if err := d.ensure(ctx); err != nil {
			return failedRows(err), err
		}
		return d.tx.Query(ctx, sql, args...)
	}
	br, err := d.send(ctx, []*pgx.QueuedQuery{{SQL: sql, Arguments: args}})
	if err != nil {
		return failedRows(err), err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return failedRows(err), err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// QueryRow runs sql; as the first statement it takes BEGIN along.
func (d *deferredTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if !d.first() || !pipelined(args) {
		if err := d.ensure(ctx); err != nil {
			return pgx.FailedBatchResults(&pgx.Batch{}, err).QueryRow()
		}
		return d.tx.QueryRow(ctx, sql, args...)
	}
	rows, err := d.Query(ctx, sql, args...)
	if err != nil {
		return pgx.FailedBatchResults(&pgx.Batch{}, err).QueryRow()
	}
	return &batchRow{rows: rows}
}

// batchRows are the rows of a query sent behind BEGIN: when they end, the
// batch that carried them is closed too, so that the connection is free
// for the next statement.
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	closed bool
	err    error
}

func (r *batchRows) finish() {
	if !r.closed {
		r.closed = true
		r.Rows.Close()
		r.err = r.br.Close()
	}
}

func (r *batchRows) Next() bool {
	if r.closed {
		return false
	}
	if r.Rows.Next() {
		return true
	}
	r.finish()
	return false
}

func (r *batchRows) Close() { r.finish() }

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// batchRow is QueryRow's Row over batchRows, with pgx's semantics: Scan
// reads the first row, closes the rows and reports pgx.ErrNoRows when
// there is none.
type batchRow struct{ rows pgx.Rows }

func (r *batchRow) Scan(dest ...any) error { return scanFirst(r.rows, dest...) }

// failedRows returns pgx's own rows for a query that failed before it
// was sent: closed, reporting err.
func failedRows(err error) pgx.Rows {
	rows, _ := pgx.FailedBatchResults(&pgx.Batch{}, err).Query()
	return rows
}

// Begin starts a nested transaction (a savepoint), beginning the
// transaction first if needed.
func (d *deferredTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := d.ensure(ctx); err != nil {
		return nil, err
	}
	return d.tx.Begin(ctx)
}

// Commit commits; a transaction that never sent anything has nothing to
// commit and succeeds at once.
func (d *deferredTx) Commit(ctx context.Context) error { return d.finish(ctx, pgx.Tx.Commit) }

// Rollback rolls back; a transaction that never sent anything has nothing
// to roll back.
func (d *deferredTx) Rollback(ctx context.Context) error { return d.finish(ctx, pgx.Tx.Rollback) }

// finish ends the transaction with end (Commit or Rollback of the begun
// transaction).
func (d *deferredTx) finish(ctx context.Context, end func(pgx.Tx, context.Context) error) error {
	switch {
	case d.first():
		d.end = true
		return nil
	case d.end:
		return pgx.ErrTxClosed
	case d.tx == nil:
		return d.err
	}
	return end(d.tx, ctx)
}

// CopyFrom begins the transaction if needed, then copies.
func (d *deferredTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := d.ensure(ctx); err != nil {
		return 0, err
	}
	return d.tx.CopyFrom(ctx, table, columns, src)
}

// Prepare begins the transaction if needed, then prepares.
func (d *deferredTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := d.ensure(ctx); err != nil {
		return nil, err
	}
	return d.tx.Prepare(ctx, name, sql)
}

// LargeObjects begins the transaction if needed, with RunInTx's context
// (the method takes none). If that fails, the returned LargeObjects report
// the failure as pgx.ErrTxClosed, and the next statement returns the
// reason.
func (d *deferredTx) LargeObjects() pgx.LargeObjects {
	if err := d.ensure(d.ctx); err != nil {
		b := &pgx.Batch{}
		b.BeginTx(pgx.TxOptions{})
		return pgx.FailedBatchResults(b, err).Tx().LargeObjects()
	}
	return d.tx.LargeObjects()
}

// Conn begins the transaction if needed, with RunInTx's context (the
// method takes none), and returns its connection, or nil when it could not
// be begun (the next statement returns the reason).
func (d *deferredTx) Conn() *pgx.Conn {
	if err := d.ensure(d.ctx); err != nil {
		return nil
	}
	return d.tx.Conn()
}
