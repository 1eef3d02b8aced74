package web

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/examples/seckill/reconcile"
)

// The operator view: GET / is one HTML page (page.html, embedded) that
// opens GET /events, a server-sent event stream. A sampler reads the cheap
// figures every sampleEvery, or less often once a sample takes long
// (sampleWait: counters, one read of the buckets, the front door's stock
// counters, the queue and outbox backlogs, the standbys) and pushes a
// snapshot to every open stream when it changed; the audit and the
// reconciliation are heavier and run every checkEvery (or less often, as
// checkPace says, when they take long), the latest result riding along in
// each snapshot.

//go:embed page.html
var pageHTML []byte

// checkPace bounds the checks' share of the time: after a check that
// took d, the next starts checkPace × d later at the soonest, so they take
// at most 1/(checkPace+1) of one connection's time, about 2 %. Neither
// check grows with the sale's history: the live audit reads what changed
// since its last run, the reconciliation the orders created since its
// last passing run and the same span one order time to live earlier
// (Service.ReconcileRecent); GET /reconcile, on demand, reads it all.
const checkPace = 50

// checkWait is the wait after a check that took took: checkEvery, or
// pace times took when that is longer.
func checkWait(took time.Duration, pace int64) time.Duration {
	return max(checkEvery, time.Duration(pace)*took)
}

// sampleWait is the wait after a sample of the cheap figures that took
// took: sampleEvery, or pace times took when that is longer. A sample
// reads a few rows, but on a busy database counting a long outbox
// backlog or reading pg_stat_replication takes tens of milliseconds:
// then the samples, like the checks, take at most about 2 % of one
// connection's time.
func sampleWait(took time.Duration, pace int64) time.Duration {
	return max(sampleEvery, time.Duration(pace)*took)
}

const (
	sampleEvery = 500 * time.Millisecond
	checkEvery  = 3 * time.Second
	historyLen  = 240 // points of the time series kept (2 minutes at 500ms)
	keepAlive   = 15 * time.Second
)

// Snapshot is what one server-sent event carries (JSON).
type Snapshot struct {
	At         time.Time    `json:"at"`
	FrontDoor  string       `json:"front_door"`
	Broker     string       `json:"broker"`
	Buckets    []pageBucket `json:"buckets"`
	Orders     int64        `json:"orders"` // orders created since start-up
	Paid       int64        `json:"paid"`
	Cancelled  int64        `json:"cancelled"`
	Refunded   int64        `json:"refunded"` // payments after the cancel: refunds requested
	Queue      int64        `json:"queue_backlog"`
	Outbox     int64        `json:"outbox_backlog"` // PENDING, SENDING or RETRY
	OutboxDead int64        `json:"outbox_dead"`
	// OutboxOldest is the age of the oldest PENDING or RETRY event, in
	// seconds (outbox.Stats.OldestWaiting; 0 when none waits).
	OutboxOldest float64       `json:"outbox_oldest_s"`
	Pool         pagePool      `json:"pool"`
	Standbys     []pageStandby `json:"standbys"` // pg_stat_replication; empty: no standby
	History      []pagePoint   `json:"history"`
	Audit        CheckLine     `json:"audit"`
	Reconcile    CheckLine     `json:"reconcile"`
	Error        string        `json:"error,omitempty"` // the last sample's failure, if it failed
}

// pageBucket is one bucket's stock in PostgreSQL and at the front door.
type pageBucket struct {
	Bucket int16 `json:"bucket"`
	Total  int32 `json:"total"`
	PG     int32 `json:"pg_available"`
	Front  int64 `json:"front_available"` // -1 when the front door did not answer
}

// pagePool is the pool's saturation (pgxpool.Stat).
type pagePool struct {
	Acquired int32 `json:"acquired"` // connections in use
	Idle     int32 `json:"idle"`
	Max      int32 `json:"max"`
	// AcquireMs is the mean time an acquire took over the last interval,
	// in milliseconds (0 when none was made).
	AcquireMs float64 `json:"acquire_ms"`
	// EmptyAcquires counts the acquires that had to wait for a connection
	// because none was idle, since start-up; EmptyWaitMs is their total
	// wait.
	EmptyAcquires int64   `json:"empty_acquires"`
	EmptyWaitMs   float64 `json:"empty_wait_ms"`
}

// pageStandby is one standby of pg_stat_replication.
type pageStandby struct {
	Name      string  `json:"name"`
	State     string  `json:"state"`
	SyncState string  `json:"sync_state"`
	ReplayLag float64 `json:"replay_lag_s"` // 0 once caught up and idle
	LagBytes  int64   `json:"lag_bytes"`    // WAL not yet replayed
}

// pagePoint is one point of the time series: orders per second over the
// last interval and the order transaction's p50/p99 in it.
type pagePoint struct {
	At        time.Time `json:"at"`
	PerSecond float64   `json:"orders_per_second"`
	P50ms     float64   `json:"p50_ms"`
	P99ms     float64   `json:"p99_ms"`
	Queue     int64     `json:"queue_backlog"`
	Outbox    int64     `json:"outbox_backlog"`
	Acquired  int32     `json:"pool_acquired"`
	OutboxAge float64   `json:"outbox_oldest_s"`
}

// CheckLine is the latest audit or reconciliation: PASS or FAIL with the
// lines that say why; PENDING before the first one; UNSETTLED for a
// reconciliation with unexplained differences read while work was in
// flight (confirmed, or not, at the next quiet moment). An audit line says
// whether it was read live (during the sale: the checks exact only at rest
// that did not hold are SKIP lines, counted in Skipped) or at rest (the
// run's final audit: every check judged).
type CheckLine struct {
	Status  string    `json:"status"` // "PASS", "FAIL", "UNSETTLED" or "PENDING"
	At      time.Time `json:"at,omitzero"`
	Lines   []string  `json:"lines"`
	Mode    string    `json:"mode,omitempty"`    // audit: "live" or "at_rest"
	Skipped int       `json:"skipped,omitempty"` // audit: checks exact only at rest, not judged live
	// Failed counts an audit's checks that failed (-1: the audit itself
	// failed to run; 0 before the first).
	Failed int `json:"failed"`
}

// Monitor samples a service for the operator page and fans the snapshots
// out to the event streams (GET /events).
type Monitor struct {
	s Service

	mu        sync.Mutex
	data      []byte        // latest snapshot, JSON
	cmp       []byte        // the same without its time, to see a change
	seq       uint64        // its number (the SSE id)
	changed   chan struct{} // closed when a new snapshot replaces data
	history   []pagePoint
	audit     CheckLine
	reconcile CheckLine
	final     bool // the run is over: the snapshot no longer changes

	lastOrders int64
	lastAt     time.Time
	lastLat    int           // latencies seen so far
	lastAcq    int64         // the pool's acquires at the last point
	lastAcqDur time.Duration // and their total duration

	stop      func()
	done      chan struct{} // closed by Close: the streams end
	closeOnce sync.Once
	streams   atomic.Int64 // open event streams
	keepAlive atomic.Int64 // nanoseconds between comments on a quiet stream
	pace      atomic.Int64 // the checks' pace (checkPace unless SetCheckPace)
}

// StartMonitor samples s until Close (or ctx ends).
func StartMonitor(ctx context.Context, s Service) *Monitor {
	m := &Monitor{s: s, changed: make(chan struct{}), done: make(chan struct{}),
		audit:     CheckLine{Status: "PENDING", Lines: []string{"not checked yet"}},
		reconcile: CheckLine{Status: "PENDING", Lines: []string{"not checked yet"}}}
	m.keepAlive.Store(int64(keepAlive))
	m.pace.Store(checkPace)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	m.lastAt = time.Now()
	m.sample(ctx)
	wg.Go(func() {
		var took time.Duration
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(sampleWait(took, m.pace.Load())):
			}
			began := time.Now()
			m.sample(ctx)
			took = time.Since(began)
		}
	})
	wg.Go(func() {
		for {
			began := time.Now()
			m.check(ctx)
			select {
			case <-ctx.Done():
				return
			case <-time.After(checkWait(time.Since(began), m.pace.Load())):
			}
		}
	})
	m.stop = func() { cancel(); wg.Wait() }
	return m
}

// Close stops the sampling and ends the open event streams.
func (m *Monitor) Close() {
	m.stop()
	m.closeOnce.Do(func() { close(m.done) })
}

// Audit is the latest audit: the live one of every few seconds, or the
// run's own at rest after Finish; Status PENDING before the first.
func (m *Monitor) Audit() CheckLine {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.audit
}

// Stop stops the sampling; the streams stay open (until Close) with the
// last snapshot.
func (m *Monitor) Stop() { m.stop() }

// Streams reports how many event streams are open.
func (m *Monitor) Streams() int64 { return m.streams.Load() }

// SetCheckPace sets the checks' pace (checkPace, 50, by default): after a
// check that took d, the next starts pace × d later at the soonest, and
// never sooner than checkEvery. The samples of the cheap figures follow
// the same pace, never sooner than sampleEvery apart. A test that waits for the next check's
// result on a slow machine (under the race detector, a check of a tiny
// sale can take seconds) sets 1; pace below 1 counts as 1.
func (m *Monitor) SetCheckPace(pace int) { m.pace.Store(int64(max(pace, 1))) }

// SetKeepAlive sets the time between comment lines on a quiet stream
// (15 s by default), for the streams opened after.
func (m *Monitor) SetKeepAlive(d time.Duration) { m.keepAlive.Store(int64(d)) }

// Finish stops the sampling and publishes a run's own final audit (read at
// rest) and reconciliation (nil: keep the last): the page shows the result
// the run's report prints. The streams stay open until Close.
func (m *Monitor) Finish(checks []flow.Check, rec *reconcile.Result) {
	m.stop()
	m.mu.Lock()
	m.audit = AuditLine(checks, false)
	if rec != nil {
		m.reconcile = reconcileLine(rec)
	}
	m.mu.Unlock()
	m.sample(context.Background())
	m.mu.Lock()
	m.final = true
	m.mu.Unlock()
}

// sample reads the cheap figures and publishes a snapshot if it changed.
func (m *Monitor) sample(ctx context.Context) {
	s, fs := m.s, m.s.Flow()
	fig := s.Figures()
	snap := Snapshot{At: time.Now(), FrontDoor: s.FrontDoor().Name(), Broker: s.Broker().Name(),
		Orders: fig.Orders, Paid: fig.Paid, Cancelled: fig.Cancelled, Refunded: fig.Refunded, Queue: s.Broker().Pending(ctx)}
	var errs []string
	st, err := fs.Inventory.Stock(ctx, fs.Pool, fs.Item.ActivityID, fs.Item.SKUID)
	buckets := st.Buckets
	if err != nil {
		errs = append(errs, err.Error())
	}
	front, err := s.FrontAvailable(ctx)
	if err != nil {
		errs = append(errs, "front door: "+err.Error())
	}
	for _, b := range buckets {
		pb := pageBucket{Bucket: b.BucketNo, Total: b.Total, PG: b.Available, Front: -1}
		if int(b.BucketNo) < len(front) {
			pb.Front = front[b.BucketNo]
		}
		snap.Buckets = append(snap.Buckets, pb)
	}
	if st, err := fs.Outbox.Backlog(ctx, fs.Pool); err != nil {
		errs = append(errs, err.Error())
	} else {
		snap.Outbox, snap.OutboxDead, snap.OutboxOldest = st.Pending+st.Sending+st.Retry, st.Dead, st.OldestWaiting.Seconds()
	}
	if snap.Standbys, err = readStandbys(ctx, fs.Pool); err != nil {
		errs = append(errs, "replication: "+err.Error())
	}
	snap.Error = strings.Join(errs, "; ")

	m.mu.Lock()
	defer m.mu.Unlock()
	if m.final {
		return
	}
	snap.Pool = m.poolLocked()
	if dt := snap.At.Sub(m.lastAt).Seconds(); dt > 0 && (len(m.history) == 0 || dt >= sampleEvery.Seconds()/2) {
		p := pagePoint{At: snap.At, PerSecond: float64(snap.Orders-m.lastOrders) / dt, Queue: snap.Queue, Outbox: snap.Outbox,
			Acquired: snap.Pool.Acquired, OutboxAge: snap.OutboxOldest}
		var window []time.Duration
		window, m.lastLat = s.OrderLatencies(m.lastLat)
		p.P50ms, p.P99ms = pct(window, 50), pct(window, 99)
		m.history = append(m.history, p)
		if len(m.history) > historyLen {
			m.history = slices.Delete(m.history, 0, len(m.history)-historyLen)
		}
		m.lastOrders, m.lastAt = snap.Orders, snap.At
	}
	snap.History, snap.Audit, snap.Reconcile = m.history, m.audit, m.reconcile
	m.publishLocked(snap)
}

// poolLocked reads the pool's saturation; the mean acquire time is over
// the acquires since the last call. m.mu is held.
func (m *Monitor) poolLocked() pagePool {
	st := m.s.Flow().Pool.Stat()
	p := pagePool{Acquired: st.AcquiredConns(), Idle: st.IdleConns(), Max: st.MaxConns(),
		EmptyAcquires: st.EmptyAcquireCount(), EmptyWaitMs: ms(st.EmptyAcquireWaitTime())}
	if n := st.AcquireCount() - m.lastAcq; n > 0 {
		p.AcquireMs = ms((st.AcquireDuration() - m.lastAcqDur) / time.Duration(n))
	}
	m.lastAcq, m.lastAcqDur = st.AcquireCount(), st.AcquireDuration()
	return p
}

// standbysSQL reads the standbys of a primary (none on a standby or a
// server without replication); the lags are NULL once a standby has caught
// up and nothing is written, reported as 0.
const standbysSQL = `SELECT application_name, state, sync_state,
       COALESCE(EXTRACT(EPOCH FROM replay_lag), 0)::float8,
       COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn), 0)::bigint
  FROM pg_stat_replication
 ORDER BY application_name`

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// readStandbys reads pg_stat_replication (empty: no standby).
func readStandbys(ctx context.Context, pool *pgxpool.Pool) ([]pageStandby, error) {
	rows, err := pool.Query(ctx, standbysSQL)
	if err != nil {
		return nil, err
	}
	var out []pageStandby
	var sb pageStandby
	_, err = pgx.ForEachRow(rows, []any{&sb.Name, &sb.State, &sb.SyncState, &sb.ReplayLag, &sb.LagBytes}, func() error {
		out = append(out, sb)
		return nil
	})
	return out, err
}

// publishLocked replaces the snapshot and wakes the streams when anything
// but the time changed. m.mu is held.
func (m *Monitor) publishLocked(snap Snapshot) {
	at := snap.At
	snap.At = time.Time{}
	cmp, _ := json.Marshal(snap)
	if m.data != nil && bytes.Equal(m.cmp, cmp) {
		return
	}
	snap.At = at
	m.data, _ = json.Marshal(snap)
	m.cmp = cmp
	m.seq++
	close(m.changed)
	m.changed = make(chan struct{})
}

// check runs the audit and the reconciliation once and keeps the result.
// The sale runs, so the audit is live: it reads one snapshot of the
// database, judges every invariant that holds in any snapshot, and skips
// (SKIP lines) the checks exact only at rest that work in flight leaves
// unsettled; the run's final audit, at rest, replaces it (finish).
func (m *Monitor) check(ctx context.Context) {
	s := m.s
	var a CheckLine
	checks, err := s.AuditNow(ctx, true)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		a = CheckLine{Status: "FAIL", At: time.Now(), Lines: []string{"audit error: " + err.Error()}, Mode: "live", Failed: -1}
	} else {
		a = AuditLine(checks, true)
	}
	quietBefore := s.Quiet(ctx)
	rec, err := s.ReconcileRecent(ctx)
	if ctx.Err() != nil {
		return
	}
	var r CheckLine
	if err != nil {
		r = CheckLine{Status: "FAIL", At: time.Now(), Lines: []string{"reconciliation error: " + err.Error()}}
	} else {
		r = reconcileLine(rec)
		if r.Status == "FAIL" && !(quietBefore && s.Quiet(ctx)) {
			// The three stores cannot be read at one instant: under load a
			// difference can be work that moved between the reads. It is
			// shown, not called a failure, until a quiet moment confirms it.
			r.Status = "UNSETTLED"
		}
	}
	m.mu.Lock()
	if m.final {
		m.mu.Unlock()
		return
	}
	m.audit = a
	m.reconcile = r
	m.mu.Unlock()
}

// AuditLine is the page's line for an audit read live or at rest.
func AuditLine(checks []flow.Check, live bool) CheckLine {
	l := CheckLine{Status: "PASS", At: time.Now(), Mode: "at_rest", Skipped: Skipped(checks)}
	if live {
		l.Mode = "live"
	}
	if !flow.Passed(checks) {
		l.Status = "FAIL"
	}
	for _, c := range checks {
		if !c.Pass {
			l.Failed++
		}
		l.Lines = append(l.Lines, fmt.Sprintf("%s [%s] %s: %s", CheckStatus(c), c.Invariant, c.Name, c.Detail))
	}
	return l
}

func reconcileLine(rec *reconcile.Result) CheckLine {
	l := CheckLine{Status: "PASS", At: time.Now()}
	if !rec.Passed() {
		l.Status = "FAIL"
	}
	var b strings.Builder
	rec.Print(&b)
	for line := range strings.Lines(b.String()) {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "reconciliation") {
			l.Lines = append(l.Lines, line)
		}
	}
	return l
}

// pct is the p-th percentile of d in milliseconds, 0 when empty.
func pct(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(float64(len(d))*p/100+0.5) - 1
	return d[min(max(i, 0), len(d)-1)].Seconds() * 1000
}

// ServePage serves GET /: the page.
func (m *Monitor) ServePage(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(pageHTML)
}

// ServeEvents serves GET /events: A server-sent event stream: "event: snapshot",
// "id: <n>", "data: <snapshot JSON>" at once and then whenever the
// snapshot changes (at most every sampleEvery), a comment line every
// keepAlive; it ends when the client goes away.
func (m *Monitor) ServeEvents(w http.ResponseWriter, r *http.Request) {
	m.streams.Add(1)
	defer m.streams.Add(-1)
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	var sent uint64
	ka := time.NewTicker(time.Duration(m.keepAlive.Load()))
	defer ka.Stop()
	for {
		m.mu.Lock()
		data, seq, changed := m.data, m.seq, m.changed
		m.mu.Unlock()
		if seq != sent && data != nil {
			if _, err := fmt.Fprintf(w, "event: snapshot\nid: %d\ndata: %s\n\n", seq, data); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			sent = seq
		}
		select {
		case <-r.Context().Done():
			return
		case <-m.done:
			return
		case <-changed:
		case <-ka.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
		}
	}
}
