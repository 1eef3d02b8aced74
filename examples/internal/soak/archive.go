package soak

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/examples/seckill/flow"
)

// The archive form of the soak (Config.Archive): the retention jobs move
// the inbox rows and the SENT events to their history tables
// (inbox.Store.Archive, outbox.Store.ArchiveSent) instead of deleting
// them, and Config.Backlog preloads a history of that many rows to move.

// backlogChunk is the rows one preload statement writes.
const backlogChunk = 100_000

// preloadEventSQL writes SENT events $1..$2 of a past sale, sent 30 days
// ago: the history an outbox holds when its retention job has not run.
// Their ids grow with g, as the outbox's time-ordered (UUIDv7) ids do, and
// below every real one: the history lies in the table in id order, as it
// would have been written.
const preloadEventSQL = `INSERT INTO %[1]s.event_outbox (
	event_id, dedup_key, aggregate_type, aggregate_id, topic, tag, message_key, schema_version, payload,
	status, available_at, sent_at, created_at, updated_at)
SELECT lpad(to_hex(g), 32, '0')::uuid, 'SOAK_HISTORY:' || g, 'ORDER', g::text, 'SOAK_HISTORY', 'SOAK_HISTORY', g::text, 1,
       jsonb_build_object('order_id', g, 'sku', 'history'),
       20, now() - interval '30 days', now() - interval '30 days', now() - interval '30 days', now() - interval '30 days'
FROM generate_series($1::int8, $2::int8) AS g`

// preloadInboxSQL writes processed inbox rows $1..$2 of a past sale.
const preloadInboxSQL = `INSERT INTO %[1]s.consumer_inbox (
	consumer_group, message_id, topic, tag, ref, status, result_code, result_payload, created_at, processed_at)
SELECT 'soak-history', lpad(to_hex(g), 32, '0')::uuid, 'SOAK_HISTORY', 'SOAK_HISTORY', g::text, 20, 'OK', jsonb_build_object('order_id', g),
       now() - interval '30 days', now() - interval '30 days'
FROM generate_series($1::int8, $2::int8) AS g`

// preload writes cfg.Backlog rows of history, half SENT events and half
// processed inbox rows, backlogChunk rows a statement.
func preload(ctx context.Context, cfg Config) error {
	s := pgx.Identifier{cfg.Schema}.Sanitize()
	events := cfg.Backlog / 2
	for _, part := range []struct {
		sql  string
		rows int64
	}{{fmt.Sprintf(preloadEventSQL, s), events}, {fmt.Sprintf(preloadInboxSQL, s), cfg.Backlog - events}} {
		for from := int64(1); from <= part.rows; from += backlogChunk {
			if _, err := cfg.Pool.Exec(ctx, part.sql, from, min(from+backlogChunk-1, part.rows)); err != nil {
				return fmt.Errorf("preload the history: %w", err)
			}
		}
	}
	_, err := cfg.Pool.Exec(ctx, fmt.Sprintf(`ANALYZE %[1]s.event_outbox; ANALYZE %[1]s.consumer_inbox`, s))
	return err
}

// archive is the archive form's retention: everything processed or sent
// before cut moves to the history tables. It fills the sample's Archived,
// RetentionWAL and RetentionTime.
func archive(ctx context.Context, cfg Config, svc *flow.Service, cut time.Time, s *Sample) error {
	var lsn0 string
	if err := cfg.Pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn0); err != nil {
		return err
	}
	t0 := time.Now()
	n, err := svc.Outbox.ArchiveSent(ctx, cfg.Pool, cut, cfg.ArchiveBatch)
	if err != nil {
		return fmt.Errorf("archive the outbox: %w", err)
	}
	m, err := svc.Inbox.Archive(ctx, cfg.Pool, cut, cfg.ArchiveBatch)
	if err != nil {
		return fmt.Errorf("archive the inbox: %w", err)
	}
	s.RetentionTime = time.Since(t0)
	if err := cfg.Pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::text::pg_lsn)::int8`, lsn0).
		Scan(&s.RetentionWAL); err != nil {
		return err
	}
	s.Archived = n + m
	return nil
}

// WALPerRow is the WAL the retention wrote per row it archived or purged
// (0 when none).
func (s Sample) WALPerRow() int64 {
	if n := s.Archived + s.Purged; n > 0 {
		return s.RetentionWAL / n
	}
	return 0
}

// retain runs the round's retention: the archives with Config.Archive,
// else PurgeHistory (which records the horizon, so the audit's
// event-completeness checks skip the changes whose events went with the
// history). It fills the sample's Archived or Purged, RetentionWAL and
// RetentionTime.
func retain(ctx context.Context, cfg Config, svc *flow.Service, cut time.Time, s *Sample) error {
	if cfg.Archive {
		// The audit's event-completeness checks read the history table.
		return archive(ctx, cfg, svc, cut, s)
	}
	var lsn0 string
	if err := cfg.Pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn0); err != nil {
		return err
	}
	t0 := time.Now()
	n, err := svc.PurgeHistory(ctx, cut, 500)
	if err != nil {
		return fmt.Errorf("purge: %w", err)
	}
	s.Purged, s.RetentionTime = n, time.Since(t0)
	return cfg.Pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::text::pg_lsn)::int8`, lsn0).Scan(&s.RetentionWAL)
}
