package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// reportStack prints the -stack tables: per offered rate, the orders, the
// latency, the CPU per order of each component, the WAL per order; then
// the answers the clicks got and each window's top statements.
func reportStack(out io.Writer, o options, kit [2]float64, rs []rateResult) {
	fmt.Fprintf(out, "\n## The real stack under a fixed offered rate (%s warm-up + %s window per rate)\n\n", o.warmup, o.duration)
	fmt.Fprintf(out, "kit alone (flow.Service.PlaceOrder, 64 buckets, 32 consumers, closed loop), same PostgreSQL: %.0f orders/s before the stack, %.0f after\n\n", kit[0], kit[1])
	fmt.Fprintln(out, "| offered/s | orders/s | click→order p50 ms | p99 ms | PostgreSQL µs/order | service | nats-server | redis-server | stack total | load generator | stack's cores | WAL B/order |")
	fmt.Fprintln(out, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for i := range rs {
		r := &rs[i]
		fmt.Fprintf(out, "| %d | %.0f | %.1f | %.1f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.2f | %.0f |\n", r.offered, r.ordersPerSec(),
			ms(r.pct(0.50)), ms(r.pct(0.99)), r.perOrder(r.cpu[cpuPostgres]), r.perOrder(r.cpu[cpuService]),
			r.perOrder(r.cpu[cpuNATS]), r.perOrder(r.cpu[cpuRedis]), r.perOrder(r.totalCPU()), r.perOrder(r.cpu[cpuLoad]),
			ratio(r.totalCPU().Seconds(), r.window.Seconds()), ratio(float64(r.walBytes), float64(r.orders)))
	}
	fmt.Fprintln(out, "\n| offered/s | window clicks | answered 202 | failed (not 202) | with an order | late to leave | not sent | every answer (warm-up included) |")
	fmt.Fprintln(out, "|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, r := range rs {
		fmt.Fprintf(out, "| %d | %d | %d | %d | %d | %d | %d | %s |\n", r.offered, r.clicks, r.accepted, int64(r.clicks)-r.accepted, r.ordered, r.late, r.notSent, statusLine(r.status))
	}
	for _, r := range rs {
		fmt.Fprintf(out, "\nTop statements by execution time, %d/s offered (%.0f ms of statements in the window):\n\n", r.offered, r.stmtsTotalMS)
		for _, s := range r.stmts {
			fmt.Fprintf(out, "- %5.1f%%  %8.1f ms  %6d calls  %7.3f ms/call  %6.0f WAL B/call  `%s`\n", 100*ratio(s.totalMS, r.stmtsTotalMS),
				s.totalMS, s.calls, ratio(s.totalMS, float64(s.calls)), ratio(s.walBytes, float64(s.calls)), s.normalized)
		}
	}
}

// statusLine is "202: n, 503: m, …"; 0 is no answer, -1 not sent.
func statusLine(m map[int32]int64) string {
	var keys []int
	for k := range m {
		keys = append(keys, int(k))
	}
	sort.Ints(keys)
	var parts []string
	for _, k := range keys {
		name := fmt.Sprint(k)
		switch k {
		case 0:
			name = "no answer"
		case -1:
			name = "not sent"
		}
		parts = append(parts, fmt.Sprintf("%s: %d", name, m[int32(k)]))
	}
	return strings.Join(parts, ", ")
}

// saturated is the rate whose window created the most orders/s.
func saturated(rs []rateResult) *rateResult {
	var best *rateResult
	for i := range rs {
		if best == nil || rs[i].ordersPerSec() > best.ordersPerSec() {
			best = &rs[i]
		}
	}
	return best
}

// printStackResult prints the -stack RESULT line: the figures of the rate
// that created the most orders/s (the stack saturated, when the highest
// rate is past what it carries).
func printStackResult(out io.Writer, kit [2]float64, rs []rateResult) {
	s := saturated(rs)
	if s == nil {
		return
	}
	fmt.Fprintf(out, "RESULT stack_orders_per_s=%.0f stack_vs_kit=%.2f stack_cpu_us_per_order=%.0f stack_pg_cpu_us_per_order=%.0f wal_bytes_per_order=%.0f\n",
		s.ordersPerSec(), ratio(s.ordersPerSec(), (kit[0]+kit[1])/2), s.perOrder(s.totalCPU()), s.perOrder(s.cpu[cpuPostgres]),
		ratio(float64(s.walBytes), float64(s.orders)))
}
