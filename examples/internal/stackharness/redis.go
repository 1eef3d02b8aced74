package stackharness

import (
	"context"
	"errors"
	"strconv"
)

// EnvRedisURL names the environment variable that points tests and the
// example at an existing Redis instead of a throwaway one.
const EnvRedisURL = "SECKILL_REDIS_URL"

// ErrNoRedis is matched by the error of StartRedis when no URL is given and
// no redis-server binary is found.
var ErrNoRedis = errors.New("no Redis available: install redis-server " +
	"(Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis) " +
	"or set " + EnvRedisURL + " (or -redis) to a server you may write to")

// Redis is a Redis server for tests and the example.
type Redis struct {
	// URL is a redis:// URL for go-redis's ParseURL.
	URL string

	server // no process when given by URL
}

// Owned reports whether this process started the server (and so may kill
// and restart it).
func (r *Redis) Owned() bool { return r.owned() }

// StartRedis returns the server at url when url is not empty, else the one
// SECKILL_REDIS_URL names, else a new throwaway redis-server.
func StartRedis(ctx context.Context, url string) (*Redis, error) {
	if url = urlOrEnv(url, EnvRedisURL); url != "" {
		return &Redis{URL: url}, nil
	}
	return StartThrowawayRedis(ctx)
}

// throwawayRedis is a redis-server without persistence.
var throwawayRedis = throwaway{
	bin: "redis-server", missing: ErrNoRedis, dirPrefix: "seckill-redis-", logName: "redis.log",
	args: func(dir string, port int) []string {
		return []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
			"--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "yes",
			"--maxclients", "1000", "--loglevel", "warning"}
	},
	ready: redisPing,
}

// StartThrowawayRedis starts a redis-server without persistence on a random
// port, whatever SECKILL_REDIS_URL says.
func StartThrowawayRedis(ctx context.Context) (*Redis, error) {
	p, err := throwawayRedis.start(ctx)
	if err != nil {
		return nil, err
	}
	return &Redis{URL: "redis://" + p.addr + "/0", server: server{p}}, nil
}

// Kill ends the throwaway server with SIGKILL: every connection drops and,
// with no persistence, all data is gone.
func (r *Redis) Kill() error { return r.kill() }

// Restart starts the throwaway server again on the same port, empty.
func (r *Redis) Restart(ctx context.Context) error { return r.restart(ctx) }

// Stop ends a throwaway server and removes its directory; it does nothing
// for a server given by URL. Safe to call more than once.
func (r *Redis) Stop() { r.stop() }
