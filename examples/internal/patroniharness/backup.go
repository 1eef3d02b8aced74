package patroniharness

import (
	"context"
	"encoding/json"
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

// Stanza is the pgBackRest stanza of the cluster.
const Stanza = "seckill"

// Backup is the cluster's pgBackRest repository: a directory of the
// cluster's own (repo1-path), into which every node archives its WAL
// (archive_command = pgbackrest archive-push) and the leader is backed up.
type Backup struct {
	c      *Cluster
	bin    string
	dir    string // repository, logs, locks, spool
	config string
}

// Backup is the cluster's pgBackRest repository (nil unless
// [Options.Backup]).
func (c *Cluster) Backup() *Backup { return c.backup }

func newBackup(c *Cluster) (*Backup, error) {
	bin, err := findProgram("pgbackrest", "pgbackrest")
	if err != nil {
		return nil, err
	}
	b := &Backup{c: c, bin: bin, dir: filepath.Join(c.dir, "pgbackrest")}
	for _, d := range []string{b.dir, filepath.Join(b.dir, "repo"), filepath.Join(b.dir, "log"), filepath.Join(b.dir, "lock"), filepath.Join(b.dir, "spool")} {
		if err := c.mkdir(d); err != nil {
			return nil, err
		}
	}
	b.config = filepath.Join(b.dir, "pgbackrest.conf")
	conf := strings.Join([]string{
		"[global]",
		"repo1-path=" + filepath.Join(b.dir, "repo"),
		"repo1-retention-full=2",
		"log-path=" + filepath.Join(b.dir, "log"),
		"lock-path=" + filepath.Join(b.dir, "lock"),
		"spool-path=" + filepath.Join(b.dir, "spool"),
		"log-level-console=warn",
		"log-level-file=info",
		"start-fast=y",
		"archive-timeout=60",
		"compress-type=lz4",
		"process-max=2",
		"",
		"[" + Stanza + "]",
		"pg1-user=postgres",
		"",
	}, "\n")
	if err := os.WriteFile(b.config, []byte(conf), 0o644); err != nil {
		return nil, fmt.Errorf("patroniharness: %w", err)
	}
	return b, nil
}

// Repo is the repository's directory.
func (b *Backup) Repo() string { return filepath.Join(b.dir, "repo") }

// archiveCommand is node n's archive_command: the pgBackRest archive-push
// of a WAL segment of n's data directory.
func (b *Backup) archiveCommand(n *Node) string {
	return fmt.Sprintf("%s --config=%s --stanza=%s --pg1-path=%s archive-push %%p", b.bin, b.config, Stanza, n.DataDir())
}

// run runs pgbackrest with args against node n (its data directory,
// port and socket) as the server's OS user.
func (b *Backup) run(ctx context.Context, n *Node, args ...string) (string, error) {
	all := []string{"--config=" + b.config, "--stanza=" + Stanza}
	if n != nil {
		all = append(all, "--pg1-path="+n.DataDir(), "--pg1-port="+strconv.Itoa(n.Port), "--pg1-socket-path="+n.dir)
	}
	all = append(all, args...)
	cmd := exec.CommandContext(ctx, b.bin, all...)
	cmd.Dir = b.dir
	cmd.Env = []string{"HOME=" + b.dir, "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: b.c.cred}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("patroniharness: pgbackrest %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// CreateStanza creates the stanza on the leader and checks that WAL
// archiving reaches the repository (pgbackrest check).
func (b *Backup) CreateStanza(ctx context.Context, leader *Node) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if _, err := b.run(ctx, leader, "stanza-create"); err != nil {
		return err
	}
	_, err := b.run(ctx, leader, "check")
	return err
}

// Full takes a full backup of the leader.
func (b *Backup) Full(ctx context.Context, leader *Node) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	_, err := b.run(ctx, leader, "backup", "--type=full")
	return err
}

// BackupInfo is one backup of the repository as `pgbackrest info` lists
// it.
type BackupInfo struct {
	Label    string
	Type     string
	Size     int64 // the database's size
	RepoSize int64 // the backup's size in the repository (compressed)
}

// Info lists the repository's backups and the size of its WAL archive.
func (b *Backup) Info(ctx context.Context) (backups []BackupInfo, archiveBytes int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := b.run(ctx, nil, "info", "--output=json")
	if err != nil {
		return nil, 0, err
	}
	var info []struct {
		Backup []struct {
			Label string `json:"label"`
			Type  string `json:"type"`
			Info  struct {
				Size       int64 `json:"size"`
				Repository struct {
					Size int64 `json:"size"`
				} `json:"repository"`
			} `json:"info"`
		} `json:"backup"`
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		return nil, 0, fmt.Errorf("patroniharness: pgbackrest info: %w: %s", err, out)
	}
	for _, st := range info {
		for _, bk := range st.Backup {
			backups = append(backups, BackupInfo{Label: bk.Label, Type: bk.Type, Size: bk.Info.Size, RepoSize: bk.Info.Repository.Size})
		}
	}
	archiveBytes, err = dirSize(filepath.Join(b.Repo(), "archive"))
	return backups, archiveBytes, err
}

func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	return n, err
}

// ArchiveNow switches the leader to a new WAL segment and waits until the
// finished one is in the repository: everything committed before the call
// is then archived.
func (b *Backup) ArchiveNow(ctx context.Context, leader *Node) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, leader.URL())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var seg string
	// pg_switch_wal switches only when the segment has something in it;
	// the segment of the current position is then the one to wait for.
	if err := conn.QueryRow(ctx, `SELECT pg_walfile_name(pg_switch_wal())`).Scan(&seg); err != nil {
		return err
	}
	for {
		var last string
		if err := conn.QueryRow(ctx, `SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver`).Scan(&last); err != nil {
			return err
		}
		if last >= seg {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("patroniharness: WAL segment %s not archived (last archived %q): %w", seg, last, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Restored is a PostgreSQL instance restored from the repository into a
// directory of its own: isolated (no archiving, no replication, a port of
// its own), stopped and removed by Stop.
type Restored struct {
	// URL connects to it.
	URL string
	// Restore is how long pgbackrest restore took; Recovery how long
	// PostgreSQL then took to replay the WAL up to the target and accept
	// writes.
	Restore, Recovery time.Duration

	dir  string
	proc *proc
}

// Restore restores the latest backup into a new directory and starts it
// as an isolated instance. target is a recovery target time ("" recovers
// to the end of the archived WAL); the instance is promoted when it is
// reached. It returns once the instance accepts writes.
func (b *Backup) Restore(ctx context.Context, target time.Time) (*Restored, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	r := &Restored{dir: filepath.Join(b.c.dir, "restore-"+strconv.FormatInt(time.Now().UnixNano(), 36))}
	if err := b.c.mkdir(r.dir); err != nil {
		return nil, err
	}
	data := filepath.Join(r.dir, "data")
	args := []string{"--pg1-path=" + data, "restore", "--archive-mode=off"}
	if !target.IsZero() {
		args = append(args, "--type=time", "--target="+target.UTC().Format("2006-01-02 15:04:05.999999-07"), "--target-action=promote")
	} else {
		args = append(args, "--type=default")
	}
	began := time.Now()
	if _, err := b.run(ctx, nil, args...); err != nil {
		return nil, err
	}
	r.Restore = time.Since(began)
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	r.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=5", port)
	r.proc = &proc{
		name: "restored postgres", bin: filepath.Join(b.c.binDir, "postgres"), dir: r.dir,
		logPath: filepath.Join(r.dir, "postgres.log"), cred: b.c.cred, death: syscall.SIGQUIT,
		env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"},
		args: []string{"-D", data, "-p", strconv.Itoa(port), "-k", r.dir,
			"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=" + r.dir,
			"-c", "archive_mode=off", "-c", "synchronous_standby_names=", "-c", "primary_conninfo=",
			"-c", "hba_file=" + filepath.Join(data, "pg_hba.conf"), "-c", "ident_file=" + filepath.Join(data, "pg_ident.conf"),
			"-c", "logging_collector=off", "-c", "shared_buffers=64MB"},
	}
	began = time.Now()
	if err := r.proc.start(); err != nil {
		return nil, err
	}
	for {
		if ok, _ := writable(ctx, r.URL); ok {
			r.Recovery = time.Since(began)
			return r, nil
		}
		if !r.proc.running() {
			err := fmt.Errorf("patroniharness: the restored instance exited; log:\n%s", r.proc.logTail(3000))
			_ = r.Stop()
			return nil, err
		}
		select {
		case <-ctx.Done():
			err := fmt.Errorf("patroniharness: the restored instance did not accept writes: %w; log:\n%s", ctx.Err(), r.proc.logTail(3000))
			_ = r.Stop()
			return nil, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func writable(ctx context.Context, url string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var rec bool
	if err := conn.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&rec); err != nil {
		return false, err
	}
	return !rec, nil
}

// Log is the tail of the restored instance's server log.
func (r *Restored) Log() string { return r.proc.logTail(4000) }

// Stop shuts the restored instance down and removes its directory.
func (r *Restored) Stop() error {
	var err error
	if r.proc != nil {
		err = r.proc.stop(syscall.SIGINT, 30*time.Second)
	}
	if rmErr := os.RemoveAll(r.dir); rmErr != nil && err == nil {
		err = rmErr
	}
	if left := Leftovers(r.dir); len(left) > 0 {
		err = errors.Join(err, fmt.Errorf("patroniharness: processes left after stop: %v", left))
	}
	return err
}
