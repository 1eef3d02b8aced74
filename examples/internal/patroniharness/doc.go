// Package patroniharness starts a throwaway high-availability PostgreSQL
// cluster for the drills: one etcd member and two or three PostgreSQL
// nodes, each run by its own Patroni, on random ports of 127.0.0.1 in a
// temporary directory, and stops every process and removes the directory
// in [Cluster.Stop].
//
// The cluster is the topology a production deployment runs, only small:
//
//   - Patroni keeps the leader key in etcd with a short TTL (a few seconds
//     instead of 30) so that a drill's failover takes seconds;
//   - synchronous_mode is on: the leader names one standby in
//     synchronous_standby_names (Patroni picks it and records it in etcd),
//     every commit waits for it (synchronous_commit = on), and only that
//     standby may be promoted when the leader is lost — so a commit that
//     was acknowledged is on the node that takes over;
//   - use_pg_rewind is on (with wal_log_hints): a failed leader that comes
//     back is rewound to the new timeline and rejoins as a standby;
//   - a third node, when asked for, is an asynchronous replica: a
//     candidate to become the synchronous standby once the leader changes.
//
// Every Patroni reaches etcd through a TCP gate of its own
// ([Node.CutEtcd], [Node.RestoreEtcd]) so a drill can take etcd away
// from one node only, the way a network partition does. [Node.Kill] is
// kill -9 of a node's Patroni and postmaster (and every server process),
// [Node.Start] starts its Patroni again. [Cluster.URL] names every node
// with target_session_attrs=read-write, so a client follows the leader.
//
// With [Options.Backup] every node archives its WAL with pgBackRest into a
// repository in the temporary directory ([Backup]), and a backup can be
// restored to a point in time into an isolated instance
// ([Backup.Restore]).
//
// The processes run as the unprivileged "postgres" OS user when the test
// runs as root (PostgreSQL refuses root). A missing program (patroni,
// patronictl, etcd, pgbackrest, the PostgreSQL server) fails Start with
// one sentence naming the Debian package to install.
package patroniharness
