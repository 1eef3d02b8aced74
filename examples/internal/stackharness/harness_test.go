package stackharness

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

func probe(t *testing.T, url, scheme string) error {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimSuffix(strings.TrimPrefix(url, scheme), "/0"), time.Second)
	if err == nil {
		c.Close()
	}
	return err
}

func TestThrowawayRedisKillRestartStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := StartThrowawayRedis(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	if !r.Owned() || !strings.HasPrefix(r.URL, "redis://127.0.0.1:") {
		t.Fatalf("URL %q owned %v", r.URL, r.Owned())
	}
	pid := r.PID()
	if pid == 0 {
		t.Fatal("PID of a running throwaway redis-server is 0")
	}
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	if probe(t, r.URL, "redis://") == nil {
		t.Fatal("killed redis still accepts connections")
	}
	if got := r.PID(); got != 0 {
		t.Fatalf("PID of a killed redis-server is %d, want 0", got)
	}
	if err := r.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if r.PID() == 0 {
		t.Fatalf("PID after the restart is 0 (before the kill: %d)", pid)
	}
	if err := probe(t, r.URL, "redis://"); err != nil {
		t.Fatalf("restarted redis: %v", err)
	}
	r.Stop()
	r.Stop() // twice is fine
	if probe(t, r.URL, "redis://") == nil {
		t.Fatal("stopped redis still accepts connections")
	}
}

func TestThrowawayNATSKillRestartStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := StartThrowawayNATS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	if n.PID() == 0 {
		t.Fatal("PID of a running throwaway nats-server is 0")
	}
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	if probe(t, n.URL, "nats://") == nil {
		t.Fatal("killed nats still accepts connections")
	}
	if err := n.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := probe(t, n.URL, "nats://"); err != nil {
		t.Fatalf("restarted nats: %v", err)
	}
	n.Stop()
	n.Stop()
}

func TestURLGivenIsNotOwned(t *testing.T) {
	r, err := StartRedis(context.Background(), "redis://example.invalid:6379/0")
	if err != nil || r.Owned() || r.PID() != 0 || r.Kill() == nil || r.Restart(context.Background()) == nil {
		t.Fatalf("a Redis given by URL: err %v owned %v", err, r.Owned())
	}
	r.Stop()
	n, err := StartNATS(context.Background(), "nats://example.invalid:4222")
	if err != nil || n.Owned() || n.Kill() == nil {
		t.Fatalf("a NATS given by URL: err %v", err)
	}
	n.Stop()
}

func TestMissingBinaryNamesThePackage(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := findBinary("no-such-server-binary", ErrNoRedis)
	if !errors.Is(err, ErrNoRedis) || !strings.Contains(err.Error(), "apt-get install redis-server") {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(ErrNoNATS.Error(), "apt-get install nats-server") {
		t.Fatalf("ErrNoNATS = %v", ErrNoNATS)
	}
}
