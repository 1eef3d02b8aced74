package pgtx_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seckillkit/seckill/pgtx"
)

var errTaken = errors.New("test: id taken")

// taken is a call's classification: a unique violation becomes errTaken,
// wrapping the server's error.
func taken(err error) error {
	if _, ok := pgtx.UniqueViolationOf(err); ok {
		return fmt.Errorf("%w: %w", errTaken, err)
	}
	return err
}

// queueInsertTwice is a helper that queues two statements as one named
// call: a plain insert of id, then a read of it.
func queueInsertTwice(b *pgx.Batch, table string, id int, got *int) {
	from := b.Len()
	b.Queue(`INSERT INTO `+table+` VALUES ($1, 1)`, id)
	b.Queue(`SELECT v FROM `+table+` WHERE id = $1`, id).QueryRow(func(r pgx.Row) error { return r.Scan(got) })
	pgtx.NameCall(b, from, fmt.Sprintf("test.QueueInsertTwice(%d)", id), taken)
}

// TestNameCall: the error of a named call's statement names the call, not
// the statement, and matches the call's classification with errors.Is,
// whether it is a server error (RunBatch's *StatementError, nothing
// committed), a result callback's error (a *ResultError, committed), or
// the batch is sent with pgx's own SendBatch.
func TestNameCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var got int
	batch := &pgx.Batch{}
	batch.Queue(`SELECT 1`)
	queueInsertTwice(batch, b.table, 1, &got)
	queueInsertTwice(batch, b.table, 2, &got)
	if err := pgtx.RunBatch(b.ctx, b.pool, pgtx.Options{}, batch); err != nil || got != 1 {
		t.Fatalf("fresh: %v, read %d", err, got)
	}

	// The second call's insert raises: statement 3 of the batch, the call
	// test.QueueInsertTwice(1).
	batch = &pgx.Batch{}
	queueInsertTwice(batch, b.table, 3, &got)
	queueInsertTwice(batch, b.table, 1, &got)
	err := pgtx.RunBatch(b.ctx, b.pool, pgtx.Options{}, batch)
	var se *pgtx.StatementError
	var pgErr *pgconn.PgError
	if !errors.As(err, &se) || se.Call != "test.QueueInsertTwice(1)" || se.Index != 2 || !pgtx.Classify(err).NotCommitted {
		t.Fatalf("duplicate: %v (%+v), want the call test.QueueInsertTwice(1) to abort the batch", err, se)
	}
	if !errors.Is(err, errTaken) || !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.UniqueViolation {
		t.Fatalf("duplicate: %v, want errTaken wrapping the unique violation", err)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "pgtx: batch call test.QueueInsertTwice(1) failed, nothing committed: test: id taken: ") ||
		strings.Contains(msg, "statement") {
		t.Fatalf("duplicate: message %q", msg)
	}
	if n := b.count(t, "id = 3"); n != 0 {
		t.Fatalf("the aborted batch left %d rows", n)
	}

	// A statement queued without a name keeps its index.
	batch = &pgx.Batch{}
	queueInsertTwice(batch, b.table, 4, &got)
	batch.Queue(`INSERT INTO ` + b.table + ` VALUES (1, 1)`)
	err = pgtx.RunBatch(b.ctx, b.pool, pgtx.Options{}, batch)
	if !errors.As(err, &se) || se.Call != "" || se.Index != 2 || errors.Is(err, errTaken) ||
		!strings.Contains(err.Error(), "batch statement 2 failed") {
		t.Fatalf("unnamed statement: %v (%+v)", err, se)
	}

	// A result callback's own error: the transaction committed, and the
	// ResultError names the call.
	batch = &pgx.Batch{}
	errCallback := errors.New("test: callback refused")
	from := batch.Len()
	batch.Queue(`INSERT INTO ` + b.table + ` VALUES (5, 5)`).Fn = func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		return errCallback
	}
	pgtx.NameCall(batch, from, "test.QueueFive", nil)
	err = pgtx.RunBatch(b.ctx, b.pool, pgtx.Options{}, batch)
	var re *pgtx.ResultError
	if !errors.As(err, &re) || re.Call != "test.QueueFive" || !errors.Is(err, errCallback) || pgtx.Classify(err).NotCommitted ||
		b.count(t, "id = 5") != 1 || !strings.Contains(err.Error(), "batch call test.QueueFive") {
		t.Fatalf("callback error: %v (%+v)", err, re)
	}

	// Sent with pgx's SendBatch: the error starts with the call's name.
	batch = &pgx.Batch{}
	queueInsertTwice(batch, b.table, 1, &got)
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(b.ctx) }()
	err = tx.SendBatch(b.ctx, batch).Close()
	if !errors.Is(err, errTaken) || !strings.HasPrefix(err.Error(), "test.QueueInsertTwice(1): test: id taken: ") {
		t.Fatalf("SendBatch: %v", err)
	}

	// Out of range and nil: nothing marked, no panic.
	pgtx.NameCall(nil, 0, "x", nil)
	batch = &pgx.Batch{}
	batch.Queue(`SELECT 1`)
	pgtx.NameCall(batch, 5, "x", nil)
	pgtx.NameCall(batch, -1, "x", nil)
	pgtx.NameCall(batch, batch.Len(), "x", nil)
	pgtx.NameCall(batch, batch.Len(), "x", func(err error) error { return err }) // one past the last
	if batch.QueuedQueries[0].Fn != nil {
		t.Fatal("NameCall out of range marked a statement")
	}
}

var errNoTable = errors.New("test: no such table")

// TestNameCallUnplaced: a statement on a missing table fails where pgx
// describes the batch's statements, before the first one runs (in the
// describing exec modes), without saying which: RunBatch asks the named
// calls' classifications in order, and the one that recognises the error
// names the call. In the other exec modes the statement itself fails.
func TestNameCallUnplaced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	missing := b.schema + ".no_such_table"
	batch := &pgx.Batch{}
	var got int
	queueInsertTwice(batch, b.table, 10, &got) // classifies unique violations only
	from := batch.Len()
	batch.Queue(`INSERT INTO ` + missing + ` VALUES (1)`)
	noTable := func(err error) error {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UndefinedTable {
			return fmt.Errorf("%w: %w", errNoTable, err)
		}
		return err
	}
	pgtx.NameCall(batch, from, "test.QueueMissing", noTable)
	err := pgtx.RunBatch(b.ctx, b.pool, pgtx.Options{}, batch)
	var se *pgtx.StatementError
	if !errors.As(err, &se) || se.Call != "test.QueueMissing" || !errors.Is(err, errNoTable) || errors.Is(err, errTaken) ||
		(se.Index != -1 && se.Index != 2) || !pgtx.Classify(err).NotCommitted {
		t.Fatalf("missing table: %v (%+v), want the call test.QueueMissing and errNoTable", err, se)
	}
	t.Logf("failed at statement %d: %v", se.Index, err)
	if n := b.count(t, "id = 10"); n != 0 {
		t.Fatalf("the aborted batch left %d rows", n)
	}

	// The same batch value, reset and queued again: the calls of its first
	// life are gone.
	*batch = pgx.Batch{}
	batch.Queue(`SELECT 1`)
	batch.Queue(`INSERT INTO ` + missing + ` VALUES (2)`)
	pgtx.NameCall(batch, 1, "test.QueueMissingAgain", noTable)
	err = pgtx.RunBatch(b.ctx, b.pool, pgtx.Options{}, batch)
	if !errors.As(err, &se) || se.Call != "test.QueueMissingAgain" || !errors.Is(err, errNoTable) {
		t.Fatalf("reset batch: %v (%+v), want the call test.QueueMissingAgain", err, se)
	}

	// Reset once more, now shorter than the position of the call it had:
	// that call is recognised as gone, not looked up past the end.
	*batch = pgx.Batch{}
	batch.Queue(`INSERT INTO ` + missing + ` VALUES (3)`)
	pgtx.NameCall(batch, 0, "test.QueueMissingThird", noTable)
	err = pgtx.RunBatch(b.ctx, b.pool, pgtx.Options{}, batch)
	if !errors.As(err, &se) || se.Call != "test.QueueMissingThird" || !errors.Is(err, errNoTable) {
		t.Fatalf("shorter reset batch: %v (%+v), want the call test.QueueMissingThird", err, se)
	}
}
