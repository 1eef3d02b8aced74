package inventory

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/pgtx"
)

// The invariants [Store.Audit] checks, as the Kind of a [Finding].
const (
	findingBucketConservation    = "bucket_conservation"
	findingNegative              = "negative_counter"
	findingSKUTotal              = "sku_total"
	findingBucketCount           = "bucket_count"
	findingReplayAvailable       = "ledger_replay_available"
	findingReplayAllocated       = "ledger_replay_allocated"
	findingReplayTotal           = "ledger_replay_total"
	findingDuplicateAllocate     = "duplicate_allocate"
	findingDuplicateRelease      = "duplicate_release"
	findingOrphanRelease         = "release_without_allocate"
	findingReleaseMismatch       = "release_mismatch"
	findingMissingAllocate       = "reservation_without_allocate"
	findingMissingRelease        = "reservation_without_release"
	findingLeakedAllocation      = "leaked_allocation"
	findingAdjustWithoutEvidence = "adjust_without_evidence"
	findingTokenClaim            = "token_claim"
)

// Finding is one broken invariant. Fields that do not apply to its Kind are
// zero (Bucket is -1 then). Kind names the invariant:
//
//   - "bucket_conservation": a bucket's total is not available + allocated
//     (Expected: available + allocated, Actual: total).
//   - "negative_counter": a bucket counter is negative (Actual: the smallest).
//   - "sku_total": the buckets' totals do not add up to the planned stock
//     (Expected: planned, Actual: sum of totals).
//   - "bucket_count": the bucket rows do not match the provisioned bucket
//     count (Expected: bucket_count, Actual: rows found), or a bucket number
//     is out of range (Bucket set, Expected: bucket_count).
//   - "ledger_replay_available", "ledger_replay_allocated",
//     "ledger_replay_total": summing the ledger's deltas for a bucket does
//     not reproduce its counter (Expected: the replayed value, Actual: the
//     counter).
//   - "duplicate_allocate", "duplicate_release": a reservation has more than
//     one ALLOCATE (RELEASE) row (Actual: the count).
//   - "release_without_allocate": a RELEASE row has no ALLOCATE row.
//   - "release_mismatch": a RELEASE gives back another quantity, or to
//     another bucket, than its ALLOCATE took (Expected: allocated quantity,
//     Actual: released quantity).
//   - "reservation_without_allocate": an ORDERED, RELEASE_PENDING or
//     RELEASED reservation has no ALLOCATE row.
//   - "reservation_without_release": a RELEASED reservation has no RELEASE row.
//   - "leaked_allocation": a PENDING_DB, REJECTED or EXPIRED reservation
//     holds stock (ALLOCATE without RELEASE).
//   - "adjust_without_evidence": an ADJUST row has no operator or no
//     approval reference (rows written before migration 005; Bucket set,
//     Actual: the row's total delta).
//   - "token_claim": the tokens a reservation holds do not match its
//     ledger (a token SKU; Bucket 0, Expected: the ALLOCATE row's quantity
//     while there is no RELEASE row, else 0; Actual: the tokens held).
//
// A token SKU ([SKU].Tokens) is checked as one bucket, bucket 0, whose
// total, available and allocated stock are its token count, its free and
// its claimed tokens.
type Finding struct {
	Kind          string    // the invariant (see above); it says what Expected and Actual hold
	ActivityID    int64     // the SKU's activity (always set)
	SKUID         int64     // the SKU (always set)
	Bucket        int       // -1 when the finding is not about one bucket
	ReservationID uuid.UUID // uuid.Nil when the finding is not about one reservation
	Expected      int64     // what the invariant requires (see Kind)
	Actual        int64     // what the database holds (see Kind)
}

// Audit checks the inventory invariants of one SKU and returns every
// violation as a [Finding]; none means the SKU is consistent:
//
//   - each bucket: total = available + allocated, all counters >= 0;
//   - the SKU: bucket totals add up to the planned stock, and the bucket
//     rows are exactly 0 .. bucket_count-1;
//   - the ledger: replaying its deltas reproduces every bucket's available,
//     allocated and total stock;
//   - per reservation: at most one ALLOCATE and one RELEASE, every RELEASE
//     pairs with an ALLOCATE of the same bucket and quantity; ORDERED,
//     RELEASE_PENDING and RELEASED reservations have their ALLOCATE,
//     RELEASED ones also their RELEASE, and PENDING_DB/REJECTED/EXPIRED ones hold no stock;
//   - a token SKU: each reservation holds exactly the tokens its ledger
//     says (its ALLOCATE quantity until its RELEASE, then none), and no
//     token is held by a reservation without them.
//
// activityID 0 audits every SKU of the schema, skuID 0 every SKU of the
// activity (skuID must be 0 when activityID is).
//
// It runs as one read-only statement, hence on one snapshot: the
// findings are consistent with each other even while allocations,
// releases and rebalances commit: none comes from reading two moments. It
// writes nothing. To read one snapshot across several
// audits (this one, order.Store.Audit, the caller's own counts), pass
// them all the same read-only Repeatable Read transaction
// (pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly});
// on a pool or a Read Committed transaction each audit reads its own
// moment.
//
// It replays the whole ledger of the SKUs it checks: its cost grows with
// the history. During a sale use [Store.AuditIncremental], which replays
// only the rows after the last [Store.Checkpoint]; keep Audit for audits
// at rest (after the sale, or now and then off-peak): it is the only one
// that checks every reservation and every ledger row.
func (s *Store) Audit(ctx context.Context, db pgtx.Querier, activityID, skuID int64) (_ []Finding, err error) {
	defer s.fail.Explain(&err)
	act, sku, err := auditScope(db, activityID, skuID)
	if err != nil {
		return nil, err
	}
	return s.audit(ctx, db, s.sql.audit, act, sku)
}

// auditScope checks the arguments of an audit and returns the activity and
// SKU as the statement takes them (NULL for every one).
func auditScope(db pgtx.Querier, activityID, skuID int64) (act, sku *int64, err error) {
	if db == nil {
		return nil, nil, nilHandle("db")
	}
	if activityID < 0 {
		return nil, nil, invalid("activityID", "must not be negative")
	}
	if skuID < 0 {
		return nil, nil, invalid("skuID", "must not be negative")
	}
	if activityID == 0 && skuID != 0 {
		return nil, nil, invalid("skuID", "must be 0 when activityID is 0")
	}
	if activityID > 0 {
		act = &activityID
	}
	if skuID > 0 {
		sku = &skuID
	}
	return act, sku, nil
}

func (s *Store) audit(ctx context.Context, db pgtx.Querier, query string, activityID, skuID *int64) ([]Finding, error) {
	rows, err := db.Query(ctx, query, activityID, skuID)
	if err != nil {
		return nil, fmt.Errorf("inventory: audit: %w", err)
	}
	defer rows.Close()
	var out []Finding
	for rows.Next() {
		var (
			f      Finding
			kind   string
			bucket *int32
			res    *uuid.UUID
		)
		if err := rows.Scan(&kind, &f.ActivityID, &f.SKUID, &bucket, &res, &f.Expected, &f.Actual); err != nil {
			return nil, fmt.Errorf("inventory: audit: %w", err)
		}
		f.Kind, f.Bucket = kind, -1
		if bucket != nil {
			f.Bucket = int(*bucket)
		}
		if res != nil {
			f.ReservationID = *res
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inventory: audit: %w", err)
	}
	return out, nil
}

// LedgerEntry is one row of inventory_ledger.
type LedgerEntry struct {
	// LedgerID is ledger_id, an identity: increasing in insertion order,
	// with gaps (rolled-back inserts) that mean nothing.
	LedgerID int64
	// IdempotencyKey is unique across the ledger: "ALLOCATE:<reservation
	// id>", "RELEASE:<reservation id>", "ADJUST:MANUAL:<activity>:<sku>:<approval
	// ref>:<bucket>" for a manual adjustment (before inventory migration
	// 013, "ADJUST:MANUAL:<approval ref>:<bucket>"), "ADJUST:<move id>:<bucket>"
	// for a rebalance move, and "PROVISION:<activity>:<sku>:<bucket>".
	IdempotencyKey  string
	Type            string    // ledger_type: "ALLOCATE", "RELEASE", "ADJUST" or "PROVISION"
	ReservationID   uuid.UUID // uuid.Nil for PROVISION and ADJUST
	OrderID         int64     // 0 when none
	SourceMessageID uuid.UUID // uuid.Nil for PROVISION and ADJUST
	ActivityID      int64     // the SKU's activity
	SKUID           int64     // the SKU
	UserID          int64     // 0 for PROVISION and ADJUST
	Bucket          int16     // inventory_bucket: the bucket whose counters changed
	// TotalDelta, AvailableDelta and AllocatedDelta are the changes of the
	// bucket's counters, TotalDelta = AvailableDelta + AllocatedDelta:
	// ALLOCATE moves the reservation's quantity from available to
	// allocated (TotalDelta 0), RELEASE moves it back, ADJUST and
	// PROVISION change available and total alike. Summed per bucket over
	// the whole ledger they give the bucket's counters.
	TotalDelta     int32
	AvailableDelta int32 // see TotalDelta
	AllocatedDelta int32 // see TotalDelta
	// BeforeAvailable, AfterAvailable, BeforeAllocated and AfterAllocated
	// are the bucket's counters just before and just after this row's
	// change (After = Before + delta, never negative).
	BeforeAvailable int32
	AfterAvailable  int32     // see BeforeAvailable
	BeforeAllocated int32     // see BeforeAvailable
	AfterAllocated  int32     // see BeforeAvailable
	Reason          string    // reason, at most 64 characters, e.g. "ORDER_CREATED"
	CreatedAt       time.Time // created_at: the server time of the statement that wrote the row
	// Operator and ApprovalRef are the evidence of an ADJUST row (who,
	// under which approval); "" for other rows and for ADJUST rows written
	// before migration 005.
	Operator, ApprovalRef string
}

// ReservationLedger reads a reservation's ledger rows (its ALLOCATE and
// RELEASE) in ledger order. An unknown reservation gives an empty slice.
func (s *Store) ReservationLedger(ctx context.Context, db pgtx.Querier, reservationID uuid.UUID) (_ []LedgerEntry, err error) {
	defer s.fail.Explain(&err)
	if db == nil {
		return nil, nilHandle("db")
	}
	rows, err := db.Query(ctx, s.sql.ledgerByReservation, reservationID)
	if err != nil {
		return nil, fmt.Errorf("inventory: read ledger: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (LedgerEntry, error) {
		var (
			e        LedgerEntry
			res, msg *uuid.UUID
		)
		err := row.Scan(&e.LedgerID, &e.IdempotencyKey, ledgerTypeName{&e.Type}, &res, &e.OrderID, &msg,
			&e.ActivityID, &e.SKUID, &e.UserID, &e.Bucket, &e.TotalDelta, &e.AvailableDelta, &e.AllocatedDelta,
			&e.BeforeAvailable, &e.AfterAvailable, &e.BeforeAllocated, &e.AfterAllocated, &e.Reason, &e.CreatedAt,
			&e.Operator, &e.ApprovalRef)
		if res != nil {
			e.ReservationID = *res
		}
		if msg != nil {
			e.SourceMessageID = *msg
		}
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("inventory: read ledger: %w", err)
	}
	return out, nil
}
