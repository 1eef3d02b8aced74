// Package stackharness gives the example's tests and programs the two
// servers around PostgreSQL in the seckill stack: Redis (the front door)
// and NATS JetStream (the broker).
//
// Like pgharness for PostgreSQL, each is either the server a URL names
// (SECKILL_REDIS_URL, SECKILL_NATS_URL, or the -redis and -nats flags of
// the example) or a throwaway server started from the local binaries on a
// random port of 127.0.0.1 in a temporary directory, stopped and removed
// by Stop and killed with this process if Stop is never called. The
// throwaway Redis keeps nothing on disk (no RDB, no AOF): a restart comes
// back empty, as a cache node that lost its data does. The throwaway NATS
// runs JetStream with its store in the temporary directory: a restart
// comes back with every stream and consumer.
//
// Neither server refuses to run as root (unlike initdb), so both run as
// the calling user. Kill and Restart exist for the fault tests; they work only on throwaway
// servers. With neither URL nor binary, Start fails with one sentence that
// says what to install.
package stackharness
