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

const lockBucketsSQL = `
SELECT bucket_no, available_stock
  FROM {schema}.sku_inventory
 WHERE activity_id = $1 AND sku_id = $2
 ORDER BY bucket_no
   FOR UPDATE`

// applyMovesSQL applies the computed deltas to the locked buckets and writes
// one ADJUST ledger row per bucket. The expected_available guard re-checks
// that each bucket is what was read under the lock (it always is; a
// mismatch means the lock was not held and fails the call).
const applyMovesSQL = `
WITH m AS (
	SELECT * FROM unnest($3::smallint[], $4::int[], $5::int[]) AS m (bucket_no, delta, expected_available)
), upd AS (
	UPDATE {schema}.sku_inventory AS s
	   SET available_stock = s.available_stock + m.delta,
	       total_stock = s.total_stock + m.delta,
	       version = s.version + 1,
	       updated_at = statement_timestamp()
	  FROM m
	 WHERE s.activity_id = $1 AND s.sku_id = $2 AND s.bucket_no = m.bucket_no
	   AND s.available_stock = m.expected_available
	   AND s.available_stock + m.delta >= 0
	RETURNING s.bucket_no, m.delta, s.available_stock - m.delta AS before_available,
	          s.available_stock AS after_available, s.allocated_stock
), led AS (
	INSERT INTO {schema}.inventory_ledger (
		idempotency_key, activity_id, sku_id, inventory_bucket, ledger_type,
		total_delta, available_delta, allocated_delta,
		before_available, after_available, before_allocated, after_allocated, reason, operator, approval_ref)
	SELECT 'ADJUST:' || $6::text || ':' || u.bucket_no, $1, $2, u.bucket_no, 30,
	       u.delta, u.delta, 0,
	       u.before_available, u.after_available, u.allocated_stock, u.allocated_stock, $7, $8, $9
	  FROM upd AS u
	RETURNING inventory_bucket, ledger_id, idempotency_key, created_at
)
SELECT u.bucket_no, u.delta, u.before_available, u.after_available, l.ledger_id,
       l.idempotency_key, u.allocated_stock, l.created_at
  FROM upd AS u
  JOIN led AS l ON l.inventory_bucket = u.bucket_no
 ORDER BY u.bucket_no`

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
	switch {
	case req.ActivityID <= 0:
		return Rebalanced{}, invalid("ActivityID", "must be positive")
	case req.SKUID <= 0:
		return Rebalanced{}, invalid("SKUID", "must be positive")
	}
	if err := checkCode("Reason", req.Reason); err != nil {
		return Rebalanced{}, err
	}
	for _, f := range []struct{ name, v string }{{"Operator", req.Operator}, {"ApprovalRef", req.ApprovalRef}} {
		if err := checkEvidence(f.name, f.v, false); err != nil {
			return Rebalanced{}, err
		}
	}
	reason := req.Reason
	if reason == "" {
		reason = defaultRebalanceReason
	}
	operator := req.Operator
	if operator == "" {
		operator = defaultRebalanceOperator
	}
	rows, err := tx.Query(ctx, s.sql.lockBuckets, req.ActivityID, req.SKUID)
	if err != nil {
		return Rebalanced{}, fmt.Errorf("inventory: rebalance: lock buckets: %w", err)
	}
	var cur []bucketAvail
	for rows.Next() {
		var b bucketAvail
		if err := rows.Scan(&b.no, &b.avail); err != nil {
			rows.Close()
			return Rebalanced{}, fmt.Errorf("inventory: rebalance: lock buckets: %w", err)
		}
		cur = append(cur, b)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return Rebalanced{}, fmt.Errorf("inventory: rebalance: lock buckets: %w", err)
	}
	if len(cur) == 0 {
		return Rebalanced{}, fmt.Errorf("inventory: rebalance activity %d sku %d: %w", req.ActivityID, req.SKUID, ErrUnknownSKU)
	}

	moveID, err := uuid.NewV7()
	if err != nil {
		return Rebalanced{}, fmt.Errorf("inventory: rebalance: move id: %w", err)
	}
	out := Rebalanced{MoveID: moveID}
	targets := evenTargets(cur)
	var (
		nos            []int16
		deltas, expect []int32
	)
	for i, b := range cur {
		out.Available += int64(b.avail)
		if d := targets[i] - b.avail; d != 0 {
			nos, deltas, expect = append(nos, b.no), append(deltas, d), append(expect, b.avail)
			if d > 0 {
				out.Moved += int64(d)
			}
		}
	}
	if len(nos) == 0 {
		return out, nil
	}

	start := time.Now()
	approval := req.ApprovalRef
	if approval == "" {
		approval = "rebalance:" + moveID.String()
	}
	rows, err = tx.Query(ctx, s.sql.applyMoves, req.ActivityID, req.SKUID, nos, deltas, expect, moveID.String(), reason, operator, approval)
	if err != nil {
		return Rebalanced{}, fmt.Errorf("inventory: rebalance: apply moves: %w", err)
	}
	for rows.Next() {
		m := LedgerEntry{Type: "ADJUST", ActivityID: req.ActivityID, SKUID: req.SKUID, Reason: reason,
			Operator: operator, ApprovalRef: approval}
		if err := rows.Scan(&m.Bucket, &m.AvailableDelta, &m.BeforeAvailable, &m.AfterAvailable, &m.LedgerID,
			&m.IdempotencyKey, &m.BeforeAllocated, &m.CreatedAt); err != nil {
			rows.Close()
			return Rebalanced{}, fmt.Errorf("inventory: rebalance: apply moves: %w", err)
		}
		m.TotalDelta, m.AfterAllocated = m.AvailableDelta, m.BeforeAllocated
		out.Moves = append(out.Moves, m)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return Rebalanced{}, fmt.Errorf("inventory: rebalance: apply moves: %w", err)
	}
	if len(out.Moves) != len(nos) {
		// Unreachable while the buckets are locked by tx; the partial
		// update must not be committed.
		return Rebalanced{}, fmt.Errorf("inventory: rebalance: %d of %d buckets changed under the lock: %w",
			len(out.Moves), len(nos), ErrInconsistent)
	}
	s.log.InfoContext(ctx, "inventory: rebalanced", "activity_id", req.ActivityID, "sku_id", req.SKUID,
		"move_id", moveID, "moved", out.Moved, "buckets", len(out.Moves), "took", time.Since(start))
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
