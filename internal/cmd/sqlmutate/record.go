package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/pgharness"
	"github.com/seckillkit/seckill/internal/sqlfile"
)

// record is which statements each top-level test executes, from one run of
// each test alone.
type record struct {
	Binary string             `json:"binary"` // hash of the test binary recorded
	Tests  map[string]testRun `json:"tests"`
}

type testRun struct {
	Pass       bool          `json:"pass"`
	Took       time.Duration `json:"took"`
	Statements []string      `json:"statements"`
}

// testsOf returns the tests that passed and executed statement, the
// fastest first, and the time they took together.
func (r *record) testsOf(statement string) ([]string, time.Duration) {
	var out []string
	var took time.Duration
	for name, t := range r.Tests {
		if t.Pass && contains(t.Statements, statement) {
			out = append(out, name)
			took += t.Took
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := r.Tests[out[i]].Took, r.Tests[out[j]].Took
		return a < b || a == b && out[i] < out[j]
	})
	return out, took
}

// stages splits tests (fastest first) into the fast ones, run first, and
// the rest, run only when the fast ones all pass: most mutants are killed
// by a fast test.
func (r *record) stages(tests []string) [][]string {
	var fast time.Duration
	for i, name := range tests {
		fast += r.Tests[name].Took
		if fast > 2*time.Second && i > 0 && i < len(tests)-1 {
			return [][]string{tests[:i], tests[i:]}
		}
	}
	return [][]string{tests}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

var marker = regexp.MustCompile(`/\* sqlmutate:([a-z0-9_]+\.[a-z0-9_]+) \*/`)

// recording returns the record of pkg, running (and adding to the cached
// record in the work directory) each top-level test not yet recorded.
func recording(ctx context.Context, cfg config, srv *pgharness.Server, pkg, bin string) (*record, error) {
	cache := filepath.Join(cfg.work, pkg+".record.json")
	sum, err := fileHash(bin)
	if err != nil {
		return nil, err
	}
	rec := &record{Tests: map[string]testRun{}}
	if b, err := os.ReadFile(cache); err == nil {
		if err := json.Unmarshal(b, rec); err != nil {
			return nil, fmt.Errorf("%s: %w", cache, err)
		}
	}
	if rec.Binary != sum { // another build: a test or a statement changed
		rec = &record{Binary: sum, Tests: map[string]testRun{}}
	}
	env := []string{pgharness.EnvURL + "=" + srv.URL}
	list := exec.CommandContext(ctx, bin, "-test.list", ".")
	list.Dir, list.Env = pkg, append(os.Environ(), env...)
	out, err := list.Output()
	if err != nil {
		return nil, fmt.Errorf("-test.list: %w", err)
	}
	var todo []string
	for _, name := range strings.Fields(string(out)) {
		if _, done := rec.Tests[name]; !done && (strings.HasPrefix(name, "Test") || strings.HasPrefix(name, "Example") || strings.HasPrefix(name, "Fuzz")) {
			todo = append(todo, name)
		}
	}
	if len(todo) == 0 {
		return rec, nil
	}
	if err := logStatements(ctx, srv.URL, "all"); err != nil {
		return nil, err
	}
	defer logStatements(context.WithoutCancel(ctx), srv.URL, "none")
	for _, name := range todo {
		run, err := recordTest(ctx, cfg, srv, pkg, bin, name, env)
		if err != nil {
			return nil, err
		}
		rec.Tests[name] = run
		fmt.Fprintf(os.Stderr, "record %s %s: pass %v, %s, %d statements\n", pkg, name, run.Pass, run.Took.Round(time.Millisecond), len(run.Statements))
		b, err := json.MarshalIndent(rec, "", "\t")
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(cache, b, 0o644); err != nil {
			return nil, err
		}
	}
	return rec, nil
}

// recordTest runs one test with the record marker on and reads the
// statements it executed from the server's log.
func recordTest(ctx context.Context, cfg config, srv *pgharness.Server, pkg, bin, name string, env []string) (testRun, error) {
	logPath := filepath.Join(srv.Dir(), "server.log")
	fi, err := os.Stat(logPath)
	if err != nil {
		return testRun{}, err
	}
	_, code, took := runTests(ctx, bin, pkg, []string{name}, cfg.parallel, 5*time.Minute, append(env, sqlfile.EnvMutateRecord+"=1"))
	if ctx.Err() != nil {
		return testRun{}, ctx.Err()
	}
	f, err := os.Open(logPath)
	if err != nil {
		return testRun{}, err
	}
	defer f.Close()
	if _, err := f.Seek(fi.Size(), 0); err != nil {
		return testRun{}, err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return testRun{}, err
	}
	seen := map[string]bool{}
	run := testRun{Pass: code == 0, Took: took}
	for _, m := range marker.FindAllStringSubmatch(string(b), -1) {
		if !seen[m[1]] {
			seen[m[1]] = true
			run.Statements = append(run.Statements, m[1])
		}
	}
	sort.Strings(run.Statements)
	return run, nil
}

// logStatements sets the server's log_statement and reloads it.
func logStatements(ctx context.Context, url, level string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "ALTER SYSTEM SET log_statement = '"+level+"'"); err != nil {
		return err
	}
	// log_statement shows what runs; log_min_duration_statement = 0 also
	// shows each parse of the extended protocol, with its text: a
	// statement a test only prepares (to EXPLAIN it) is recorded too.
	duration := "-1"
	if level == "all" {
		duration = "0"
	}
	if _, err := conn.Exec(ctx, "ALTER SYSTEM SET log_min_duration_statement = "+duration); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return err
	}
	time.Sleep(500 * time.Millisecond) // the postmaster signals its children
	return nil
}

// fileHash returns the SHA-256 of a file, in hex.
func fileHash(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
