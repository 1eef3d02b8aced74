package pgharness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// errExitedEarly is wrapped by the error of a process that exited before it
// accepted connections.
var errExitedEarly = errors.New("exited during start-up")

// process is a child server process (postgres or pgbouncer) of the
// harness: started under the harness's credentials with a parent-death
// signal, logging to a file, stopped at most once.
type process struct {
	name    string              // "postgres" or "pgbouncer", for messages
	logPath string              // the process's stdout and stderr
	cred    *syscall.Credential // nil: run as this process's user

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the process has exited
	stopped bool
}

// start runs bin with args in dir. deathSig reaches the child if this
// process dies first, so no server outlives a killed test run. truncate
// starts a fresh log instead of appending.
func (p *process) start(bin string, args []string, dir string, deathSig syscall.Signal, truncate bool) error {
	flags := os.O_CREATE | os.O_WRONLY | os.O_APPEND
	if truncate {
		flags = os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	}
	logf, err := os.OpenFile(p.logPath, flags, 0o644)
	if err != nil {
		return fmt.Errorf("pgharness: %w", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: p.cred,
		Setpgid:    true, // a ^C to the test run reaches us, not the server directly
		Pdeathsig:  deathSig,
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("pgharness: start %s: %w", p.name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	p.mu.Lock()
	p.cmd, p.exited, p.stopped = cmd, exited, false
	p.mu.Unlock()
	return nil
}

// waitReady polls until a connection to url answers, and fails with the
// log's tail when the process exits first, when ctx ends or when timeout
// passes (then it kills the process with giveUp).
func (p *process) waitReady(ctx context.Context, url string, timeout time.Duration, giveUp syscall.Signal) error {
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	deadline := time.Now().Add(timeout)
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := ping(pctx, url)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("pgharness: %s %w; log:\n%s", p.name, errExitedEarly, p.logTail())
		case <-ctx.Done():
			p.signal(giveUp)
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.signal(giveUp)
			return fmt.Errorf("pgharness: %s did not accept connections within %v: %v; log:\n%s", p.name, timeout, err, p.logTail())
		}
	}
}

func (p *process) logTail() string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func (p *process) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

func (p *process) waitExit(timeout time.Duration) error {
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	if exited == nil {
		return nil
	}
	select {
	case <-exited:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("pgharness: %s did not exit within %v", p.name, timeout)
	}
}

// stop sends sig once (later calls do nothing and return nil), waits up to
// timeout, and kills the process if it is still there.
func (p *process) stop(sig syscall.Signal, timeout time.Duration) error {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return nil
	}
	p.stopped = true
	p.mu.Unlock()
	p.signal(sig)
	err := p.waitExit(timeout)
	if err != nil {
		p.signal(syscall.SIGKILL)
		_ = p.waitExit(5 * time.Second)
	}
	return err
}
