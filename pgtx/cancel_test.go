package pgtx_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/pgtx"
)

// A cancel request sent because RunInTx's context ended raises the same
// SQLSTATE (57014) as statement_timeout; Classify's StatementTimeout tells them
// apart without reading the server's message.
func TestCancelRequestIsNotStatementTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := pgtest.NewPool(t, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
			return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, DeadlineDelay: time.Minute}
		}
	})
	// The statement is cancelled within testwait.Step, or the test fails.
	ctx, cancel := context.WithCancel(testwait.Context(t, b.ctx, testwait.Step))
	defer cancel()
	marker := fmt.Sprintf("cancel-%d", time.Now().UnixNano())
	go func() {
		// Cancel once the statement runs on the server.
		for ctx.Err() == nil {
			var n int
			_ = b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()`, marker).Scan(&n)
			if n > 0 {
				cancel()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	err := pgtx.RunInTx(ctx, pool, pgtx.Options{StatementTimeout: time.Hour}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT pg_sleep(60) /* `+marker+` */`)
		return err
	})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "57014" {
		t.Fatalf("err = %v, want the server's 57014 from the cancel request", err)
	}
	if pgtx.Classify(err).StatementTimeout || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v: StatementTimeout = %v, matches context.Canceled = %v; want false, true",
			err, pgtx.Classify(err).StatementTimeout, errors.Is(err, context.Canceled))
	}
}

// The predicate does not depend on the server's language: a statement
// timeout reported in German (lc_messages = de) is one, and a cancel
// whose context ended is not, whatever its text.
func TestIsStatementTimeoutIgnoresTheMessage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "57014", Message: "Abbruch der Anweisung wegen Zeitüberschreitung"}, true},
		{&pgconn.PgError{Code: "57014", Message: "canceling statement due to statement timeout"}, true},
		{fmt.Errorf("%w (%w)", &pgconn.PgError{Code: "57014", Message: "canceling statement due to statement timeout"}, context.DeadlineExceeded), false},
		{fmt.Errorf("%w (%w)", &pgconn.PgError{Code: "57014", Message: "Abbruch der Anweisung wegen Benutzeranforderung"}, context.Canceled), false},
		{&pgconn.PgError{Code: "55P03", Message: "canceling statement due to lock timeout"}, false},
		{errors.New("canceling statement due to statement timeout"), false},
	} {
		if got := pgtx.Classify(tc.err).StatementTimeout; got != tc.want {
			t.Errorf("StatementTimeout(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
