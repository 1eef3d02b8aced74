package pgharness

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// EnvPgBouncer names the pgbouncer binary to use, overriding the search.
const EnvPgBouncer = "SECKILL_PGBOUNCER"

// ErrNoPgBouncer is returned by [StartPgBouncer] when no pgbouncer binary
// is found.
var ErrNoPgBouncer = errors.New("no PgBouncer available: install it " +
	"(Debian/Ubuntu: apt-get install pgbouncer; macOS: brew install pgbouncer) " +
	"or set " + EnvPgBouncer + " to the pgbouncer binary")

// PoolMode is PgBouncer's pool_mode: when a server connection returns to
// the pool.
type PoolMode string

const (
	// PoolTransaction hands the server connection back after every
	// transaction (and after every statement outside one): the mode that
	// lets a few server connections serve many clients, and the one whose
	// restrictions a library must respect (no session state, no named
	// prepared statements before PgBouncer 1.21, no LISTEN).
	PoolTransaction PoolMode = "transaction"
	// PoolSession keeps the server connection for the client's whole
	// session; it behaves like a direct connection.
	PoolSession PoolMode = "session"
)

// QueryExecMode is the pgx default_query_exec_mode that [PgBouncer.URL]
// selects. "exec" runs every statement as one extended-protocol round trip
// (Parse of the unnamed statement, Bind, Execute, Sync) with no named
// prepared statement and no cached description, so it is correct however
// PgBouncer in transaction mode moves the client between server
// connections, and stays correct across schema changes. "cache_describe"
// is also correct through PgBouncer (it caches only descriptions and
// re-sends the SQL with every execution) and uses the binary format, but a
// cached description goes stale when a migration changes a table.
// "cache_statement" (pgx's default, named prepared statements) and
// "describe_exec" (two round trips on the unnamed statement) are not safe
// with transaction pooling on PgBouncer before 1.21.
const QueryExecMode = "exec"

// PgBouncerOptions tunes [StartPgBouncer]. The zero value is fine.
type PgBouncerOptions struct {
	// PoolMode is the pool_mode. Defaults to [PoolTransaction].
	PoolMode PoolMode
	// MaxClientConn is max_client_conn, the number of client connections
	// PgBouncer accepts. Defaults to 500.
	MaxClientConn int
	// DefaultPoolSize is default_pool_size, the number of server
	// connections per database and user. Defaults to 20.
	DefaultPoolSize int
	// Settings are extra "name = value" lines for the [pgbouncer] section
	// of pgbouncer.ini; a later line overrides an earlier one.
	Settings []string
}

// PgBouncer is a PgBouncer process in front of a [Server], started by
// [StartPgBouncer] and stopped by [PgBouncer.Stop].
type PgBouncer struct {
	// URL is a pgx connection string for the target's database through
	// PgBouncer, with sslmode=disable and default_query_exec_mode set to
	// [QueryExecMode].
	URL string

	bin  string
	mode PoolMode
	dir  string // temp root: pgbouncer.ini, userlist.txt, pgbouncer.log
	port int
	cred *syscall.Credential
	proc process
}

// Port is the TCP port PgBouncer listens on at 127.0.0.1.
func (b *PgBouncer) Port() int { return b.port }

// Dir is PgBouncer's temporary directory (configuration and log), removed
// by Stop.
func (b *PgBouncer) Dir() string { return b.dir }

// Mode is the pool mode PgBouncer runs in.
func (b *PgBouncer) Mode() PoolMode { return b.mode }

// Binary is the path of the pgbouncer binary in use.
func (b *PgBouncer) Binary() string { return b.bin }

// PoolConfig returns a pgxpool configuration parsed from URL, so with
// DefaultQueryExecMode set to [QueryExecMode]. Adjust it (MaxConns, …)
// before creating the pool.
func (b *PgBouncer) PoolConfig() (*pgxpool.Config, error) {
	return pgxpool.ParseConfig(b.URL)
}

// FindPgBouncer returns the pgbouncer binary: SECKILL_PGBOUNCER when set,
// else the first on PATH, else /usr/sbin/pgbouncer or
// /usr/local/sbin/pgbouncer. It returns an error matching [ErrNoPgBouncer]
// when there is none.
func FindPgBouncer() (string, error) {
	isExec := func(p string) bool {
		fi, err := os.Stat(p)
		return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
	}
	if p := os.Getenv(EnvPgBouncer); p != "" {
		if isExec(p) {
			return p, nil
		}
		return "", fmt.Errorf("pgharness: %s=%s is not an executable: %w", EnvPgBouncer, p, ErrNoPgBouncer)
	}
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer"} {
		if isExec(p) {
			return p, nil
		}
	}
	return "", ErrNoPgBouncer
}

// StartPgBouncer starts PgBouncer in front of target (a throwaway cluster
// or the server named by SECKILL_DATABASE_URL: host, port, user, password
// and database are taken from target.URL) and returns once a query through
// it has succeeded.
//
// PgBouncer listens on a free port of 127.0.0.1 and lets clients in
// without a password (auth_type = trust) as target's user only; it logs in
// to the server with target's password, if any. It runs as the same
// unprivileged OS user as a throwaway server when this process is root
// (PgBouncer refuses to run as root), with a parent-death signal, so it
// goes down with the process even when Stop is never called.
//
// The configuration, besides opts: ignore_startup_parameters =
// extra_float_digits (sent by libpq-based tools; pgx sends nothing
// PgBouncer rejects), server_reset_query = DISCARD ALL (used in session
// mode only: transaction mode runs no reset, which is why session state
// leaks between clients there), no Unix socket, connection logging off.
func StartPgBouncer(ctx context.Context, target *Server, opts PgBouncerOptions) (*PgBouncer, error) {
	if target == nil {
		return nil, errors.New("pgharness: StartPgBouncer: target is nil")
	}
	conf, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	tc, err := parseTarget(target.URL)
	if err != nil {
		return nil, err
	}
	bin, err := FindPgBouncer()
	if err != nil {
		return nil, err
	}
	b := &PgBouncer{bin: bin, mode: conf.mode}
	if os.Geteuid() == 0 {
		if b.cred, err = unprivileged(); err != nil {
			return nil, err
		}
	}
	if b.dir, err = os.MkdirTemp("", "seckill-pgbouncer-"); err != nil {
		return nil, fmt.Errorf("pgharness: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(b.dir)
		}
	}()
	if b.cred != nil {
		if err := os.Chown(b.dir, int(b.cred.Uid), int(b.cred.Gid)); err != nil {
			return nil, fmt.Errorf("pgharness: %w", err)
		}
	}
	quote := func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
	if err := b.writeFile("userlist.txt", quote(tc.User)+" "+quote(tc.Password)+"\n"); err != nil {
		return nil, err
	}
	if err := b.startOnFreePort(ctx, tc, conf); err != nil {
		return nil, err
	}
	ok = true
	return b, nil
}

// pgBouncerConf is PgBouncerOptions with its defaults filled in.
type pgBouncerConf struct {
	mode                PoolMode
	maxClient, poolSize int
	settings            []string
}

// resolve checks o and fills in its defaults.
func (o PgBouncerOptions) resolve() (pgBouncerConf, error) {
	c := pgBouncerConf{mode: o.PoolMode, maxClient: o.MaxClientConn, poolSize: o.DefaultPoolSize, settings: o.Settings}
	if c.mode == "" {
		c.mode = PoolTransaction
	}
	if c.mode != PoolTransaction && c.mode != PoolSession {
		return c, fmt.Errorf("pgharness: StartPgBouncer: pool mode %q is not %q or %q", c.mode, PoolTransaction, PoolSession)
	}
	if c.maxClient == 0 {
		c.maxClient = 500
	}
	if c.poolSize == 0 {
		c.poolSize = 20
	}
	if c.maxClient < 0 || c.poolSize < 0 {
		return c, fmt.Errorf("pgharness: StartPgBouncer: MaxClientConn %d and DefaultPoolSize %d must not be negative", o.MaxClientConn, o.DefaultPoolSize)
	}
	return c, nil
}

// parseTarget parses the target's URL and refuses a host, user or
// database that pgbouncer.ini would need quoted.
func parseTarget(targetURL string) (*pgconn.Config, error) {
	tc, err := pgconn.ParseConfig(targetURL)
	if err != nil {
		return nil, fmt.Errorf("pgharness: StartPgBouncer: parse target URL: %w", err)
	}
	for what, v := range map[string]string{"host": tc.Host, "user": tc.User, "database": tc.Database} {
		if v == "" || strings.ContainsAny(v, " \t\r\n'\"\\=;#") {
			return nil, fmt.Errorf("pgharness: StartPgBouncer: target %s %q is empty or has characters this harness does not quote", what, v)
		}
	}
	return tc, nil
}

// serverTLSMode is the server_tls_sslmode that matches the target's
// sslmode.
func serverTLSMode(tc *pgconn.Config) string {
	serverTLS := "disable"
	if tc.TLSConfig != nil {
		// PgBouncer does not verify the server certificate in these
		// modes; good enough for a test harness.
		serverTLS = "require"
		for _, fb := range tc.Fallbacks {
			if fb.TLSConfig == nil {
				serverTLS = "prefer"
			}
		}
	}
	return serverTLS
}

// startOnFreePort writes pgbouncer.ini for a free port and launches
// PgBouncer on it. A port taken between freePort and PgBouncer's bind
// makes it exit at once: it tries again on another port, 3 times in all.
func (b *PgBouncer) startOnFreePort(ctx context.Context, tc *pgconn.Config, conf pgBouncerConf) (err error) {
	q := url.Values{"sslmode": {"disable"}, "default_query_exec_mode": {QueryExecMode}}
	for attempt := 1; ; attempt++ {
		if b.port, err = freePort(); err != nil {
			return err
		}
		if err := b.writeFile("pgbouncer.ini", b.ini(tc, conf)); err != nil {
			return err
		}
		b.URL = (&url.URL{
			Scheme:   "postgres",
			User:     url.User(tc.User),
			Host:     "127.0.0.1:" + strconv.Itoa(b.port),
			Path:     "/" + tc.Database,
			RawQuery: q.Encode(),
		}).String()
		err = b.launch(ctx)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errExitedEarly) || attempt == 3 || !strings.Contains(b.proc.logTail(), "in use") {
			return err
		}
	}
}

// ini is pgbouncer.ini for the target tc on b.port.
func (b *PgBouncer) ini(tc *pgconn.Config, conf pgBouncerConf) string {
	return strings.Join(append([]string{
		"[databases]",
		fmt.Sprintf("* = host=%s port=%d", tc.Host, tc.Port),
		"",
		"[pgbouncer]",
		"listen_addr = 127.0.0.1",
		"listen_port = " + strconv.Itoa(b.port),
		"unix_socket_dir =",
		"auth_type = trust",
		"auth_file = " + filepath.Join(b.dir, "userlist.txt"),
		"pool_mode = " + string(conf.mode),
		"max_client_conn = " + strconv.Itoa(conf.maxClient),
		"default_pool_size = " + strconv.Itoa(conf.poolSize),
		"min_pool_size = 0",
		"reserve_pool_size = 0",
		"server_reset_query = DISCARD ALL",
		"server_tls_sslmode = " + serverTLSMode(tc),
		"ignore_startup_parameters = extra_float_digits",
		"log_connections = 0",
		"log_disconnections = 0",
		"log_pooler_errors = 1",
		"syslog = 0",
	}, conf.settings...), "\n") + "\n"
}

func (b *PgBouncer) writeFile(name, content string) error {
	p := filepath.Join(b.dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		return fmt.Errorf("pgharness: %w", err)
	}
	if b.cred != nil {
		if err := os.Chown(p, int(b.cred.Uid), int(b.cred.Gid)); err != nil {
			return fmt.Errorf("pgharness: %w", err)
		}
	}
	return nil
}

// launch starts pgbouncer in the foreground and waits until a query
// through it succeeds.
func (b *PgBouncer) launch(ctx context.Context) error {
	b.proc.name, b.proc.logPath, b.proc.cred = "pgbouncer", filepath.Join(b.dir, "pgbouncer.log"), b.cred
	// SIGTERM: immediate shutdown if this process dies.
	if err := b.proc.start(b.bin, []string{filepath.Join(b.dir, "pgbouncer.ini")}, b.dir, syscall.SIGTERM, true); err != nil {
		return err
	}
	return b.proc.waitReady(ctx, b.URL, 30*time.Second, syscall.SIGKILL)
}

// Stop shuts PgBouncer down (SIGTERM: immediate shutdown; client
// connections are dropped) and removes its directory. It is safe to call
// more than once.
func (b *PgBouncer) Stop() error {
	err := b.proc.stop(syscall.SIGTERM, 10*time.Second)
	if rmErr := os.RemoveAll(b.dir); rmErr != nil && err == nil {
		err = rmErr
	}
	return err
}
