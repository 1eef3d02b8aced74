package stackharness

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// RedisCluster is a throwaway Redis Cluster of primaries only (no
// replicas, no persistence), for the tests that prove the front door's
// scripts run on a cluster.
type RedisCluster struct {
	// Addrs are the nodes' host:port addresses.
	Addrs []string

	dir   string
	nodes []*process
}

// StartThrowawayRedisCluster starts n redis-server nodes with
// cluster-enabled, joins them with redis-cli --cluster create (the slots
// spread over all of them) and waits until the cluster state is ok.
func StartThrowawayRedisCluster(ctx context.Context, n int) (*RedisCluster, error) {
	bin, err := findBinary("redis-server", ErrNoRedis)
	if err != nil {
		return nil, err
	}
	cli, err := findBinary("redis-cli", fmt.Errorf("no redis-cli: install redis-tools (Debian/Ubuntu: apt-get install redis-tools; it comes with redis-server)"))
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "seckill-redis-cluster-")
	if err != nil {
		return nil, fmt.Errorf("stackharness: %w", err)
	}
	c := &RedisCluster{dir: dir}
	ok := false
	defer func() {
		if !ok {
			c.Stop()
		}
	}()
	for i := range n {
		port, err := clusterPort()
		if err != nil {
			return nil, err
		}
		ndir := filepath.Join(dir, strconv.Itoa(i))
		if err := os.MkdirAll(ndir, 0o700); err != nil {
			return nil, fmt.Errorf("stackharness: %w", err)
		}
		p := newProcess("redis-server (cluster node)", bin, ndir, "redis.log", port,
			[]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", ndir, "--save", "", "--appendonly", "no",
				"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000",
				"--daemonize", "no", "--loglevel", "warning"},
			redisPing)
		if err := p.launch(ctx); err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, p)
		c.Addrs = append(c.Addrs, p.addr)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("stackharness: redis-cli --cluster create: %w: %s", err, strings.TrimSpace(string(out)))
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, addr := range c.Addrs {
		for {
			state, err := clusterState(addr)
			if err == nil && state == "ok" {
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("stackharness: cluster node %s: state %q, %v after 30s", addr, state, err)
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	ok = true
	return c, nil
}

// Stop ends the nodes and removes their directories. Safe to call twice.
func (c *RedisCluster) Stop() {
	for _, p := range c.nodes {
		p.stop()
	}
	c.nodes = nil
	os.RemoveAll(c.dir)
}

func redisPing(c net.Conn) error {
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := readLine(c)
	if err != nil {
		return err
	}
	if line != "+PONG" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// clusterState asks a node CLUSTER INFO and returns cluster_state.
func clusterState(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("CLUSTER INFO\r\n")); err != nil {
		return "", err
	}
	buf := make([]byte, 4096)
	var sb strings.Builder
	for !strings.Contains(sb.String(), "cluster_state:") || !strings.Contains(sb.String()[strings.Index(sb.String(), "cluster_state:"):], "\r\n") {
		n, err := c.Read(buf)
		sb.Write(buf[:n])
		if err == io.EOF || (err != nil && n == 0) {
			return "", err
		}
	}
	s := sb.String()
	s = s[strings.Index(s, "cluster_state:")+len("cluster_state:"):]
	return strings.TrimSpace(s[:strings.Index(s, "\r\n")]), nil
}

// clusterPort finds a free port whose cluster bus port (+10000) is free too.
func clusterPort() (int, error) {
	for range 50 {
		p, err := freePort()
		if err != nil {
			return 0, err
		}
		if p+10000 > 65535 {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+10000)))
		if err != nil {
			continue
		}
		l.Close()
		return p, nil
	}
	return 0, fmt.Errorf("stackharness: no free port pair for a cluster node")
}
