package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/seckillkit/seckill/internal/pgharness"
)

// covMap is which top-level tests execute which lines of one package, from
// one run of each test alone with a coverage profile.
type covMap struct {
	Key    string             `json:"key"` // hash of the package's Go files
	Tests  []testRun          `json:"tests"`
	Blocks map[string][]block `json:"blocks"` // by file, relative to the module root
}

type testRun struct {
	Name string        `json:"name"`
	Pass bool          `json:"pass"`
	Took time.Duration `json:"took"`
}

// block is a covered range of lines and the tests (indexes into Tests)
// that execute it.
type block struct {
	From  int   `json:"from"`
	To    int   `json:"to"`
	Tests []int `json:"tests"`
}

// testsAt returns the tests that passed alone and execute line of file.
func (m *covMap) testsAt(file string, line int) []string {
	seen := map[int]bool{}
	var out []string
	for _, b := range m.Blocks[file] {
		if line < b.From || line > b.To {
			continue
		}
		for _, i := range b.Tests {
			if !seen[i] && m.Tests[i].Pass {
				seen[i] = true
				out = append(out, m.Tests[i].Name)
			}
		}
	}
	sort.Strings(out)
	return out
}

// stages orders tests (names from testsAt) fastest first and splits them
// into the fast ones, about two seconds together, and the rest.
func (m *covMap) stages(tests []string) [][]string {
	took := map[string]time.Duration{}
	for _, t := range m.Tests {
		took[t.Name] = t.Took
	}
	sorted := slices.Clone(tests)
	sort.SliceStable(sorted, func(i, j int) bool { return took[sorted[i]] < took[sorted[j]] })
	var fast time.Duration
	for i, name := range sorted {
		fast += took[name]
		if fast > 2*time.Second && i > 0 && i < len(sorted)-1 {
			return [][]string{sorted[:i], sorted[i:]}
		}
	}
	return [][]string{sorted}
}

func mapFile(work, pkg string) string { return filepath.Join(work, pkg+".map.json") }

func loadMap(work, pkg string) (*covMap, error) {
	b, err := os.ReadFile(mapFile(work, pkg))
	if err != nil {
		return nil, err
	}
	var m covMap
	return &m, json.Unmarshal(b, &m)
}

// packageKey hashes the Go files of pkg: a changed package is recorded again.
func packageKey(pkg string) (string, error) {
	files, err := filepath.Glob(filepath.Join(pkg, "*.go"))
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", f, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// coverage returns the coverage map of pkg, recording it unless the
// work directory holds one of the same package source.
func coverage(ctx context.Context, cfg config, url, pkg string) (*covMap, error) {
	key, err := packageKey(pkg)
	if err != nil {
		return nil, err
	}
	if m, err := loadMap(cfg.work, pkg); err == nil && m.Key == key && !cfg.remap {
		return m, nil
	}
	bin := filepath.Join(cfg.work, pkg+".cover.test")
	build := exec.CommandContext(ctx, "go", "test", "-c", "-cover", "-covermode", "set", "-o", bin, "./"+pkg)
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go test -c: %w: %s", err, out)
	}
	names, err := listTests(ctx, bin, pkg)
	if err != nil {
		return nil, err
	}
	m := &covMap{Key: key, Blocks: map[string][]block{}}
	profDir := filepath.Join(cfg.work, "cover", pkg)
	if err := os.MkdirAll(profDir, 0o755); err != nil {
		return nil, err
	}
	for i, name := range names {
		prof := filepath.Join(profDir, name+".out")
		run := exec.CommandContext(ctx, bin, "-test.run", "^"+name+"$", "-test.count", "1", "-test.short",
			"-test.parallel", "2", "-test.timeout", "10m", "-test.coverprofile", prof)
		run.Dir = pkg
		run.Env = append(os.Environ(), pgharness.EnvURL+"="+url)
		began := time.Now()
		out, err := run.CombinedOutput()
		tr := testRun{Name: name, Pass: err == nil, Took: time.Since(began)}
		m.Tests = append(m.Tests, tr)
		fmt.Fprintf(os.Stderr, "%s: recorded %s (%s, pass %v)\n", pkg, name, tr.Took.Round(time.Millisecond), tr.Pass)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s\n", lastLines(out, 20))
		}
		if err := m.addProfile(prof, i); err != nil {
			return nil, err
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return m, os.WriteFile(mapFile(cfg.work, pkg), b, 0o644)
}

// listTests lists the top-level tests, examples and fuzz targets of a test
// binary (their seed corpora run as tests).
func listTests(ctx context.Context, bin, pkg string) ([]string, error) {
	list := exec.CommandContext(ctx, bin, "-test.list", ".")
	list.Dir = pkg
	out, err := list.Output()
	if err != nil {
		return nil, fmt.Errorf("-test.list: %w", err)
	}
	var names []string
	for _, l := range strings.Fields(string(out)) {
		if strings.HasPrefix(l, "Test") || strings.HasPrefix(l, "Example") || strings.HasPrefix(l, "Fuzz") {
			names = append(names, l)
		}
	}
	return names, nil
}

// addProfile adds the executed blocks of a coverage profile to test i.
// A missing profile (the test binary died before writing it) adds nothing.
func (m *covMap) addProfile(prof string, i int) error {
	f, err := os.Open(prof)
	if os.IsNotExist(err) {
		return nil
	} else if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// github.com/seckillkit/seckill/pgtx/run.go:12.34,15.2 3 1
		file, from, to, count, ok := parseBlock(sc.Text())
		if !ok || count == 0 {
			continue
		}
		m.Blocks[file] = addBlock(m.Blocks[file], from, to, i)
	}
	return sc.Err()
}

func addBlock(bs []block, from, to, test int) []block {
	for k := range bs {
		if bs[k].From == from && bs[k].To == to {
			if n := len(bs[k].Tests); n == 0 || bs[k].Tests[n-1] != test {
				bs[k].Tests = append(bs[k].Tests, test)
			}
			return bs
		}
	}
	return append(bs, block{From: from, To: to, Tests: []int{test}})
}

// parseBlock parses one line of a coverage profile into the file (relative
// to the module root), its first and last line, and its count.
func parseBlock(line string) (file string, from, to, count int, ok bool) {
	colon := strings.LastIndexByte(line, ':')
	if colon < 0 || !strings.HasPrefix(line, module+"/") {
		return "", 0, 0, 0, false
	}
	file = strings.TrimPrefix(line[:colon], module+"/")
	var fromCol, toCol, stmts int
	if _, err := fmt.Sscanf(line[colon+1:], "%d.%d,%d.%d %d %d", &from, &fromCol, &to, &toCol, &stmts, &count); err != nil {
		return "", 0, 0, 0, false
	}
	return file, from, to, count, true
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
