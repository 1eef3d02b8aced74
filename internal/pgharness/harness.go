// Package pgharness gives tests and example programs a PostgreSQL server:
// the one named by SECKILL_DATABASE_URL when it is set, otherwise a throwaway
// cluster started from the local PostgreSQL binaries in a temporary
// directory and removed by Stop.
//
// The throwaway cluster keeps fsync and synchronous_commit on, so a crash
// drill against it means what it would mean in production. When the process
// runs as root the server runs as the unprivileged "postgres" OS user
// (initdb refuses root). The server is started with a parent-death signal,
// so it goes down with the process even when Stop is never called.
//
// A throwaway primary gets a streaming standby with [Server.StartStandby]
// (pg_basebackup; synchronous or asynchronous; an apply delay for a
// lagging replica), which [Server.Promote] turns into the new primary after
// [Server.Crash] or [Server.Kill] of the old one; [MultiHostURL] names both
// with target_session_attrs=read-write. [Options.Archive] turns on WAL
// archiving with an archive_command that [Server.SetArchiveFailing] makes
// fail.
package pgharness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvURL is the environment variable that points tests and examples at an
// existing server instead of a throwaway one.
const EnvURL = "SECKILL_DATABASE_URL"

// EnvBinDir names a directory holding initdb and postgres, overriding the
// search.
const EnvBinDir = "SECKILL_PG_BINDIR"

// ErrNoPostgres is returned when no server URL is set and no PostgreSQL
// binaries are found.
var ErrNoPostgres = errors.New("no PostgreSQL available: install the PostgreSQL server binaries " +
	"(Debian/Ubuntu: apt-get install postgresql; macOS: brew install postgresql) " +
	"or set " + EnvURL + " to a server you can create schemas in")

// Options tunes a throwaway cluster. The zero value is fine.
type Options struct {
	// MaxConnections is the server's max_connections. Defaults to 300.
	MaxConnections int
	// Settings are extra "name=value" server settings (postgres -c).
	// They come after the harness's own, so they override them.
	Settings []string
	// Archive turns WAL archiving on (archive_mode = on) with an
	// archive_command that copies each finished WAL segment into
	// [Server.ArchiveDir] — and fails while [Server.SetArchiveFailing] says
	// so. Defaults to false.
	Archive bool
}

// Server is a PostgreSQL server for tests and examples.
type Server struct {
	// URL is a connection string for the server's "postgres" database.
	URL string

	owned  bool
	binDir string
	dir    string // temp root: data/, sock/, server.log
	port   int
	args   []string
	cred   *syscall.Credential
	proc   process

	heldPID int // the WAL receiver HoldReplication stopped
}

// Owned reports whether the server is a throwaway cluster this process
// started (and so may stop, crash and restart).
func (s *Server) Owned() bool { return s.owned }

// Port is the throwaway cluster's TCP port on 127.0.0.1 (0 when not owned).
func (s *Server) Port() int { return s.port }

// Dir is the throwaway cluster's temporary directory ("" when not owned).
func (s *Server) Dir() string { return s.dir }

// BinDir is the directory of the PostgreSQL binaries in use ("" when not
// owned).
func (s *Server) BinDir() string { return s.binDir }

// Start returns the server named by SECKILL_DATABASE_URL, or starts a
// throwaway cluster. It fails with an error matching [ErrNoPostgres] when
// neither is possible.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if url := os.Getenv(EnvURL); url != "" {
		s := &Server{URL: url}
		if err := ping(ctx, url); err != nil {
			return nil, fmt.Errorf("pgharness: %s is set but the server does not answer: %w", EnvURL, err)
		}
		return s, nil
	}
	return StartThrowaway(ctx, opts)
}

// StartThrowaway starts a new cluster from the local binaries, whatever
// SECKILL_DATABASE_URL says. Crash drills use it: they need a server they
// own.
func StartThrowaway(ctx context.Context, opts Options) (*Server, error) {
	bin, err := FindBinDir()
	if err != nil {
		return nil, err
	}
	s := &Server{owned: true, binDir: bin}
	if os.Geteuid() == 0 {
		if s.cred, err = unprivileged(); err != nil {
			return nil, err
		}
	}
	if s.dir, err = s.makeDirs("seckill-pg-"); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(s.dir)
		}
	}()
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"),
		"-D", filepath.Join(s.dir, "data"), "-U", "postgres", "--auth=trust",
		"-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	initdb.Dir = s.dir
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pgharness: initdb: %w: %s", err, strings.TrimSpace(string(out)))
	}
	if s.port, err = freePort(); err != nil {
		return nil, err
	}
	s.args = serverArgs(s.dir, s.port, opts.MaxConnections)
	if opts.Archive {
		if err := s.makeArchiveDir(); err != nil {
			return nil, err
		}
		s.args = append(s.args,
			"-c", "archive_mode=on",
			"-c", "archive_command="+s.archiveCommand())
	}
	for _, kv := range opts.Settings {
		s.args = append(s.args, "-c", kv)
	}
	s.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
	if err := s.launch(ctx); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

// serverArgs are the postgres arguments of a throwaway server in dir on
// port (maxConns 0: 300 connections).
func serverArgs(dir string, port, maxConns int) []string {
	if maxConns == 0 {
		maxConns = 300
	}
	return []string{
		"-D", filepath.Join(dir, "data"),
		"-p", strconv.Itoa(port),
		"-k", filepath.Join(dir, "sock"),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "max_connections=" + strconv.Itoa(maxConns),
		"-c", "fsync=on",
		"-c", "synchronous_commit=on",
		"-c", "full_page_writes=on",
		"-c", "shared_buffers=256MB",
		"-c", "max_locks_per_transaction=256",
		"-c", "log_min_messages=warning",
		"-c", "logging_collector=off",
	}
}

// launch starts the postmaster on the existing data directory and waits
// until it accepts connections.
func (s *Server) launch(ctx context.Context) error {
	s.proc.name, s.proc.logPath, s.proc.cred = "postgres", filepath.Join(s.dir, "server.log"), s.cred
	// SIGQUIT: immediate shutdown if this process dies.
	if err := s.proc.start(filepath.Join(s.binDir, "postgres"), s.args, s.dir, syscall.SIGQUIT, false); err != nil {
		return err
	}
	return s.proc.waitReady(ctx, s.URL, 60*time.Second, syscall.SIGQUIT)
}

// Crash stops the throwaway server the way a power cut would look to
// clients: an immediate shutdown (SIGQUIT), no checkpoint, every connection
// dropped. The data directory is kept; [Server.Restart] runs crash recovery.
func (s *Server) Crash() error {
	if !s.owned {
		return errors.New("pgharness: cannot crash a server this process does not own")
	}
	s.proc.signal(syscall.SIGQUIT)
	return s.proc.waitExit(30 * time.Second)
}

// Restart starts the throwaway server again on the same data directory and
// port, after [Server.Crash]. It returns once crash recovery has finished
// and the server accepts connections.
func (s *Server) Restart(ctx context.Context) error {
	if !s.owned {
		return errors.New("pgharness: cannot restart a server this process does not own")
	}
	if err := s.proc.waitExit(30 * time.Second); err != nil {
		return err
	}
	return s.launch(ctx)
}

// Stop shuts a throwaway server down (fast shutdown) and removes its
// directory. It is a no-op for a server named by SECKILL_DATABASE_URL and
// safe to call more than once.
func (s *Server) Stop() error {
	if !s.owned {
		return nil
	}
	if s.heldPID != 0 {
		_ = s.ReleaseReplication() // a frozen WAL receiver would not shut down
	}
	err := s.proc.stop(syscall.SIGINT, 30*time.Second) // fast shutdown
	if rmErr := os.RemoveAll(s.dir); rmErr != nil && err == nil {
		err = rmErr
	}
	return err
}

func ping(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.Ping(ctx)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgharness: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func unprivileged() (*syscall.Credential, error) {
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.Atoi(u.Uid)
		gid, err2 := strconv.Atoi(u.Gid)
		if err1 != nil || err2 != nil || uid == 0 {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("pgharness: running as root, and initdb refuses root: create an unprivileged " +
		`"postgres" OS user (the postgresql package does) or run as a normal user`)
}

// FindBinDir finds a directory holding both initdb and postgres: first
// SECKILL_PG_BINDIR, then PATH, then `pg_config --bindir`, then the usual
// install locations (newest version first). It returns an error matching
// [ErrNoPostgres] when there is none.
func FindBinDir() (string, error) {
	has := func(dir string) bool {
		for _, b := range []string{"initdb", "postgres"} {
			if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.IsDir() {
				return false
			}
		}
		return true
	}
	if d := os.Getenv(EnvBinDir); d != "" {
		if has(d) {
			return d, nil
		}
		return "", fmt.Errorf("pgharness: %s=%s has no initdb and postgres: %w", EnvBinDir, d, ErrNoPostgres)
	}
	var cands []string
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		cands = append(cands, d)
		// PATH often holds symlinks (pg_wrapper, Homebrew): follow initdb.
		if p, err := filepath.EvalSymlinks(filepath.Join(d, "initdb")); err == nil {
			cands = append(cands, filepath.Dir(p))
		}
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		cands = append(cands, strings.TrimSpace(string(out)))
	}
	for _, pattern := range []string{"/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin", "/opt/homebrew/opt/postgresql@*/bin", "/usr/local/opt/postgresql@*/bin"} {
		m, _ := filepath.Glob(pattern)
		sort.Slice(m, func(i, j int) bool { return versionOf(m[i]) > versionOf(m[j]) })
		cands = append(cands, m...)
	}
	cands = append(cands, "/usr/local/pgsql/bin")
	for _, d := range cands {
		if d != "" && has(d) {
			return d, nil
		}
	}
	return "", ErrNoPostgres
}

func versionOf(dir string) int {
	for _, part := range strings.FieldsFunc(dir, func(r rune) bool { return r < '0' || r > '9' }) {
		if v, err := strconv.Atoi(part); err == nil {
			return v
		}
	}
	return 0
}
