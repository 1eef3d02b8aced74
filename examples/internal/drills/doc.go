// Package drills holds the fault, crash and pooler drills of the seckill
// kit: tests that run the example order flow (examples/seckill/flow) under
// the faults a production deployment meets and then prove that the
// invariants of docs/design.md still hold. It has no code of its own besides
// this overview; everything is in the _test.go files.
//
// # What every drill does
//
// A drill makes a set of order messages (buyers over a few buckets, some
// buyers clicking twice, so that sold-out and already-ordered rejections
// happen too), delivers them to a pool of consumer goroutines at least once
// — a delivery that returns an error other than a poison message is
// redelivered after a backoff, as a broker would — and runs outbox relays
// whose publisher records every event id. Some drills also run payments
// and timeout-cancel sweeps. Then it injects its fault, lets the flow
// finish, drains the outbox and checks:
//
//   - the flow's Audit: every check passes (one order per user, bucket and
//     SKU conservation, ledger replay, one ALLOCATE per live order and one
//     RELEASE per cancel, no order both paid and cancelled, no event left
//     unpublished);
//   - exactly once: one inbox row per message id, its result consistent
//     with the orders table (ORDER_CREATED ⇔ the message's order exists),
//     one ALLOCATE ledger row per order, allocated stock = live orders, and
//     what each consumer was told matches what the inbox holds;
//   - every outbox event reached the publisher at least once;
//   - the drill's own assertions (below).
//
// # The drills
//
//   - TestFaultCutConnections: every consumer connection runs through
//     internal/faultproxy, which cuts 170 connections: 50 each in the fresh
//     path's one batch at its COMMIT, before a Bind in its middle, and after
//     a batch or statement ran (for the fresh batch: after the server
//     committed it), and 10 each before and after the general
//     transaction's COMMIT (waves of buyers come until every kind is done).
//     Unknown commits happen and are resolved by redelivery through the
//     inbox, or with pgtx.Options.ResolveCommit (85 cuts more) in place
//     when the transaction id reached the client (the general transaction)
//     and by redelivery when it did not (a cut one-batch transaction).
//   - TestCrashImmediateShutdown: a throwaway cluster of its own is shut
//     down immediately (pg_ctl stop -m immediate, i.e. SIGQUIT) in the
//     middle of the load, with three orders held in flight (batch run,
//     COMMIT not sent), and restarted; everything a consumer or a payment
//     acknowledged survives, the orders in flight did not commit and are
//     created once on redelivery, the relays resume, and the events a
//     relay had claimed before the crash are recovered after their lease
//     and published.
//   - TestFaultKillConsumerBeforeCommit: a consumer dies after the bucket
//     decrement and before COMMIT (its socket closed, or its ctx cancelled
//     before COMMIT, in the general transaction; its connection dead as
//     COMMIT leaves, in the fresh pipelined batch): nothing of it remains,
//     and the redelivery creates the order once.
//   - TestFaultRelayKilledBetweenPublishAndMark: a relay dies after
//     publishing and before marking SENT: the events are published again
//     after the lease expires, nothing is lost.
//   - TestFaultDeadlocksAndLockTimeouts: real deadlocks between a consumer
//     and a hostile session, lock timeouts behind held bucket locks, a
//     concurrent Rebalance and cancel sweeps: each failure is retried
//     (40P01) or classified (55P03) and redelivered; no wrong result.
//   - TestFaultPoolExhaustion: two connections for sixteen consumers that
//     wait at most 20ms for one: acquire timeouts surface as errors, the
//     queue backs off, everything is processed once, no connection stays
//     checked out, no goroutine leaks. (A deadline on the whole delivery
//     shorter than a transaction under contention livelocks instead: the
//     cancelled transactions close their connections and every delivery
//     pays for a new one. Bound the acquire, not the transaction.)
//   - TestFaultDuplicateStorm: every message delivered three times at
//     once (and some re-sent under a new message id): one effect each.
//   - TestFailoverSynchronousStandby: a primary with a synchronous standby
//     (pg_basebackup, streaming), every pool on a multi-host URL with
//     target_session_attrs=read-write. Mid-sale the standby's WAL receiver
//     is held until COMMITs wait for it, the primary is stopped
//     immediately, the standby powered off and on and promoted: every
//     acknowledged order and payment is on the new primary, the waiting
//     COMMITs are unknown outcomes that ResolveCommit does not call
//     committed (another timeline), their redeliveries meet the inbox, the
//     stranded claim is recovered.
//   - TestFailoverAsynchronousStandby: the same with synchronous_commit =
//     local: the messages acknowledged while the standby did not receive
//     them are lost; the drill counts them (messages, orders, events
//     already published) and asserts they are the ones the standby never
//     received.
//   - TestReplicaLagReadsNeverDecideWrites: a lagging standby serves order
//     status; a cancel decided on its stale CREATED is refused by the
//     primary's conditional UPDATE; read-your-writes by replayed position.
//   - TestArchiveFailureDuringSale: archive_command fails mid-sale; the
//     sale goes on without an error, pg_stat_archiver and the pg_wal
//     backlog show it, and the backlog is archived once it works again.
//   - TestSoakShort: twelve rounds of load with inbox and outbox purges and
//     autovacuum (examples/internal/soak); table sizes and the outbox
//     claim's cost stay within twice their size after the warm-up.
//   - TestPgBouncerFullFlow: the whole flow — orders, payments, cancels,
//     relays polling with DisableListen — through PgBouncer in transaction
//     pooling mode with pgx's exec query mode.
//   - TestPatroniKillLeaderMidSale: a Patroni cluster
//     (examples/internal/patroniharness: etcd, a leader and a synchronous
//     standby, synchronous_mode and use_pg_rewind), every pool on a
//     multi-host URL. Mid-sale, with COMMITs waiting for the standby, the
//     leader's Patroni, postmaster and server processes are killed with
//     SIGKILL: Patroni promotes the standby once the leader key expires;
//     every acknowledged order, payment and event is on it; ResolveCommit
//     leaves the waiting COMMITs unknown (another timeline) and their
//     redeliveries meet the inbox; the old leader, started again, is
//     rewound (pg_rewind) and rejoins as the synchronous standby.
//   - TestPatroniFencingLeaderLosesEtcd: mid-sale the leader loses etcd;
//     its Patroni demotes it before its key expires, writes sent to it
//     fail from then on and those it acknowledged are on the new leader;
//     every node is sampled every 10ms: never two writable at once.
//   - TestPatroniSwitchoverUnderLoad: patronictl switchover mid-sale;
//     retries at most, nothing lost, the write outage reported.
//   - TestPgBackRestPointInTimeRecovery: a pgBackRest stanza on the
//     Patroni cluster, a full backup, WAL archived during a sale; restores
//     into isolated instances to a mid-sale instant (the invariant queries
//     of testdata/invariants hold, every order acknowledged before it is
//     present, none started after it) and to the end (every acknowledged
//     order present); RTO, RPO and sizes reported.
//   - TestJetStreamClusterNodeKilledMidSale: the order messages and the
//     outbox's events through a three-node JetStream cluster (streams with
//     Replicas: 3); the order stream's leader is killed mid-sale;
//     publishes, consumers and relays go on, duplicates are absorbed by
//     the Nats-Msg-Id window and the inbox, nothing is lost.
//   - TestRedisMasterKilledMidSale: the sale through the Redis front door
//     (examples/seckill/frontdoor) on a Redis Cluster of three masters with
//     a replica each; mid-sale the master of the sale's slot acknowledges
//     reservations its replica never receives (the replica frozen, its
//     link cut) and is killed with SIGKILL; the replica is promoted
//     without them. The front door sees another server holding its keys,
//     answers ErrDown (buyers click again) and is rebuilt from PostgreSQL;
//     the killed master comes back as a replica; every acknowledged order
//     is present, no oversell, no second order, and the audit and the
//     three-way reconciliation pass. The outage is reported.
//   - TestAutovacuumHeldBack: a sale in phases while an open snapshot, then
//     an abandoned logical replication slot, holds vacuum back; the oldest
//     xmin age, the dead versions VACUUM cannot remove and the outbox
//     claim's buffers show it, and all recover when it is released.
//
// Run them alone with, e.g.,
//
//	go test -race -count=1 -run 'TestFault|TestCrash|TestFailover|TestReplica|TestArchive|TestSoak|TestPgBouncer|TestAutovacuum' ./examples/internal/drills/
//	go test -race -count=1 -run 'TestPatroni|TestPgBackRest|TestJetStream|TestRedis' ./examples/internal/drills/
//
// The Patroni and pgBackRest drills need the patroni, etcd-server and
// pgbackrest packages; the JetStream drill nats-server; the Redis drill
// redis-server and redis-tools (redis-cli).
package drills
