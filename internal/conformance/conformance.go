// Package conformance is the conformance harness of this module's stores,
// for tests only.
//
// Every public package checks the same promises about its entry points:
// a nil transaction or connection is refused with the package's typed
// error instead of a panic; invalid input (a nil batch, text PostgreSQL
// cannot store, a limit out of range) is refused with the typed error
// before anything is queued or written; every queued form takes a nil
// destination; the statements work in every pgx query exec mode, and
// through PgBouncer in transaction pooling mode; hostile strings are
// stored verbatim. Each package declares its entry points once, as a
// table of [Entry] values in its conformance_test.go, and runs the table
// with [NilHandles] and [Refusals]; [ExecModes] and [PgBouncerPool] run its
// end-to-end scenario in each exec mode and through PgBouncer. [Covered]
// compares the table with the exported methods of the package's Store,
// like racetest.Covered does for the race table, so that a new entry point
// cannot be added without a row.
package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/internal/pgtest"
)

// Hostile returns the strings an attacker would try through a text
// parameter; drop and truncate name the package's tables in the
// "DROP TABLE" and "TRUNCATE" attempts.
func Hostile(drop, truncate string) []string {
	return []string{
		`'; DROP TABLE ` + drop + `; --`, `"quoted"`, `$1`, `' OR '1'='1`, `\`, `%s%d%!`, `);--`, `{schema}`,
		`"; TRUNCATE ` + truncate + `; --`, "é主🚀\u200b", `E'\x41'`, "tab\tnew\nline",
	}
}

// MustJSON returns s as a JSON string literal.
func MustJSON(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// Call is one call of an entry point that must be refused.
type Call struct {
	// Name tells the call apart from the entry's other calls.
	Name string
	// Do makes the call and returns its error.
	Do func(ctx context.Context) error
}

// Case is one invalid input to an entry point.
type Case struct {
	// Name tells the case apart from the entry's other cases.
	Name string
	// Do calls the entry point with the invalid input: the direct form on
	// tx, the queued form on b (or on a nil batch). Both are shared by all
	// the cases of a table: nothing may be queued on b, and tx is
	// committed after the last case, so nothing may be written.
	Do func(ctx context.Context, tx pgx.Tx, b *pgx.Batch) error
}

// Entry is one row of a package's conformance table: one exported method
// of its Store.
type Entry struct {
	// Method is the exported Store method.
	Method string
	// Nil calls the method with a nil transaction or connection, each
	// with its own input; every call must be refused with the nil-handle
	// error. Required for every method that takes a handle.
	Nil []Call
	// Queue queues a valid input with a nil destination on b. Required
	// for every method that takes a *pgx.Batch: a nil batch must be
	// refused, and a real one must get at least one statement.
	Queue func(b *pgx.Batch) error
	// Invalid are inputs the method must refuse with the invalid-input
	// error, queueing and writing nothing.
	Invalid []Case
}

// Check reports what is wrong with an error an entry point returned, or
// nil when it is the documented one.
type Check func(err error) error

// Typed returns a Check that err matches sentinel with errors.Is and is an
// E with errors.As (the package's typed error); with fields, the field E
// names (field reads it) must be one of them.
func Typed[E error](sentinel error, field func(E) string, fields ...string) Check {
	return func(err error) error {
		var e E
		switch {
		case !errors.Is(err, sentinel):
			return fmt.Errorf("%v, want %v", err, sentinel)
		case !errors.As(err, &e):
			return fmt.Errorf("%v, want a %T", err, e)
		case field != nil && len(fields) == 0 && field(e) == "":
			return fmt.Errorf("%v names no field", err)
		case len(fields) > 0 && !slices.Contains(fields, field(e)):
			return fmt.Errorf("%v names field %q, want one of %q", err, field(e), fields)
		}
		return nil
	}
}

// NilHandles makes every Nil call of the table, each as a subtest
// Method/Name, and checks that it is refused as nilHandle says (and does
// not panic).
func NilHandles(t *testing.T, entries []Entry, nilHandle Check) {
	t.Helper()
	ctx := context.Background()
	for _, e := range entries {
		for _, c := range e.Nil {
			t.Run(e.Method+"/"+c.Name, func(t *testing.T) {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("%s(nil) panicked: %v", e.Method, r)
					}
				}()
				if err := nilHandle(c.Do(ctx)); err != nil {
					t.Errorf("%s(nil) %s: %v", e.Method, c.Name, err)
				}
			})
		}
	}
}

// Refusals runs every Invalid case of the table in one transaction on db
// and checks each is refused as invalid says; it also checks that every
// queued form refuses a nil batch. Then it commits, and checks that
// nothing was queued and that rows (a count of what the package's tables
// hold) did not change. Last it checks that every queued form takes a
// valid input with a nil destination and queues its statement.
func Refusals(t *testing.T, ctx context.Context, db *pgxpool.Pool, entries []Entry, invalid Check, rows func() int64) {
	t.Helper()
	before := rows()
	var batch pgx.Batch
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	for _, e := range entries {
		for _, c := range e.Invalid {
			if err := invalid(noPanic(func() error { return c.Do(ctx, tx, &batch) })); err != nil {
				t.Errorf("%s(%s): %v", e.Method, c.Name, err)
			}
		}
		if e.Queue != nil {
			if err := invalid(noPanic(func() error { return e.Queue(nil) })); err != nil {
				t.Errorf("%s(nil batch): %v", e.Method, err)
			}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Errorf("commit after the invalid calls: %v", err)
	}
	if batch.Len() != 0 {
		t.Errorf("%d statements queued for invalid input", batch.Len())
	}
	if after := rows(); after != before {
		t.Errorf("invalid calls changed the tables: %d → %d", before, after)
	}
	for _, e := range entries {
		if e.Queue == nil {
			continue
		}
		var b pgx.Batch
		if err := noPanic(func() error { return e.Queue(&b) }); err != nil || b.Len() == 0 {
			t.Errorf("%s(valid input, nil dst) = %v, queued %d statements; want it accepted and queued", e.Method, err, b.Len())
		}
	}
}

// noPanic returns call's error, or its panic as an error.
func noPanic(call func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panicked: %v", r)
		}
	}()
	return call()
}

// Rejected is the property of a fuzz target's validation: when err is
// not nil it must pass invalid and nothing may have been queued (queued is
// the batch's length). It reports whether the input was rejected.
func Rejected(t *testing.T, err error, queued int, invalid Check) bool {
	t.Helper()
	if err == nil {
		return false
	}
	if e := invalid(err); e != nil {
		t.Fatalf("rejection is not the typed error: %v", e)
	}
	if queued != 0 {
		t.Fatalf("rejected input queued %d statements", queued)
	}
	return true
}

// ExecModes runs scenario once per query exec mode where pgx does not
// learn parameter types from the server (exec, simple_protocol: what
// PgBouncer in transaction mode needs) or encodes from a cached
// description (cache_describe), each as a parallel subtest named after
// the mode, with a pool in that mode. The scenario checks its results
// against fixed values, so every mode gives the same results.
func ExecModes(t *testing.T, scenario func(t *testing.T, pool *pgxpool.Pool)) {
	t.Helper()
	for _, mode := range pgtest.ExecModes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			scenario(t, pgtest.NewPool(t, pgtest.WithExecMode(mode)))
		})
	}
}

// PgBouncerPool returns a pool of at most maxConns client connections
// through the process's PgBouncer in transaction pooling mode, with the
// pgx settings of the test harness (default_query_exec_mode=exec).
func PgBouncerPool(t *testing.T, maxConns int32) *pgxpool.Pool {
	t.Helper()
	return pgtest.PgBouncerPool(t, func(c *pgxpool.Config) { c.MaxConns = maxConns })
}

// Covered fails t for every exported method of store's type that has no
// row in entries and is not listed in exempt (with the reason it has
// nothing to conform to), is in both, or has a row that misses what the
// method's signature asks for: Nil calls when it takes a transaction or
// connection, Queue when it takes a *pgx.Batch.
func Covered(t *testing.T, store any, entries []Entry, exempt map[string]string) {
	t.Helper()
	for _, p := range Uncovered(store, entries, exempt) {
		t.Error(p)
	}
}

// Uncovered returns what [Covered] reports, one sentence per problem.
func Uncovered(store any, entries []Entry, exempt map[string]string) []string {
	typ := reflect.TypeOf(store)
	methods := map[string]reflect.Method{}
	for i := range typ.NumMethod() {
		methods[typ.Method(i).Name] = typ.Method(i)
	}
	rows := map[string]Entry{}
	var problems []string
	for _, e := range entries {
		if _, dup := rows[e.Method]; dup {
			problems = append(problems, fmt.Sprintf("the conformance table has two rows for %s", e.Method))
		}
		rows[e.Method] = e
	}
	for _, name := range sortedKeys(methods) {
		e, inTable := rows[name]
		_, listed := exempt[name]
		switch {
		case inTable && listed:
			problems = append(problems, fmt.Sprintf("%s.%s is both in the conformance table and exempt", typ, name))
		case !inTable && !listed:
			problems = append(problems, fmt.Sprintf("%s.%s has no row in the conformance table: add one (or, if it has nothing to conform to, exempt it with the reason)", typ, name))
		case inTable:
			handle, batch := params(methods[name].Type)
			if handle && len(e.Nil) == 0 {
				problems = append(problems, fmt.Sprintf("%s.%s takes a transaction or connection: its row needs Nil calls", typ, name))
			}
			if batch && e.Queue == nil {
				problems = append(problems, fmt.Sprintf("%s.%s takes a *pgx.Batch: its row needs Queue", typ, name))
			}
			if !handle && !batch && len(e.Invalid) == 0 {
				problems = append(problems, fmt.Sprintf("%s.%s: its row checks nothing", typ, name))
			}
		}
	}
	for _, name := range sortedKeys(rows) {
		if _, ok := methods[name]; !ok {
			problems = append(problems, fmt.Sprintf("the conformance table names %s, which is not a method of %s", name, typ))
		}
	}
	for _, name := range sortedKeys(exempt) {
		if _, ok := methods[name]; !ok {
			problems = append(problems, fmt.Sprintf("the exempt list names %s, which is not a method of %s", name, typ))
		}
		if strings.TrimSpace(exempt[name]) == "" {
			problems = append(problems, fmt.Sprintf("%s is exempt without a reason", name))
		}
	}
	return problems
}

var batchType = reflect.TypeFor[*pgx.Batch]()

// params reports whether method type m takes a database handle (an
// interface of pgx or of this module's pgtx) and a *pgx.Batch.
func params(m reflect.Type) (handle, batch bool) {
	for i := range m.NumIn() {
		p := m.In(i)
		switch {
		case p == batchType:
			batch = true
		case p.Kind() == reflect.Interface &&
			(p.PkgPath() == "github.com/jackc/pgx/v5" || p.PkgPath() == "github.com/seckillkit/seckill/pgtx"):
			handle = true
		}
	}
	return handle, batch
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
