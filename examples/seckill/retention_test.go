package main

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/internal/pgtest"
)

// On the real stack the service's inbox refuses a purge or archive horizon
// inside the replay window the streams declare: their MaxAge plus their
// duplicate window plus the repair time. A purge with a horizon shorter
// than that deletes nothing.
func TestInboxRetentionFollowsTheStreams(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 2*time.Minute)
	pool := pgtest.Pool(t)
	cfg := smallConfig(t)
	useStack(t, &cfg, stackReal, false)
	cfg.JetStream.MaxAge, cfg.JetStream.Duplicates, cfg.JetStream.RepairTime = 3*time.Hour, 5*time.Minute, time.Hour
	s, err := newService(ctx, pool, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	want := 3*time.Hour + 5*time.Minute + time.Hour
	// A row processed two hours ago: inside the window.
	m := inbox.Message{Group: "g", MessageID: uuid.Must(uuid.NewV7()), Topic: "T"}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		m.Result = &inbox.Result{Code: "OK"}
		_, err := s.Inbox.ClaimMessage(ctx, tx, m)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	table := pgx.Identifier{cfg.Schema, "consumer_inbox"}.Sanitize()
	if _, err := pool.Exec(ctx, `UPDATE `+table+` SET created_at = now() - interval '2 hours', processed_at = now() - interval '2 hours'`); err != nil {
		t.Fatal(err)
	}
	// The error names the inbox's minimum retention: MaxAge + Duplicates +
	// repair.
	var re *inbox.Error
	if n, err := s.Inbox.Purge(ctx, pool, time.Now().Add(-time.Hour), 0); n != 0 || !errors.Is(err, inbox.ErrRetentionTooShort) || !errors.As(err, &re) || re.MinRetention != want {
		t.Fatalf("Purge one hour back = %d, %v; want a *inbox.Error naming %v", n, err, want)
	}
	if n, err := s.PurgeHistory(ctx, time.Now().Add(-time.Hour), 100); n != 0 || !errors.Is(err, inbox.ErrRetentionTooShort) {
		t.Fatalf("PurgeHistory one hour back = %d, %v; want ErrRetentionTooShort", n, err)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&left); err != nil || left != 1 {
		t.Fatalf("%d inbox rows left (%v), want 1", left, err)
	}
	if n, err := s.Inbox.Purge(ctx, pool, time.Now().Add(-want), 0); err != nil || n != 0 {
		t.Fatalf("Purge past the window = %d, %v; want 0 (the row is younger), no error", n, err)
	}
}
