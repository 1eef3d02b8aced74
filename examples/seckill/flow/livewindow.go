package flow

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// liveMargin is taken off the live audit's next watermark: the time a
// transaction takes between reading its start time and showing it in
// pg_stat_activity is far below it.
const liveMargin = time.Second

// liveWindow is where the live audit starts: it checks the rows changed
// since its last passing run, not the sale's history. Copies of a Service
// share it; one live audit runs at a time.
//
// The orders, reservations and payments a live audit checks are those
// whose updated_at is at or after since (every statement that writes them
// sets it to the statement's start; BRIN indexes read them), and the
// ledger rows above ledgerFrom. Each passing live audit moves since to the
// moment it read before its snapshot: the earliest start of a transaction
// then running in the database (or the clock, if none ran), less
// liveMargin. A transaction that wrote a row stamped before that moment
// had ended before the audit's snapshot was taken, so the audit saw the
// row: every change is checked by the first live audit after it commits,
// however late it commits. A live audit that fails, or ends in an error,
// leaves the window where it was: the next one checks the same changes and
// fails the same way until they are repaired. ledgerFrom moves to the
// inventory checkpoint's watermark, below which every ledger row is
// committed and was visible to the audit's snapshot.
//
// With since zero (the first live audit of a process, a role that cannot
// read other sessions' transaction starts, or Citus, whose writes run on
// other nodes) the live audit reads the whole history, as at rest.
type liveWindow struct {
	mu         sync.Mutex
	since      time.Time
	ledgerFrom int64
	// whole says why since stays zero ("" when it can move).
	whole string
}

// nextWatermark reads, before the audit's snapshot, the moment before
// which every change is visible to a snapshot taken after this call: the
// earliest start of a transaction running in this database (other than
// this session's) or the clock, less liveMargin. ok is false, with the
// reason, when the role cannot read other sessions' transaction starts
// (it needs pg_read_all_stats or superuser: pg_stat_activity shows
// them NULL otherwise).
func (s *Service) nextWatermark(ctx context.Context) (next time.Time, ok bool, why string, err error) {
	var allowed bool
	err = s.Pool.QueryRow(ctx, `SELECT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
			OR pg_has_role(current_user, 'pg_read_all_stats', 'MEMBER'),
		least(statement_timestamp(), (SELECT min(xact_start) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid())) - make_interval(secs => $1)`,
		liveMargin.Seconds()).Scan(&allowed, &next)
	if err != nil {
		return time.Time{}, false, "", fmt.Errorf("flow: live audit watermark: %w", err)
	}
	if !allowed {
		return time.Time{}, false, "the role cannot read other sessions' transaction starts (grant it pg_read_all_stats)", nil
	}
	return next, true, "", nil
}

// scope describes the window in a check's detail.
func (w auditWindow) scope() string {
	if w.since.IsZero() {
		return ""
	}
	return fmt.Sprintf(" (live: rows changed since %s)", w.since.UTC().Format(time.RFC3339Nano))
}

// auditWindow is what one audit reads: everything (since zero) or the
// rows changed at or after since and the ledger rows above ledgerFrom.
type auditWindow struct {
	since      time.Time
	ledgerFrom int64
}
