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
func reportStack(out io.Writer, o options, kit [2]kitResult, rs []rateResult) {
	fmt.Fprintf(out, "\n## The real stack under a fixed offered rate (%s warm-up + %s window per rate)\n\n", o.warmup, o.duration)
	reportKit(out, kit)
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
	if len(rs) > 0 && len(rs[0].nodes) > 1 {
		reportNodes(out, rs)
	}
	reportWAL(out, rs)
	for _, r := range rs {
		for _, n := range r.nodes {
			where := ""
			if len(r.nodes) > 1 {
				where = ", " + n.name
			}
			fmt.Fprintf(out, "\nTop statements by execution time, %d/s offered%s (%.0f ms of statements in the window):\n\n", r.offered, where, n.stmtsMS)
			printStmtLines(out, n.stmts, n.stmtsMS)
			fmt.Fprintf(out, "\nRead-only statements (the operator view's live audit, reconciliation and figures, and any other read): %.0f ms, %.1f%% of the statement time%s:\n\n",
				n.readMS, 100*ratio(n.readMS, n.stmtsMS), where)
			printStmtLines(out, n.readTop[:min(len(n.readTop), 5)], n.stmtsMS)
		}
	}
}

// printStmtLines prints stmts, each with its share of allMS.
func printStmtLines(out io.Writer, stmts []stmtLine, allMS float64) {
	for _, s := range stmts {
		fmt.Fprintf(out, "- %5.1f%%  %8.1f ms  %6d calls  %7.3f ms/call  %6.0f WAL B/call  `%s`\n", 100*ratio(s.totalMS, allMS),
			s.totalMS, s.calls, ratio(s.totalMS, float64(s.calls)), ratio(s.walBytes, float64(s.calls)), s.normalized)
	}
}

// reportKit prints the kit alone's two runs: orders/s, CPU per order of
// PostgreSQL and of the kit's client (this process), the cores they kept
// busy, WAL per order.
func reportKit(out io.Writer, kit [2]kitResult) {
	fmt.Fprintln(out, "The kit alone (flow.Service.PlaceOrder, 64 buckets, 32 consumers, closed loop), same PostgreSQL:")
	fmt.Fprintln(out, "\n| kit alone | orders/s | PostgreSQL µs/order | client µs/order | total µs/order | cores | WAL B/order |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|")
	for i, k := range kit {
		fmt.Fprintf(out, "| %s | %.0f | %.0f | %.0f | %.0f | %.2f | %.0f |\n", [2]string{"before the stack", "after the stack"}[i],
			k.ordersPerSec(), k.perOrder(k.pgCPU), k.perOrder(k.clientCPU), k.perOrder(k.cpu()),
			ratio(k.cpu().Seconds(), k.window.Seconds()), ratio(float64(k.walBytes), float64(k.orders)))
	}
	fmt.Fprintln(out)
}

// reportNodes prints, on Citus, each node's CPU, WAL and statement time
// per order, and the coordinator's hop: the statement time the
// coordinator reports (which includes the workers' answers) less the
// workers' own, per order and per coordinator statement.
func reportNodes(out io.Writer, rs []rateResult) {
	fmt.Fprintln(out, "\nPer PostgreSQL node (CPU of the node's postmaster and its backends; statement time from each node's pg_stat_statements):")
	fmt.Fprintln(out, "\n| offered/s | node | CPU µs/order | WAL B/order | statement ms/order | statements |")
	fmt.Fprintln(out, "|---:|---|---:|---:|---:|---:|")
	for _, r := range rs {
		for _, n := range r.nodes {
			fmt.Fprintf(out, "| %d | %s | %.0f | %.0f | %.3f | %d |\n", r.offered, n.name, r.perOrder(n.cpu),
				ratio(float64(n.walBytes), float64(r.orders)), ratio(n.stmtsMS, float64(r.orders)), n.calls)
		}
	}
	fmt.Fprintln(out, "\n| offered/s | coordinator hop ms/order | per coordinator statement ms | coordinator CPU µs/order |")
	fmt.Fprintln(out, "|---:|---:|---:|---:|")
	for _, r := range rs {
		hop, per := r.hop()
		fmt.Fprintf(out, "| %d | %.3f | %.3f | %.0f |\n", r.offered, hop, per, r.perOrder(r.nodes[0].cpu))
	}
}

// hop is, on Citus, the coordinator's statement time per order less the
// workers', and that difference per statement the coordinator ran.
func (r *rateResult) hop() (perOrder, perStatement float64) {
	if len(r.nodes) < 2 {
		return 0, 0
	}
	diff := r.nodes[0].stmtsMS
	for _, n := range r.nodes[1:] {
		diff -= n.stmtsMS
	}
	return ratio(diff, float64(r.orders)), ratio(diff, float64(r.nodes[0].calls))
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
// Beside it, the kit alone's CPU (PostgreSQL and its client) and
// PostgreSQL's alone per order, its WAL per order (the mean of its two
// runs), and stack_vs_kit_cpu_bound, the kit's CPU per order over the
// stack's: when both saturate the same cores, the most stack_vs_kit can
// be.
// With -stack-citus every key starts with citus_, and the line adds the
// coordinator's CPU and hop per order.
// With floor (-stack-floor) it adds the floor's CPU per order and
// stack_vs_kit_floor_bound, the most stack_vs_kit can be over it (see
// reportFloor).
// With inTx (-stack-relay-in-tx) it adds the first such rate's WAL per
// order with the relays in InTx mode, and its ratio to the lease mode's at
// the same rate.
func printStackResult(out io.Writer, o options, kit [2]kitResult, rs, inTx []rateResult, floor *floorResult) {
	s := saturated(rs)
	if s == nil {
		return
	}
	p := ""
	if o.stackCitus {
		p = "citus_"
	}
	kitPerSec, kitCPU, kitPG, kitWAL := kitMean(kit)
	fmt.Fprintf(out, "RESULT %[1]sstack_orders_per_s=%.0[2]f %[1]sstack_vs_kit=%.2[3]f %[1]sstack_cpu_us_per_order=%.0[4]f %[1]sstack_pg_cpu_us_per_order=%.0[5]f %[1]swal_bytes_per_order=%.0[6]f",
		p, s.ordersPerSec(), ratio(s.ordersPerSec(), kitPerSec), s.perOrder(s.totalCPU()), s.perOrder(s.cpu[cpuPostgres]),
		s.walPerOrder())
	fmt.Fprintf(out, " %[1]skit_cpu_us_per_order=%.0[2]f %[1]skit_pg_cpu_us_per_order=%.0[3]f %[1]skit_wal_bytes_per_order=%.0[4]f %[1]sstack_vs_kit_cpu_bound=%.2[5]f",
		p, kitCPU, kitPG, kitWAL, ratio(kitCPU, s.perOrder(s.totalCPU())))
	if len(s.nodes) > 0 {
		fmt.Fprintf(out, " %sstack_readonly_stmt_share=%.3f", p, ratio(s.nodes[0].readMS, s.nodes[0].stmtsMS))
	}
	if o.stackCitus {
		hop, _ := s.hop()
		fmt.Fprintf(out, " citus_coordinator_cpu_us_per_order=%.0f citus_coordinator_hop_ms_per_order=%.3f", s.perOrder(s.nodes[0].cpu), hop)
	}
	if floor != nil {
		fmt.Fprintf(out, " %[1]sstack_floor_cpu_us_per_order=%.0[2]f %[1]sstack_vs_kit_floor_bound=%.2[3]f", p,
			floor.perOrder(), floorBound(kitCPU, floor.perOrder()))
	}
	if len(inTx) > 0 {
		if lease := rateOf(rs, inTx[0].offered); lease != nil {
			fmt.Fprintf(out, " %[1]srelay_intx_wal_bytes_per_order=%.0[2]f %[1]srelay_intx_wal_vs_lease=%.2[3]f", p,
				inTx[0].walPerOrder(), ratio(inTx[0].walPerOrder(), lease.walPerOrder()))
		}
	}
	fmt.Fprintln(out)
}

// rateOf is the result of offered rate rate, or nil.
func rateOf(rs []rateResult, rate int) *rateResult {
	for i := range rs {
		if rs[i].offered == rate {
			return &rs[i]
		}
	}
	return nil
}

// reportRelayModes prints each rate of -stack-relay-in-tx in both relay
// modes: the lease mode of the main windows (each event inserted, then
// updated twice: claimed, and marked SENT after the publish) and the InTx
// mode (claimed, published and marked in one transaction: updated once).
func reportRelayModes(out io.Writer, lease, inTx []rateResult) {
	if len(inTx) == 0 {
		return
	}
	fmt.Fprint(out, "\n## The outbox relays in both modes (outbox.RelayConfig.InTx), each on a fresh sale\n\n")
	fmt.Fprintln(out, "| offered/s | relay mode | orders/s | click→order p99 ms | PostgreSQL µs/order | stack total µs/order | WAL B/order | of it event_outbox and its indexes |")
	fmt.Fprintln(out, "|---:|---|---:|---:|---:|---:|---:|---:|")
	for _, x := range inTx {
		for _, m := range []struct {
			name string
			r    *rateResult
		}{{"leases", rateOf(lease, x.offered)}, {"InTx", &x}} {
			r := m.r
			if r == nil {
				continue
			}
			outbox := "n/a"
			if len(r.wal) > 0 {
				outbox = fmt.Sprintf("%.0f", ratio(float64(r.walOf("event_outbox")), float64(r.orders)))
			}
			fmt.Fprintf(out, "| %d | %s | %.0f | %.1f | %.0f | %.0f | %.0f | %s |\n", r.offered, m.name, r.ordersPerSec(), ms(r.pct(0.99)),
				r.perOrder(r.cpu[cpuPostgres]), r.perOrder(r.totalCPU()), r.walPerOrder(), outbox)
		}
	}
	if len(inTx[0].wal) > 0 {
		fmt.Fprint(out, "\nWith the relays in InTx mode:\n")
		reportWAL(out, inTx)
	}
}

// reportSavings prints, per rate of -stack-off-rates, the first windows
// (every saving on), each run with one saving off and the last run with
// every saving on again: orders/s, CPU per order by component and WAL.
func reportSavings(out io.Writer, first []rateResult, offs []offRun) {
	if len(offs) == 0 {
		return
	}
	fmt.Fprint(out, "\n## The service's savings, each turned off on a fresh sale (-stack-off)\n\n")
	fmt.Fprintln(out, "| offered/s | run | orders/s | click→order p99 ms | PostgreSQL µs/order | service | nats-server | redis-server | stack total | WAL B/order |")
	fmt.Fprintln(out, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, x := range offs[0].results {
		row := func(name string, r *rateResult) {
			if r == nil {
				return
			}
			fmt.Fprintf(out, "| %d | %s | %.0f | %.1f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |\n", r.offered, name, r.ordersPerSec(), ms(r.pct(0.99)),
				r.perOrder(r.cpu[cpuPostgres]), r.perOrder(r.cpu[cpuService]), r.perOrder(r.cpu[cpuNATS]), r.perOrder(r.cpu[cpuRedis]),
				r.perOrder(r.totalCPU()), r.walPerOrder())
		}
		row("every saving on (the rates above)", rateOf(first, x.offered))
		for _, o := range offs {
			name := "off: `" + o.flag + "`"
			if o.flag == "" {
				name = "every saving on, again"
			}
			row(name, rateOf(o.results, x.offered))
		}
	}
}
