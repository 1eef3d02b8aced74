package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// pgNode is one PostgreSQL server that -stack reads: the only one, or on
// Citus the coordinator or a worker. Its CPU is its postmaster's tree,
// its WAL its own, its statements its own pg_stat_statements.
type pgNode struct {
	name string
	pool *pgxpool.Pool
	pid  int  // the postmaster
	own  bool // pool is this node's own, closed by closeNodes
}

// citusWorkers connects to every worker of the Citus coordinator that
// pool reaches (pg_dist_node, primaries with shards), with the
// coordinator's credentials, and finds each one's postmaster: the
// workers must run on this machine. Each needs pg_stat_statements in its
// shared_preload_libraries too.
func citusWorkers(ctx context.Context, pool *pgxpool.Pool) ([]pgNode, error) {
	var version string
	if err := pool.QueryRow(ctx, "SELECT citus_version()").Scan(&version); err != nil {
		return nil, fmt.Errorf("-stack-citus: %s is not a Citus coordinator: %w", "the server", err)
	}
	rows, err := pool.Query(ctx, `SELECT nodename, nodeport FROM pg_dist_node
		WHERE noderole = 'primary' AND groupid <> 0 AND shouldhaveshards ORDER BY nodeid`)
	if err != nil {
		return nil, err
	}
	type addr struct {
		host string
		port int
	}
	var addrs []addr
	for rows.Next() {
		var a addr
		if err := rows.Scan(&a.host, &a.port); err != nil {
			return nil, err
		}
		addrs = append(addrs, a)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("-stack-citus: the coordinator has no worker with shards")
	}
	var out []pgNode
	for _, a := range addrs {
		cfg := pool.Config().Copy()
		cfg.ConnConfig.Host, cfg.ConnConfig.Port = a.host, uint16(a.port)
		cfg.ConnConfig.Fallbacks = nil
		cfg.MinConns, cfg.MaxConns = 1, 2
		cfg.ConnConfig.Tracer = nil
		wp, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			closeNodes(out)
			return nil, err
		}
		n := pgNode{name: "worker " + net.JoinHostPort(a.host, strconv.Itoa(a.port)), pool: wp, own: true}
		out = append(out, n)
		if out[len(out)-1].pid, err = postmasterPID(ctx, wp); err != nil {
			closeNodes(out)
			return nil, err
		}
		// The coordinator's CREATE EXTENSION reaches the workers (Citus
		// refuses one sent to a worker directly); the library must be
		// preloaded there too.
		if _, err := wp.Exec(ctx, "SELECT pg_stat_statements_reset()"); err != nil {
			closeNodes(out)
			return nil, fmt.Errorf("%s: -stack reads pg_stat_statements (in the worker's shared_preload_libraries, the extension created on the coordinator): %w", n.name, err)
		}
	}
	return out, nil
}

// closeNodes closes the pools the nodes own.
func closeNodes(nodes []pgNode) {
	for _, n := range nodes {
		if n.own {
			n.pool.Close()
		}
	}
}

// nodeWindow is one node's share of a rate's window.
type nodeWindow struct {
	name     string
	cpu      time.Duration
	walBytes int64
	stmts    []stmtLine
	stmtsMS  float64    // every statement's execution time on the node
	calls    int64      // every statement's calls on the node
	readMS   float64    // the read-only statements' execution time (readOnlyStatement)
	readTop  []stmtLine // the read-only statements that took the most
}

// resetStatements clears pg_stat_statements on every node.
func (sr *stackRun) resetStatements(ctx context.Context) error {
	for _, n := range sr.nodes {
		if _, err := n.pool.Exec(ctx, "SELECT pg_stat_statements_reset()"); err != nil {
			return fmt.Errorf("%s: %w", n.name, err)
		}
	}
	return nil
}

// readNodes reads every node's CPU time and WAL position.
func (sr *stackRun) readNodes(ctx context.Context) (cpu []time.Duration, lsn []uint64, err error) {
	for _, n := range sr.nodes {
		c, err := treeCPU(n.pid)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: CPU time: %w", n.name, err)
		}
		var text string
		if err := n.pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&text); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", n.name, err)
		}
		l, err := parseLSN(text)
		if err != nil {
			return nil, nil, err
		}
		cpu, lsn = append(cpu, c), append(lsn, l)
	}
	return cpu, lsn, nil
}

// nodeWindows are the nodes' shares between two snapshots, with each
// node's top statements since the reset.
func (sr *stackRun) nodeWindows(ctx context.Context, s0, s1 snapshot, top int) ([]nodeWindow, error) {
	out := make([]nodeWindow, len(sr.nodes))
	for i, n := range sr.nodes {
		w := nodeWindow{name: n.name, cpu: s1.nodeCPU[i] - s0.nodeCPU[i], walBytes: int64(s1.nodeLSN[i] - s0.nodeLSN[i])}
		st, err := topStatements(ctx, n.pool, top)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n.name, err)
		}
		w.stmts, w.stmtsMS, w.calls, w.readMS, w.readTop = st.top, st.allMS, st.allCalls, st.readMS, st.readTop
		out[i] = w
	}
	return out, nil
}
