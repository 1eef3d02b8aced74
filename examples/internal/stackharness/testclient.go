package stackharness

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisClient starts a Redis for a test with [StartRedis] (a throwaway
// redis-server unless EnvRedisURL names one) and returns a go-redis client
// on it. The server is stopped and the client closed when the test ends;
// an error fails the test.
func RedisClient(t testing.TB) *redis.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := StartRedis(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	opts, err := redis.ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}
