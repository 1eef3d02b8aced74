package pgharness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// StandbyOptions tunes [Server.StartStandby]. The zero value is an
// asynchronous streaming standby named "standby".
type StandbyOptions struct {
	// Name is the standby's application_name, the name the primary's
	// synchronous_standby_names and pg_stat_replication know it by.
	// Defaults to "standby".
	Name string
	// Synchronous makes the standby the primary's synchronous standby: the
	// primary's synchronous_standby_names is set to Name, so a commit with
	// synchronous_commit = on returns only once the standby has flushed its
	// WAL. StartStandby returns once the primary reports the standby as
	// sync. Defaults to false: asynchronous streaming (a commit returns
	// once it is durable on the primary alone).
	Synchronous bool
	// ApplyDelay, when positive, is the standby's recovery_min_apply_delay:
	// it receives and flushes WAL at once but replays (makes visible) each
	// commit only this long after the primary made it — a replica that
	// lags on purpose. Defaults to 0.
	ApplyDelay time.Duration
	// Settings are extra "name=value" server settings of the standby.
	Settings []string
}

// StartStandby builds a streaming standby of the throwaway primary s: a
// base backup taken with pg_basebackup (WAL streamed along), started in
// standby mode on a port of its own and streaming from s. It returns once
// the standby accepts (read-only) connections and s reports it streaming
// (as sync when opts.Synchronous). The standby is a [Server] like any
// other: [Server.Crash], [Server.Restart], [Server.Stop] and
// [Server.Promote] work on it, and Stop removes its directory.
//
// s must be a throwaway cluster this process started ([Server.Owned]); its
// default settings (wal_level replica, max_wal_senders 10, a trust
// replication entry in pg_hba.conf) allow the backup.
func (s *Server) StartStandby(ctx context.Context, opts StandbyOptions) (*Server, error) {
	if !s.owned {
		return nil, errors.New("pgharness: a standby needs a throwaway primary this process started")
	}
	if opts.Name == "" {
		opts.Name = "standby"
	}
	if !validName(opts.Name) {
		return nil, fmt.Errorf("pgharness: standby name %q: use letters, digits and underscores", opts.Name)
	}
	if opts.ApplyDelay < 0 {
		return nil, fmt.Errorf("pgharness: ApplyDelay %v must not be negative", opts.ApplyDelay)
	}
	basebackup, err := s.tool("pg_basebackup")
	if err != nil {
		return nil, err
	}
	sb := &Server{owned: true, binDir: s.binDir, cred: s.cred}
	if sb.dir, err = s.makeDirs("seckill-standby-"); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			sb.proc.stop(syscall.SIGQUIT, 10*time.Second)
			_ = os.RemoveAll(sb.dir)
		}
	}()
	// -R writes standby.signal; the connection string given below on the
	// command line overrides the one -R writes.
	bb := exec.CommandContext(ctx, basebackup,
		"-D", filepath.Join(sb.dir, "data"), "-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "-U", "postgres",
		"-X", "stream", "-c", "fast", "-R", "--no-sync")
	bb.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	bb.Dir = sb.dir
	if out, err := bb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pgharness: pg_basebackup: %w: %s", err, strings.TrimSpace(string(out)))
	}
	if sb.port, err = freePort(); err != nil {
		return nil, err
	}
	sb.args = serverArgs(sb.dir, sb.port, 0)
	sb.args = append(sb.args,
		"-c", fmt.Sprintf("primary_conninfo=host=127.0.0.1 port=%d user=postgres application_name=%s", s.port, opts.Name),
		"-c", "hot_standby=on",
		"-c", "synchronous_standby_names=", // once promoted it waits for nobody
		"-c", "archive_mode=off",
		"-c", "recovery_min_apply_delay="+strconv.FormatInt(opts.ApplyDelay.Milliseconds(), 10),
	)
	for _, kv := range opts.Settings {
		sb.args = append(sb.args, "-c", kv)
	}
	sb.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", sb.port)
	if err := sb.launch(ctx); err != nil {
		return nil, err
	}
	if opts.Synchronous {
		if err := s.exec(ctx, fmt.Sprintf(`ALTER SYSTEM SET synchronous_standby_names = '"%s"'`, opts.Name)); err != nil {
			return nil, err
		}
		if err := s.exec(ctx, `SELECT pg_reload_conf()`); err != nil {
			return nil, err
		}
	}
	want := "async"
	if opts.Synchronous {
		want = "sync"
	}
	if err := s.waitReplication(ctx, opts.Name, want, time.Minute); err != nil {
		return nil, fmt.Errorf("%w; standby log:\n%s", err, sb.proc.logTail())
	}
	ok = true
	return sb, nil
}

// Promote ends the standby's recovery and makes it a primary on a new
// timeline (pg_promote). It returns once the server accepts writes.
func (s *Server) Promote(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		return fmt.Errorf("pgharness: promote: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// pg_promote without waiting, then poll: a statement waiting through
	// the end of recovery can be cancelled by a recovery conflict.
	if _, err := conn.Exec(ctx, `SELECT pg_promote(false)`); err != nil {
		return fmt.Errorf("pgharness: promote: %w", err)
	}
	for {
		var recovering bool
		if err := conn.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&recovering); err != nil {
			return fmt.Errorf("pgharness: promote: %w", err)
		}
		if !recovering {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgharness: promote: still in recovery: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// MultiHostURL is a connection string naming every server of servers, in
// order, with target_session_attrs=read-write: a client connects to the
// first that accepts writes, so after a failover new connections find the
// promoted standby by themselves.
func MultiHostURL(servers ...*Server) string {
	hosts := make([]string, len(servers))
	for i, s := range servers {
		hosts[i] = "127.0.0.1:" + strconv.Itoa(s.port)
	}
	return "postgres://postgres@" + strings.Join(hosts, ",") +
		"/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=5"
}

// tool finds a client program of the server's installation: next to
// postgres (following a symlink to the real installation), else on PATH.
func (s *Server) tool(name string) (string, error) {
	cands := []string{filepath.Join(s.binDir, name)}
	if real, err := filepath.EvalSymlinks(filepath.Join(s.binDir, "postgres")); err == nil {
		cands = append(cands, filepath.Join(filepath.Dir(real), name))
	}
	for _, c := range cands {
		if fi, err := os.Stat(c); err == nil && !fi.IsDir() {
			return c, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("pgharness: %s not found next to postgres in %s nor on PATH: "+
		"install the PostgreSQL client programs (Debian/Ubuntu: apt-get install postgresql-client)", name, s.binDir)
}

// makeDirs makes a temporary directory with its sock/ subdirectory, both
// owned by the server's OS user.
func (s *Server) makeDirs(prefix string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", fmt.Errorf("pgharness: %w", err)
	}
	for _, d := range []string{dir, filepath.Join(dir, "sock")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			_ = os.RemoveAll(dir)
			return "", fmt.Errorf("pgharness: %w", err)
		}
		if s.cred != nil {
			if err := os.Chown(d, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
				_ = os.RemoveAll(dir)
				return "", fmt.Errorf("pgharness: %w", err)
			}
		}
	}
	return dir, nil
}

func (s *Server) exec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		return fmt.Errorf("pgharness: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("pgharness: %s: %w", sql, err)
	}
	return nil
}

// waitReplication waits until the primary s reports the standby name
// streaming with the given sync_state.
func (s *Server) waitReplication(ctx context.Context, name, syncState string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		return fmt.Errorf("pgharness: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for {
		var state, sync string
		err := conn.QueryRow(ctx, `SELECT state, sync_state FROM pg_stat_replication WHERE application_name = $1`, name).Scan(&state, &sync)
		if err == nil && state == "streaming" && sync == syncState {
			return nil
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("pgharness: pg_stat_replication: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgharness: standby %s not streaming as %s (state %q, sync_state %q): %w", name, syncState, state, sync, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func validName(s string) bool {
	for _, r := range s {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return s != ""
}

// HoldReplication freezes the standby's WAL receiver (SIGSTOP): from now on
// the standby receives and flushes nothing more, so a synchronous
// primary's commits wait for it (they are durable on the primary only, and
// their clients hear nothing), and an asynchronous primary's commits are
// acknowledged without reaching it. [Server.ReleaseReplication] lets the
// receiver go on; [Server.Kill] discards what it had not flushed.
func (s *Server) HoldReplication(ctx context.Context) error {
	pid, err := s.walReceiverPID(ctx)
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("pgharness: hold the WAL receiver: %w", err)
	}
	s.heldPID = pid
	return nil
}

// ReleaseReplication undoes [Server.HoldReplication].
func (s *Server) ReleaseReplication() error {
	if s.heldPID == 0 {
		return errors.New("pgharness: replication is not held")
	}
	pid := s.heldPID
	s.heldPID = 0
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		return fmt.Errorf("pgharness: release the WAL receiver: %w", err)
	}
	return nil
}

func (s *Server) walReceiverPID(ctx context.Context) (int, error) {
	if !s.owned {
		return 0, errors.New("pgharness: cannot signal a server this process does not own")
	}
	conn, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		return 0, fmt.Errorf("pgharness: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var pid int
	if err := conn.QueryRow(ctx, `SELECT pid FROM pg_stat_wal_receiver WHERE status = 'streaming'`).Scan(&pid); err != nil {
		return 0, fmt.Errorf("pgharness: no streaming WAL receiver (is this a standby?): %w", err)
	}
	return pid, nil
}

// Kill ends the throwaway server and every one of its processes at once
// with SIGKILL — held ones too — like a machine losing power: nothing is
// written on the way down, what was not flushed is gone. The data
// directory is kept; [Server.Restart] runs crash recovery. It reads the
// server's child processes from /proc (Linux).
func (s *Server) Kill() error {
	if !s.owned {
		return errors.New("pgharness: cannot kill a server this process does not own")
	}
	s.proc.mu.Lock()
	var pid int
	if s.proc.cmd != nil && s.proc.cmd.Process != nil {
		pid = s.proc.cmd.Process.Pid
	}
	s.proc.mu.Unlock()
	if pid == 0 {
		return nil
	}
	// Every child of the postmaster makes itself a session leader, so
	// the postmaster's process group does not hold them: freeze the
	// postmaster (no more forks), list its children, kill them all.
	// kill returns before the signal is taken: a fork under way would
	// finish after the list is read. Once the postmaster shows as
	// stopped, every child it made is in /proc.
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if st, ok := statField(pid, 0); !ok || st == "T" || st == "t" || st == "Z" || time.Now().After(deadline) {
			break
		}
	}
	shmKey, shmid := shmSegment(filepath.Join(s.dir, "data"))
	children, err := childrenOf(pid)
	if err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return err
	}
	for _, c := range children {
		_ = syscall.Kill(c, syscall.SIGKILL)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	s.heldPID = 0
	if err := s.proc.waitExit(30 * time.Second); err != nil {
		return err
	}
	// A restart must not find the old shared memory still attached.
	for deadline := time.Now().Add(10 * time.Second); ; {
		alive := 0
		for _, c := range children {
			if syscall.Kill(c, 0) == nil && !zombie(c) {
				alive++
			}
		}
		attached := shmAttached(shmid)
		if alive == 0 && attached == 0 {
			return nil
		}
		if alive == 0 {
			// Something the list missed still holds the segment (a
			// backend forked as the postmaster was being stopped, or a
			// shell an archiver forked): kill it too.
			for _, p := range shmHolders(shmKey) {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgharness: %d processes of the killed server still alive, %d still attached to its shared memory", alive, attached)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// shmSegment reads the System V shared memory key and id a server records
// in the last line of its postmaster.pid ("key id"); id -1 when there is
// none.
func shmSegment(dataDir string) (key, id int) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, -1
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 7 {
		return 0, -1
	}
	f := strings.Fields(lines[6])
	if len(f) != 2 {
		return 0, -1
	}
	key, err1 := strconv.Atoi(f[0])
	id, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		return 0, -1
	}
	return key, id
}

// shmHolders lists the processes that map the System V segment of key
// (/proc/pid/maps names it /SYSV followed by the key in eight hex digits).
func shmHolders(key int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	name := fmt.Sprintf("/SYSV%08x", key)
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/maps"); err == nil && strings.Contains(string(b), name) {
			out = append(out, p)
		}
	}
	return out
}

// shmAttached counts the processes attached to segment shmid, read from
// /proc/sysvipc/shm: what a new postmaster checks before it starts
// ("pre-existing shared memory block is still in use"). A segment that is
// gone, or that this process cannot read, counts 0.
func shmAttached(shmid int) int {
	if shmid < 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/sysvipc/shm")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 7 || f[1] != strconv.Itoa(shmid) {
			continue
		}
		n, _ := strconv.Atoi(f[6])
		return n
	}
	return 0
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("pgharness: Kill needs /proc: %w", err)
	}
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _ := statField(p, 1); ppid == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out, nil
}

// statField returns field i (0: state, 1: ppid) after the command name of
// /proc/pid/stat.
func statField(pid, i int) (string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", false
	}
	s := string(b)
	j := strings.LastIndexByte(s, ')')
	if j < 0 {
		return "", false
	}
	f := strings.Fields(s[j+1:])
	if i >= len(f) {
		return "", false
	}
	return f[i], true
}

func zombie(pid int) bool {
	st, ok := statField(pid, 0)
	return !ok || st == "Z"
}
