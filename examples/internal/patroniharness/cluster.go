package patroniharness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/pgharness"
)

// Options tunes a cluster. The zero value is two nodes with a 10s TTL.
type Options struct {
	// Nodes is the number of PostgreSQL nodes: 2 (leader and synchronous
	// standby) or 3 (and an asynchronous candidate). Defaults to 2.
	Nodes int
	// TTL is the leader key's time to live in etcd, in seconds: how long a
	// lost leader keeps the key before a standby may take over. LoopWait
	// is the Patroni loop's period and RetryTimeout how long it retries
	// etcd and PostgreSQL before it demotes a leader that cannot renew its
	// key; Patroni requires LoopWait + 2*RetryTimeout <= TTL. Default 10,
	// 1 and 4.
	TTL, LoopWait, RetryTimeout int
	// MaxConnections is each node's max_connections. Defaults to 100.
	MaxConnections int
	// Parameters are extra PostgreSQL settings of every node (Patroni's
	// dynamic configuration in etcd).
	Parameters map[string]string
	// Backup makes every node archive its WAL with pgBackRest
	// (archive_mode = on) into a repository in the cluster's directory;
	// [Cluster.Backup] creates the stanza and takes backups. Defaults to
	// false.
	Backup bool
}

// Cluster is a throwaway etcd with Patroni-managed PostgreSQL nodes.
type Cluster struct {
	// Scope is the Patroni cluster name.
	Scope string
	// Nodes are the PostgreSQL nodes, in the order they were started: the
	// first was the bootstrap leader.
	Nodes []*Node

	dir        string
	binDir     string
	patroni    string
	patronictl string
	cred       *syscall.Credential
	etcd       *proc
	etcdAddr   string
	backup     *Backup
	opts       Options
}

// Node is one PostgreSQL node and its Patroni.
type Node struct {
	// Name is the node's Patroni name (node1, node2, …).
	Name string
	// Port is PostgreSQL's port on 127.0.0.1; RESTPort Patroni's REST API.
	Port, RESTPort int

	c       *Cluster
	dir     string
	config  string
	patroni *proc
	gate    *gate
}

// Dir is the cluster's temporary directory.
func (c *Cluster) Dir() string { return c.dir }

// BinDir is the directory of the PostgreSQL binaries the nodes run.
func (c *Cluster) BinDir() string { return c.binDir }

// DataDir is the node's PostgreSQL data directory.
func (n *Node) DataDir() string { return filepath.Join(n.dir, "data") }

// URL is a connection string for the node alone.
func (n *Node) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=5", n.Port)
}

// URL names every node with target_session_attrs=read-write: a client
// connects to whichever accepts writes, so new connections follow the
// leader through a failover or a switchover.
func (c *Cluster) URL() string {
	hosts := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		hosts[i] = "127.0.0.1:" + strconv.Itoa(n.Port)
	}
	return "postgres://postgres@" + strings.Join(hosts, ",") +
		"/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=3"
}

// Start starts etcd and opts.Nodes Patroni nodes, and returns once one is
// the leader, one its synchronous standby, and every other streams from
// the leader. On error everything started is stopped.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	if opts, err = opts.withDefaults(); err != nil {
		return nil, err
	}
	c = &Cluster{Scope: "seckill", opts: opts}
	etcdBin, err := c.findPrograms()
	if err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		if c.cred, err = unprivileged(); err != nil {
			return nil, err
		}
	}
	if c.dir, err = os.MkdirTemp("", "seckill-patroni-"); err != nil {
		return nil, fmt.Errorf("patroniharness: %w", err)
	}
	cl := c // the named result is nil by the time a failed Start's defer runs
	defer func() {
		if err != nil {
			_ = cl.Stop()
		}
	}()
	if err := c.mkdir(c.dir); err != nil {
		return nil, err
	}

	// etcd: one member, as the calling user.
	if err := c.newEtcd(etcdBin); err != nil {
		return nil, err
	}
	if err := c.StartEtcd(ctx); err != nil {
		return nil, err
	}
	if opts.Backup {
		if c.backup, err = newBackup(c); err != nil {
			return nil, err
		}
	}
	if err := c.addNodes(); err != nil {
		return nil, err
	}
	if err := c.startNodes(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// withDefaults checks o and fills in its defaults.
func (o Options) withDefaults() (Options, error) {
	if o.Nodes == 0 {
		o.Nodes = 2
	}
	if o.Nodes < 2 || o.Nodes > 3 {
		return o, fmt.Errorf("patroniharness: Nodes = %d: use 2 or 3", o.Nodes)
	}
	o.TTL = cmpOr(o.TTL, 10)
	o.LoopWait = cmpOr(o.LoopWait, 1)
	o.RetryTimeout = cmpOr(o.RetryTimeout, 4)
	o.MaxConnections = cmpOr(o.MaxConnections, 100)
	if o.LoopWait+2*o.RetryTimeout > o.TTL {
		return o, fmt.Errorf("patroniharness: LoopWait + 2*RetryTimeout (%d) must not exceed TTL (%d)", o.LoopWait+2*o.RetryTimeout, o.TTL)
	}
	return o, nil
}

// findPrograms finds patroni, patronictl, etcd (whose path it returns),
// pgBackRest with Options.Backup, and the PostgreSQL installation's
// directory with the tools Patroni runs.
func (c *Cluster) findPrograms() (etcdBin string, err error) {
	if c.patroni, err = findProgram("patroni", "patroni"); err != nil {
		return "", err
	}
	if c.patronictl, err = findProgram("patronictl", "patroni"); err != nil {
		return "", err
	}
	etcdBin, err = findProgram("etcd", "etcd-server")
	if err != nil {
		return "", err
	}
	if c.opts.Backup {
		if _, err := findProgram("pgbackrest", "pgbackrest"); err != nil {
			return "", err
		}
	}
	if c.binDir, err = pgharness.FindBinDir(); err != nil {
		return "", err
	}
	// PATH may hold links to a few of the programs only (initdb,
	// postgres): Patroni needs the installation's directory.
	if real, err := filepath.EvalSymlinks(filepath.Join(c.binDir, "postgres")); err == nil {
		c.binDir = filepath.Dir(real)
	}
	for _, tool := range []string{"pg_rewind", "pg_basebackup"} {
		if _, err := os.Stat(filepath.Join(c.binDir, tool)); err != nil {
			return "", fmt.Errorf("%w: %s not found in %s: install the PostgreSQL server (Debian/Ubuntu: apt-get install postgresql)", ErrMissingProgram, tool, c.binDir)
		}
	}
	return etcdBin, nil
}

// newEtcd sets up (without starting it) the cluster's etcd: one member on
// free ports, as the calling user.
func (c *Cluster) newEtcd(etcdBin string) error {
	clientPort, err := freePort()
	if err != nil {
		return err
	}
	peerPort, err := freePort()
	if err != nil {
		return err
	}
	c.etcdAddr = "127.0.0.1:" + strconv.Itoa(clientPort)
	etcdDir := filepath.Join(c.dir, "etcd")
	peer := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	c.etcd = &proc{
		name: "etcd", bin: etcdBin, dir: c.dir, logPath: filepath.Join(c.dir, "etcd.log"), death: syscall.SIGKILL,
		env: os.Environ(),
		args: []string{"--name", "e1", "--data-dir", etcdDir,
			"--listen-client-urls", "http://" + c.etcdAddr, "--advertise-client-urls", "http://" + c.etcdAddr,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", "e1=" + peer, "--initial-cluster-state", "new",
			"--log-level", "warn", "--logger", "zap"},
	}
	return nil
}

// addNodes sets up Options.Nodes nodes: their ports, directories and
// gates to etcd.
func (c *Cluster) addNodes() (err error) {
	for i := range c.opts.Nodes {
		n := &Node{Name: "node" + strconv.Itoa(i+1), c: c, dir: filepath.Join(c.dir, "node"+strconv.Itoa(i+1))}
		if n.Port, err = freePort(); err != nil {
			return err
		}
		if n.RESTPort, err = freePort(); err != nil {
			return err
		}
		if err := c.mkdir(n.dir); err != nil {
			return err
		}
		if n.gate, err = startGate(c.etcdAddr); err != nil {
			return err
		}
		c.Nodes = append(c.Nodes, n)
	}
	return nil
}

// startNodes writes every node's configuration and starts its Patroni:
// the first bootstraps alone, the others clone it. It returns once the
// cluster is healthy.
func (c *Cluster) startNodes(ctx context.Context) error {
	for i, n := range c.Nodes {
		if err := n.writeConfig(); err != nil {
			return err
		}
		if err := n.Start(); err != nil {
			return err
		}
		if i == 0 {
			// The first node bootstraps alone; the others clone it.
			if _, err := c.WaitLeader(ctx, "", 90*time.Second); err != nil {
				return err
			}
		}
	}
	return c.WaitHealthy(ctx, 120*time.Second)
}

func cmpOr(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// StartEtcd starts etcd (again, after [Cluster.StopEtcd]) and waits until
// it answers.
func (c *Cluster) StartEtcd(ctx context.Context) error {
	if err := c.etcd.start(); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := c.etcdHealthy(ctx); err == nil {
			return nil
		} else if time.Now().After(deadline) || !c.etcd.running() {
			return fmt.Errorf("patroniharness: etcd did not become healthy: %v; log:\n%s", err, c.etcd.logTail(3000))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// StopEtcd stops etcd (SIGTERM): every Patroni loses the DCS at once.
func (c *Cluster) StopEtcd() error { return c.etcd.stop(syscall.SIGTERM, 10*time.Second) }

func (c *Cluster) etcdHealthy(ctx context.Context) error {
	b, err := httpGet(ctx, "http://"+c.etcdAddr+"/health")
	if err != nil {
		return err
	}
	if !strings.Contains(string(b), `"health":"true"`) {
		return fmt.Errorf("etcd /health: %s", b)
	}
	return nil
}

func (c *Cluster) mkdir(d string) error {
	if err := os.MkdirAll(d, 0o700); err != nil {
		return fmt.Errorf("patroniharness: %w", err)
	}
	if c.cred != nil {
		if err := os.Chown(d, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return fmt.Errorf("patroniharness: %w", err)
		}
	}
	return nil
}

func unprivileged() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("%w: running as root needs the unprivileged \"postgres\" OS user (Debian/Ubuntu: apt-get install postgresql creates it)", ErrMissingProgram)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil || uid == 0 {
		return nil, errors.New("patroniharness: the \"postgres\" OS user is not an unprivileged user")
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// writeConfig writes the node's Patroni configuration (JSON, which is
// YAML).
func (n *Node) writeConfig() error {
	c := n.c
	b, err := json.MarshalIndent(n.patroniConfig(), "", "  ")
	if err != nil {
		return fmt.Errorf("patroniharness: %w", err)
	}
	n.config = filepath.Join(n.dir, "patroni.yml")
	if err := os.WriteFile(n.config, b, 0o600); err != nil {
		return fmt.Errorf("patroniharness: %w", err)
	}
	if c.cred != nil {
		if err := os.Chown(n.config, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return fmt.Errorf("patroniharness: %w", err)
		}
	}
	return nil
}

// patroniConfig is the node's Patroni configuration.
func (n *Node) patroniConfig() map[string]any {
	c := n.c
	o := c.opts
	local := map[string]any{
		"unix_socket_directories": n.dir,
	}
	if c.backup != nil {
		local["archive_mode"] = "on"
		local["archive_command"] = c.backup.archiveCommand(n)
	}
	return map[string]any{
		"scope":     c.Scope,
		"namespace": "/seckill/",
		"name":      n.Name,
		"log":       map[string]any{"level": "INFO"},
		"restapi": map[string]any{
			"listen":          "127.0.0.1:" + strconv.Itoa(n.RESTPort),
			"connect_address": "127.0.0.1:" + strconv.Itoa(n.RESTPort),
		},
		"etcd3": map[string]any{"hosts": []string{n.gate.addr()}, "use_proxies": true, "protocol": "http"},
		"bootstrap": map[string]any{
			"dcs": map[string]any{
				"ttl": o.TTL, "loop_wait": o.LoopWait, "retry_timeout": o.RetryTimeout,
				"maximum_lag_on_failover": 64 << 20,
				"synchronous_mode":        true,
				"postgresql": map[string]any{
					"use_pg_rewind": true,
					"use_slots":     true,
					"parameters":    o.clusterParameters(),
				},
			},
			"initdb": []any{map[string]string{"encoding": "UTF8"}, map[string]string{"locale": "C"}},
		},
		"postgresql": map[string]any{
			"listen":          "127.0.0.1:" + strconv.Itoa(n.Port),
			"connect_address": "127.0.0.1:" + strconv.Itoa(n.Port),
			"data_dir":        n.DataDir(),
			"bin_dir":         c.binDir,
			"pgpass":          filepath.Join(n.dir, "pgpass"),
			"authentication": map[string]any{
				"superuser":   map[string]string{"username": "postgres", "password": "postgres"},
				"replication": map[string]string{"username": "postgres", "password": "postgres"},
				"rewind":      map[string]string{"username": "postgres", "password": "postgres"},
			},
			"parameters": local,
			"pg_hba": []string{
				"local all all trust",
				"host all all 127.0.0.1/32 trust",
				"host replication all 127.0.0.1/32 trust",
			},
		},
		"tags": map[string]any{"nofailover": false, "noloadbalance": false, "clonefrom": false, "nosync": false},
	}
}

// clusterParameters are the PostgreSQL settings of every node (Patroni's
// dynamic configuration): the harness's, then o.Parameters.
func (o Options) clusterParameters() map[string]any {
	params := map[string]any{
		"max_connections":           o.MaxConnections,
		"wal_level":                 "replica",
		"hot_standby":               "on",
		"wal_log_hints":             "on", // pg_rewind needs it (or data checksums)
		"max_wal_senders":           10,
		"max_replication_slots":     10,
		"wal_keep_size":             "256MB",
		"synchronous_commit":        "on",
		"fsync":                     "on",
		"full_page_writes":          "on",
		"shared_buffers":            "64MB",
		"max_locks_per_transaction": 256,
		"logging_collector":         "on",
		"log_directory":             "log",
		"log_min_messages":          "warning",
	}
	for k, v := range o.Parameters {
		params[k] = v
	}
	return params
}

// Start starts the node's Patroni (again, after [Node.Kill] or
// [Node.StopPatroni]). It returns at once; Patroni starts or rejoins
// PostgreSQL on its own (a failed leader is rewound with pg_rewind).
func (n *Node) Start() error {
	if n.patroni != nil && n.patroni.running() {
		return fmt.Errorf("patroniharness: %s is running", n.Name)
	}
	n.patroni = &proc{
		name: "patroni " + n.Name, bin: n.c.patroni, args: []string{n.config}, dir: n.dir,
		logPath: filepath.Join(n.dir, "patroni.log"), cred: n.c.cred,
		// If the test run dies, Patroni gets SIGTERM and stops PostgreSQL.
		death: syscall.SIGTERM,
		env:   []string{"HOME=" + n.dir, "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "LC_ALL=C.UTF-8"},
	}
	return n.patroni.start()
}

// Kill is kill -9 of the node: its Patroni and its postmaster and every
// server process, at once, nothing written on the way down. The data
// directory stays; [Node.Start] brings the node back.
func (n *Node) Kill() error {
	pm := postmasterPID(n.DataDir())
	if pm != 0 {
		_ = syscall.Kill(pm, syscall.SIGSTOP) // no more forks, no more writes
	}
	if n.patroni != nil {
		n.patroni.signal(syscall.SIGKILL)
		if err := n.patroni.wait(15 * time.Second); err != nil {
			return err
		}
	}
	return killTree(pm)
}

// Pause freezes (SIGSTOP) the node's Patroni, leaving PostgreSQL running:
// the node's agent hangs the way a stalled VM does. Resume undoes it.
func (n *Node) Pause() { n.patroni.signal(syscall.SIGSTOP) }

// Resume undoes [Node.Pause].
func (n *Node) Resume() { n.patroni.signal(syscall.SIGCONT) }

// StopPatroni stops the node's Patroni the orderly way (SIGTERM: it stops
// PostgreSQL and releases the leader key).
func (n *Node) StopPatroni() error {
	if n.patroni == nil {
		return nil
	}
	n.patroni.signal(syscall.SIGCONT)
	err := n.patroni.stop(syscall.SIGTERM, 60*time.Second)
	if pm := postmasterPID(n.DataDir()); pm != 0 {
		// Patroni was killed before it could stop PostgreSQL.
		_ = killTree(pm)
	}
	return err
}

// CutEtcd drops the node's connections to etcd and refuses new ones: the
// node is partitioned from the DCS while the other nodes still reach it.
func (n *Node) CutEtcd() { n.gate.set(true) }

// RestoreEtcd ends [Node.CutEtcd].
func (n *Node) RestoreEtcd() { n.gate.set(false) }

// Log is the tail of the node's Patroni log.
func (n *Node) Log() string { return n.patroni.logTail(6000) }

// LogContains reports whether the node's Patroni log holds s.
func (n *Node) LogContains(s string) bool {
	b, _ := os.ReadFile(filepath.Join(n.dir, "patroni.log"))
	return strings.Contains(string(b), s)
}

// Member is one node as Patroni's /cluster endpoint reports it.
type Member struct {
	Name     string `json:"name"`
	Role     string `json:"role"`  // leader, sync_standby, replica
	State    string `json:"state"` // running, streaming, starting, stopped, …
	Port     int    `json:"port"`
	Timeline int    `json:"timeline"`
	Lag      any    `json:"lag"`
}

// Members asks the first node whose REST API answers for the cluster's
// members as the DCS holds them.
func (c *Cluster) Members(ctx context.Context) ([]Member, error) {
	var last error
	for _, n := range c.Nodes {
		if n.patroni == nil || !n.patroni.running() {
			continue
		}
		b, err := httpGet(ctx, fmt.Sprintf("http://127.0.0.1:%d/cluster", n.RESTPort))
		if err != nil {
			last = err
			continue
		}
		var out struct {
			Members []Member `json:"members"`
		}
		if err := json.Unmarshal(b, &out); err != nil {
			last = err
			continue
		}
		return out.Members, nil
	}
	if last == nil {
		last = errors.New("no Patroni is running")
	}
	return nil, fmt.Errorf("patroniharness: /cluster: %w", last)
}

// Node returns the node called name (nil if none).
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// WaitLeader waits until a node other than not holds the leader key and
// its PostgreSQL accepts writes, and returns it.
func (c *Cluster) WaitLeader(ctx context.Context, not string, timeout time.Duration) (*Node, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last string
	for {
		ms, err := c.Members(ctx)
		if err == nil {
			last = fmt.Sprint(ms)
			for _, m := range ms {
				if m.Role == "leader" && m.Name != not && m.State == "running" {
					n := c.Node(m.Name)
					if n != nil && n.Writable(ctx) {
						return n, nil
					}
				}
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("patroniharness: no writable leader (other than %q): %w (bound %v): %s%s", not, ctx.Err(), timeout, last, c.logs())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitHealthy waits until every node runs: one leader accepting writes,
// one synchronous standby, and every other node streaming from the
// leader on its timeline (as pg_stat_replication on the leader shows).
func (c *Cluster) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last string
	for {
		st, err := c.Status(ctx)
		if err == nil {
			why := st.unhealthy(len(c.Nodes))
			if why == "" {
				return nil
			}
			last = why + "; " + st.String()
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("patroniharness: cluster not healthy: %w (bound %v): %s%s", ctx.Err(), timeout, last, c.logs())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Status is the cluster as a drill reports it: Patroni's members and the
// leader's pg_stat_replication.
type Status struct {
	Members     []Member
	Leader      string
	Timeline    int           // the leader's timeline (from its WAL file name)
	Replication []Replication // the leader's pg_stat_replication
}

// Replication is one row of the leader's pg_stat_replication.
type Replication struct {
	Name, State, SyncState string
}

func (s Status) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "leader %s on timeline %d; members:", s.Leader, s.Timeline)
	for _, m := range s.Members {
		fmt.Fprintf(&b, " %s(%s %s tl %d)", m.Name, m.Role, m.State, m.Timeline)
	}
	b.WriteString("; pg_stat_replication:")
	for _, r := range s.Replication {
		fmt.Fprintf(&b, " %s(%s %s)", r.Name, r.State, r.SyncState)
	}
	return b.String()
}

func (s Status) healthy(nodes int) bool { return s.unhealthy(nodes) == "" }

// unhealthy names the first thing that keeps s from being healthy with
// nodes nodes ("" when it is): a missing leader or member, a member not
// running, a standby the leader does not list in pg_stat_replication (it
// is not connected: still starting, rewinding, or refused), one that is
// connected but not streaming (catching up), or not exactly one
// synchronous standby. WaitHealthy's error leads with it.
func (s Status) unhealthy(nodes int) string {
	if s.Leader == "" {
		return "no member holds the leader key"
	}
	if len(s.Members) != nodes {
		return fmt.Sprintf("%d of %d nodes are members", len(s.Members), nodes)
	}
	repl := make(map[string]Replication, len(s.Replication))
	sync := 0
	for _, r := range s.Replication {
		repl[r.Name] = r
		if r.SyncState == "sync" {
			sync++
		}
	}
	syncMember := 0
	for _, m := range s.Members {
		if m.State != "running" && m.State != "streaming" {
			return fmt.Sprintf("%s (%s) is %s", m.Name, m.Role, m.State)
		}
		if m.Role == "sync_standby" {
			syncMember++
		}
		if m.Name == s.Leader {
			continue
		}
		r, ok := repl[m.Name]
		switch {
		case !ok:
			return fmt.Sprintf("%s is not in the leader's pg_stat_replication: it is not connected to %s", m.Name, s.Leader)
		case r.State != "streaming":
			return fmt.Sprintf("%s is connected to %s but %s, not streaming", m.Name, s.Leader, r.State)
		}
	}
	if len(s.Replication) != nodes-1 {
		return fmt.Sprintf("the leader's pg_stat_replication lists %d standbys, want %d", len(s.Replication), nodes-1)
	}
	if sync != 1 || syncMember != 1 {
		return fmt.Sprintf("%d synchronous standbys in pg_stat_replication and %d sync_standby members, want 1 and 1", sync, syncMember)
	}
	return ""
}

// Status reads the cluster's members and the leader's replication.
func (c *Cluster) Status(ctx context.Context) (Status, error) {
	var st Status
	ms, err := c.Members(ctx)
	if err != nil {
		return st, err
	}
	st.Members = ms
	for _, m := range ms {
		if m.Role == "leader" {
			st.Leader = m.Name
		}
	}
	n := c.Node(st.Leader)
	if n == nil {
		return st, errors.New("patroniharness: no leader")
	}
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(qctx, n.URL())
	if err != nil {
		return st, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := conn.QueryRow(qctx, `SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int`).Scan(&st.Timeline); err != nil {
		return st, err
	}
	rows, err := conn.Query(qctx, `SELECT application_name, state, sync_state FROM pg_stat_replication ORDER BY application_name`)
	if err != nil {
		return st, err
	}
	st.Replication, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Replication, error) {
		var x Replication
		err := r.Scan(&x.Name, &x.State, &x.SyncState)
		return x, err
	})
	return st, err
}

// Writable reports whether the node's PostgreSQL answers and is not in
// recovery (it would accept a write).
func (n *Node) Writable(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, n.URL())
	if err != nil {
		return false
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var rec bool
	return conn.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&rec) == nil && !rec
}

// Timeline is the node's timeline: a primary's current one, a standby's
// (the one it replays).
func (n *Node) Timeline(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, n.URL())
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var tl int
	err = conn.QueryRow(ctx, `SELECT CASE WHEN pg_is_in_recovery()
		THEN (SELECT received_tli FROM pg_stat_wal_receiver)
		ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END`).Scan(&tl)
	return tl, err
}

// Switchover runs `patronictl switchover` from leader to candidate and
// returns its output.
func (c *Cluster) Switchover(ctx context.Context, leader, candidate string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.patronictl, "-c", c.Nodes[0].config, "switchover",
		"--leader", leader, "--candidate", candidate, "--force", c.Scope)
	cmd.Env = []string{"HOME=" + c.dir, "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "LC_ALL=C.UTF-8"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("patroniharness: patronictl switchover: %w: %s", err, out)
	}
	return string(out), nil
}

// List is `patronictl list`, for the log.
func (c *Cluster) List(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.patronictl, "-c", c.Nodes[0].config, "list", c.Scope)
	cmd.Env = []string{"HOME=" + c.dir, "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "LC_ALL=C.UTF-8"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Sprintf("patronictl list: %v: %s", err, out)
	}
	return string(out)
}

func (c *Cluster) logs() string {
	var b strings.Builder
	for _, n := range c.Nodes {
		if n.patroni != nil {
			fmt.Fprintf(&b, "\n--- %s patroni log:\n%s", n.Name, n.patroni.logTail(2500))
		}
	}
	return b.String()
}

// Stop stops every Patroni (and so PostgreSQL), etcd and the gates, kills
// what did not stop, and removes the directory. Safe to call twice.
//
// The leader stops last: stopped first, it would hand its key to a
// standby, which would then promote itself on its way down.
func (c *Cluster) Stop() error {
	var errs []error
	for _, n := range c.stopOrder() {
		if err := n.StopPatroni(); err != nil {
			errs = append(errs, fmt.Errorf("%w; its log ends:\n%s", err, n.patroni.logTail(2500)))
		}
		if n.gate != nil {
			n.gate.close()
		}
	}
	if c.etcd != nil {
		if err := c.etcd.stop(syscall.SIGTERM, 10*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if c.dir != "" {
		if left := Leftovers(c.dir); len(left) > 0 {
			errs = append(errs, fmt.Errorf("patroniharness: processes left after stop: %v", left))
		}
		if err := os.RemoveAll(c.dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// stopOrder is c.Nodes with the node that holds the leader key (as the
// first REST API to answer within a few seconds says) moved to the end.
func (c *Cluster) stopOrder() []*Node {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ms, _ := c.Members(ctx)
	leader := ""
	for _, m := range ms {
		if m.Role == "leader" {
			leader = m.Name
		}
	}
	var order, last []*Node
	for _, n := range c.Nodes {
		if n.Name == leader {
			last = append(last, n)
		} else {
			order = append(order, n)
		}
	}
	return append(order, last...)
}

func httpGet(ctx context.Context, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}
