// Package cituscheck holds the per-helper Citus check: tests, built only
// with the build tag citus, that run every helper of the kit in a
// distributed schema of a Citus coordinator (schema-based sharding),
// counting the transactions that committed with two phases, every
// one-batch helper sent with pgtx.RunBatch where it commits and where it
// aborts (each abort matched to its sentinel and SQLSTATE), and the outbox
// relay in both its modes through failed and repeated publishes. It needs a
// coordinator that keeps its two-phase commit records:
//
//	ALTER SYSTEM SET citus.recover_2pc_interval = -1; SELECT pg_reload_conf();
//	SECKILL_DATABASE_URL=postgres://…coordinator… go test -tags citus -v ./internal/cituscheck/
//
// Without the tag the package is empty; without a Citus coordinator the
// test fails (it never skips itself).
package cituscheck
