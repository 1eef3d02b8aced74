package main

import (
	"bytes"
	"errors"
	"fmt"
	"go/scanner"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// wrap is gomutate run as "go" by gremlins: a mutant's "go test" runs the
// tests that execute the mutated line only; every other command goes to
// the real go unchanged.
func wrap(args []string) int {
	realGo := os.Getenv(envGo)
	if realGo == "" {
		fmt.Fprintln(os.Stderr, "gomutate: run as go without", envGo)
		return 2
	}
	stages := narrow(args)
	if len(stages) == 1 {
		err := syscall.Exec(realGo, append([]string{"go"}, stages[0]...), os.Environ())
		fmt.Fprintln(os.Stderr, "gomutate: exec go:", err)
		return 2
	}
	// The fast tests first: most mutants are killed by one of them, and
	// the slow ones then never run.
	for _, args := range stages {
		cmd := exec.Command(realGo, args...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		err := cmd.Run()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		} else if err != nil {
			fmt.Fprintln(os.Stderr, "gomutate: go:", err)
			return 2
		}
	}
	return 0
}

// narrow returns the argument lists of the real go commands: one list,
// args itself, but for gremlins' "go test ... <package>" of a mutant, with
// -run naming the tests that execute the mutated line, in two stages (the
// fastest tests first) when there are enough of them.
func narrow(args []string) [][]string {
	if len(args) < 2 || args[0] != "test" || contains(args, "-cover") {
		return [][]string{args}
	}
	// gremlins passes "-cpu N" as one argument.
	var out []string
	for _, a := range args {
		if f, v, ok := strings.Cut(a, " "); ok && strings.HasPrefix(f, "-") {
			out = append(out, f, v)
			continue
		}
		out = append(out, a)
	}
	// -short: the few tests that scale with it (thousands of concurrent
	// transactions) run a tenth of them, as in sqlmutate's runs.
	out = slices.Insert(out, len(out)-1, "-short")
	pkg := strings.TrimPrefix(strings.TrimPrefix(out[len(out)-1], module), "/")
	file, line, ok := mutatedLine(pkg)
	if !ok {
		return [][]string{out}
	}
	work := os.Getenv(envWork)
	m, err := loadMap(work, pkg)
	if err != nil {
		logRun(work, fmt.Sprintf("%s:%d no coverage map (%v): the whole suite", file, line, err))
		return [][]string{out}
	}
	tests := m.testsAt(file, line)
	if len(tests) == 0 {
		logRun(work, fmt.Sprintf("%s:%d no recorded test: the whole suite", file, line))
		return [][]string{out}
	}
	logRun(work, fmt.Sprintf("%s:%d %d tests: %s", file, line, len(tests), strings.Join(tests, " ")))
	var stages [][]string
	for _, st := range m.stages(tests) {
		run := "^(" + strings.Join(st, "|") + ")$"
		stages = append(stages, append(append(slices.Clone(out[:len(out)-1]), "-run", run), out[len(out)-1]))
	}
	return stages
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// mutatedLine finds, in the package directory of gremlins' copy of the
// module (the working directory or one above it), the Go file that
// differs from the module's own and the line of the first token that
// differs, in the module's own file.
func mutatedLine(pkg string) (string, int, bool) {
	root := os.Getenv(envRoot)
	wd, err := os.Getwd()
	if err != nil {
		return "", 0, false
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil && dir != root {
			return firstDiff(root, dir, pkg)
		}
		if dir == filepath.Dir(dir) {
			return "", 0, false
		}
	}
}

func firstDiff(root, copyRoot, pkg string) (string, int, bool) {
	files, err := filepath.Glob(filepath.Join(root, pkg, "*.go"))
	if err != nil {
		return "", 0, false
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") { // gremlins mutates no test file
			continue
		}
		rel, _ := filepath.Rel(root, f)
		orig, err1 := os.ReadFile(f)
		mut, err2 := os.ReadFile(filepath.Join(copyRoot, rel))
		if err1 != nil || err2 != nil || bytes.Equal(orig, mut) {
			continue
		}
		if line := firstTokenDiff(orig, mut); line > 0 {
			return filepath.ToSlash(rel), line, true
		}
	}
	return "", 0, false
}

// firstTokenDiff returns the line, in a, of the first token that differs
// between two Go sources (gremlins rewrites the whole file with go/printer,
// so lines may differ in layout but not in tokens), or 0.
func firstTokenDiff(a, b []byte) int {
	fs := token.NewFileSet()
	var sa, sb scanner.Scanner
	fa := fs.AddFile("a", -1, len(a))
	fb := fs.AddFile("b", -1, len(b))
	sa.Init(fa, a, nil, 0)
	sb.Init(fb, b, nil, 0)
	for {
		pa, ta, la := sa.Scan()
		_, tb, lb := sb.Scan()
		if ta != tb || la != lb && ta != token.SEMICOLON { // "\n" or ";"
			return fa.Line(pa)
		}
		if ta == token.EOF {
			return 0
		}
	}
}

func logRun(work, msg string) {
	f, err := os.OpenFile(filepath.Join(work, "runs.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s %s\n", time.Now().Format(time.RFC3339), msg)
}
