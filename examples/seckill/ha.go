package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/examples/internal/patroniharness"
	"github.com/seckillkit/seckill/pgtx"
)

// runHA is the sale on a throwaway Patroni cluster (-ha): etcd, a leader
// and its synchronous standby, the service on a multi-host URL with
// target_session_attrs=read-write; with -stack real, the broker on a
// three-node JetStream cluster and the front door on a Redis Cluster
// (haStack). When the share failoverAt of the
// clicks is done, the leader is killed (kill -9 of its Patroni and
// PostgreSQL); Patroni promotes the standby, the service follows it, and
// the old leader is started again and rejoins (pg_rewind when needed).
// The report adds the failover's timeline. It fails when the audit or the
// reconciliation fails or the old leader did not rejoin.
func runHA(ctx context.Context, cfg config, failoverAt float64, verbose bool, level slog.Level) error {
	if !(failoverAt > 0 && failoverAt < 1) {
		return fmt.Errorf("-failover-at %v: want a share of the clicks between 0 and 1", failoverAt)
	}
	if cfg.Activities > 1 || cfg.Citus {
		return errors.New("-ha runs one activity on plain PostgreSQL: drop -activities and -citus")
	}
	log := slog.New(slog.DiscardHandler)
	if verbose {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	}
	fmt.Fprintln(os.Stderr, "seckill: starting a throwaway Patroni cluster (etcd, a leader and its synchronous standby)")
	c, err := patroniharness.Start(ctx, patroniharness.Options{MaxConnections: cfg.PoolSize + 60})
	if err != nil {
		return err
	}
	defer c.Stop()
	pcfg, err := pgxpool.ParseConfig(c.URL())
	if err != nil {
		return err
	}
	pcfg.MaxConns = int32(cfg.PoolSize)
	pcfg.ConnConfig.Tracer = poolTracer{} // acquire time and rows written, for the order transaction's log record
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	topology := []string{fmt.Sprintf("PostgreSQL: Patroni cluster of %d nodes on etcd (synchronous_mode), a multi-host URL", len(c.Nodes))}
	switch cfg.Stack {
	case stackMemory:
		topology = append(topology, "front door and broker: in-process stand-ins (-stack memory)")
	case stackReal:
		more, stop, err := haStack(ctx, &cfg)
		if err != nil {
			return err
		}
		defer stop()
		topology = append(topology, more...)
	default:
		return fmt.Errorf("-stack %q: want %q or %q", cfg.Stack, stackReal, stackMemory)
	}

	fo := &failover{c: c, log: os.Stderr}
	hooks := &saleHooks{
		started: func(s *service) { fo.svc = s },
		click: func(i, total int) {
			if i == int(float64(total)*failoverAt) {
				fo.start(ctx)
			}
		},
	}
	start := time.Now()
	rep, err := runSaleHooked(ctx, pool, cfg, log, nil, hooks)
	fo.wait()
	if err != nil {
		return err
	}
	rep.print(os.Stdout)
	fmt.Println("topology:")
	for _, t := range topology {
		fmt.Println("  " + t)
	}
	fo.print(ctx, os.Stdout, pool, cfg.Schema)
	fmt.Printf("finished in %.1fs\n", time.Since(start).Seconds())
	if !rep.Passed() {
		return errors.New("audit or reconciliation failed")
	}
	if fo.err != nil {
		return fmt.Errorf("failover: %w", fo.err)
	}
	return nil
}

// failover kills the leader once, waits for the promotion, and brings the
// old leader back, recording when each step happened.
type failover struct {
	c   *patroniharness.Cluster
	svc *service
	log io.Writer

	once sync.Once
	done chan struct{}

	oldLeader, newLeader       string
	killed, promoted, rejoined time.Time
	txErrorsAtKill, txErrors   int64
	unknownAtKill, unknown     int64
	rewound                    bool
	status                     patroniharness.Status
	err                        error
}

func (f *failover) start(ctx context.Context) {
	f.once.Do(func() {
		f.done = make(chan struct{})
		go func() { defer close(f.done); f.err = f.run(ctx) }()
	})
}

func (f *failover) wait() {
	if f.done != nil {
		<-f.done
	}
}

func (f *failover) run(ctx context.Context) error {
	st, err := f.c.Status(ctx)
	if err != nil {
		return err
	}
	old := f.c.Node(st.Leader)
	if old == nil {
		return fmt.Errorf("no leader: %s", st)
	}
	f.oldLeader = old.Name
	if f.svc != nil {
		f.txErrorsAtKill, f.unknownAtKill = f.svc.stats.txErrors.Load(), f.svc.stats.unknownCmts.Load()
	}
	fmt.Fprintf(f.log, "seckill: kill -9 of the leader %s (Patroni and PostgreSQL)\n", old.Name)
	if err := old.Kill(); err != nil {
		return err
	}
	// Every process of the old leader is gone: a statement that starts
	// from now on runs on the new leader.
	f.killed = time.Now()
	n, err := f.c.WaitLeader(ctx, old.Name, 2*time.Minute)
	if err != nil {
		return err
	}
	f.promoted, f.newLeader = time.Now(), n.Name
	if f.svc != nil {
		f.txErrors, f.unknown = f.svc.stats.txErrors.Load()-f.txErrorsAtKill, f.svc.stats.unknownCmts.Load()-f.unknownAtKill
	}
	fmt.Fprintf(f.log, "seckill: %s leads, %v after the kill; starting %s again\n", n.Name, f.promoted.Sub(f.killed).Round(time.Millisecond), old.Name)
	if err := old.Start(); err != nil {
		return err
	}
	if err := f.c.WaitHealthy(ctx, 3*time.Minute); err != nil {
		return err
	}
	f.rejoined = time.Now()
	f.rewound = old.LogContains("pg_rewind exit code=0")
	f.status, err = f.c.Status(ctx)
	return err
}

// print writes the failover's timeline.
func (f *failover) print(ctx context.Context, w io.Writer, pool *pgxpool.Pool, schema string) {
	fmt.Fprintln(w, "failover timeline:")
	if f.killed.IsZero() {
		fmt.Fprintln(w, "  the failover never started (the sale had too few clicks)")
		return
	}
	at := func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return fmt.Sprintf("+%.3fs", t.Sub(f.killed).Seconds())
	}
	fmt.Fprintf(w, "  %-46s %s UTC (%s)\n", "leader killed (kill -9, every process gone)", f.killed.UTC().Format("15:04:05.000"), f.oldLeader)
	if n := f.c.Node(f.newLeader); n != nil {
		if t, ok := patroniLogTime(n, "promoted self to leader"); ok {
			fmt.Fprintf(w, "  %-46s %s\n", "detected: leader key expired, standby took it", at(t))
		}
	}
	fmt.Fprintf(w, "  %-46s %s (%s)\n", "promoted: new leader accepts writes", at(f.promoted), f.newLeader)
	var first *time.Time
	var after int64
	q := `SELECT min(created_at), count(*) FROM ` + pgx.Identifier{schema, "orders"}.Sanitize() + ` WHERE created_at > $1`
	if err := pool.QueryRow(ctx, q, f.killed).Scan(&first, &after); err == nil && first != nil {
		fmt.Fprintf(w, "  %-46s %s\n", "first order committed on the new leader", at(*first))
	}
	fmt.Fprintf(w, "  %-46s %d (order transactions failed and redelivered during the outage: %d, unknown commits: %d)\n",
		"orders committed after the kill", after, f.txErrors, f.unknown)
	rejoin := "no"
	if !f.rejoined.IsZero() {
		rejoin = fmt.Sprintf("yes, %s", at(f.rejoined))
		if f.rewound {
			rejoin += " through pg_rewind"
		}
	}
	fmt.Fprintf(w, "  %-46s %s\n", "old leader rejoined as a standby", rejoin)
	if f.status.Leader != "" {
		fmt.Fprintf(w, "  %-46s %s\n", "cluster", f.status)
	}
	if f.err != nil {
		fmt.Fprintf(w, "  FAIL %v\n", f.err)
	}
}

// patroniLogTime finds the first line of the node's Patroni log holding s
// and returns its timestamp ("2006-01-02 15:04:05,000", local time).
func patroniLogTime(n *patroniharness.Node, s string) (time.Time, bool) {
	for _, line := range strings.Split(n.Log(), "\n") {
		if !strings.Contains(line, s) || len(line) < 23 {
			continue
		}
		t, err := time.ParseInLocation("2006-01-02 15:04:05,000", line[:23], time.Local)
		if err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// databaseUnavailable reports whether err says the database could not be
// reached or was changing hands — no connection, a connection cut, a
// server shutting down or read-only (a demoted leader), a COMMIT whose
// outcome is unknown — rather than that the request was wrong: what a
// caller retries through a failover.
func databaseUnavailable(err error) bool {
	var ce *pgconn.ConnectError
	var pe *pgconn.PgError
	switch {
	case err == nil:
		return false
	case errors.As(err, &ce), pgconn.SafeToRetry(err), pgconn.Timeout(err), pgtx.Classify(err).OutcomeUnknown:
		return true
	case errors.As(err, &pe):
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03" || pe.Code == "25006"
	}
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}
