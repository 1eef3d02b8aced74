package main

import (
	"bufio"
	"context"
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
)

// gremlinsResult is the part of gremlins' --output file gomutate reads.
type gremlinsResult struct {
	Files []struct {
		Name      string `json:"file_name"`
		Mutations []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
			Line   int    `json:"line"`
			Column int    `json:"column"`
		} `json:"mutations"`
	} `json:"files"`
}

// runPackage records the coverage map of pkg, runs gremlins over it and
// prints the report.
func runPackage(ctx context.Context, cfg config, url string, env []string, pkg string) error {
	began := time.Now()
	m, err := coverage(ctx, cfg, url, pkg)
	if err != nil {
		return err
	}
	var suite time.Duration
	for _, t := range m.Tests {
		suite += t.Took
	}
	coef := cfg.coefficient
	if coef == 0 {
		// gremlins' deadline is its coverage run's time (about one suite)
		// times the coefficient.
		coef = max(3, int((3*time.Minute)/max(suite, time.Second))+1)
	}
	name := pkg
	args := []string{"unleash", "--workers", fmt.Sprint(cfg.workers), "--test-cpu", fmt.Sprint(cfg.testCPU),
		"--timeout-coefficient", fmt.Sprint(coef)}
	if cfg.files != nil {
		excluded, kept, err := splitFiles(pkg, cfg.files)
		if err != nil {
			return err
		}
		if len(kept) == 0 {
			return fmt.Errorf("%s: -files %s matches none of its files", pkg, cfg.files)
		}
		for _, f := range excluded { // gremlins matches the path it walks, relative to where it runs
			args = append(args, "--exclude-files", "(^|/)"+regexp.QuoteMeta(f)+"$")
		}
		name = pkg + "." + strings.Join(kept, "+")
		fmt.Fprintf(os.Stderr, "gomutate: %s: mutating %s only\n", pkg, strings.Join(kept, ", "))
	}
	out := filepath.Join(cfg.work, name+".gremlins.json")
	g := exec.CommandContext(ctx, cfg.gremlins, append(args, "--output", out, "./"+pkg)...)
	g.Env = env
	logf, err := os.Create(filepath.Join(cfg.work, name+".gremlins.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	g.Stdout, g.Stderr = io.MultiWriter(logf, os.Stderr), io.MultiWriter(logf, os.Stderr)
	if err := g.Run(); err != nil {
		return fmt.Errorf("gremlins: %w", err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return err
	}
	var res gremlinsResult
	if err := json.Unmarshal(b, &res); err != nil {
		return err
	}
	report(os.Stdout, name, pkg, &res, len(m.Tests), time.Since(began))
	return nil
}

// splitFiles sorts the package's non-test Go files by the -files regexp:
// the base names gremlins must leave alone and the ones it mutates.
func splitFiles(pkg string, files *regexp.Regexp) (excluded, kept []string, err error) {
	all, err := filepath.Glob(filepath.Join(pkg, "*.go"))
	if err != nil {
		return nil, nil, err
	}
	for _, f := range all {
		base := filepath.Base(f)
		switch {
		case strings.HasSuffix(base, "_test.go"):
		case files.MatchString(base):
			kept = append(kept, base)
		default:
			excluded = append(excluded, base)
		}
	}
	return excluded, kept, nil
}

// report prints the counts of a run over pkg (named name: the package, or
// the package and the files of -files) and every mutant that lived or
// timed out.
func report(w io.Writer, name, pkg string, res *gremlinsResult, tests int, wall time.Duration) {
	n := map[string]int{}
	var notable []string
	for _, f := range res.Files {
		for _, mu := range f.Mutations {
			n[mu.Status]++
			if mu.Status == "LIVED" || mu.Status == "TIMED OUT" {
				notable = append(notable, fmt.Sprintf("%s %s:%d:%d %s\t%s", mu.Status, f.Name, mu.Line, mu.Column, mu.Type, sourceLine(filepath.Join(pkg, filepath.Base(f.Name)), mu.Line)))
			}
		}
	}
	eff := 0.0
	if k, l := n["KILLED"], n["LIVED"]; k+l > 0 {
		eff = 100 * float64(k) / float64(k+l)
	}
	fmt.Fprintf(w, "| package | killed | lived | not covered | timed out | not viable | efficacy | tests recorded | wall |\n")
	fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %d | %.1f %% | %d | %s |\n", name,
		n["KILLED"], n["LIVED"], n["NOT COVERED"], n["TIMED OUT"], n["NOT VIABLE"], eff, tests, wall.Round(time.Second))
	sort.Strings(notable)
	for _, s := range notable {
		fmt.Fprintln(w, s)
	}
}

// sourceLine returns line n of file (relative to the module root), trimmed.
func sourceLine(file string, n int) string {
	f, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for i := 1; sc.Scan(); i++ {
		if i == n {
			return strings.TrimSpace(sc.Text())
		}
	}
	return ""
}
