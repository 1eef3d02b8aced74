package patroniharness

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one child process of the harness (etcd or a Patroni), logging to
// a file, with a parent-death signal so it does not outlive a killed test
// run.
type proc struct {
	name    string
	bin     string
	args    []string
	env     []string
	dir     string
	logPath string
	cred    *syscall.Credential
	death   syscall.Signal

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

func (p *proc) start() error {
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("patroniharness: %w", err)
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = p.dir
	cmd.Env = p.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred, Setpgid: true, Pdeathsig: p.death}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("patroniharness: start %s: %w", p.name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()
	return nil
}

// pid is the process id, 0 when it is not running.
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	select {
	case <-p.exited:
		return 0
	default:
	}
	return p.cmd.Process.Pid
}

func (p *proc) running() bool { return p.pid() != 0 }

func (p *proc) signal(sig syscall.Signal) {
	if pid := p.pid(); pid != 0 {
		_ = syscall.Kill(pid, sig)
	}
}

// wait waits up to timeout for the process to exit.
func (p *proc) wait(timeout time.Duration) error {
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	if exited == nil {
		return nil
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-exited:
		return nil
	case <-t.C:
		return fmt.Errorf("patroniharness: %s did not exit within %v", p.name, timeout)
	}
}

// stop sends sig, waits up to timeout, then kills.
func (p *proc) stop(sig syscall.Signal, timeout time.Duration) error {
	if !p.running() {
		return nil
	}
	p.signal(sig)
	err := p.wait(timeout)
	if err != nil {
		p.signal(syscall.SIGKILL)
		_ = p.wait(10 * time.Second)
	}
	return err
}

func (p *proc) logTail(n int) string {
	return tail(p.logPath, n)
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// killTree freezes pid (so it forks no more), kills every process whose
// parent it is, then pid itself, and waits until they are gone: kill -9 of
// a postmaster and its server processes, the way a machine losing power
// ends them.
func killTree(pid int) error {
	if pid <= 0 {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	children := childrenOf(pid)
	for _, c := range children {
		_ = syscall.Kill(c, syscall.SIGKILL)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	return waitGone(append(children, pid), 15*time.Second)
}

// waitGone waits until none of pids is alive (a zombie counts as gone).
func waitGone(pids []int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		alive := 0
		for _, p := range pids {
			if isAlive(p) {
				alive++
			}
		}
		if alive == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("patroniharness: %d processes still alive %v after SIGKILL", alive, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func isAlive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	st, ok := statField(pid, 0)
	return ok && st != "Z"
}

// childrenOf lists the processes whose parent is pid (from /proc).
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	want := strconv.Itoa(pid)
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _ := statField(p, 1); ppid == want {
			out = append(out, p)
		}
	}
	return out
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

// Leftovers lists the live processes that belong to dir: their working
// directory or their command line is inside it. After [Cluster.Stop] there
// must be none.
func Leftovers(dir string) []string {
	if dir == "" {
		return nil
	}
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() || !isAlive(pid) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		cwd, _ := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		cl := strings.ReplaceAll(string(cmdline), "\x00", " ")
		if strings.Contains(cl, dir) || cwd == dir || strings.HasPrefix(cwd, dir+"/") {
			out = append(out, fmt.Sprintf("pid %d: %s", pid, strings.TrimSpace(cl)))
		}
	}
	return out
}

// postmasterPID reads the postmaster's pid from data/postmaster.pid (0
// when there is none or it is not alive).
func postmasterPID(dataDir string) int {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || !isAlive(pid) {
		return 0
	}
	return pid
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("patroniharness: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// gate is a TCP proxy that can be closed and opened: closed, it drops every
// connection and refuses new ones — a network partition between a node and
// the server behind it.
type gate struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func startGate(target string) (*gate, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("patroniharness: gate: %w", err)
	}
	g := &gate{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	g.wg.Add(1)
	go g.accept()
	return g, nil
}

func (g *gate) addr() string { return g.ln.Addr().String() }

func (g *gate) accept() {
	defer g.wg.Done()
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		g.mu.Lock()
		if g.closed {
			g.mu.Unlock()
			c.Close()
			continue
		}
		g.mu.Unlock()
		g.wg.Add(1)
		go g.serve(c)
	}
}

func (g *gate) serve(c net.Conn) {
	defer g.wg.Done()
	s, err := net.DialTimeout("tcp", g.target, 2*time.Second)
	if err != nil {
		c.Close()
		return
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		c.Close()
		s.Close()
		return
	}
	g.conns[c], g.conns[s] = struct{}{}, struct{}{}
	g.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(s, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, s); done <- struct{}{} }()
	<-done
	c.Close()
	s.Close()
	<-done
	g.mu.Lock()
	delete(g.conns, c)
	delete(g.conns, s)
	g.mu.Unlock()
}

// set closes (drops every connection, refuses new ones) or opens the gate.
func (g *gate) set(closed bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = closed
	if closed {
		for c := range g.conns {
			c.Close()
		}
	}
}

func (g *gate) close() {
	g.set(true)
	_ = g.ln.Close()
	g.wg.Wait()
}

// findProgram looks for name on PATH and in the usual directories; the
// error names the Debian package that has it.
func findProgram(name, pkg string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/bin", "/usr/sbin", "/usr/local/bin"} {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %s not found: install it (Debian/Ubuntu: apt-get install %s)", ErrMissingProgram, name, pkg)
}

// ErrMissingProgram is wrapped by the error of Start when a program the
// cluster needs is not installed.
var ErrMissingProgram = errors.New("patroniharness: a program the HA cluster needs is missing")
