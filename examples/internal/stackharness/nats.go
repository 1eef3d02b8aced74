package stackharness

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
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

	server // no process when given by URL
}

// Owned reports whether this process started the server (and so may kill
// and restart it).
func (n *NATS) Owned() bool { return n.owned() }

// StartNATS returns the server at url when url is not empty, else the one
// SECKILL_NATS_URL names, else a new throwaway nats-server -js.
func StartNATS(ctx context.Context, url string) (*NATS, error) {
	if url = urlOrEnv(url, EnvNATSURL); url != "" {
		return &NATS{URL: url}, nil
	}
	return StartThrowawayNATS(ctx)
}

// throwawayNATS is a nats-server -js with its store in its directory.
var throwawayNATS = throwaway{
	bin: "nats-server", missing: ErrNoNATS, dirPrefix: "seckill-nats-", logName: "nats.log",
	args: func(dir string, port int) []string {
		return []string{"-js", "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-sd", filepath.Join(dir, "store"),
			"-n", "seckill-" + strconv.Itoa(port)}
	},
	ready: natsReady,
}

// StartThrowawayNATS starts nats-server -js on a random port with its
// JetStream store in a temporary directory, whatever SECKILL_NATS_URL says.
func StartThrowawayNATS(ctx context.Context) (*NATS, error) {
	p, err := throwawayNATS.start(ctx)
	if err != nil {
		return nil, err
	}
	return &NATS{URL: "nats://" + p.addr, server: server{p}}, nil
}

// Kill ends the throwaway server with SIGKILL. Its store directory stays:
// Restart recovers every stream and consumer from it.
func (n *NATS) Kill() error { return n.kill() }

// Restart starts the throwaway server again on the same port and store.
func (n *NATS) Restart(ctx context.Context) error { return n.restart(ctx) }

// Stop ends a throwaway server and removes its directory; it does nothing
// for a server given by URL. Safe to call more than once.
func (n *NATS) Stop() { n.stop() }
