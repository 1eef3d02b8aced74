package stackharness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// EnvNATSURL names the environment variable that points tests and the
// example at an existing NATS server (with JetStream enabled) instead of a
// throwaway one.
const EnvNATSURL = "SECKILL_NATS_URL"

// ErrNoNATS is matched by the error of StartNATS when no URL is given and no
// nats-server binary is found.
var ErrNoNATS = errors.New("no NATS available: install nats-server " +
	"(Debian/Ubuntu: apt-get install nats-server; macOS: brew install nats-server) " +
	"or set " + EnvNATSURL + " (or -nats) to a server with JetStream enabled")

// NATS is a NATS server with JetStream for tests and the example.
type NATS struct {
	// URL is a nats:// URL.
	URL string

	proc *process // nil when given by URL
}

// Owned reports whether this process started the server (and so may kill
// and restart it).
func (n *NATS) Owned() bool { return n.proc != nil }

// StartNATS returns the server at url when url is not empty, else the one
// SECKILL_NATS_URL names, else a new throwaway nats-server -js.
func StartNATS(ctx context.Context, url string) (*NATS, error) {
	if url == "" {
		url = os.Getenv(EnvNATSURL)
	}
	if url != "" {
		return &NATS{URL: url}, nil
	}
	return StartThrowawayNATS(ctx)
}

// StartThrowawayNATS starts nats-server -js on a random port with its
// JetStream store in a temporary directory, whatever SECKILL_NATS_URL says.
func StartThrowawayNATS(ctx context.Context) (*NATS, error) {
	bin, err := findBinary("nats-server", ErrNoNATS)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "seckill-nats-")
	if err != nil {
		return nil, fmt.Errorf("stackharness: %w", err)
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p := &process{
		name: "nats-server", bin: bin, dir: dir, logPath: filepath.Join(dir, "nats.log"),
		addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		args: []string{"-js", "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-sd", filepath.Join(dir, "store"),
			"-n", "seckill-" + strconv.Itoa(port)},
		ready: func(c net.Conn) error {
			line, err := readLine(c)
			if err != nil {
				return err
			}
			if !strings.HasPrefix(line, "INFO ") {
				return fmt.Errorf("greeting %q", line)
			}
			return nil
		},
	}
	if err := p.launch(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &NATS{URL: "nats://" + p.addr, proc: p}, nil
}

// Kill ends the throwaway server with SIGKILL. Its store directory stays:
// Restart recovers every stream and consumer from it.
func (n *NATS) Kill() error {
	if n.proc == nil {
		return errNotOwned
	}
	n.proc.kill()
	return nil
}

// Restart starts the throwaway server again on the same port and store.
func (n *NATS) Restart(ctx context.Context) error {
	if n.proc == nil {
		return errNotOwned
	}
	n.proc.kill()
	return n.proc.launch(ctx)
}

// Stop ends a throwaway server and removes its directory; it does nothing
// for a server given by URL. Safe to call more than once.
func (n *NATS) Stop() {
	if n.proc == nil {
		return
	}
	n.proc.stop()
	os.RemoveAll(n.proc.dir)
}
