package pgtx_test

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seckillkit/seckill/pgtx"
)

// FuzzErrorClassification feeds arbitrary SQLSTATE codes, messages,
// constraint names and wrapping depths to Classify and UniqueViolationOf
// and checks their invariants: a condition is true only for its own code; wrapping
// with %w (any depth, errors.Join, the error of too many attempts) never changes a result; an
// unknown commit outcome is never retryable and never "not committed".
func FuzzErrorClassification(f *testing.F) {
	for _, s := range []struct {
		code, msg, constraint string
		depth                 uint8
		unknown               bool
	}{
		{"40001", "could not serialize access", "", 0, false},
		{"40P01", "deadlock detected", "", 3, false},
		{"40001", "x", "", 1, true},
		{"23505", "duplicate key", "uq_orders_request", 2, false},
		{"55P03", "canceling statement due to lock timeout", "", 0, false},
		{"57014", "canceling statement due to statement timeout", "", 5, false},
		{"57014", "canceling statement due to user request", "", 0, false},
		{"40002", "", "", 0, false},
		{"40003", "", "", 0, true},
		{"", "", "", 0, false},
		{"4000", "statement timeout", "", 0, false},
		{"40p01", "", "", 0, false},
		{"'; DROP TABLE x; --", "\x00\xff", "\"q\"", 7, false},
	} {
		f.Add(s.code, s.msg, s.constraint, s.depth, s.unknown)
	}
	f.Fuzz(func(t *testing.T, code, msg, constraint string, depth uint8, unknown bool) {
		pgErr := &pgconn.PgError{Code: code, Message: msg, ConstraintName: constraint}
		var err error = pgErr
		if unknown {
			err = &pgtx.CommitError{Err: err, Unknown: true}
		}
		type result struct {
			retryable, serial, deadlock, unique, lock, stmt, outcome, notCommitted bool
			constraint                                                             string
		}
		classify := func(err error) result {
			c, u := pgtx.UniqueViolationOf(err)
			cl := pgtx.Classify(err)
			if n := btoi(cl.Committed) + btoi(cl.NotCommitted) + btoi(cl.OutcomeUnknown); n != 1 {
				t.Fatalf("Classify(%v) = %+v: %d outcomes, want exactly one", err, cl, n)
			}
			return result{cl.Retryable, cl.SerializationFailure, cl.Deadlock, u,
				cl.LockTimeout, cl.StatementTimeout, cl.OutcomeUnknown, cl.NotCommitted, c}
		}
		r := classify(err)
		switch {
		case r.retryable && code != "40001" && code != "40P01":
			t.Fatalf("Retryable true for code %q", code)
		case r.retryable && unknown, r.outcome != unknown, r.notCommitted == unknown:
			t.Fatalf("unknown=%v: retryable=%v outcome=%v notCommitted=%v", unknown, r.retryable, r.outcome, r.notCommitted)
		case !unknown && r.retryable != (code == "40001" || code == "40P01"):
			t.Fatalf("Retryable=%v for code %q", r.retryable, code)
		case r.serial != (code == "40001"), r.deadlock != (code == "40P01"), r.lock != (code == "55P03"):
			t.Fatalf("code %q: %+v", code, r)
		case r.unique != (code == "23505"), r.unique && r.constraint != constraint, !r.unique && r.constraint != "":
			t.Fatalf("code %q: UniqueViolation = %q, %v", code, r.constraint, r.unique)
		case r.stmt != (code == "57014"):
			t.Fatalf("StatementTimeout = %v for code %q, message %q (the message must not matter)", r.stmt, code, msg)
		}
		// Wrapping preserves every answer.
		wrapped := err
		for i := 0; i < int(depth%16); i++ {
			switch i % 3 {
			case 0:
				wrapped = fmt.Errorf("layer %d: %w", i, wrapped)
			case 1:
				wrapped = errors.Join(errors.New("other"), wrapped)
			case 2:
				wrapped = fmt.Errorf("%w (and %v)", wrapped, msg)
			}
		}
		if got := classify(wrapped); got != r {
			t.Fatalf("wrapped %d times: %+v, unwrapped %+v", depth%16, got, r)
		}
		// The error of too many attempts keeps the classification of its cause.
		if got := classify(pgtx.NewAttemptsError(2, err)); got != r {
			t.Fatalf("in the attempts error: %+v, want %+v", got, r)
		}
		// Nothing classifies nil or a plain error.
		for _, e := range []error{nil, errors.New(msg)} {
			if got := classify(e); got.retryable || got.unique || got.lock || got.stmt || got.outcome || got.serial || got.deadlock {
				t.Fatalf("classify(%v) = %+v", e, got)
			}
		}
		if cl := pgtx.Classify(nil); cl.NotCommitted || !cl.Committed {
			t.Fatalf("Classify(nil) = %+v, want Committed only", cl)
		}
	})
}

// FuzzBackoff checks Backoff's bounds for arbitrary arguments: with a
// non-negative base and cap, the wait is in [d/2, d] where d is
// min(base·2^(attempt-1), maxWait), never negative and never above maxWait —
// also when the doubling would overflow.
func FuzzBackoff(f *testing.F) {
	f.Add(1, int64(time.Millisecond), int64(time.Second))
	f.Add(5, int64(10*time.Millisecond), int64(time.Second))
	f.Add(0, int64(0), int64(0))
	f.Add(-3, int64(time.Millisecond), int64(time.Second))
	f.Add(1000, int64(time.Hour), int64(math.MaxInt64))
	f.Add(64, int64(1), int64(math.MaxInt64))
	f.Add(3, int64(time.Second), int64(time.Millisecond))
	f.Fuzz(func(t *testing.T, attempt int, base, maxWait int64) {
		if base < 0 || maxWait < 0 {
			return // rejected by Options validation (TestInvalidOptions)
		}
		attempt = attempt % 10000
		got := pgtx.Backoff(attempt, time.Duration(base), time.Duration(maxWait))
		// The expected cap, computed without overflow.
		d := base
		for i := 1; i < attempt && d < maxWait; i++ {
			if d > maxWait/2 {
				d = maxWait
				break
			}
			d *= 2
		}
		d = min(d, maxWait)
		lo := d / 2
		if d <= 1 {
			lo = d
		}
		if int64(got) < lo || int64(got) > d {
			t.Fatalf("Backoff(%d, %v, %v) = %v, want in [%v, %v]", attempt, time.Duration(base), time.Duration(maxWait), got, time.Duration(lo), time.Duration(d))
		}
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
