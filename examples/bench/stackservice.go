package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/seckillkit/seckill/examples/internal/stackharness"
	"github.com/seckillkit/seckill/examples/seckill/web"
	"github.com/seckillkit/seckill/internal/pgharness"
)

// servicePkg is the example service the -stack mode runs, as a user runs
// it: `go run ./examples/seckill -serve`.
const servicePkg = "github.com/seckillkit/seckill/examples/seckill"

// serviceProc is the example service running -serve in a child process of
// its own (its CPU is that process's), on the throwaway servers.
type serviceProc struct {
	cmd    *exec.Cmd
	exited chan struct{}
	addr   string // the buyers' address, 127.0.0.1:port
	key    []byte // the buyer token key it verifies with
	dir    string
	once   sync.Once
}

// startService builds the example into a temporary directory and starts
// it with -serve on a free port of 127.0.0.1, pointed at PostgreSQL (dbURL),
// redis and nats, with stock units over 64 buckets. No per-buyer or
// per-address rate limit: every click comes from this process's address.
// -order-ttl 1h: no order times out during the run, so the windows measure
// the order path, not the timeout canceller. citus: the service runs with
// -citus (its schema distributed, whole on one worker). profile: the
// service writes its CPU profile there (-cpuprofile), "" for none. extra
// are more of the service's flags.
func startService(ctx context.Context, dbURL string, redis *stackharness.Redis, nats *stackharness.NATS, stock int, citus bool, profile string, extra ...string) (*serviceProc, error) {
	dir, err := os.MkdirTemp("", "seckill-bench-stack-")
	if err != nil {
		return nil, err
	}
	sp := &serviceProc{dir: dir, exited: make(chan struct{})}
	bin := filepath.Join(dir, "seckill")
	fmt.Fprintln(stderr, "bench: building", servicePkg)
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, servicePkg)
	build.Stdout, build.Stderr = stderr, stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("build %s: %w", servicePkg, err)
	}
	port, err := freeTCPPort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	sp.addr = "127.0.0.1:" + strconv.Itoa(port)
	sp.key = randomHexKey() // the service uses the variable's text as the key
	secret := randomHexKey()
	sp.cmd = exec.Command(bin, "-serve", sp.addr, "-page", "127.0.0.1:0", "-redis", redis.URL, "-nats", nats.URL, "-schema", stackSchema,
		"-stock", strconv.Itoa(stock), "-buckets", "64", "-rate-buyer", "-1", "-rate-addr", "-1", "-order-ttl", "1h")
	if citus { // the sale's schema is a distributed schema; the stores take Citus's statement shapes
		sp.cmd.Args = append(sp.cmd.Args, "-citus")
	}
	if profile != "" {
		sp.cmd.Args = append(sp.cmd.Args, "-cpuprofile", profile)
	}
	sp.cmd.Args = append(sp.cmd.Args, extra...)
	sp.cmd.Env = append(os.Environ(), pgharness.EnvURL+"="+dbURL,
		web.EnvBuyerKeys+"="+string(sp.key), web.EnvCallbackSecrets+"="+string(secret))
	sp.cmd.Stdout, sp.cmd.Stderr = stderr, stderr
	sp.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := sp.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	go func() { _ = sp.cmd.Wait(); close(sp.exited) }()
	if err := sp.waitReady(ctx); err != nil {
		sp.stop()
		return nil, err
	}
	return sp, nil
}

// waitReady waits until the service answers HTTP on its address (any
// status: GET /orders/{id} without a token answers 401).
func (sp *serviceProc) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(2 * time.Minute)
	url := "http://" + sp.addr + "/orders/00000000-0000-0000-0000-000000000000"
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-sp.exited:
			return fmt.Errorf("the service (%s -serve) exited during start-up", servicePkg)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the service (%s -serve) did not answer on %s within 2m", servicePkg, sp.addr)
		}
	}
}

// pid is the service's process id.
func (sp *serviceProc) pid() int { return sp.cmd.Process.Pid }

// stop ends the service (SIGTERM, then SIGKILL after 15s) and removes its
// binary. Stopping it again does nothing.
func (sp *serviceProc) stop() {
	sp.once.Do(func() {
		_ = sp.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-sp.exited:
		case <-time.After(15 * time.Second):
			_ = sp.cmd.Process.Kill()
			<-sp.exited
		}
		os.RemoveAll(sp.dir)
	})
}

// mintTokens signs a token for each of n buyers from first on.
func (sp *serviceProc) mintTokens(first int64, n int) ([]string, error) {
	out := make([]string, n)
	for i := range out {
		t, err := web.MintBuyerToken(sp.key, first+int64(i), time.Hour)
		if err != nil {
			return nil, err
		}
		out[i] = t
	}
	return out, nil
}

// randomHexKey is 32 random bytes in hex, as `openssl rand -hex 32` makes.
func randomHexKey() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return []byte(hex.EncodeToString(b))
}

func freeTCPPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
