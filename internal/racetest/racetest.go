// Package racetest is the race harness of this module's guarded
// statements, for tests only.
//
// A guarded statement locks or conditionally updates a row and then
// classifies what it found: updated, already in the target state, an
// illegal from-state, a lost lease, a duplicate. Under READ COMMITTED a
// statement that waits for a row lock sees the row as the holder left it
// only where it reads the locked row itself (a locking read, or the row an
// UPDATE re-checks after the wait); everything else in the statement keeps
// the snapshot taken before the wait. A classification that reads that
// snapshot reports a state the row no longer has. The harness makes that
// wait happen for every entry point:
//
//  1. transaction A takes the row's lock and changes the row (Round.Hold);
//  2. transaction B calls the entry point (Round.Call) and must wait for A:
//     the harness checks on the server that A's backend blocks B's;
//  3. A commits, or, in a second run, rolls back;
//  4. B's result is checked against what the documentation promises for
//     the row as A left it (Round.Check).
//
// An entry point that passes over locked rows (SKIP LOCKED) is a Race with
// Skips set: B must return while A still holds the lock, and must not have
// touched A's row.
//
// Each package keeps its table of races next to its tests and runs it with
// [Run]; [Covered] compares the table with the exported methods of the
// package's Store so that a new guarded entry point cannot be added
// without a row. Every wait of the harness has its own deadline
// ([StepTimeout]): a broken guard fails in seconds with a message.
package racetest

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// StepTimeout bounds every wait of one race: B's start, B blocking on A's
// lock, B's result after A ended. It is far below any package timeout.
const StepTimeout = 15 * time.Second

// End is how transaction A ends.
type End int

// The two ends of A.
const (
	Commit End = iota
	Rollback
)

// String returns "commit" or "rollback".
func (e End) String() string {
	if e == Commit {
		return "commit"
	}
	return "rollback"
}

// Race is one row of a package's race table: an entry point, and one state
// transaction A leaves the row in.
type Race struct {
	// Method is the exported Store method transaction B calls.
	Method string
	// State names what A does to the row (the state it leaves it in when
	// it commits).
	State string
	// Skips marks an entry point that passes over locked rows instead of
	// waiting for them: B must return while A holds the lock.
	Skips bool
	// Setup prepares a fresh row (in a schema the Race may share with
	// others: it must use ids of its own) and returns the round.
	Setup func(t *testing.T) Round
}

// Name is the subtest name of the race: Method/State.
func (r Race) Name() string { return r.Method + "/" + r.State }

// Round is one prepared race.
type Round struct {
	// Pool gives A, B and the harness's watcher their connections; it
	// needs three free connections.
	Pool *pgxpool.Pool
	// Hold is transaction A: it locks the row and changes it. The harness
	// commits or rolls back tx afterwards.
	Hold func(ctx context.Context, tx pgx.Tx) error
	// Call is transaction B: it calls the entry point on tx and returns
	// what it returned. The harness commits tx when err is nil and rolls
	// it back otherwise.
	Call func(ctx context.Context, tx pgx.Tx) (any, error)
	// Check checks B's result against the documentation for the row as
	// A left it (end). It may read the database.
	Check func(t *testing.T, end End, got any, err error)
}

// Run runs every race of the table twice, A committing and A rolling back,
// each as a parallel subtest Method/State/commit and
// Method/State/rollback.
func Run(t *testing.T, races []Race) {
	t.Helper()
	for _, r := range races {
		for _, end := range []End{Commit, Rollback} {
			t.Run(r.Name()+"/"+end.String(), func(t *testing.T) {
				t.Parallel()
				round := r.Setup(t)
				got, err := Play(t, r, round, end)
				round.Check(t, end, got, err)
			})
		}
	}
}

type outcome struct {
	got any
	err error
}

// Play runs the prepared round of race r with A ending as end and
// returns B's result, failing t when B does not wait for A (or, with
// Skips, does not pass A's row over) within [StepTimeout].
func Play(t *testing.T, r Race, round Round, end End) (any, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*StepTimeout)
	defer cancel()

	a, err := round.Pool.Begin(ctx)
	if err != nil {
		t.Fatalf("begin A: %v", err)
	}
	defer func() { _ = a.Rollback(context.WithoutCancel(ctx)) }()
	aPID := backendPID(t, ctx, a)
	if err := round.Hold(ctx, a); err != nil {
		t.Fatalf("A (hold): %v", err)
	}

	bPID := make(chan uint32, 1)
	done := make(chan outcome, 1)
	go func() {
		b, err := round.Pool.Begin(ctx)
		if err != nil {
			bPID <- 0
			done <- outcome{err: fmt.Errorf("begin B: %w", err)}
			return
		}
		var pid uint32
		if err := b.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			_ = b.Rollback(ctx)
			bPID <- 0
			done <- outcome{err: fmt.Errorf("B's backend pid: %w", err)}
			return
		}
		bPID <- pid
		got, err := round.Call(ctx, b)
		if err == nil {
			if cerr := b.Commit(ctx); cerr != nil {
				err = fmt.Errorf("commit B: %w", cerr)
			}
		} else {
			_ = b.Rollback(context.WithoutCancel(ctx))
		}
		done <- outcome{got, err}
	}()

	var pid uint32
	select {
	case pid = <-bPID:
	case <-time.After(StepTimeout):
		t.Fatalf("B did not start within %v", StepTimeout)
	}
	if pid == 0 {
		o := <-done
		t.Fatalf("B: %v", o.err)
	}

	if r.Skips {
		select {
		case o := <-done:
			endA(t, ctx, a, end)
			return o.got, o.err
		case <-time.After(StepTimeout):
			t.Fatalf("%s waited for A's lock for %v; it must pass locked rows over", r.Method, StepTimeout)
		}
	}
	if o, returned := waitBlocked(t, ctx, round.Pool, aPID, pid, done); returned {
		t.Fatalf("%s returned without waiting for A's lock (got %+v, err %v): the race did not happen", r.Method, o.got, o.err)
	}
	endA(t, ctx, a, end)
	select {
	case o := <-done:
		return o.got, o.err
	case <-time.After(StepTimeout):
		t.Fatalf("B (%s) still running %v after A's %s", r.Method, StepTimeout, end)
	}
	return nil, nil
}

func endA(t *testing.T, ctx context.Context, a pgx.Tx, end End) {
	t.Helper()
	var err error
	if end == Commit {
		err = a.Commit(ctx)
	} else {
		err = a.Rollback(ctx)
	}
	if err != nil {
		t.Fatalf("A's %s: %v", end, err)
	}
}

func backendPID(t *testing.T, ctx context.Context, tx pgx.Tx) uint32 {
	t.Helper()
	var pid uint32
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatalf("backend pid: %v", err)
	}
	return pid
}

// waitBlocked polls the server until backend a blocks backend b (a lock
// wait: pg_blocking_pids, which covers row locks and the transaction-id
// waits of a unique index), within StepTimeout. It returns B's outcome
// and true when B finished first. Polling the server is the signal here:
// B is inside a blocking statement and cannot report it itself.
func waitBlocked(t *testing.T, ctx context.Context, pool *pgxpool.Pool, a, b uint32, done chan outcome) (outcome, bool) {
	t.Helper()
	deadline := time.NewTimer(StepTimeout)
	defer deadline.Stop()
	var state string
	for {
		var blocked bool
		if err := pool.QueryRow(ctx, `SELECT $1::int = ANY (pg_blocking_pids($2::int)),
				coalesce((SELECT wait_event_type || ':' || wait_event || ' ' || state FROM pg_stat_activity WHERE pid = $2::int), 'gone')`,
			a, b).Scan(&blocked, &state); err != nil {
			t.Fatalf("watch B's lock wait: %v", err)
		}
		if blocked {
			return outcome{}, false
		}
		select {
		case o := <-done:
			return o, true
		case <-deadline.C:
			t.Fatalf("B is not waiting for A's lock after %v (B: %s)", StepTimeout, state)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Covered fails t unless every exported method of store's type appears
// either as the Method of a race in the table or as a key of unguarded
// (a method that guards nothing, with the reason as value), never in
// both, and every name in either is a method. Add a row to the table for
// a new guarded entry point, or the method with its reason to unguarded.
func Covered(t *testing.T, store any, races []Race, unguarded map[string]string) {
	t.Helper()
	for _, p := range Uncovered(store, races, unguarded) {
		t.Error(p)
	}
}

// Uncovered returns what [Covered] reports: one sentence per method of
// store's type missing from both the table and unguarded, or in both, and
// per name in either that is not a method.
func Uncovered(store any, races []Race, unguarded map[string]string) []string {
	typ := reflect.TypeOf(store)
	methods := map[string]bool{}
	for i := range typ.NumMethod() {
		methods[typ.Method(i).Name] = true
	}
	inTable := map[string]bool{}
	for _, r := range races {
		inTable[r.Method] = true
	}
	var problems []string
	for _, m := range sortedKeys(methods) {
		switch _, listed := unguarded[m]; {
		case inTable[m] && listed:
			problems = append(problems, fmt.Sprintf("%s.%s is both in the race table and listed as guarding nothing", typ, m))
		case !inTable[m] && !listed:
			problems = append(problems, fmt.Sprintf("%s.%s has no row in the race table: add its races (or, if it guards nothing, list it with the reason)", typ, m))
		}
	}
	for _, m := range sortedKeys(inTable) {
		if !methods[m] {
			problems = append(problems, fmt.Sprintf("the race table names %s, which is not a method of %s", m, typ))
		}
	}
	for _, m := range sortedKeys(unguarded) {
		if !methods[m] {
			problems = append(problems, fmt.Sprintf("the list of methods that guard nothing names %s, which is not a method of %s", m, typ))
		}
		if strings.TrimSpace(unguarded[m]) == "" {
			problems = append(problems, fmt.Sprintf("%s is listed as guarding nothing without a reason", m))
		}
	}
	return problems
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return slices.Clip(keys)
}
