package stackharness

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// What Redis and NATS share: the server a URL names (given, or from an
// environment variable) or a throwaway one started from a local binary,
// which alone can be killed, restarted and stopped.

// urlOrEnv returns url when it is not empty, else the value of the
// environment variable env.
func urlOrEnv(url, env string) string {
	if url == "" {
		url = os.Getenv(env)
	}
	return url
}

// throwaway is one kind of throwaway server: its binary, and how to run
// it on a port of 127.0.0.1 in a temporary directory of its own.
type throwaway struct {
	bin       string // the binary's name: "redis-server", "nats-server"
	missing   error  // the error when the binary is nowhere
	dirPrefix string // of the temporary directory's name
	logName   string // the log file in the directory
	args      func(dir string, port int) []string
	ready     func(net.Conn) error // the readiness probe
}

// start finds the binary, starts the server on a free port in a new
// temporary directory and waits until it is ready. On error the
// directory is removed.
func (t throwaway) start(ctx context.Context) (*process, error) {
	bin, err := findBinary(t.bin, t.missing)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", t.dirPrefix)
	if err != nil {
		return nil, fmt.Errorf("stackharness: %w", err)
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p := newProcess(t.bin, bin, dir, t.logName, port, t.args(dir, port), t.ready)
	if err := p.launch(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return p, nil
}

// newProcess is a server called name (for messages) run from bin in dir,
// logging to dir/logName, listening on port of 127.0.0.1.
func newProcess(name, bin, dir, logName string, port int, args []string, ready func(net.Conn) error) *process {
	return &process{
		name: name, bin: bin, dir: dir, logPath: filepath.Join(dir, logName),
		addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), args: args, ready: ready,
	}
}

// server is the throwaway server's process, nil for a server given by
// URL.
type server struct {
	proc *process
}

func (s server) owned() bool { return s.proc != nil }

// kill ends a throwaway server with SIGKILL; its directory stays.
func (s server) kill() error {
	if s.proc == nil {
		return errNotOwned
	}
	s.proc.kill()
	return nil
}

// restart starts a throwaway server again on the same port, arguments and
// directory (after killing it, a no-op when it is already dead).
func (s server) restart(ctx context.Context) error {
	if s.proc == nil {
		return errNotOwned
	}
	s.proc.kill()
	return s.proc.launch(ctx)
}

// stop ends a throwaway server and removes its directory; it does nothing
// for a server given by URL. Safe to call more than once.
func (s server) stop() {
	if s.proc == nil {
		return
	}
	s.proc.stop()
	os.RemoveAll(s.proc.dir)
}

// natsReady is NATS's readiness probe: a server greets a new connection
// with an INFO line.
func natsReady(c net.Conn) error {
	line, err := readLine(c)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "INFO ") {
		return fmt.Errorf("greeting %q", line)
	}
	return nil
}

// PID is the throwaway server's process id: 0 for a server given by URL or
// one not running (killed and not restarted).
func (s server) PID() int {
	if s.proc == nil {
		return 0
	}
	s.proc.mu.Lock()
	defer s.proc.mu.Unlock()
	if s.proc.cmd == nil || s.proc.cmd.Process == nil {
		return 0
	}
	select {
	case <-s.proc.exited:
		return 0
	default:
	}
	return s.proc.cmd.Process.Pid
}
