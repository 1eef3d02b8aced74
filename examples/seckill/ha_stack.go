package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/seckillkit/seckill/examples/internal/stackharness"
)

// haStack starts what -ha runs around the Patroni cluster with -stack
// real: a throwaway three-node NATS JetStream cluster, the streams at three
// replicas, and a throwaway Redis Cluster of three masters with a replica
// each, unless -redis or -nats (or their environment variables) name
// servers to use instead. It sets cfg's URLs and returns a description of
// the topology for the report and a stop for everything it started.
func haStack(ctx context.Context, cfg *config) (topology []string, stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	if url := urlOrEnv(cfg.RedisURL, stackharness.EnvRedisURL); url != "" {
		cfg.RedisURL = url
		topology = append(topology, "front door: the Redis given by -redis or "+stackharness.EnvRedisURL)
	} else {
		fmt.Fprintln(os.Stderr, "seckill: starting a throwaway Redis Cluster (3 masters, a replica each)")
		rc, err := stackharness.StartThrowawayRedisCluster(ctx, stackharness.RedisClusterOptions{Replicas: 1})
		if err != nil {
			return nil, nil, err
		}
		stops = append(stops, rc.Stop)
		cfg.RedisURL = rc.URL()
		topology = append(topology, fmt.Sprintf("front door: Redis Cluster, 3 masters with a replica each (%d nodes), the sale's keys in one slot", len(rc.Addrs)))
	}
	if url := urlOrEnv(cfg.NATSURL, stackharness.EnvNATSURL); url != "" {
		cfg.NATSURL = url
		topology = append(topology, "broker: the NATS given by -nats or "+stackharness.EnvNATSURL)
	} else {
		fmt.Fprintln(os.Stderr, "seckill: starting a throwaway NATS JetStream cluster (3 nodes)")
		nc, err := stackharness.StartThrowawayNATSCluster(ctx, 3)
		if err != nil {
			return nil, nil, err
		}
		stops = append(stops, nc.Stop)
		if err := nc.WaitJetStream(ctx, time.Minute); err != nil {
			return nil, nil, err
		}
		cfg.NATSURL = nc.URL()
		cfg.JetStream.Replicas = 3
		// A clustered work-queue stream at its MaxMsgs with DiscardNew
		// (the order queue's bound) acknowledges publishes it did not store
		// and refuses some it did (nats-server 2.9: nats-io/nats-server#4247,
		// #4771): the order queue on the cluster is never allowed to fill.
		cfg.QueueDepth = max(cfg.QueueDepth, 2*cfg.Buyers)
		topology = append(topology, fmt.Sprintf("broker: NATS JetStream cluster of 3 nodes, streams at 3 replicas (order queue bound %d: never full)", cfg.QueueDepth))
	}
	return topology, stop, nil
}

// urlOrEnv is url, or else the value of the environment variable env.
func urlOrEnv(url, env string) string {
	if url == "" {
		url = os.Getenv(env)
	}
	return url
}
