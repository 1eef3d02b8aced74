package stackharness

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/seckillkit/seckill/examples/internal/patroniharness"
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

// TestRedisClusterFailover: three masters with a replica each; a killed
// master's replica is promoted to serve its slots, the killed node comes
// back as that replica's replica, and Stop leaves no process and no
// directory.
func TestRedisClusterFailover(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := StartThrowawayRedisCluster(ctx, RedisClusterOptions{Replicas: 1, NodeTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	t.Logf("cluster of 6 ready after %v", time.Since(start).Round(time.Millisecond))
	if len(c.Addrs) != 6 || !strings.HasPrefix(c.URL(), "redis://"+c.Addrs[0]+"?addr=") || strings.Count(c.URL(), "addr=") != 5 {
		t.Fatalf("addrs %v, URL %s", c.Addrs, c.URL())
	}
	nodes, err := c.Nodes(0)
	if err != nil {
		t.Fatal(err)
	}
	masters := 0
	for _, n := range nodes {
		if n.Master {
			masters++
		}
	}
	if len(nodes) != 6 || masters != 3 {
		t.Fatalf("%d nodes, %d masters: %+v", len(nodes), masters, nodes)
	}
	slot, err := c.KeySlot("sale:{7:70}:meta")
	if err != nil {
		t.Fatal(err)
	}
	m, replicas, err := c.MasterOf(0, slot)
	if err != nil || len(replicas) != 1 {
		t.Fatalf("master of slot %d: %d, replicas %v, %v", slot, m, replicas, err)
	}
	r := replicas[0]
	c.Kill(m)
	killed := time.Now()
	deadline := killed.Add(time.Minute)
	for {
		role, err := c.Role(r)
		if err == nil && role == "master" {
			if now, _, err := c.MasterOf(r, slot); err == nil && now == r {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %d not promoted to serve slot %d within a minute of the kill of master %d: role %q, %v", r, slot, m, role, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("replica %d serves slot %d %v after the kill of master %d", r, slot, time.Since(killed).Round(time.Millisecond), m)
	if err := c.Restart(ctx, m); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("old master %d back as a replica %v after the kill", m, time.Since(killed).Round(time.Millisecond))
	if role, err := c.Role(m); err != nil || role != "slave" {
		t.Fatalf("the restarted old master: role %q, %v; want slave (of node %d)", role, err, r)
	}
	c.Stop()
	c.Stop() // twice is fine
	if left := patroniharness.Leftovers(c.Dir()); len(left) > 0 {
		t.Errorf("processes left after Stop: %v", left)
	}
	if _, err := os.Stat(c.Dir()); !os.IsNotExist(err) {
		t.Errorf("directory %s left after Stop: %v", c.Dir(), err)
	}
}

// TestRedisClusterNeedsRedisCLI: without redis-cli the cluster cannot be
// created, and the error names the package.
func TestRedisClusterNeedsRedisCLI(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := findBinary("no-such-redis-cli", ErrNoRedisCLI)
	if !errors.Is(err, ErrNoRedisCLI) || !strings.Contains(err.Error(), "apt-get install redis-tools") {
		t.Fatalf("err = %v", err)
	}
}
