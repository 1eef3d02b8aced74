package stackharness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
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

// redisDo sends one command to the Redis at addr and returns the answer
// as text: a simple or bulk string, or an integer; a Redis error reply is
// an error.
func redisDo(addr string, args ...string) (string, error) { return redisDoAll(addr, args) }

// redisDoAll sends commands one after the other on one connection and
// returns the last answer (an error reply to any ends it).
func redisDoAll(addr string, cmds ...[]string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	rd := bufio.NewReader(c)
	var answer string
	for _, args := range cmds {
		var b strings.Builder
		fmt.Fprintf(&b, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
		if _, err := c.Write([]byte(b.String())); err != nil {
			return "", err
		}
		if answer, err = readAnswer(rd, args); err != nil {
			return "", err
		}
	}
	return answer, nil
}

// readAnswer reads one answer that is not an array.
func readAnswer(rd *bufio.Reader, args []string) (string, error) {
	line, err := rd.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("empty answer to %s", args[0])
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("%s: %s", strings.Join(args, " "), line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err // a nil bulk string reads as ""
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("%s: unexpected answer %q", args[0], line)
}
