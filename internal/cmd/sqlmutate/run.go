package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/internal/pgharness"
	"github.com/seckillkit/seckill/internal/sqlfile"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/outbox"
)

// checkSchema is the migrated schema the mutants are prepared against.
const checkSchema = "sqlmutate_check"

// The outcomes of a mutant.
const (
	killed    = "killed"
	lived     = "LIVED"
	invalid   = "invalid"
	timedOut  = "timed out"
	uncovered = "not covered"
	notRun    = "not run" // interrupted, or past -stop
)

// result is one mutant's outcome.
type result struct {
	mutant
	Outcome string        `json:"outcome"`
	By      string        `json:"by,omitempty"` // the first failing test, or the server's refusal
	Tests   int           `json:"tests"`        // how many tests ran it
	Took    time.Duration `json:"took"`
	Hash    string        `json:"hash"`             // of the mutated statement's text
	Reused  bool          `json:"reused,omitempty"` // the outcome of an earlier run (-resume)
}

// key identifies a mutant across runs.
func (r *result) key() string {
	return strings.Join([]string{r.Statement, fmt.Sprint(r.Line), r.Desc, r.Orig, r.New, r.Hash}, "\x00")
}

func migrateCheckSchema(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = migrate.Apply(ctx, conn, checkSchema, inventory.Migrations, order.Migrations, inbox.Migrations, outbox.Migrations)
	return err
}

// validity marks the mutants the server refuses to prepare as invalid.
// A statement whose original text does not prepare either (it needs
// something the check schema lacks) leaves its mutants unchecked.
func validity(ctx context.Context, url, pkg string, rs []result) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	quoted, err := migrate.QuoteSchema(checkSchema)
	if err != nil {
		return err
	}
	set, err := sqlfile.Parse(os.DirFS(pkg), "sql")
	if err != nil {
		return err
	}
	bound := set.Bind(quoted)
	origOK := map[string]bool{}
	for i := range rs {
		r := &rs[i]
		name := strings.TrimPrefix(r.Statement, pkg+".")
		ok, seen := origOK[name]
		if !seen {
			_, perr := conn.Prepare(ctx, "", bound.Get(name))
			ok, origOK[name] = perr == nil, perr == nil
		}
		if !ok {
			continue
		}
		if _, perr := conn.Prepare(ctx, "", strings.ReplaceAll(r.Text, "{schema}", quoted)); perr != nil {
			r.Outcome, r.By = invalid, oneLine(perr.Error())
		}
	}
	return nil
}

// runPackage runs every mutant of pkg and prints its report.
func runPackage(ctx context.Context, cfg config, srv *pgharness.Server, pkg string) error {
	began := time.Now()
	bin := filepath.Join(cfg.work, pkg+".test")
	build := exec.CommandContext(ctx, "go", "test", "-c", "-tags", "sqlmutate", "-o", bin, "./"+pkg)
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go test -c: %w: %s", err, out)
	}
	ms, err := packageMutants(pkg, cfg.only)
	if err != nil {
		return err
	}
	rs := make([]result, len(ms))
	for i, m := range ms {
		rs[i].mutant = m
		sum := sha256.Sum256([]byte(m.Text))
		rs[i].Hash = hex.EncodeToString(sum[:8])
	}
	if err := validity(ctx, srv.URL, pkg, rs); err != nil {
		return err
	}
	rec, err := recording(ctx, cfg, srv, pkg, bin)
	if err != nil {
		return err
	}
	resultsFile := filepath.Join(cfg.work, pkg+".results.json")
	if cfg.resume {
		if err := reuse(resultsFile, rs); err != nil {
			return err
		}
	}
	killers := killersOf(rs)
	for i := range rs {
		if ctx.Err() != nil || !cfg.stopAt.IsZero() && time.Now().After(cfg.stopAt) {
			if rs[i].Outcome == "" {
				rs[i].Outcome = notRun
			}
			continue
		}
		if rs[i].Outcome == "" {
			waitWhilePaused(ctx, cfg.work)
			rs[i] = runMutant(ctx, cfg, srv.URL, pkg, bin, rec, rs[i], killers[rs[i].Statement])
			killers.add(rs[i])
			fmt.Fprintf(os.Stderr, "%s %s: %s %s (%s)\n", rs[i].Statement, rs[i].Desc, rs[i].Outcome, rs[i].By, rs[i].Took.Round(time.Second))
			if err := writeResults(resultsFile, rs); err != nil { // a run cut short resumes from here
				return err
			}
		}
	}
	report(os.Stdout, pkg, rs, time.Since(began))
	return writeResults(resultsFile, rs)
}

// killers are, per statement, the tests that killed its mutants so far,
// the most recent first: a mutant of the same statement is often killed
// by the same test.
type killers map[string][]string

// killersOf collects the killers of the results already known (-resume).
func killersOf(rs []result) killers {
	k := killers{}
	for _, r := range rs {
		k.add(r)
	}
	return k
}

// add records r's killing test (its top-level test), if r was killed by a
// test.
func (k killers) add(r result) {
	if r.Outcome != killed || r.By == "" || strings.ContainsAny(r.By, " :") {
		return
	}
	top, _, _ := strings.Cut(r.By, "/")
	list := []string{top}
	for _, t := range k[r.Statement] {
		if t != top && len(list) < 3 {
			list = append(list, t)
		}
	}
	k[r.Statement] = list
}

// killersFirst puts the killers among the stages' tests into a first stage
// of their own, and keeps the stages' other tests in their order: the run
// decides the same (every test still runs while none fails), usually
// sooner.
func killersFirst(stages [][]string, killers []string) [][]string {
	var first []string
	for _, st := range stages {
		for _, t := range st {
			if contains(killers, t) {
				first = append(first, t)
			}
		}
	}
	if len(first) == 0 {
		return stages
	}
	out := [][]string{first}
	for _, st := range stages {
		var rest []string
		for _, t := range st {
			if !contains(first, t) {
				rest = append(rest, t)
			}
		}
		if len(rest) > 0 {
			out = append(out, rest)
		}
	}
	return out
}

// waitWhilePaused waits, before the next mutant, while the work directory
// holds a file named "pause": a heavy job can then have the machine
// without starving a mutant's tests into a failure (a false kill), and
// without the run being restarted.
func waitWhilePaused(ctx context.Context, work string) {
	pause := filepath.Join(work, "pause")
	for said := false; ctx.Err() == nil; said = true {
		if _, err := os.Stat(pause); err != nil {
			return
		}
		if !said {
			fmt.Fprintf(os.Stderr, "paused: %s exists\n", pause)
		}
		time.Sleep(5 * time.Second)
	}
}

func writeResults(file string, rs []result) error {
	b, err := json.MarshalIndent(rs, "", "\t")
	if err != nil {
		return err
	}
	return os.WriteFile(file, b, 0o644)
}

// reuse takes from the results of an earlier run the mutants it found
// killed or invalid, when the mutant is the same (statement, line,
// mutation and the whole mutated text): after new tests, a run with
// -resume tests again only the survivors, the timeouts and the rest.
func reuse(file string, rs []result) error {
	b, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return nil
	} else if err != nil {
		return err
	}
	var prev []result
	if err := json.Unmarshal(b, &prev); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	done := map[string]result{}
	for _, p := range prev {
		if p.Outcome == killed || p.Outcome == invalid {
			done[p.key()] = p
		}
	}
	for i := range rs {
		p, ok := done[rs[i].key()]
		if !ok { // results written before the hash was kept
			r := rs[i]
			r.Hash = ""
			p, ok = done[r.key()]
		}
		if ok && rs[i].Outcome == "" {
			rs[i].Outcome, rs[i].By, rs[i].Tests, rs[i].Took = p.Outcome, p.By, p.Tests, p.Took
			rs[i].Reused = true
		}
	}
	return nil
}

var failLine = regexp.MustCompile(`--- FAIL: (\S+)`)

// runMutant runs the tests that execute the mutant's statement against it.
func runMutant(ctx context.Context, cfg config, url, pkg, bin string, rec *record, r result, killers []string) result {
	tests, budget := rec.testsOf(r.Statement)
	r.Tests = len(tests)
	if len(tests) == 0 {
		r.Outcome = uncovered
		return r
	}
	file := filepath.Join(cfg.work, "mutant.sql")
	if err := os.WriteFile(file, []byte(r.Text), 0o644); err != nil {
		r.Outcome, r.By = invalid, err.Error()
		return r
	}
	timeout := cfg.timeout
	if timeout == 0 {
		timeout = max(2*time.Minute, 4*budget)
	}
	env := []string{
		pgharness.EnvURL + "=" + url,
		sqlfile.EnvMutateStatement + "=" + r.Statement,
		sqlfile.EnvMutateFile + "=" + file,
	}
	var out []byte
	var code int
	var took time.Duration
	for _, stage := range killersFirst(rec.stages(tests), killers) {
		o, c, t := runTests(ctx, bin, pkg, stage, cfg.parallel, timeout, env)
		out, code, took = o, c, took+t
		if code != 0 {
			break
		}
	}
	r.Took = took
	switch {
	case code == 0:
		r.Outcome = lived
	case code < 0 || bytes.Contains(out, []byte("panic: test timed out")):
		r.Outcome, r.By = timedOut, fmt.Sprintf("after %s", timeout)
		log := filepath.Join(cfg.work, fmt.Sprintf("timeout-%s-%d.log", r.Statement, r.Line))
		if err := os.WriteFile(log, out, 0o644); err == nil {
			r.By += ", output in " + log
		}
	default:
		r.Outcome = killed
		if m := failLine.FindSubmatch(out); m != nil {
			r.By = string(m[1])
		}
	}
	return r
}

// runTests runs the top-level tests of the test binary bin in the
// package's directory; code is -1 when the deadline killed it.
func runTests(ctx context.Context, bin, pkg string, tests []string, parallel int, timeout time.Duration, env []string) (out []byte, code int, took time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin,
		"-test.run", "^("+strings.Join(tests, "|")+")$", "-test.count", "1", "-test.failfast", "-test.short",
		"-test.parallel", fmt.Sprint(parallel), "-test.timeout", timeout.String())
	cmd.Dir = pkg
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	began := time.Now()
	out, err := cmd.CombinedOutput()
	took = time.Since(began)
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return out, -1, took
	case errors.As(err, &exit):
		return out, exit.ExitCode(), took
	case err != nil:
		return []byte(err.Error()), 1, took
	}
	return out, 0, took
}
