package stackharness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATSCluster is a throwaway NATS cluster with JetStream on every node (a
// JetStream cluster: streams with Replicas 3 keep a copy on three nodes
// and acknowledge a publish once a majority stored it).
type NATSCluster struct {
	// Names are the nodes' server names (as a stream's cluster info names
	// its leader and replicas), in node order.
	Names []string

	dir   string
	nodes []*process
}

// StartThrowawayNATSCluster starts n nats-server -js nodes routed to each
// other in one cluster, each on random client and cluster ports with its
// store in a temporary directory, and returns once every node accepts
// clients. JetStream elects its meta leader shortly after: clients should
// retry their first stream creation.
func StartThrowawayNATSCluster(ctx context.Context, n int) (*NATSCluster, error) {
	bin, err := findBinary("nats-server", ErrNoNATS)
	if err != nil {
		return nil, err
	}
	if n < 3 {
		return nil, fmt.Errorf("stackharness: a JetStream cluster needs at least 3 nodes, not %d", n)
	}
	dir, err := os.MkdirTemp("", "seckill-nats-cluster-")
	if err != nil {
		return nil, fmt.Errorf("stackharness: %w", err)
	}
	c := &NATSCluster{dir: dir}
	ok := false
	defer func() {
		if !ok {
			c.Stop()
		}
	}()
	ports := make([]int, n)
	routes := make([]string, n)
	for i := range n {
		if ports[i], err = freePort(); err != nil {
			return nil, err
		}
		rp, err := freePort()
		if err != nil {
			return nil, err
		}
		routes[i] = "nats://127.0.0.1:" + strconv.Itoa(rp)
	}
	for i := range n {
		ndir := filepath.Join(dir, strconv.Itoa(i))
		if err := os.MkdirAll(ndir, 0o700); err != nil {
			return nil, fmt.Errorf("stackharness: %w", err)
		}
		name := fmt.Sprintf("nats-%d", i+1)
		c.Names = append(c.Names, name)
		p := newProcess("nats-server "+name, bin, ndir, "nats.log", ports[i],
			[]string{"-js", "-a", "127.0.0.1", "-p", strconv.Itoa(ports[i]), "-sd", filepath.Join(ndir, "store"),
				"-n", name, "--cluster_name", "seckill", "--cluster", routes[i], "--routes", strings.Join(routes, ",")},
			natsReady)
		c.nodes = append(c.nodes, p)
	}
	// Start them all before waiting: a node greets clients at once, but
	// each needs the others to form the JetStream cluster.
	for _, p := range c.nodes {
		if err := p.launch(ctx); err != nil {
			return nil, err
		}
	}
	ok = true
	return c, nil
}

// URL names every node (nats.go tries them in turn and reconnects to
// another when its server goes away).
func (c *NATSCluster) URL() string {
	urls := make([]string, len(c.nodes))
	for i, p := range c.nodes {
		urls[i] = "nats://" + p.addr
	}
	return strings.Join(urls, ",")
}

// Node returns the index of the node called name, or -1.
func (c *NATSCluster) Node(name string) int {
	for i, n := range c.Names {
		if n == name {
			return i
		}
	}
	return -1
}

// Kill ends node i with SIGKILL; its store stays for Restart.
func (c *NATSCluster) Kill(i int) { c.nodes[i].kill() }

// Restart starts node i again on its port and store.
func (c *NATSCluster) Restart(ctx context.Context, i int) error {
	c.nodes[i].kill()
	return c.nodes[i].launch(ctx)
}

// WaitJetStream waits until the cluster's JetStream accepts a stream with
// a replica on every node (its meta leader elected, every peer known): it
// creates such a stream, retrying, and deletes it again.
func (c *NATSCluster) WaitJetStream(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	nc, err := nats.Connect(c.URL(), nats.Timeout(2*time.Second))
	if err != nil {
		return fmt.Errorf("stackharness: NATS cluster: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("stackharness: NATS cluster: %w", err)
	}
	const probe = "SECKILL_HARNESS_PROBE"
	for {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = js.CreateOrUpdateStream(cctx, jetstream.StreamConfig{Name: probe, Subjects: []string{"seckill.harness.probe"},
			Storage: jetstream.MemoryStorage, Replicas: len(c.nodes)})
		if err == nil {
			err = js.DeleteStream(cctx, probe)
		}
		ccancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stackharness: the NATS cluster's JetStream did not accept a stream at %d replicas within %v: %w", len(c.nodes), timeout, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Stop ends every node and removes the directory. Safe to call twice.
func (c *NATSCluster) Stop() {
	for _, p := range c.nodes {
		p.stop()
	}
	os.RemoveAll(c.dir)
}
