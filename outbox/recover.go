package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/pgtx"
)

// Recovered is one event whose expired lease was recovered.
type Recovered struct {
	EventID  uuid.UUID // the event whose lease expired
	LockedBy string    // the owner whose lease expired
	Status   Status    // StatusRetry, or StatusDead when its attempts ran out
}

// Recover returns events whose lease (locked_at) is older than expiry to
// RETRY, available at once, counting the lost attempt (DEAD when attempts
// ran out), with last_error SEND_LEASE_EXPIRED: up to limit events of every
// expired claim when of is the zero Lease, or only the events still SENDING
// under exactly of (owner and claim time) — a supervisor that knows a relay
// died recovers just that relay's claim. It is a compare-and-set on status,
// owner and claim time: a row marked SENT, failed, released or claimed
// again in the meantime is never touched, and a row being marked right now
// is skipped (SKIP LOCKED). Returns what it recovered (empty: nothing had
// expired). Invalid input (expiry or limit not positive, of half set)
// returns a *[Error] matching [ErrInvalidArgument] and sends nothing.
func (s *Store) Recover(ctx context.Context, db pgtx.Querier, of Lease, expiry time.Duration, limit int) (_ []Recovered, err error) {
	defer s.fail.Explain(&err)
	if db == nil {
		return nil, nilHandle("db")
	}
	if of != (Lease{}) {
		if err := checkLease(of); err != nil {
			return nil, err
		}
	}
	if expiry <= 0 {
		return nil, invalid("expiry", "must be positive, got %v", expiry)
	}
	if limit <= 0 || limit > 1<<31-1 {
		return nil, invalid("limit", "must be positive, got %d", limit)
	}
	if of == (Lease{}) {
		return s.recover(ctx, db, s.recoverSQL, expiry.Microseconds(), limit)
	}
	return s.recover(ctx, db, s.recoverSpec, expiry.Microseconds(), limit, of.Owner, of.LockedAt)
}

func (s *Store) recover(ctx context.Context, db pgtx.Querier, sql string, args ...any) ([]Recovered, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("outbox: recover leases: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Recovered, error) {
		var r Recovered
		var st int16
		err := row.Scan(&r.EventID, &r.LockedBy, &st)
		r.Status = Status(st)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: recover leases: %w", err)
	}
	return out, nil
}
