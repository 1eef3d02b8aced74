// Package sqlplan checks the plans of the named statements of
// internal/sqlfile against their headers, and renders docs/sql.md.
//
// [Explain] prepares a statement and explains its generic plan
// (plan_cache_mode = force_generic_plan, then EXPLAIN EXECUTE with every
// parameter NULL): the plan that holds for every parameter value, the one
// a prepared statement (pgx's statement cache) ends up using after its
// first executions when it costs no more than the custom ones. For a
// statement whose header gives typical values ("explain with:"), it
// explains the custom plan for them instead: the generic plan of a LIMIT
// $n assumes a tenth of the table, which the server never uses for a
// batch of a thousand rows (its custom plans cost far less). [Check] then holds the plan to the statement's header:
// every index the "index:" line names is used (scanned, or the arbiter of
// an ON CONFLICT), and no table holding at least a given number of rows is
// read by a sequential scan unless the "full scan:" line names it. Nothing
// in the check is specific to a table: what a statement must use is read
// from its header.
package sqlplan

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/sqlfile"
)

// Plan is what the planner chose for one statement.
type Plan struct {
	// Indexes are the indexes the plan reads (index scans, index-only
	// scans, bitmap index scans) or checks as ON CONFLICT arbiters,
	// sorted, each once.
	Indexes []string
	// SeqScans are the tables the plan reads by a sequential scan,
	// sorted, each once.
	SeqScans []string
	// Text is the plan as EXPLAIN (COSTS OFF) prints it, with the
	// schema name replaced by {schema}.
	Text string
}

// Explain returns the plan of text (a bound statement) on conn: the
// generic plan (every parameter NULL, plan_cache_mode =
// force_generic_plan) when with is empty, else the custom plan for the
// parameter values with (SQL expressions, comma-separated, as an EXECUTE
// takes them; plan_cache_mode = force_custom_plan). It sets
// plan_cache_mode for the session.
func Explain(ctx context.Context, conn *pgx.Conn, schema, text, with string) (Plan, error) {
	mode := "force_generic_plan"
	if with != "" {
		mode = "force_custom_plan"
	}
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
		return Plan{}, err
	}
	sd, err := conn.Prepare(ctx, "sqlplan_explained", text)
	if err != nil {
		return Plan{}, fmt.Errorf("prepare: %w", err)
	}
	defer conn.Deallocate(context.WithoutCancel(ctx), "sqlplan_explained")
	args := ""
	if n := len(sd.ParamOIDs); n > 0 {
		args = "(" + strings.TrimSuffix(strings.Repeat("NULL, ", n), ", ") + ")"
		if with != "" {
			args = "(" + with + ")"
		}
	}
	var js string
	if err := conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) EXECUTE sqlplan_explained"+args, pgx.QueryExecModeSimpleProtocol).Scan(&js); err != nil {
		return Plan{}, fmt.Errorf("explain: %w", err)
	}
	var top []struct {
		Plan node `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(js), &top); err != nil {
		return Plan{}, err
	}
	var p Plan
	if len(top) == 1 {
		top[0].Plan.walk(&p)
	}
	slices.Sort(p.Indexes)
	p.Indexes = slices.Compact(p.Indexes)
	slices.Sort(p.SeqScans)
	p.SeqScans = slices.Compact(p.SeqScans)
	rows, err := conn.Query(ctx, "EXPLAIN (COSTS OFF) EXECUTE sqlplan_explained"+args, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return Plan{}, fmt.Errorf("explain: %w", err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return Plan{}, fmt.Errorf("explain: %w", err)
	}
	p.Text = strings.ReplaceAll(strings.Join(lines, "\n"), schema+".", "{schema}.")
	// The values of "explain with" are evaluated when explained: keep
	// the time out of the text, so that regenerating changes nothing.
	p.Text = timestampLiteral.ReplaceAllString(p.Text, "'<time>'::timestamp with time zone")
	return p, nil
}

// timestampLiteral is a timestamptz constant in a plan's text.
var timestampLiteral = regexp.MustCompile(`'[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:.]+[+-][0-9:]+'::timestamp with time zone`)

// node is one node of EXPLAIN (FORMAT JSON).
type node struct {
	NodeType  string   `json:"Node Type"`
	Relation  string   `json:"Relation Name"`
	Index     string   `json:"Index Name"`
	Arbiters  []string `json:"Conflict Arbiter Indexes"`
	Subplans  []node   `json:"Plans"`
	Operation string   `json:"Operation"`
}

func (n node) walk(p *Plan) {
	if n.Index != "" {
		p.Indexes = append(p.Indexes, n.Index)
	}
	p.Indexes = append(p.Indexes, n.Arbiters...)
	if n.NodeType == "Seq Scan" {
		p.SeqScans = append(p.SeqScans, n.Relation)
	}
	for _, c := range n.Subplans {
		c.walk(p)
	}
}

// Check returns what in p breaks the header of st: an intended index the
// plan does not use, or a sequential scan of a table of large (the tables
// holding many rows) that the header does not allow.
func Check(st *sqlfile.Statement, p Plan, large map[string]bool) []string {
	var problems []string
	for _, ix := range st.Indexes {
		if !slices.ContainsFunc(strings.Split(ix, "|"), func(a string) bool { return slices.Contains(p.Indexes, a) }) {
			ix = strings.ReplaceAll(ix, "|", " or ")
			problems = append(problems, fmt.Sprintf("%s: does not use its intended index %s (uses %s)", st.Name, ix, orNone(p.Indexes)))
		}
	}
	for _, t := range p.SeqScans {
		if large[t] && !slices.Contains(st.FullScans, t) {
			problems = append(problems, fmt.Sprintf("%s: reads the large table %s by a sequential scan", st.Name, t))
		}
	}
	return problems
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "no index"
	}
	return strings.Join(s, ", ")
}

// Package is the statements of one package, parsed from its directory
// (Set's paths are then relative to the module root: outbox/sql/…).
type Package struct {
	Name string
	Set  *sqlfile.Set
}

// PlanBegin and PlanEnd enclose the plan of a statement in docs/sql.md:
// what the staleness check leaves out.
const (
	PlanBegin = "<!-- plan: written by -update, not compared -->"
	PlanEnd   = "<!-- end plan -->"
)

// Doc renders docs/sql.md: every statement of pkgs with its file, its
// description, its parameters, its intended index and its plan
// (plans[pkg.Name+"."+name]; "(not explained)" when missing), or for a
// statement marked "not explained:" the reason.
func Doc(pkgs []Package, plans map[string]string) string {
	var b strings.Builder
	b.WriteString(`# The SQL statements

<!-- Generated: go test ./internal/sqlplan/ -run TestPlans -update. Do not edit. -->

Every statement the library's packages send (` + "`outbox`, `inbox`, `order`, `inventory`, `pgtx`, `migrate`" + `) lives
whole in their embedded ` + "`sql/*.sql`" + ` files, one file per operation, each under a
header that names it, lists its parameters and the index it is meant to use.
(BEGIN is pgx's text for the modes ` + "`pgtx.Options`" + ` names; see ` + "`pgtx/sql/begin.sql`" + `.)
A statement EXPLAIN does not take (COMMIT, ROLLBACK, DDL) is listed with a
note instead of a plan.
The only placeholder is ` + "`{schema}`" + `, replaced once, when a Store is built, by
the validated, quoted schema name; every value is a bind parameter. Variants
(plain, Citus, ` + "`pgtx.Abort`" + `) are separate statements written out in full;
where two carry the same fragment, a test checks the copies are identical.

The plans are generic plans (` + "`plan_cache_mode = force_generic_plan`" + `, every
parameter unknown): the plans a prepared statement ends up using, valid for
every parameter value. A statement whose plan depends on its values (a batch
LIMIT, a range) names typical values in its header instead, and shows the
custom plan for them: the generic plan of a ` + "`LIMIT $n`" + ` assumes a tenth of the
table, and the server keeps the far cheaper custom plans for a batch of a
thousand rows. The plans were taken on PostgreSQL after a realistic load (a
million SENT outbox events plus ready, sending, retrying and dead ones; inbox
rows; paid, live, expired and cancelled orders with their items, payments and
reviews; a sale's inventory: 20,000 SKUs, 92,600 buckets, 256 for the busiest
SKUs, 200,000 reservations and their ledger rows, the sale log) and ANALYZE,
costs off. The plan test fails when a statement does
not use the index its header names, or reads a large table by a sequential
scan its header does not allow. A second test checks that the decrement of a
bucket stays a HOT update (` + "`n_tup_hot_upd`" + ` of ` + "`sku_inventory`" + ` grows with
` + "`n_tup_upd`" + ` over a run of allocations on one bucket).

How this file is kept current: a test without a database renders it from the
` + "`sql/*.sql`" + ` files and compares everything but the plan blocks (between the
plan markers), so a changed statement, parameter or index fails at once.
Plans depend on the server's version and statistics: only ` + "`-update`" + `, which
runs the plan test against a throwaway server with the load above, rewrites
them.
`)
	for _, pkg := range pkgs {
		fmt.Fprintf(&b, "\n## %s\n", pkg.Name)
		files := pkg.Set.Files()
		for _, f := range files {
			fmt.Fprintf(&b, "\n### %s\n\n", strings.TrimPrefix(f.Path, pkg.Name+"/"))
			fmt.Fprintf(&b, "[%s](../%s)", f.Path, f.Path)
			if doc := paragraph(f.Doc); doc != "" {
				b.WriteString(": " + doc)
			}
			b.WriteString("\n")
			for _, st := range pkg.Set.Statements() {
				if st.File != f.Path {
					continue
				}
				writeStatement(&b, pkg.Name, st, plans)
			}
		}
	}
	return b.String()
}

// writeStatement renders one statement of docs/sql.md.
func writeStatement(b *strings.Builder, pkgName string, st *sqlfile.Statement, plans map[string]string) {
	fmt.Fprintf(b, "\n#### %s.%s\n\n", pkgName, st.Name)
	if doc := paragraph(st.Doc); doc != "" {
		b.WriteString(doc + "\n\n")
	}
	if len(st.Params) > 0 {
		b.WriteString("| Parameter | Name, type, meaning |\n|---|---|\n")
		for _, p := range st.Params {
			fmt.Fprintf(b, "| `$%d` | %s |\n", p.N, strings.ReplaceAll(p.Doc, "|", `\|`))
		}
		b.WriteString("\n")
	} else {
		b.WriteString("No parameters.\n\n")
	}
	if len(st.Indexes) > 0 {
		fmt.Fprintf(b, "Intended index: `%s`.\n", strings.ReplaceAll(strings.Join(st.Indexes, "`, `"), "|", "` or `"))
	} else {
		fmt.Fprintf(b, "Intended index: none %s.\n", st.IndexNote)
	}
	if len(st.FullScans) > 0 {
		fmt.Fprintf(b, "Full scan by design: `%s` (%s).\n", strings.Join(st.FullScans, "`, `"), st.FullScanNote)
	}
	fmt.Fprintf(b, "\n```sql\n%s\n```\n\n", st.Text)
	if st.NotExplained != "" {
		fmt.Fprintf(b, "Not explained: %s.\n", st.NotExplained)
		return
	}
	if st.ExplainWith != "" {
		fmt.Fprintf(b, "The custom plan for the values `%s`:\n\n%s\n\n", st.ExplainWith, PlanBegin)
	} else {
		fmt.Fprintf(b, "The generic plan:\n\n%s\n\n", PlanBegin)
	}
	plan, ok := plans[pkgName+"."+st.Name]
	if !ok {
		plan = "(not explained)"
	}
	fmt.Fprintf(b, "```text\n%s\n```\n\n%s\n", plan, PlanEnd)
}

// paragraph joins comment lines into one paragraph.
func paragraph(lines []string) string {
	return strings.TrimSpace(strings.Join(lines, " "))
}

// StripPlans returns doc without its plan blocks: what the staleness check
// compares.
func StripPlans(doc string) string {
	var b strings.Builder
	for {
		i := strings.Index(doc, PlanBegin)
		if i < 0 {
			b.WriteString(doc)
			return b.String()
		}
		b.WriteString(doc[:i])
		j := strings.Index(doc[i:], PlanEnd)
		if j < 0 {
			return b.String()
		}
		doc = doc[i+j+len(PlanEnd):]
	}
}

// Plans returns the plan blocks of doc by statement ("pkg.name"), as Doc
// rendered them.
func Plans(doc string) map[string]string {
	out := map[string]string{}
	for _, sec := range strings.Split(doc, "\n#### ")[1:] {
		name := sec[:strings.Index(sec, "\n")]
		i := strings.Index(sec, PlanBegin)
		j := strings.Index(sec, "\n```\n\n"+PlanEnd)
		if i < 0 || j < i {
			continue
		}
		if k := strings.Index(sec[i:j], "```text\n"); k >= 0 {
			out[name] = sec[i+k+len("```text\n") : j]
		}
	}
	return out
}
