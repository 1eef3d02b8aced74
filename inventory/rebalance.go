package inventory

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// defaultRebalanceReason is the ledger reason of rebalance moves when the
// caller gives none.
const defaultRebalanceReason = "REBALANCE"

// RebalanceRequest asks [Store.Rebalance] to even out a SKU's buckets.
type RebalanceRequest struct {
	ActivityID int64 // > 0
	SKUID      int64 // > 0
	// Reason is the ledger reason, up to 64 characters.
	// Defaults to "REBALANCE".
	Reason string
	// Operator is recorded on the ADJUST rows, up to 128 characters.
	// Defaults to "seckill:rebalance" (a rebalance is usually run by
	// the service itself, not by a person).
	Operator string
	// ApprovalRef is recorded on the ADJUST rows, up to 128 characters.
	// Defaults to "rebalance:<MoveID>": a rebalance keeps the SKU's
	// available stock and needs no approval beyond its own move id.
	ApprovalRef string
}

// defaultRebalanceOperator is the operator of rebalance moves when the
// request names none.
const defaultRebalanceOperator = "seckill:rebalance"

// Rebalanced is the result of [Store.Rebalance].
type Rebalanced struct {
	// MoveID identifies this rebalance; the ADJUST rows' idempotency keys
	// are "ADJUST:<MoveID>:<bucket>".
	MoveID uuid.UUID
	// Available is the SKU's available stock, which the rebalance keeps.
	Available int64
	// Moved is the number of units that changed bucket (the sum of the
	// positive deltas).
	Moved int64
	// Moves lists the ADJUST ledger rows written, one per bucket that
	// changed, in bucket order: AvailableDelta (= TotalDelta) is added to
	// the bucket's available and total stock, negative for a donor bucket.
	// Empty when the buckets were already even.
	Moves []LedgerEntry
}

// Rebalance moves available stock between the buckets of one SKU so that
// their available stock is even again (differing by at most one unit),
// answering the cost of bucketing, partial sell-out (one bucket sold out
// while others still hold stock). It runs in the
// caller's transaction tx (Read Committed) and takes two statements:
//
//  1. SELECT … FOR UPDATE of every bucket of the SKU, in bucket_no order.
//     An allocation locks a single bucket and never waits for a second one,
//     and every rebalancer locks in the same order, so no deadlock is
//     possible. Allocations on the SKU wait until tx ends: commit promptly.
//  2. One statement that adds each bucket's delta to its available and
//     total stock and writes one ADJUST ledger row per changed bucket
//     (total_delta = available_delta = delta, allocated untouched), with
//     before/after counters.
//
// The amounts are computed from the counters read under the locks, so a
// rebalance never moves more than is available at that moment and never
// touches allocated stock: every bucket keeps total = available +
// allocated, the deltas sum to zero so the SKU total stays the planned
// stock, and allocations racing with it can neither oversell nor be lost.
// The target split gives the remainder to the buckets that already hold the
// most, to move as little as possible. Running it again on even buckets
// changes nothing (Moves empty), so it is safe to repeat.
//
// When a front door (Redis) keeps per-bucket stock too, it must apply the
// same moves, or the two stop reconciling bucket by bucket: emit
// Rebalanced.Moves in the same transaction (e.g. through the outbox) and
// apply them there idempotently, keyed by MoveID.
//
// An unknown SKU gives [ErrUnknownSKU]; bad input a *Error.
func (s *Store) Rebalance(ctx context.Context, tx pgx.Tx, req RebalanceRequest) (_ Rebalanced, err error) {
	defer s.fail.Explain(&err)
	if tx == nil {
		return Rebalanced{}, nilHandle("tx")
	}
	if err := req.validate(); err != nil {
		return Rebalanced{}, err
	}
	cur, err := s.lockBuckets(ctx, tx, req)
	if err != nil {
		return Rebalanced{}, err
	}
	moveID, err := uuid.NewV7()
	if err != nil {
		return Rebalanced{}, fmt.Errorf("inventory: rebalance: move id: %w", err)
	}
	out := Rebalanced{MoveID: moveID}
	targets := evenTargets(cur)
	var mv moves
	for i, b := range cur {
		out.Available += int64(b.avail)
		if d := targets[i] - b.avail; d != 0 {
			mv.nos, mv.deltas, mv.expect = append(mv.nos, b.no), append(mv.deltas, d), append(mv.expect, b.avail)
			if d > 0 {
				out.Moved += int64(d)
			}
		}
	}
	if len(mv.nos) == 0 {
		return out, nil
	}
	start := time.Now()
	if out.Moves, err = s.applyMoves(ctx, tx, req, moveID, mv); err != nil {
		return Rebalanced{}, err
	}
	s.log.InfoContext(ctx, "inventory: rebalanced", "activity_id", req.ActivityID, "sku_id", req.SKUID,
		"move_id", moveID, "moved", out.Moved, "buckets", len(out.Moves), "took", time.Since(start))
	return out, nil
}

// validate checks a rebalance request and fills its defaults.
func (req *RebalanceRequest) validate() error {
	switch {
	case req.ActivityID <= 0:
		return invalid("ActivityID", "must be positive")
	case req.SKUID <= 0:
		return invalid("SKUID", "must be positive")
	}
	if err := checkCode("Reason", req.Reason); err != nil {
		return err
	}
	for _, f := range []struct{ name, v string }{{"Operator", req.Operator}, {"ApprovalRef", req.ApprovalRef}} {
		if err := checkEvidence(f.name, f.v, false); err != nil {
			return err
		}
	}
	if req.Reason == "" {
		req.Reason = defaultRebalanceReason
	}
	if req.Operator == "" {
		req.Operator = defaultRebalanceOperator
	}
	return nil
}

// lockBuckets locks the SKU's buckets in bucket order and reads their
// available stock.
func (s *Store) lockBuckets(ctx context.Context, tx pgx.Tx, req RebalanceRequest) ([]bucketAvail, error) {
	rows, err := tx.Query(ctx, s.sql.lockBuckets, req.ActivityID, req.SKUID)
	if err != nil {
		return nil, fmt.Errorf("inventory: rebalance: lock buckets: %w", err)
	}
	cur, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (bucketAvail, error) {
		var b bucketAvail
		err := r.Scan(&b.no, &b.avail)
		return b, err
	})
	if err != nil {
		return nil, fmt.Errorf("inventory: rebalance: lock buckets: %w", err)
	}
	if len(cur) == 0 {
		return nil, fmt.Errorf("inventory: rebalance activity %d sku %d: %w", req.ActivityID, req.SKUID, ErrUnknownSKU)
	}
	return cur, nil
}

// moves are the buckets a rebalance changes: bucket numbers, the change of
// each one's available stock, and the available stock it was read with.
type moves struct {
	nos            []int16
	deltas, expect []int32
}

// applyMoves applies mv in one statement and returns its ADJUST ledger
// rows.
func (s *Store) applyMoves(ctx context.Context, tx pgx.Tx, req RebalanceRequest, moveID uuid.UUID, mv moves) ([]LedgerEntry, error) {
	approval := req.ApprovalRef
	if approval == "" {
		approval = "rebalance:" + moveID.String()
	}
	rows, err := tx.Query(ctx, s.sql.applyMoves, req.ActivityID, req.SKUID, mv.nos, mv.deltas, mv.expect, moveID.String(),
		req.Reason, req.Operator, approval)
	if err != nil {
		return nil, fmt.Errorf("inventory: rebalance: apply moves: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (LedgerEntry, error) {
		m := LedgerEntry{Type: "ADJUST", ActivityID: req.ActivityID, SKUID: req.SKUID, Reason: req.Reason,
			Operator: req.Operator, ApprovalRef: approval}
		err := r.Scan(&m.Bucket, &m.AvailableDelta, &m.BeforeAvailable, &m.AfterAvailable, &m.LedgerID,
			&m.IdempotencyKey, &m.BeforeAllocated, &m.CreatedAt)
		m.TotalDelta, m.AfterAllocated = m.AvailableDelta, m.BeforeAllocated
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("inventory: rebalance: apply moves: %w", err)
	}
	if len(out) != len(mv.nos) {
		// Unreachable while the buckets are locked by tx; the partial
		// update must not be committed.
		return nil, fmt.Errorf("inventory: rebalance: %d of %d buckets changed under the lock: %w",
			len(out), len(mv.nos), ErrInconsistent)
	}
	return out, nil
}

type bucketAvail struct {
	no    int16
	avail int32
}

// evenTargets returns, per bucket of cur, the available stock after an even
// split of the total: total/n each, plus one for the total%n buckets that
// hold the most now (ties to the lower bucket number).
func evenTargets(cur []bucketAvail) []int32 {
	var total int64
	for _, b := range cur {
		total += int64(b.avail)
	}
	n := int64(len(cur))
	base, rem := int32(total/n), int(total%n)
	order := make([]int, len(cur))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(x, y int) bool { return cur[order[x]].avail > cur[order[y]].avail })
	targets := make([]int32, len(cur))
	for rank, i := range order {
		targets[i] = base
		if rank < rem {
			targets[i]++
		}
	}
	return targets
}
