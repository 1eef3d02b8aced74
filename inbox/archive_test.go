package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/pgtx"
)

// countingRows counts the statements Archive sends.
type countingRows struct {
	pgtx.Querier
	rows atomic.Int32
}

func (c *countingRows) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.rows.Add(1)
	return c.Querier.QueryRow(ctx, sql, args...)
}

func (b *testBundle) table() string { return pgx.Identifier{b.schema, "consumer_inbox"}.Sanitize() }
func (b *testBundle) history() string {
	return pgx.Identifier{b.schema, "consumer_inbox_history"}.Sanitize()
}

// rows returns the rows of table as JSON text (without archived_at) keyed
// by "group/message id".
func (b *testBundle) rows(t *testing.T, table string) map[string]string {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `SELECT consumer_group || '/' || message_id, (to_jsonb(t) - 'archived_at')::text FROM `+table+` AS t`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var k, js string
	if _, err := pgx.ForEachRow(rows, []any{&k, &js}, func() error {
		if _, dup := out[k]; dup {
			return fmt.Errorf("%s twice in %s", k, table)
		}
		out[k] = js
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// processed commits n processed messages of group and ages them by age.
func (b *testBundle) processed(t *testing.T, group string, n int, age time.Duration) []inbox.Key {
	t.Helper()
	var keys []inbox.Key
	for range n {
		m := newMessage(group)
		b.inTx(t, func(tx pgx.Tx) error {
			_, err := b.in.ClaimMessage(b.ctx, tx, withResult(m, inbox.Result{Code: "OK", Payload: []byte(`{"n": 1}`)}))
			return err
		})
		keys = append(keys, m.Key())
	}
	if age > 0 {
		for _, k := range keys {
			if _, err := b.pool.Exec(b.ctx, `UPDATE `+b.table()+` SET created_at = created_at - $3::int8 * interval '1 microsecond',
				processed_at = processed_at - $3::int8 * interval '1 microsecond' WHERE consumer_group = $1 AND message_id = $2`,
				k.Group, k.MessageID, age.Microseconds()); err != nil {
				t.Fatal(err)
			}
		}
	}
	return keys
}

// Archive moves exactly the rows processed before the horizon, whole and
// unchanged, in statements of at most batchSize rows; a second run moves
// nothing; a moved message is no longer found (a redelivery would be
// processed again).
func TestArchive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	old := b.processed(t, "archive", 25, 30*24*time.Hour)
	b.processed(t, "archive", 7, 0)
	before := b.rows(t, b.table())
	cutoff := time.Now().Add(-24 * time.Hour)
	q := &countingRows{Querier: b.pool}
	n, err := b.in.Archive(b.ctx, q, cutoff, 10)
	if err != nil || n != 25 {
		t.Fatalf("Archive = %d, %v; want 25", n, err)
	}
	if got := q.rows.Load(); got != 3 { // 10 + 10 + 5
		t.Fatalf("%d statements, want 3 batches of at most 10", got)
	}
	active, hist := b.rows(t, b.table()), b.rows(t, b.history())
	if len(active) != 7 || len(hist) != 25 {
		t.Fatalf("%d active, %d archived; want 7 and 25", len(active), len(hist))
	}
	for k, js := range before {
		a, inActive := active[k]
		h, inHist := hist[k]
		switch {
		case inActive == inHist:
			t.Fatalf("%s: active %v, archived %v", k, inActive, inHist)
		case inActive && a != js, inHist && h != js:
			t.Fatalf("%s changed on the way:\n before %s\n after  %s%s", k, js, a, h)
		}
	}
	if _, err := b.in.Lookup(b.ctx, b.pool, old[0]); !errors.Is(err, inbox.ErrNotFound) {
		t.Fatalf("Lookup of an archived message = %v, want ErrNotFound", err)
	}
	q.rows.Store(0)
	if n, err := b.in.Archive(b.ctx, q, cutoff, 0); err != nil || n != 0 || q.rows.Load() != 1 {
		t.Fatalf("second Archive = %d, %v after %d statements; want 0 after 1", n, err, q.rows.Load())
	}
	if n, err := b.in.Archive(b.ctx, b.pool, time.Now().Add(time.Hour), 7); err != nil || n != 7 {
		t.Fatalf("Archive of the rest = %d, %v; want 7", n, err)
	}
	ctx, cancel := context.WithCancel(b.ctx)
	cancel()
	if _, err := b.in.Archive(ctx, b.pool, cutoff, 10); !errors.Is(err, context.Canceled) {
		t.Fatalf("Archive with a cancelled ctx = %v", err)
	}
}

// Bad input gets a *ValidationError and moves nothing; so does a negative
// Config.MinRetention in New.
func TestArchiveRejectsBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.processed(t, "bad", 3, time.Hour)
	for name, call := range map[string]func() (int64, error){
		"zero time":      func() (int64, error) { return b.in.Archive(b.ctx, b.pool, time.Time{}, 0) },
		"negative batch": func() (int64, error) { return b.in.Archive(b.ctx, b.pool, time.Now(), -1) },
		"batch too big":  func() (int64, error) { return b.in.Archive(b.ctx, b.pool, time.Now(), inbox.MaxArchiveBatchSize+1) },
		"nil db":         func() (int64, error) { return b.in.Archive(b.ctx, nil, time.Now(), 0) },
	} {
		n, err := call()
		var ve *inbox.Error
		if n != 0 || !errors.Is(err, inbox.ErrInvalidArgument) || !errors.As(err, &ve) {
			t.Errorf("%s: %d, %v; want 0 and a *ValidationError", name, n, err)
		}
	}
	if got := b.count(t, nil); got != 3 {
		t.Fatalf("%d rows left after rejected calls, want 3", got)
	}
	_, err := inbox.New(inbox.Config{Schema: b.schema, MinRetention: -time.Second})
	var ve *inbox.Error
	if !errors.Is(err, inbox.ErrInvalidArgument) || !errors.As(err, &ve) || ve.Field != "Config.MinRetention" {
		t.Fatalf("New with a negative MinRetention = %v, want a *ValidationError", err)
	}
}

// With Config.MinRetention set to the replay window, a purge or archive
// horizon younger than it is refused with a *RetentionError naming both
// values and deletes nothing; an old enough horizon works.
func TestRetentionGuard(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const replay = 2 * time.Hour
	in, err := inbox.New(inbox.Config{Schema: b.schema, MinRetention: replay})
	if err != nil {
		t.Fatal(err)
	}
	b.processed(t, "guard", 4, 3*time.Hour) // older than the window
	b.processed(t, "guard", 5, time.Hour)   // inside it: must stay
	b.processed(t, "guard", 6, 0)
	horizon := time.Now().Add(-time.Hour / 2)
	for op, call := range map[string]func() (int64, error){
		"purge":   func() (int64, error) { return in.Purge(testwait.Context(t, b.ctx, testwait.Step), b.pool, horizon, 0) },
		"archive": func() (int64, error) { return in.Archive(b.ctx, b.pool, horizon, 0) },
	} {
		n, err := call()
		var re *inbox.Error
		if n != 0 || !errors.Is(err, inbox.ErrRetentionTooShort) || !errors.As(err, &re) {
			t.Fatalf("%s with a horizon inside the replay window = %d, %v; want a *RetentionError", op, n, err)
		}
		if re.Op != op || !re.OlderThan.Equal(horizon) || re.MinRetention != replay || re.Age < time.Hour/2 || re.Age > replay {
			t.Fatalf("%s: %+v", op, re)
		}
		if msg := err.Error(); !strings.Contains(msg, replay.String()) || !strings.Contains(msg, "30m") {
			t.Fatalf("%s: the message %q does not name both the horizon's age and the minimum", op, msg)
		}
	}
	if got := b.count(t, nil); got != 15 {
		t.Fatalf("%d rows left after the refused calls, want 15", got)
	}
	if n, err := in.Archive(b.ctx, b.pool, time.Now().Add(-replay-time.Minute), 0); err != nil || n != 4 {
		t.Fatalf("Archive past the window = %d, %v; want the 4 old rows", n, err)
	}
	b.processed(t, "guard", 2, 4*time.Hour)
	if n, err := in.Purge(testwait.Context(t, b.ctx, testwait.Step), b.pool, time.Now().Add(-replay-time.Minute), 0); err != nil || n != 2 {
		t.Fatalf("Purge past the window = %d, %v; want 2", n, err)
	}
	if got := b.count(t, nil); got != 11 {
		t.Fatalf("%d rows left, want the 11 inside the window", got)
	}
}

// The archive never moves a row whose processing has not committed: a
// claim (with its result) in an open transaction is invisible to it, and a
// committed row another transaction holds locked (a repair rewriting it)
// is skipped. Once they commit, the next run moves them, as committed.
func TestArchiveSkipsUncommittedProcessing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	done := b.processed(t, "inflight", 1, 0)[0]
	repaired := b.processed(t, "inflight", 1, 0)[0]
	repair, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer repair.Rollback(b.ctx)
	if _, err := repair.Exec(b.ctx, `UPDATE `+b.table()+` SET result_code = 'REPAIRED' WHERE message_id = $1`, repaired.MessageID); err != nil {
		t.Fatal(err)
	}
	// A claim whose transaction is still open.
	fresh := newMessage("inflight")
	claiming, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer claiming.Rollback(b.ctx)
	if c, err := b.in.ClaimMessage(b.ctx, claiming, withResult(fresh, inbox.Result{Code: "OK"})); err != nil || !c.Fresh {
		t.Fatalf("claim = %+v, %v", c, err)
	}
	// Archive must pass the locked rows over, not wait for them.
	n, err := b.in.Archive(testwait.Context(t, b.ctx, testwait.Step), b.pool, time.Now().Add(time.Hour), 0)
	if err != nil || n != 1 {
		t.Fatalf("Archive with processing in flight = %d, %v; want 1 without waiting for the locked rows", n, err)
	}
	if hist := b.rows(t, b.history()); len(hist) != 1 || hist[done.Group+"/"+done.MessageID.String()] == "" {
		t.Fatalf("history %v, want only the finished message", hist)
	}
	if err := repair.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := claiming.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := b.in.Archive(b.ctx, b.pool, time.Now().Add(time.Hour), 0); err != nil || n != 2 {
		t.Fatalf("Archive after the commits = %d, %v; want 2", n, err)
	}
	var code string
	if err := b.pool.QueryRow(b.ctx, `SELECT result_code FROM `+b.history()+` WHERE message_id = $1`, repaired.MessageID).Scan(&code); err != nil || code != "REPAIRED" {
		t.Fatalf("archived result %q, %v; want the committed repair's REPAIRED", code, err)
	}
}

// An archive interrupted inside a batch (its statement waiting after its
// DELETE) by a cancelled context or a cut connection moved whole batches
// only; run again, it moves the rest: nothing lost, nothing twice.
func TestArchiveInterruptedThenResumed(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"cancel", "cut"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			keys := b.processed(t, "cut", 35, time.Hour)
			before := b.rows(t, b.table())
			// An uncommitted copy of one row in the history makes the
			// batch that moves it wait, inside its statement.
			blocker, err := b.pool.Begin(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer blocker.Rollback(b.ctx)
			if _, err := blocker.Exec(b.ctx, `INSERT INTO `+b.history()+` SELECT i.* FROM `+b.table()+` AS i WHERE message_id = $1`, keys[20].MessageID); err != nil {
				t.Fatal(err)
			}
			conn := pgtest.Conn(t)
			pid := conn.PgConn().PID()
			ctx, cancel := context.WithCancel(b.ctx)
			defer cancel()
			type result struct {
				n   int64
				err error
			}
			res := make(chan result, 1)
			go func() {
				n, err := b.in.Archive(ctx, conn, time.Now(), 10)
				res <- result{n, err}
			}()
			waitFor(t, b, `SELECT coalesce(cardinality(pg_blocking_pids($1)) > 0, false)`, pid)
			if how == "cancel" {
				cancel()
			} else if _, err := b.pool.Exec(b.ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
				t.Fatal(err)
			}
			r := testwait.Recv(t, res, "the interrupted archive did not return")
			if r.err == nil || r.n%10 != 0 {
				t.Fatalf("interrupted Archive = %d, %v; want whole batches and an error", r.n, r.err)
			}
			// The server may finish the waiting batch once the blocker
			// ends, if it has not seen the interruption yet.
			if err := blocker.Rollback(b.ctx); err != nil {
				t.Fatal(err)
			}
			waitFor(t, b, `SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND state = 'active')`, pid)
			moved := len(b.rows(t, b.history()))
			if moved < int(r.n) || moved%10 != 0 && moved != 35 {
				t.Fatalf("%d rows archived after the interruption (%d reported); want whole batches", moved, r.n)
			}
			n, err := b.in.Archive(b.ctx, b.pool, time.Now(), 10)
			if err != nil || int(n) != 35-moved {
				t.Fatalf("resumed Archive = %d, %v; want the %d left", n, err, 35-moved)
			}
			hist := b.rows(t, b.history())
			if b.count(t, nil) != 0 || len(hist) != 35 {
				t.Fatalf("%d archived, %d left; want 35 and 0", len(hist), b.count(t, nil))
			}
			for k, js := range before {
				if hist[k] != js {
					t.Fatalf("%s archived as %q, was %q", k, hist[k], js)
				}
			}
		})
	}
}

// waitFor polls query (one parameter, pid) until it returns true.
func waitFor(t *testing.T, b *testBundle, query string, pid uint32) {
	t.Helper()
	ctx := testwait.Context(t, b.ctx, testwait.Step)
	for {
		var ok bool
		if err := b.pool.QueryRow(b.ctx, query, pid).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("not true within %v: %s", testwait.Step, query)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// consumer_inbox_history has exactly consumer_inbox's columns, plus
// archived_at.
func TestArchiveHistoryMatchesTable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cols := func(table string) map[string]string {
		rows, err := b.pool.Query(b.ctx, `SELECT column_name, format('%s %s %s', data_type, is_nullable, coalesce(column_default, ''))
			FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2`, b.schema, table)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		var name, desc string
		if _, err := pgx.ForEachRow(rows, []any{&name, &desc}, func() error { out[name] = desc; return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	active, hist := cols("consumer_inbox"), cols("consumer_inbox_history")
	if hist["archived_at"] == "" {
		t.Fatal("no archived_at in the history")
	}
	delete(hist, "archived_at")
	if len(active) != len(hist) {
		t.Fatalf("columns: active %v, history %v", active, hist)
	}
	for name, desc := range active {
		if hist[name] != desc {
			t.Errorf("column %s: %q in consumer_inbox, %q in the history", name, desc, hist[name])
		}
	}
}
