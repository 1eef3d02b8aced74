package stackharness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrNoRedisCLI is matched by the error of StartThrowawayRedisCluster when
// no redis-cli binary is found.
var ErrNoRedisCLI = errors.New("no redis-cli: install redis-tools (Debian/Ubuntu: apt-get install redis-tools; it comes with redis-server)")

// RedisClusterOptions shape a throwaway Redis Cluster. The zero value is
// three masters without replicas.
type RedisClusterOptions struct {
	// Masters is the number of masters the 16384 slots are spread over.
	// Defaults to 3, the fewest redis-cli --cluster create accepts.
	Masters int
	// Replicas is the number of replicas of each master. Defaults to 0.
	Replicas int
	// NodeTimeout is the cluster-node-timeout: how long a master may not
	// answer before the others mark it failed and its replica is
	// promoted. Defaults to 2s.
	NodeTimeout time.Duration
}

// RedisCluster is a throwaway Redis Cluster (no persistence: a node
// restarted comes back empty and, as a replica, copies its master), for
// the tests that prove the front door's scripts run on a cluster and the
// drill that kills a master.
type RedisCluster struct {
	// Addrs are the nodes' host:port addresses, in node order (the node
	// index of Kill, Restart, Freeze and Thaw).
	Addrs []string

	dir   string
	nodes []*process
}

// StartThrowawayRedisCluster starts Masters×(1+Replicas) redis-server nodes
// with cluster-enabled on random ports of 127.0.0.1, each in its own
// temporary directory, joins them with redis-cli --cluster create
// --cluster-replicas (redis-cli picks which nodes are masters) and waits
// until every node reports cluster_state:ok and every replica's link to
// its master is up. On error everything started is stopped.
func StartThrowawayRedisCluster(ctx context.Context, opts RedisClusterOptions) (*RedisCluster, error) {
	if opts.Masters == 0 {
		opts.Masters = 3
	}
	if opts.NodeTimeout == 0 {
		opts.NodeTimeout = 2 * time.Second
	}
	if opts.Masters < 3 || opts.Replicas < 0 || opts.NodeTimeout < 100*time.Millisecond {
		return nil, fmt.Errorf("stackharness: a Redis Cluster needs at least 3 masters, 0 or more replicas each and a node timeout of 100ms or more, not %+v", opts)
	}
	bin, err := findBinary("redis-server", ErrNoRedis)
	if err != nil {
		return nil, err
	}
	cli, err := findBinary("redis-cli", ErrNoRedisCLI)
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
	for i := range opts.Masters * (1 + opts.Replicas) {
		if err := c.startNode(ctx, bin, i, opts.NodeTimeout); err != nil {
			return nil, err
		}
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(opts.Replicas), "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("stackharness: redis-cli --cluster create: %w: %s", err, strings.TrimSpace(string(out)))
	}
	if err := c.WaitReady(ctx, time.Minute); err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

// startNode starts node i in its own directory on a port whose cluster
// bus port (+10000) is free too.
func (c *RedisCluster) startNode(ctx context.Context, bin string, i int, nodeTimeout time.Duration) error {
	port, err := clusterPort()
	if err != nil {
		return err
	}
	ndir := filepath.Join(c.dir, strconv.Itoa(i))
	if err := os.MkdirAll(ndir, 0o700); err != nil {
		return fmt.Errorf("stackharness: %w", err)
	}
	p := newProcess("redis-server (cluster node "+strconv.Itoa(i)+")", bin, ndir, "redis.log", port,
		[]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", ndir, "--save", "", "--appendonly", "no",
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10),
			"--daemonize", "no", "--loglevel", "warning"},
		redisPing)
	c.nodes = append(c.nodes, p)
	c.Addrs = append(c.Addrs, p.addr)
	return p.launch(ctx)
}

// WaitReady waits until every node that runs reports cluster_state:ok and
// every replica among them has its link to its master up.
func (c *RedisCluster) WaitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for i, p := range c.nodes {
		if !p.alive() {
			continue
		}
		for {
			err := nodeReady(p.addr)
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("stackharness: Redis Cluster node %d (%s) not ready within %v: %v", i, p.addr, timeout, err)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// nodeReady is nil once the node at addr says cluster_state:ok and, for a
// replica, master_link_status:up.
func nodeReady(addr string) error {
	info, err := redisDo(addr, "CLUSTER", "INFO")
	if err != nil {
		return err
	}
	if field(info, "cluster_state") != "ok" {
		return fmt.Errorf("cluster_state:%s", field(info, "cluster_state"))
	}
	repl, err := redisDo(addr, "INFO", "replication")
	if err != nil {
		return err
	}
	if field(repl, "role") == "slave" && field(repl, "master_link_status") != "up" {
		return fmt.Errorf("replica, master_link_status:%s", field(repl, "master_link_status"))
	}
	return nil
}

// field returns the value of name in a "name:value" CRLF-separated answer
// (CLUSTER INFO, INFO).
func field(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// URL names every node in the form the example's -redis flag and
// go-redis's ParseClusterURL read: redis://node0?addr=node1&addr=node2….
func (c *RedisCluster) URL() string {
	return "redis://" + c.Addrs[0] + "?addr=" + strings.Join(c.Addrs[1:], "&addr=")
}

// Dir is the cluster's temporary directory: every node runs inside it.
func (c *RedisCluster) Dir() string { return c.dir }

// RedisClusterNode is one node as a running node of the cluster sees it
// (CLUSTER NODES).
type RedisClusterNode struct {
	Index    int // in Addrs; -1 for a node this cluster did not start
	Addr     string
	ID       string
	Master   bool
	MasterID string // of a replica's master
	Failed   bool   // flagged fail (or fail? by the node asked)
	Slots    [][2]int
}

// HasSlot reports whether the node serves slot.
func (n RedisClusterNode) HasSlot(slot int) bool {
	for _, r := range n.Slots {
		if slot >= r[0] && slot <= r[1] {
			return true
		}
	}
	return false
}

// Nodes returns the cluster as node i sees it.
func (c *RedisCluster) Nodes(i int) ([]RedisClusterNode, error) {
	out, err := redisDo(c.Addrs[i], "CLUSTER", "NODES")
	if err != nil {
		return nil, fmt.Errorf("stackharness: CLUSTER NODES on node %d: %w", i, err)
	}
	var nodes []RedisClusterNode
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := RedisClusterNode{Index: -1, Addr: addr, ID: f[0], MasterID: strings.TrimPrefix(f[3], "-")}
		for _, flag := range strings.Split(f[2], ",") {
			n.Master = n.Master || flag == "master"
			n.Failed = n.Failed || flag == "fail" || flag == "fail?"
		}
		for j, a := range c.Addrs {
			if a == addr {
				n.Index = j
			}
		}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") { // a slot being migrated
				continue
			}
			lo, hi, found := strings.Cut(s, "-")
			if !found {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 == nil && err2 == nil {
				n.Slots = append(n.Slots, [2]int{a, b})
			}
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// KeySlot returns the hash slot of key (CLUSTER KEYSLOT on a running node).
func (c *RedisCluster) KeySlot(key string) (int, error) {
	var err error
	for i, p := range c.nodes {
		if !p.alive() {
			continue
		}
		var s string
		if s, err = redisDo(c.Addrs[i], "CLUSTER", "KEYSLOT", key); err == nil {
			return strconv.Atoi(s)
		}
	}
	return 0, fmt.Errorf("stackharness: CLUSTER KEYSLOT: no node answered: %v", err)
}

// MasterOf returns the index of the node that serves slot as a master, as
// node asked sees it, and the indexes of that master's replicas.
func (c *RedisCluster) MasterOf(asked, slot int) (master int, replicas []int, err error) {
	nodes, err := c.Nodes(asked)
	if err != nil {
		return -1, nil, err
	}
	master = -1
	var id string
	for _, n := range nodes {
		if n.Master && !n.Failed && n.HasSlot(slot) {
			master, id = n.Index, n.ID
		}
	}
	if master < 0 {
		return -1, nil, fmt.Errorf("stackharness: node %d knows no live master of slot %d", asked, slot)
	}
	for _, n := range nodes {
		if !n.Master && n.MasterID == id && n.Index >= 0 {
			replicas = append(replicas, n.Index)
		}
	}
	return master, replicas, nil
}

// Role returns what node i says it is: "master" or "slave" (ROLE).
func (c *RedisCluster) Role(i int) (string, error) {
	info, err := redisDo(c.Addrs[i], "INFO", "replication")
	if err != nil {
		return "", err
	}
	return field(info, "role"), nil
}

// Do sends one command to node i and returns its answer as text (a simple
// or bulk string, or an integer); a Redis error is an error. For what the
// tests ask of a particular node (CLIENT KILL, INFO).
func (c *RedisCluster) Do(i int, args ...string) (string, error) { return redisDo(c.Addrs[i], args...) }

// Read sends one read command to node i after READONLY, so that a replica
// answers it from its own copy instead of redirecting it to its master.
func (c *RedisCluster) Read(i int, args ...string) (string, error) {
	return redisDoAll(c.Addrs[i], []string{"READONLY"}, args)
}

// Kill ends node i with SIGKILL (its nodes.conf stays for Restart).
func (c *RedisCluster) Kill(i int) { c.nodes[i].kill() }

// Restart starts node i again on its port and nodes.conf, empty: it
// rejoins the cluster (as a replica when its master was failed over).
func (c *RedisCluster) Restart(ctx context.Context, i int) error {
	c.nodes[i].kill()
	return c.nodes[i].launch(ctx)
}

// Freeze stops node i (SIGSTOP): it keeps its connections but answers
// nothing, as a paused VM. Thaw lets it go on.
func (c *RedisCluster) Freeze(i int) { c.nodes[i].signal(syscall.SIGSTOP) }

// CutReplica freezes the replica (node replica) and makes its master
// (node master) drop the replication link: from then on the writes the
// master acknowledges reach no replica. Thaw the replica to let it
// reconnect and catch up from the master's backlog; kill the master first
// and those writes are lost when the replica is promoted, as Redis's
// asynchronous replication allows. Keep the freeze shorter than the node
// timeout, or the cluster marks the replica failed.
func (c *RedisCluster) CutReplica(replica, master int) error {
	c.Freeze(replica)
	n, err := redisDo(c.Addrs[master], "CLIENT", "KILL", "TYPE", "replica")
	if err != nil {
		c.Thaw(replica)
		return fmt.Errorf("stackharness: CLIENT KILL TYPE replica on node %d: %w", master, err)
	}
	if n == "0" {
		c.Thaw(replica)
		return fmt.Errorf("stackharness: node %d had no replica connected", master)
	}
	return nil
}

// Thaw resumes a frozen node (SIGCONT).
func (c *RedisCluster) Thaw(i int) { c.nodes[i].signal(syscall.SIGCONT) }

// Stop ends the nodes and removes their directories. Safe to call twice.
func (c *RedisCluster) Stop() {
	for _, p := range c.nodes {
		p.stop()
	}
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
