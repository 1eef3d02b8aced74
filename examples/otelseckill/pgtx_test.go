package otelseckill_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckillkit/seckill/examples/otelseckill"
	"github.com/seckillkit/seckill/pgtx"
	"github.com/seckillkit/seckill/seckilltest"
)

var (
	committed    = otelseckill.AttrTxOutcome.String("committed")
	notCommitted = otelseckill.AttrTxOutcome.String("not_committed")
	sqlstate     = attribute.Key("db.response.status_code")
)

// TestTxSpansMatchCommittedRows: N inserts that commit and D duplicates
// that fail with a unique violation (not retried) give N call spans with
// outcome committed (as many as the table's rows), D with outcome
// not_committed and SQLSTATE 23505, one attempt span under each, and the
// same counts in the metrics.
func TestTxSpansMatchCommittedRows(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db := seckilltest.New(t)
	b := setup(t)
	table := pgx.Identifier{db.Schema, "item"}.Sanitize()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE `+table+` (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	const n, dups = 12, 3
	ids := make([]int, 0, n+dups)
	for i := 1; i <= n; i++ {
		ids = append(ids, i)
	}
	for i := 1; i <= dups; i++ {
		ids = append(ids, i)
	}
	// The duplicates run after the originals committed, so which call
	// fails is known.
	run := func(ids []int) []error {
		errs := make([]error, len(ids))
		var wg sync.WaitGroup
		for i, id := range ids {
			wg.Go(func() {
				errs[i] = pgtx.RunInTx(ctx, db.Pool, pgtx.Options{Name: "insert", Observer: b.obs.Tx}, func(tx pgx.Tx) error {
					_, err := tx.Exec(ctx, `INSERT INTO `+table+` (id) VALUES ($1)`, id)
					return err
				})
			})
		}
		wg.Wait()
		return errs
	}
	for _, err := range run(ids[:n]) {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, err := range run(ids[n:]) {
		if sqlStateOf(err) != "23505" {
			t.Fatalf("duplicate insert: got %v, want a unique violation", err)
		}
	}
	var rows int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != n {
		t.Fatalf("table has %d rows, want %d", rows, n)
	}

	calls := b.ended("pgtx insert")
	var ok, failed int
	callIDs := map[trace.SpanID]bool{}
	for _, s := range calls {
		callIDs[s.SpanContext().SpanID()] = true
		if s.SpanKind() != trace.SpanKindClient {
			t.Errorf("call span kind %v, want client", s.SpanKind())
		}
		if v, _ := attr(s, otelseckill.AttrTxAttempts); v.AsInt64() != 1 {
			t.Errorf("call span attempts %v, want 1", v.AsInt64())
		}
		if v, _ := attr(s, "db.system.name"); v.AsString() != "postgresql" {
			t.Errorf("db.system.name %q", v.AsString())
		}
		switch v, _ := attr(s, otelseckill.AttrTxOutcome); v.AsString() {
		case "committed":
			ok++
			if s.Status().Code == codes.Error {
				t.Errorf("committed call span has status %v", s.Status())
			}
		case "not_committed":
			failed++
			if c, _ := attr(s, sqlstate); c.AsString() != "23505" || s.Status().Code != codes.Error {
				t.Errorf("failed call span: SQLSTATE %q, status %v", c.AsString(), s.Status())
			}
		default:
			t.Errorf("call span outcome %q", v.AsString())
		}
	}
	if ok != rows || failed != dups {
		t.Fatalf("call spans: %d committed, %d not committed; the table has %d rows and %d inserts were duplicates", ok, failed, rows, dups)
	}
	attempts := b.ended(otelseckill.SpanAttempt)
	if len(attempts) != n+dups {
		t.Fatalf("%d attempt spans, want %d", len(attempts), n+dups)
	}
	for _, s := range attempts {
		if !callIDs[s.Parent().SpanID()] {
			t.Fatalf("attempt span %v is not a child of a call span", s.SpanContext().SpanID())
		}
	}

	rm := collect(t, b.reader)
	dur := find(t, rm, otelseckill.MetricTxDuration)
	if got := sum(t, dur, committed, otelseckill.AttrTxName.String("insert")); got != float64(rows) {
		t.Errorf("%s committed count %v, want %d (the table's rows)", otelseckill.MetricTxDuration, got, rows)
	}
	if got := sum(t, dur, notCommitted); got != dups {
		t.Errorf("%s not_committed count %v, want %d", otelseckill.MetricTxDuration, got, dups)
	}
	att := find(t, rm, otelseckill.MetricTxAttempts)
	if got := sum(t, att, committed); got != float64(rows) {
		t.Errorf("%s committed %v, want %d", otelseckill.MetricTxAttempts, got, rows)
	}
	if got := sum(t, att, sqlstate.String("23505"), otelseckill.AttrTxRetry.Bool(false)); got != dups {
		t.Errorf("%s with SQLSTATE 23505 %v, want %d", otelseckill.MetricTxAttempts, got, dups)
	}
}

// TestTxRetryOnSerializationFailure: a Serializable transaction whose
// row another transaction updates between its read and its write fails
// with 40001 on its first attempt and commits on its second; the call's
// span shows both attempts, the first with its SQLSTATE and retry.
func TestTxRetryOnSerializationFailure(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db := seckilltest.New(t)
	b := setup(t)
	table := pgx.Identifier{db.Schema, "account"}.Sanitize()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE `+table+` (id int PRIMARY KEY, v int NOT NULL); INSERT INTO `+table+` VALUES (1, 0)`); err != nil {
		t.Fatal(err)
	}
	read, other := make(chan struct{}), make(chan error, 1)
	go func() {
		select {
		case <-read:
		case <-ctx.Done():
			other <- ctx.Err()
			return
		}
		_, err := db.Pool.Exec(ctx, `UPDATE `+table+` SET v = v + 10 WHERE id = 1`)
		other <- err
	}()
	parentCtx, parent := b.tp.Tracer("test").Start(ctx, "request")
	attempt := 0
	err := pgtx.RunInTx(parentCtx, db.Pool, pgtx.Options{Name: "bump", IsoLevel: pgx.Serializable, MaxAttempts: 3,
		BaseBackoff: time.Millisecond, Observer: b.obs.Tx}, func(tx pgx.Tx) error {
		attempt++
		var v int
		if err := tx.QueryRow(ctx, `SELECT v FROM `+table+` WHERE id = 1`).Scan(&v); err != nil {
			return err
		}
		if attempt == 1 {
			close(read)
			if err := <-other; err != nil {
				return errors.Join(errors.New("the concurrent update failed"), err)
			}
		}
		_, err := tx.Exec(ctx, `UPDATE `+table+` SET v = $1 WHERE id = 1`, v+1)
		return err
	})
	parent.End()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	if err := db.Pool.QueryRow(ctx, `SELECT v FROM `+table+` WHERE id = 1`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != 11 || attempt != 2 {
		t.Fatalf("v = %d after %d attempts, want 11 after 2 (the first one failing with 40001)", v, attempt)
	}

	calls := b.ended("pgtx bump")
	if len(calls) != 1 {
		t.Fatalf("%d call spans, want 1", len(calls))
	}
	call := calls[0]
	if call.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("the call span is not a child of the caller's span")
	}
	if o, _ := attr(call, otelseckill.AttrTxOutcome); o.AsString() != "committed" {
		t.Errorf("call outcome %q", o.AsString())
	}
	if a, _ := attr(call, otelseckill.AttrTxAttempts); a.AsInt64() != 2 {
		t.Errorf("call attempts %d, want 2", a.AsInt64())
	}
	atts := b.ended(otelseckill.SpanAttempt)
	if len(atts) != 2 {
		t.Fatalf("%d attempt spans, want 2", len(atts))
	}
	byNumber := map[int64]sdktrace.ReadOnlySpan{}
	for _, s := range atts {
		if s.Parent().SpanID() != call.SpanContext().SpanID() {
			t.Errorf("attempt span not under the call span")
		}
		n, _ := attr(s, otelseckill.AttrTxAttempt)
		byNumber[n.AsInt64()] = s
	}
	first, second := byNumber[1], byNumber[2]
	if first == nil || second == nil {
		t.Fatalf("attempt spans numbered %v", byNumber)
	}
	if c, _ := attr(first, sqlstate); c.AsString() != "40001" {
		t.Errorf("first attempt SQLSTATE %q, want 40001", c.AsString())
	}
	if r, _ := attr(first, otelseckill.AttrTxRetry); !r.AsBool() {
		t.Errorf("first attempt not marked retried")
	}
	if o, _ := attr(first, otelseckill.AttrTxOutcome); o.AsString() != "not_committed" || first.Status().Code != codes.Error {
		t.Errorf("first attempt outcome %q status %v", o.AsString(), first.Status())
	}
	if _, ok := attr(first, otelseckill.AttrTxBackoff); !ok {
		t.Errorf("first attempt has no backoff")
	}
	if o, _ := attr(second, otelseckill.AttrTxOutcome); o.AsString() != "committed" {
		t.Errorf("second attempt outcome %q", o.AsString())
	}
	if r, _ := attr(second, otelseckill.AttrTxRetry); r.AsBool() {
		t.Errorf("second attempt marked retried")
	}

	rm := collect(t, b.reader)
	att := find(t, rm, otelseckill.MetricTxAttempts)
	if got := sum(t, att, otelseckill.AttrTxRetry.Bool(true), sqlstate.String("40001")); got != 1 {
		t.Errorf("retried attempts with 40001: %v, want 1", got)
	}
	if got := sum(t, att, committed); got != 1 {
		t.Errorf("committed attempts: %v, want 1", got)
	}
	if got := sum(t, find(t, rm, otelseckill.MetricTxDuration), committed); got != 1 {
		t.Errorf("committed transactions: %v, want 1", got)
	}
}

// TestTxRetryOnDeadlock: two transactions that lock two rows in opposite
// orders deadlock; PostgreSQL aborts one with 40P01, pgtx retries it and
// both commit. The spans and metrics show three attempts, one of them
// retried with 40P01.
func TestTxRetryOnDeadlock(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db := seckilltest.New(t)
	b := setup(t)
	table := pgx.Identifier{db.Schema, "bucket"}.Sanitize()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE `+table+` (id int PRIMARY KEY, v int NOT NULL); INSERT INTO `+table+` VALUES (1, 0), (2, 0)`); err != nil {
		t.Fatal(err)
	}
	var locked sync.WaitGroup
	locked.Add(2)
	bothLocked := make(chan struct{})
	go func() { locked.Wait(); close(bothLocked) }()
	run := func(first, second int) error {
		attempt := 0
		return pgtx.RunInTx(ctx, db.Pool, pgtx.Options{Name: "swap", MaxAttempts: 3, BaseBackoff: time.Millisecond,
			Observer: b.obs.Tx}, func(tx pgx.Tx) error {
			attempt++
			if _, err := tx.Exec(ctx, `UPDATE `+table+` SET v = v + 1 WHERE id = $1`, first); err != nil {
				return err
			}
			if attempt == 1 {
				locked.Done()
				select {
				case <-bothLocked:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			_, err := tx.Exec(ctx, `UPDATE `+table+` SET v = v + 1 WHERE id = $1`, second)
			return err
		})
	}
	errs := make(chan error, 2)
	go func() { errs <- run(1, 2) }()
	go func() { errs <- run(2, 1) }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	var v1, v2 int
	if err := db.Pool.QueryRow(ctx, `SELECT (SELECT v FROM `+table+` WHERE id = 1), (SELECT v FROM `+table+` WHERE id = 2)`).Scan(&v1, &v2); err != nil {
		t.Fatal(err)
	}
	if v1 != 2 || v2 != 2 {
		t.Fatalf("rows %d, %d, want 2, 2 (both transactions committed once)", v1, v2)
	}
	atts := b.ended(otelseckill.SpanAttempt)
	var retried int
	for _, s := range atts {
		if r, _ := attr(s, otelseckill.AttrTxRetry); r.AsBool() {
			retried++
			if c, _ := attr(s, sqlstate); c.AsString() != "40P01" {
				t.Errorf("retried attempt SQLSTATE %q, want 40P01", c.AsString())
			}
		}
	}
	// Usually one of the two is chosen as the deadlock's victim and
	// retried; now and then both backends' deadlock checks fire at once and
	// both are retried. Either way every retried attempt is one more span.
	if retried < 1 || retried > 2 || len(atts) != 2+retried {
		t.Fatalf("%d attempt spans, %d retried; want 1 or 2 retried and 2 more spans than that", len(atts), retried)
	}
	calls := b.ended("pgtx swap")
	if len(calls) != 2 {
		t.Fatalf("%d call spans, want 2", len(calls))
	}
	rm := collect(t, b.reader)
	if got := sum(t, find(t, rm, otelseckill.MetricTxAttempts), sqlstate.String("40P01"), otelseckill.AttrTxRetry.Bool(true)); got != float64(retried) {
		t.Errorf("retried attempts with 40P01: %v, want %d (the retried spans)", got, retried)
	}
	if got := sum(t, find(t, rm, otelseckill.MetricTxDuration), committed); got != 2 {
		t.Errorf("committed transactions: %v, want 2", got)
	}
}
