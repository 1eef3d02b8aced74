package inventory

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/pgtx"
)

// Checkpoint moves the audit checkpoint forward: it adds the deltas of the
// ledger rows written since the last checkpoint to the checkpoint's sums
// per bucket and moves the watermark (a ledger id) past them, so that
// [Store.AuditIncremental] replays only the rows after it. It returns the
// watermark in force when it returns: every ledger row at or below it is
// in the sums.
//
// Ledger ids are taken in order, but rows become visible in commit order:
// a transaction that took id 100 may commit after the one that took 101.
// A watermark moved past 101 while 100 is undecided would leave row 100
// out of the sums and out of every later incremental replay. So the
// watermark moves only past ids that are decided, committed or rolled
// back, and Checkpoint establishes that as follows:
//
//  1. One statement reads the highest ledger id its snapshot sees (the
//     candidate) and then, from pg_locks, the transactions holding a ROW
//     EXCLUSIVE lock on the ledger. Every id at or below the candidate was
//     taken before that snapshot, by an INSERT that locked the ledger in
//     that mode (held to its transaction's end) before taking the id. Such
//     a transaction is therefore either still listed when pg_locks is read
//     (after the snapshot), or has already ended. A vacuum of the ledger
//     holds another mode and is not waited for.
//  2. Checkpoint waits until none of the listed transactions holds its lock
//     any more (polling pg_locks; writers are never blocked).
//  3. A new statement, whose snapshot is taken after the wait, sees every
//     ledger row at or below the candidate that will ever commit, sums the
//     rows between the old watermark and the candidate, and moves the
//     watermark with a compare-and-set in the same statement. Of two
//     concurrent Checkpoints the first to commit wins; the other changes
//     nothing and returns the watermark it started from.
//
// The rule assumes ledger ids come from the identity in order: its
// sequence must cache one id at a time (the migration's default; a larger
// CACHE hands each session a range, out of order, and Checkpoint refuses
// it), no row is inserted with an id of its own (OVERRIDING SYSTEM VALUE
// below the watermark is out of its reach), and no ledger row is deleted
// while the checkpoint holds its sums. With Config.Citus it refuses: the
// coordinator's pg_locks does not show the writers on the node that holds
// the schema, and AuditIncremental then replays the whole ledger.
//
// db must run each statement in a snapshot of its own: a pool or a
// connection outside a transaction (or a Read Committed transaction that
// has not written to the ledger). A Repeatable Read or Serializable
// transaction is refused with an error, as its one snapshot would not see
// what committed during the wait. A transaction that never ends (idle in
// transaction after a ledger insert) holds the checkpoint back: Checkpoint
// then returns ctx's error when ctx ends, and the watermark stays where it
// was, still correct. Give it a deadline. It writes one row of the
// watermark and one row per bucket with new ledger rows.
func (s *Store) Checkpoint(ctx context.Context, db pgtx.Querier) (_ int64, err error) {
	defer s.fail.Explain(&err)
	if db == nil {
		return 0, nilHandle("db")
	}
	if s.citus {
		return 0, errors.New("inventory: checkpoint: not with Config.Citus: the coordinator's pg_locks does not show the ledger's writers on the node that holds the schema")
	}
	ledger := pgx.Identifier{s.schema, "inventory_ledger"}.Sanitize()
	var (
		from, through, cache int64
		iso                  string
		holders              []string
	)
	if err := db.QueryRow(ctx, s.sql.checkpointCandidate, ledger).Scan(&from, &through, &iso, &cache, &holders); err != nil {
		return 0, fmt.Errorf("inventory: checkpoint: %w", err)
	}
	if iso != "read committed" {
		return 0, fmt.Errorf("inventory: checkpoint: needs a snapshot per statement (a pool, or Read Committed), got %s", iso)
	}
	if cache != 1 {
		return 0, fmt.Errorf("inventory: checkpoint: the ledger_id sequence caches %d ids per session, which hands them out of order: set its CACHE back to 1 (the migration's)", cache)
	}
	if through <= from {
		return from, nil
	}
	if err := s.waitLedgerWriters(ctx, db, ledger, holders); err != nil {
		return from, err
	}
	var moved *int64
	var buckets int64
	if err := db.QueryRow(ctx, s.sql.checkpointAdvance, from, through).Scan(&moved, &buckets); err != nil {
		return from, fmt.Errorf("inventory: checkpoint: %w", err)
	}
	if moved == nil {
		return from, nil
	}
	return *moved, nil
}

// waitLedgerWriters polls pg_locks until none of holders (virtual
// transaction ids) holds a lock on the ledger, or ctx ends.
func (s *Store) waitLedgerWriters(ctx context.Context, db pgtx.Querier, ledger string, holders []string) error {
	delay := time.Millisecond
	for len(holders) > 0 {
		var n int64
		if err := db.QueryRow(ctx, s.sql.checkpointPending, ledger, holders).Scan(&n); err != nil {
			return fmt.Errorf("inventory: checkpoint: waiting for ledger writers: %w", err)
		}
		if n == 0 {
			return nil
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("inventory: checkpoint: %d transactions writing the ledger did not end: %w", n, ctx.Err())
		case <-t.C:
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
	return nil
}

// AuditIncremental is [Store.Audit] for use during a sale: its cost
// follows the ledger rows written since the last [Store.Checkpoint], not
// the history. It takes the same arguments, returns the same kinds of
// [Finding] and runs as one read-only statement (one snapshot). Which
// checks are complete:
//
//   - every bucket and SKU check (conservation, negative counters, SKU
//     totals, bucket rows) reads every bucket, as Audit does;
//   - the ledger replay is exact: the checkpoint's sums plus the ledger
//     rows after its watermark (a range of the primary key) are the whole
//     ledger's sums, so a bucket whose counters the ledger does not
//     reproduce is found however old the cause;
//   - the per-reservation checks (duplicate_allocate, duplicate_release,
//     release_without_allocate, release_mismatch,
//     reservation_without_allocate, reservation_without_release,
//     leaked_allocation) cover the reservations with a ledger row after
//     the watermark, reading all their ledger rows; adjust_without_evidence
//     covers the rows after it.
//
// At rest only (run Audit for them): reservations without a ledger row
// after the watermark, such as one whose status changed without touching
// the ledger (a leak on a reservation allocated before the watermark), and
// ADJUST rows at or below it. Without a checkpoint (watermark 0) it
// replays the whole ledger, like Audit.
func (s *Store) AuditIncremental(ctx context.Context, db pgtx.Querier, activityID, skuID int64) (_ []Finding, err error) {
	defer s.fail.Explain(&err)
	act, sku, err := auditScope(db, activityID, skuID)
	if err != nil {
		return nil, err
	}
	return s.audit(ctx, db, s.sql.auditIncremental, act, sku)
}
