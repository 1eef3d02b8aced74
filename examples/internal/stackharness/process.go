package stackharness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is one throwaway server: started with a parent-death signal (so
// it never outlives the test run), logging to a file in its directory,
// killed and restarted on the same port and arguments by the fault tests.
type process struct {
	name    string // "redis-server" or "nats-server", for messages
	bin     string
	args    []string
	dir     string
	logPath string
	addr    string               // host:port it listens on
	ready   func(net.Conn) error // the readiness probe on a fresh connection

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// launch starts the server and waits until ready answers on its address.
func (p *process) launch(ctx context.Context) error {
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("stackharness: %w", err)
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = p.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("stackharness: start %s: %w", p.name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()

	deadline := time.Now().Add(30 * time.Second)
	for {
		err := p.probe()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("stackharness: %s exited during start-up; log:\n%s", p.name, p.logTail())
		case <-ctx.Done():
			p.kill()
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.kill()
			return fmt.Errorf("stackharness: %s did not answer on %s within 30s: %v; log:\n%s", p.name, p.addr, err, p.logTail())
		}
	}
}

func (p *process) probe() error {
	c, err := net.DialTimeout("tcp", p.addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	return p.ready(c)
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *process) kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// signal sends sig to the process while it runs.
func (p *process) signal(sig syscall.Signal) {
	if p.alive() {
		p.mu.Lock()
		_ = p.cmd.Process.Signal(sig)
		p.mu.Unlock()
	}
}

// alive reports whether the process was started and has not exited.
func (p *process) alive() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.exited == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop asks the server to end (SIGTERM; SIGCONT too, for a frozen one),
// and kills it after 10s.
func (p *process) stop() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		p.kill()
	}
}

func (p *process) logTail() string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// readLine reads one CRLF-terminated line.
func readLine(c net.Conn) (string, error) {
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}

// findBinary looks for name in PATH and in /usr/sbin, /usr/bin,
// /usr/local/bin, /opt/homebrew/bin; missing is the error to return when it
// is in none of them.
func findBinary(name string, missing error) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/usr/bin", "/usr/local/bin", "/opt/homebrew/bin"} {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	return "", missing
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("stackharness: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

var errNotOwned = errors.New("stackharness: the server was given by URL; only a throwaway server can be killed or restarted")
