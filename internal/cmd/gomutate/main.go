// Command gomutate runs gremlins (github.com/go-gremlins/gremlins), the Go
// mutation tester, over the library packages, and tests each mutant with
// the tests that execute its line only.
//
// gremlins runs the whole test suite of a package for every mutant: hours
// for a package whose suite takes a minute or two. gomutate first records
// which top-level tests execute which line (each test run alone, with a
// coverage profile, against one throwaway PostgreSQL), then runs gremlins
// with a directory first on PATH in which "go" is gomutate itself: for a
// mutant's "go test" it finds the line gremlins changed (the first token
// that differs from the module's own file) and adds -run with the tests
// that execute that line. A line no recorded test executes runs the whole
// suite, as gremlins would. Every other go command goes to the real go.
//
// It prints, per package, killed / lived / not covered / timed out / not
// viable, the efficacy and the wall time, and every mutant that lived or
// timed out with its source line. Run it from the module root, niced (see
// docs/mutation.md):
//
//	nice -n 19 go run ./internal/cmd/gomutate -pkg pgtx,inbox
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/seckillkit/seckill/internal/pgharness"
)

// module is the import path of the module under test.
const module = "github.com/seckillkit/seckill"

// The environment the wrapper ("go") reads.
const (
	envGo   = "GOMUTATE_GO"   // the real go command
	envRoot = "GOMUTATE_ROOT" // the module's own directory
	envWork = "GOMUTATE_WORK" // the work directory: coverage maps, run log
)

// config is the command line.
type config struct {
	pkgs        []string
	work        string
	gremlins    string
	workers     int
	testCPU     int
	coefficient int
	remap       bool
	files       *regexp.Regexp // mutate only the package files whose base name matches; nil: all
}

func main() {
	if filepath.Base(os.Args[0]) == "go" {
		os.Exit(wrap(os.Args[1:]))
	}
	var cfg config
	pkgs := flag.String("pkg", "pgtx,inbox,outbox,order,inventory,migrate", "the packages, comma-separated")
	flag.StringVar(&cfg.work, "work", filepath.Join(os.TempDir(), "gomutate"), "work directory: coverage maps, gremlins' results, the run log")
	flag.StringVar(&cfg.gremlins, "gremlins", "gremlins", "the gremlins command")
	flag.IntVar(&cfg.workers, "workers", 1, "gremlins' --workers")
	flag.IntVar(&cfg.testCPU, "test-cpu", 2, "gremlins' --test-cpu")
	flag.IntVar(&cfg.coefficient, "timeout-coefficient", 0, "gremlins' --timeout-coefficient (0: enough for three minutes a mutant)")
	flag.BoolVar(&cfg.remap, "remap", false, "record the coverage maps again even when the package has not changed")
	files := flag.String("files", "", "mutate only the package's files whose base name matches this regexp (a run split by files; each group's results are kept apart)")
	flag.Parse()
	if *files != "" {
		re, err := regexp.Compile(*files)
		if err != nil {
			fmt.Fprintln(os.Stderr, "gomutate: -files:", err)
			os.Exit(2)
		}
		cfg.files = re
	}
	cfg.pkgs = strings.Split(*pkgs, ",")
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "gomutate:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config) error {
	if _, err := os.Stat("go.mod"); err != nil {
		return fmt.Errorf("run me from the module root: %w", err)
	}
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	realGo, err := exec.LookPath("go")
	if err != nil {
		return err
	}
	if cfg.gremlins, err = findGremlins(cfg.gremlins); err != nil {
		return err
	}
	if cfg.work, err = filepath.Abs(cfg.work); err != nil {
		return err
	}
	binDir := filepath.Join(cfg.work, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	link := filepath.Join(binDir, "go")
	_ = os.Remove(link)
	if err := os.Symlink(self, link); err != nil {
		return err
	}
	url := os.Getenv(pgharness.EnvURL)
	if url == "" {
		start, cancel := context.WithTimeout(ctx, 2*time.Minute)
		srv, err := pgharness.StartThrowaway(start, pgharness.Options{})
		cancel()
		if err != nil {
			return err
		}
		defer srv.Stop()
		url = srv.URL
	}
	env := append(os.Environ(),
		pgharness.EnvURL+"="+url,
		envGo+"="+realGo, envRoot+"="+root, envWork+"="+cfg.work,
		"PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	for _, pkg := range cfg.pkgs {
		if err := runPackage(ctx, cfg, url, env, pkg); err != nil {
			return fmt.Errorf("%s: %w", pkg, err)
		}
	}
	return nil
}

// findGremlins resolves the gremlins command, also in go install's directory.
func findGremlins(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	out, err := exec.Command("go", "env", "GOPATH").Output()
	if err == nil {
		p := filepath.Join(strings.TrimSpace(string(out)), "bin", name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found: go install github.com/go-gremlins/gremlins/cmd/gremlins@v0.6.0", name)
}
