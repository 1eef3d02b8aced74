// Command sqlmutate runs the SQL-guard mutation test of the packages whose
// statements live in <pkg>/sql/*.sql (inbox, outbox, order, inventory): for
// each statement it generates the mutants of its guards — one conjunct of
// a WHERE, ON, HAVING or CASE WHEN condition dropped, a comparison flipped,
// a status literal swapped for another value of its enum, a locking clause
// or SKIP LOCKED removed, a LIMIT dropped — and runs the package's tests
// against each, with the statement replaced through internal/sqlfile's
// hook (compiled in only under the build tag sqlmutate).
//
// It builds each package's test binary once (go test -c -tags sqlmutate),
// starts one throwaway PostgreSQL (internal/pgharness) for every run,
// marks as invalid the mutants the server refuses to prepare against a
// migrated schema, records which top-level tests execute which statement
// (each test run alone, the server logging statements each prefixed with
// its name), and runs for each mutant only the tests that execute its
// statement, with -test.failfast and a deadline. Run it from the module
// root, niced (see docs/mutation.md):
//
//	nice -n 19 go run ./internal/cmd/sqlmutate -pkg inbox,outbox
//
// -list prints the mutants without running anything.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/seckillkit/seckill/internal/pgharness"
)

// config is the command line.
type config struct {
	pkgs     []string
	work     string
	parallel int
	timeout  time.Duration
	only     *regexp.Regexp
	list     bool
	dump     string
	stopAt   time.Time
	resume   bool
}

func main() {
	var cfg config
	pkgs := flag.String("pkg", "inbox,outbox,order,inventory", "the packages, comma-separated")
	flag.StringVar(&cfg.work, "work", filepath.Join(os.TempDir(), "sqlmutate"), "work directory: test binaries, recordings, results")
	flag.IntVar(&cfg.parallel, "parallel", 2, "-test.parallel of each test run")
	flag.DurationVar(&cfg.timeout, "timeout", 0, "deadline of one mutant's run (0: four times the recorded time of its tests, at least 2m)")
	only := flag.String("only", "", "run only the statements whose pkg.name matches this regexp")
	flag.BoolVar(&cfg.list, "list", false, "print the mutants and stop")
	flag.StringVar(&cfg.dump, "dump", "", "with -list: write each mutant's text to this directory, as <pkg.name>-<n>.sql")
	stop := flag.Duration("stop", 0, "start no mutant after this long; the rest are reported as not run (0: no limit)")
	flag.BoolVar(&cfg.resume, "resume", false, "keep the killed and invalid mutants of the last run's results in the work directory; test the rest")
	flag.Parse()
	if *stop > 0 {
		cfg.stopAt = time.Now().Add(*stop)
	}
	cfg.pkgs = strings.Split(*pkgs, ",")
	cfg.only = regexp.MustCompile(*only)
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "sqlmutate:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config) error {
	if _, err := os.Stat("go.mod"); err != nil {
		return fmt.Errorf("run me from the module root: %w", err)
	}
	if cfg.list {
		for _, pkg := range cfg.pkgs {
			if err := listMutants(pkg, cfg.only, cfg.dump); err != nil {
				return err
			}
		}
		return nil
	}
	if err := os.MkdirAll(cfg.work, 0o755); err != nil {
		return err
	}
	start, cancel := context.WithTimeout(ctx, 2*time.Minute)
	srv, err := pgharness.StartThrowaway(start, pgharness.Options{})
	cancel()
	if err != nil {
		return err
	}
	defer srv.Stop()
	if err := migrateCheckSchema(ctx, srv.URL); err != nil {
		return err
	}
	for _, pkg := range cfg.pkgs {
		if err := runPackage(ctx, cfg, srv, pkg); err != nil {
			return fmt.Errorf("%s: %w", pkg, err)
		}
	}
	return nil
}

func listMutants(pkg string, only *regexp.Regexp, dump string) error {
	ms, err := packageMutants(pkg, only)
	if err != nil {
		return err
	}
	n := map[string]int{}
	for _, m := range ms {
		n[m.Statement]++
		file := fmt.Sprintf("%s-%d.sql", m.Statement, n[m.Statement])
		fmt.Printf("%s\t%s:%d\t%s\t%s\n\t- %s\n\t+ %s\n", m.Statement, m.File, m.Line, m.Desc, file, m.Orig, m.New)
		if dump != "" {
			if err := os.WriteFile(filepath.Join(dump, file), []byte(m.Text), 0o644); err != nil {
				return err
			}
		}
	}
	fmt.Printf("%s: %d mutants\n", pkg, len(ms))
	return nil
}
