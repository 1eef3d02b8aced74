package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestFirstTokenDiff(t *testing.T) {
	orig := []byte("package p\n\nfunc f(a, b int) bool {\n\treturn a < b\n}\n")
	// go/printer's layout may differ; only the tokens count.
	mut := []byte("package p\n\nfunc f(a, b int) bool {\n\treturn a   <= b\n}\n")
	if got := firstTokenDiff(orig, mut); got != 4 {
		t.Fatalf("line %d, want 4", got)
	}
	if got := firstTokenDiff(orig, []byte("package p\nfunc f(a,  b int)  bool {\n  return a<b\n}\n")); got != 0 {
		t.Fatalf("layout only: line %d, want 0", got)
	}
}

func TestParseBlock(t *testing.T) {
	file, from, to, count, ok := parseBlock(module + "/pgtx/run.go:12.34,15.2 3 1")
	if !ok || file != "pgtx/run.go" || from != 12 || to != 15 || count != 1 {
		t.Fatalf("got %q %d %d %d %v", file, from, to, count, ok)
	}
	for _, l := range []string{"mode: set", "example.com/x/a.go:1.1,2.2 1 1", module + "/a.go:bad"} {
		if _, _, _, _, ok := parseBlock(l); ok {
			t.Fatalf("parsed %q", l)
		}
	}
}

func TestCoverageMapSelectsTests(t *testing.T) {
	dir := t.TempDir()
	prof := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("mode: set\n"+body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	m := &covMap{Blocks: map[string][]block{}, Tests: []testRun{
		{Name: "TestSlow", Pass: true, Took: 5 * time.Second},
		{Name: "TestFast", Pass: true, Took: 10 * time.Millisecond},
		{Name: "TestBroken", Pass: false, Took: time.Millisecond},
		{Name: "TestOther", Pass: true, Took: time.Second},
	}}
	lines := module + "/p/a.go:10.1,20.2 3 1\n" + module + "/p/a.go:30.1,31.2 1 0\n"
	for i, name := range []string{"TestSlow", "TestFast", "TestBroken"} {
		if err := m.addProfile(prof(name, lines), i); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.addProfile(prof("TestOther", module+"/p/a.go:40.1,41.2 1 1\n"), 3); err != nil {
		t.Fatal(err)
	}
	if err := m.addProfile(filepath.Join(dir, "missing"), 3); err != nil {
		t.Fatal(err)
	}
	// A test that failed alone is never selected; a line no test executes
	// selects none (the wrapper then runs the whole suite).
	if got := m.testsAt("p/a.go", 15); !slices.Equal(got, []string{"TestFast", "TestSlow"}) {
		t.Fatalf("line 15: %v", got)
	}
	if got := m.testsAt("p/a.go", 30); got != nil {
		t.Fatalf("line 30 (count 0): %v", got)
	}
	if got := m.stages([]string{"TestSlow", "TestFast"}); len(got) != 1 || !slices.Equal(got[0], []string{"TestFast", "TestSlow"}) {
		t.Fatalf("stages: %v", got)
	}
	m.Tests = append(m.Tests, testRun{Name: "TestMid", Pass: true, Took: 3 * time.Second})
	if got := m.stages([]string{"TestSlow", "TestMid", "TestFast", "TestOther"}); len(got) != 2 ||
		!slices.Equal(got[0], []string{"TestFast", "TestOther"}) || !slices.Equal(got[1], []string{"TestMid", "TestSlow"}) {
		t.Fatalf("stages: %v", got)
	}
}

func TestNarrowLeavesOtherCommandsAlone(t *testing.T) {
	for _, args := range [][]string{
		{"mod", "download"},
		{"test", "-cover", "-coverprofile", "c.out", "./pgtx/..."},
	} {
		if got := narrow(args); len(got) != 1 || !slices.Equal(got[0], args) {
			t.Fatalf("narrow(%v) = %v", args, got)
		}
	}
}

func TestSplitFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, f := range []string{"relay.go", "relay_test.go", "mark.go", "claim.go"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("package p\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	excluded, kept, err := splitFiles(dir, regexp.MustCompile(`^(mark|claim)\.go$`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(kept, ",") != "claim.go,mark.go" || strings.Join(excluded, ",") != "relay.go" {
		t.Fatalf("kept %v, excluded %v; want claim.go and mark.go kept, relay.go excluded (tests never listed)", kept, excluded)
	}
}
