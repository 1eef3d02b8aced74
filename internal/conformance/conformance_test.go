package conformance

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/pgtx"
)

type fakeStore struct{}

func (*fakeStore) Read(context.Context, pgtx.Querier) error      { return nil }
func (*fakeStore) Write(context.Context, pgx.Tx) error           { return nil }
func (*fakeStore) QueueWrite(*pgx.Batch) error                   { return nil }
func (*fakeStore) Schema() string                                { return "" }
func (*fakeStore) NewMethod(context.Context, pgtx.Querier) error { return nil }
func (*fakeStore) Pure(string) error                             { return nil }

// TestUncoveredNamesEveryGap: a method in neither the table nor the exempt
// list, one in both, a name that is no method, a reason left empty, a
// handle-taking method without Nil calls, a queued form without Queue and
// a row that checks nothing are each reported; a complete table reports
// nothing.
func TestUncoveredNamesEveryGap(t *testing.T) {
	t.Parallel()
	nilCall := []Call{{Name: "nil", Do: func(context.Context) error { return nil }}}
	entries := []Entry{
		{Method: "Read"},       // takes a handle: needs Nil
		{Method: "QueueWrite"}, // takes a batch: needs Queue
		{Method: "Write", Nil: nilCall},
		{Method: "Schema", Invalid: []Case{{}}},
		{Method: "Pure"}, // checks nothing
		{Method: "Gone", Nil: nilCall},
	}
	got := strings.Join(Uncovered(&fakeStore{}, entries, map[string]string{"Schema": "a name", "Old": ""}), "\n")
	for _, want := range []string{
		"NewMethod has no row in the conformance table",
		"Schema is both in the conformance table and exempt",
		"names Gone, which is not a method",
		"names Old, which is not a method",
		"Old is exempt without a reason",
		"Read takes a transaction or connection: its row needs Nil calls",
		"QueueWrite takes a *pgx.Batch: its row needs Queue",
		"Pure: its row checks nothing",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	complete := []Entry{
		{Method: "Read", Nil: nilCall},
		{Method: "NewMethod", Nil: nilCall},
		{Method: "Write", Nil: nilCall},
		{Method: "QueueWrite", Queue: func(*pgx.Batch) error { return nil }},
		{Method: "Pure", Invalid: []Case{{}}},
	}
	if p := Uncovered(&fakeStore{}, complete, map[string]string{"Schema": "a name"}); len(p) != 0 {
		t.Errorf("complete table reported %v", p)
	}
	if p := Uncovered(&fakeStore{}, append(complete, complete[0]), map[string]string{"Schema": "a name"}); len(p) != 1 ||
		!strings.Contains(p[0], "two rows for Read") {
		t.Errorf("duplicate row reported %v", p)
	}
}

type fieldError struct {
	field string
	err   error
}

func (e *fieldError) Error() string { return e.field + ": " + e.err.Error() }
func (e *fieldError) Unwrap() error { return e.err }

// TestTyped: the check wants the sentinel, the typed error and, when
// given, one of the fields.
func TestTyped(t *testing.T) {
	t.Parallel()
	errBad := errors.New("bad")
	field := func(e *fieldError) string { return e.field }
	anyField, handle := Typed(errBad, field), Typed(errBad, field, "tx", "db")
	for _, c := range []struct {
		err             error
		anyOK, handleOK bool
	}{
		{nil, false, false},
		{errBad, false, false},
		{&fieldError{"x", errors.New("other")}, false, false},
		{&fieldError{"", errBad}, false, false},
		{&fieldError{"limit", errBad}, true, false},
		{&fieldError{"db", errBad}, true, true},
	} {
		if got := anyField(c.err) == nil; got != c.anyOK {
			t.Errorf("Typed(any field)(%v) passes = %v, want %v", c.err, got, c.anyOK)
		}
		if got := handle(c.err) == nil; got != c.handleOK {
			t.Errorf("Typed(tx, db)(%v) passes = %v, want %v", c.err, got, c.handleOK)
		}
	}
}
