package outbox_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

// bothEnqueueModes runs test as two parallel subtests: "default", with
// the one-statement EnqueueMany, and "citus", with the statements of
// Config.Citus (one insert per event).
func bothEnqueueModes(t *testing.T, test func(t *testing.T, citus bool)) {
	t.Helper()
	for _, citus := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "citus"}[citus], func(t *testing.T) {
			t.Parallel()
			test(t, citus)
		})
	}
}

func TestEnqueueDedupAndIDs(t *testing.T) {
	t.Parallel()
	bothEnqueueModes(t, func(t *testing.T, citus bool) {
		b := setup(t, outbox.Config{Citus: citus})

		first := b.enqueue(t, event(1), event(2))
		for i, e := range first {
			if !e.New || e.EventID.Version() != 7 {
				t.Fatalf("first[%d] = %+v, want new with a v7 id", i, e)
			}
		}
		if first[0].EventID.String() >= first[1].EventID.String() {
			t.Fatalf("ids not time-ordered: %s, %s", first[0].EventID, first[1].EventID)
		}
		// A duplicate (in another tx) and a duplicate within one call.
		again := b.enqueue(t, event(2), event(3), event(3))
		if again[0].New || again[0].EventID != first[1].EventID {
			t.Fatalf("duplicate of k2 = %+v, want not new with id %s", again[0], first[1].EventID)
		}
		if !again[1].New || again[2].New || again[2].EventID != again[1].EventID {
			t.Fatalf("in-call duplicate = %+v, %+v", again[1], again[2])
		}
		if n := b.count(t, "true"); n != 3 {
			t.Fatalf("rows = %d, want 3", n)
		}

		// Defaults and optional fields land in the row.
		ev := event(4)
		ev.Headers = map[string]string{"trace": "abc"}
		ev.OrderingKey = "ORDER:4"
		ev.Delay = time.Hour
		ev.MaxRetries = 3
		ev.SchemaVersion = 2
		ev.Payload = []byte(`{"b": 1,  "a": [true]}`)
		e := b.enqueue(t, ev)[0]
		var msgKey, ordKey string
		var version, maxRetry int
		var headers map[string]string
		var payload json.RawMessage
		var delayed bool
		err := b.pool.QueryRow(b.ctx, `SELECT message_key, ordering_key, schema_version, max_retry, headers, payload,
		available_at > created_at + interval '59 minutes' FROM `+b.table()+` WHERE event_id = $1`, e.EventID).
			Scan(&msgKey, &ordKey, &version, &maxRetry, &headers, &payload, &delayed)
		if err != nil {
			t.Fatal(err)
		}
		if msgKey != "4" || ordKey != "ORDER:4" || version != 2 || maxRetry != 3 || headers["trace"] != "abc" || !delayed {
			t.Fatalf("row = %q %q %d %d %v delayed=%v", msgKey, ordKey, version, maxRetry, headers, delayed)
		}
		var got, want any
		_ = json.Unmarshal(payload, &got)
		_ = json.Unmarshal(ev.Payload, &want)
		if !jsonEqual(got, want) {
			t.Fatalf("payload = %s", payload)
		}
		// The default max_retry comes from the config.
		e5 := b.enqueue(t, event(5))[0]
		if err := b.pool.QueryRow(b.ctx, `SELECT max_retry FROM `+b.table()+` WHERE event_id = $1`, e5.EventID).Scan(&maxRetry); err != nil || maxRetry != outbox.DefaultMaxRetries {
			t.Fatalf("default max_retry = %d, %v", maxRetry, err)
		}
	})
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func TestEnqueueRollbackWritesNothing(t *testing.T) {
	t.Parallel()
	bothEnqueueModes(t, func(t *testing.T, citus bool) {
		b := setup(t, outbox.Config{Citus: citus})
		tx, err := b.pool.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.store.Enqueue(b.ctx, tx, event(1)); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(b.ctx); err != nil {
			t.Fatal(err)
		}
		if n := b.count(t, "true"); n != 0 {
			t.Fatalf("rows after rollback = %d", n)
		}
	})
}

// Many concurrent transactions enqueue the same dedup keys: exactly one row
// per key, and exactly one caller per key sees New.
func TestEnqueueConcurrentDedup(t *testing.T) {
	t.Parallel()
	bothEnqueueModes(t, func(t *testing.T, citus bool) {
		b := setup(t, outbox.Config{Citus: citus})
		const workers, keys = 16, 200
		var mu sync.Mutex
		newCount := map[string]int{}
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; k < keys; k += 20 {
					evs := make([]outbox.Event, 0, 20)
					for i := k; i < k+20; i++ {
						evs = append(evs, event(i))
					}
					err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
						res, err := b.store.Enqueue(b.ctx, tx, evs...)
						if err != nil {
							return err
						}
						mu.Lock()
						for i, r := range res {
							if r.New {
								newCount[evs[i].DedupKey]++
							}
						}
						mu.Unlock()
						return nil
					})
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		testwait.WaitWithin(t, &wg, testwait.Long, "the concurrent transactions")
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if n := b.count(t, "true"); n != keys {
			t.Fatalf("rows = %d, want %d", n, keys)
		}
		for k, n := range newCount {
			if n != 1 {
				t.Fatalf("key %s reported new %d times", k, n)
			}
		}
		if len(newCount) != keys {
			t.Fatalf("%d keys reported new, want %d", len(newCount), keys)
		}
	})
}

func TestEnqueueInvalidInput(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{MaxPayloadBytes: 64})
	long := func(n int) string { return strings.Repeat("é", n) } // multi-byte: limits are characters
	cases := []struct {
		name  string
		field string
		mod   func(*outbox.Event)
	}{
		{"empty topic", "Topic", func(e *outbox.Event) { e.Topic = "" }},
		{"long topic", "Topic", func(e *outbox.Event) { e.Topic = long(129) }},
		{"long tag", "Tag", func(e *outbox.Event) { e.Tag = long(65) }},
		{"empty aggregate type", "AggregateType", func(e *outbox.Event) { e.AggregateType = "" }},
		{"long aggregate type", "AggregateType", func(e *outbox.Event) { e.AggregateType = long(65) }},
		{"empty aggregate id", "AggregateID", func(e *outbox.Event) { e.AggregateID = "" }},
		{"long aggregate id", "AggregateID", func(e *outbox.Event) { e.AggregateID = long(129) }},
		{"long message key", "MessageKey", func(e *outbox.Event) { e.MessageKey = long(161) }},
		{"empty dedup key", "DedupKey", func(e *outbox.Event) { e.DedupKey = "" }},
		{"long dedup key", "DedupKey", func(e *outbox.Event) { e.DedupKey = long(161) }},
		{"long ordering key", "OrderingKey", func(e *outbox.Event) { e.OrderingKey = long(161) }},
		{"NUL in dedup key", "DedupKey", func(e *outbox.Event) { e.DedupKey = "a\x00b" }},
		{"invalid UTF-8", "Topic", func(e *outbox.Event) { e.Topic = "\xff" }},
		{"negative schema version", "SchemaVersion", func(e *outbox.Event) { e.SchemaVersion = -1 }},
		{"negative max retries", "MaxRetries", func(e *outbox.Event) { e.MaxRetries = -1 }},
		{"negative delay", "Delay", func(e *outbox.Event) { e.Delay = -time.Second }},
		{"nil payload", "Payload", func(e *outbox.Event) { e.Payload = nil }},
		{"invalid JSON", "Payload", func(e *outbox.Event) { e.Payload = []byte(`{"a":`) }},
		{"NUL escape in JSON", "Payload", func(e *outbox.Event) { e.Payload = []byte(`{"a":"x\u0000"}`) }},
		{"oversized payload", "Payload", func(e *outbox.Event) { e.Payload = []byte(`"` + strings.Repeat("x", 63) + `"`) }},
		{"schema version past int4", "SchemaVersion", func(e *outbox.Event) { e.SchemaVersion = 1 << 31 }},
		{"max retries past int4", "MaxRetries", func(e *outbox.Event) { e.MaxRetries = 1 << 31 }},
		{"empty header key", "Headers", func(e *outbox.Event) { e.Headers = map[string]string{"": "x"} }},
		{"NUL in header value", "Headers", func(e *outbox.Event) { e.Headers = map[string]string{"a": "\x00"} }},
	}
	for _, c := range cases {
		ev := event(1)
		c.mod(&ev)
		tx, err := b.pool.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err1 := b.store.Enqueue(b.ctx, tx, ev)
		// The invalid event second in a batch: nothing of the batch is written.
		_, err2 := b.store.Enqueue(b.ctx, tx, []outbox.Event{event(2), ev}...)
		var qb pgx.Batch
		err3 := b.store.QueueEnqueue(&qb, []outbox.Event{ev}, nil, pgtx.Return)
		if err := tx.Commit(b.ctx); err != nil {
			t.Fatalf("%s: commit: %v (the helper sent something)", c.name, err)
		}
		for i, err := range []error{err1, err2, err3} {
			var ve *outbox.Error
			if !errors.Is(err, outbox.ErrInvalidArgument) || !errors.As(err, &ve) || !strings.Contains(ve.Field, c.field) {
				t.Fatalf("%s: call %d: err = %v, want a ValidationError on %s", c.name, i, err, c.field)
			}
			// The field names the event by its place among the events.
			if at := []int{0, 1, 0}[i]; !strings.HasPrefix(ve.Field, fmt.Sprintf("events[%d].%s", at, c.field)) {
				t.Fatalf("%s: call %d: field %q, want events[%d].%s", c.name, i, ve.Field, at, c.field)
			}
		}
		if qb.Len() != 0 {
			t.Fatalf("%s: queued %d statements", c.name, qb.Len())
		}
	}
	if _, err := b.store.Enqueue(b.ctx, nil, []outbox.Event{event(1)}...); !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Fatalf("nil tx: err = %v", err)
	}
	err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.store.Enqueue(b.ctx, tx, nil...)
		return err
	})
	if !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Fatalf("no events: err = %v", err)
	}
	if n := b.count(t, "true"); n != 0 {
		t.Fatalf("rows = %d, want 0", n)
	}
	// Exactly at the limits is fine: the column lengths, the largest int4
	// schema version and retry count, a payload of MaxPayloadBytes.
	ev := event(9)
	ev.Topic, ev.Tag, ev.AggregateType, ev.AggregateID = long(128), long(64), long(64), long(128)
	ev.DedupKey, ev.OrderingKey, ev.MessageKey = long(160), long(160), long(160)
	ev.SchemaVersion, ev.MaxRetries = 1<<31-1, 1<<31-1
	ev.Payload = []byte(`"` + strings.Repeat("x", 62) + `"`)
	if r := b.enqueue(t, ev); !r[0].New {
		t.Fatal("event at the column limits was not inserted")
	}
}

func TestConfigInvalid(t *testing.T) {
	t.Parallel()
	for _, cfg := range []outbox.Config{
		{Schema: "bad-name"}, {Schema: "pg_x"}, {Schema: strings.Repeat("a", 64)},
	} {
		if _, err := outbox.New(cfg); !errors.Is(err, migrate.ErrInvalidSchema) {
			t.Fatalf("New(%+v) = %v, want ErrInvalidSchema", cfg, err)
		}
	}
	for _, cfg := range []outbox.Config{{DefaultMaxRetries: -1}, {MaxPayloadBytes: -1}} {
		if _, err := outbox.New(cfg); !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Fatalf("New(%+v) = %v, want ErrInvalidArgument", cfg, err)
		}
	}
	s, err := outbox.New(outbox.Config{})
	if err != nil || s.Schema() != "seckill" || outbox.Channel(s) != "seckill_outbox_seckill" {
		t.Fatalf("defaults: %v %v", s, err)
	}
	long, _ := outbox.New(outbox.Config{Schema: strings.Repeat("s", 63)})
	if len(outbox.Channel(long)) > 63 {
		t.Fatalf("channel %q longer than 63 bytes", outbox.Channel(long))
	}
}

// The Status constants mirror ck_outbox_status 1:1.
func TestStatusMatchesCheckConstraint(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	var def string
	err := b.pool.QueryRow(b.ctx, `SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c
		WHERE c.conname = 'ck_outbox_status' AND c.conrelid = $1::regclass`, b.table()).Scan(&def)
	if err != nil {
		t.Fatal(err)
	}
	// e.g. CHECK ((status = ANY (ARRAY[0, 10, 20, 30, 40])))
	mine := outbox.Statuses()
	mine[0] = outbox.StatusDead
	if outbox.Statuses()[0] != outbox.StatusPending {
		t.Fatal("changing the slice Statuses returned changed the next call's answer")
	}
	for _, s := range outbox.Statuses() {
		if !s.Valid() {
			t.Fatalf("%v not valid", s)
		}
	}
	open, close := strings.Index(def, "ARRAY["), strings.LastIndex(def, "]")
	if open < 0 || close < open {
		t.Fatalf("unexpected constraint %q", def)
	}
	var got []string
	for _, v := range strings.Split(def[open+6:close], ",") {
		got = append(got, strings.TrimSpace(v))
	}
	if len(got) != len(outbox.Statuses()) {
		t.Fatalf("constraint %q has %d values, Go has %d", def, len(got), len(outbox.Statuses()))
	}
	for i, s := range outbox.Statuses() {
		if got[i] != strconv.Itoa(int(s)) {
			t.Fatalf("constraint value %d = %s, Go %s = %d", i, got[i], s, s)
		}
	}
	// And the database accepts each and rejects anything else.
	id := b.enqueue(t, event(1))[0].EventID
	for _, s := range []outbox.Status{outbox.StatusPending, outbox.StatusRetry, outbox.StatusDead} {
		b.exec(t, `UPDATE `+b.table()+` SET status = $2 WHERE event_id = $1`, id, int16(s))
	}
	if _, err := b.pool.Exec(b.ctx, `UPDATE `+b.table()+` SET status = 5 WHERE event_id = $1`, id); err == nil {
		t.Fatal("status 5 accepted")
	}
	if outbox.Status(5).Valid() || outbox.Status(5).String() != "Status(5)" {
		t.Fatal("Status(5)")
	}
}

// Enqueues of the same ordering key serialise on a transaction advisory
// lock, so that seq order is commit order per key; other keys do not wait.
func TestEnqueueOrderedSerialisesPerKey(t *testing.T) {
	t.Parallel()
	bothEnqueueModes(t, func(t *testing.T, citus bool) {
		for _, notify := range []bool{false, true} {
			t.Run(map[bool]string{false: "silent", true: "notify"}[notify], func(t *testing.T) {
				testEnqueueOrderedSerialisesPerKey(t, outbox.Config{Citus: citus, Notify: notify})
			})
		}
	})
}

func testEnqueueOrderedSerialisesPerKey(t *testing.T, cfg outbox.Config) {
	b := setup(t, cfg)
	withKey := func(i int, key string) outbox.Event {
		e := event(i)
		e.OrderingKey = key
		return e
	}
	tx1, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback(b.ctx)
	if _, err := b.store.Enqueue(b.ctx, tx1, withKey(1, "A")); err != nil {
		t.Fatal(err)
	}
	// try enqueues e under a lock timeout of 200 ms, then lifts it for the
	// commit: with Notify, COMMIT takes the database's notification lock,
	// which every notifying commit of the parallel tests takes too, and a
	// loaded machine may hold it longer than that.
	try := func(e outbox.Event) error {
		return pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(b.ctx, `SET LOCAL lock_timeout = '200ms'`); err != nil {
				return err
			}
			if _, err := b.store.Enqueue(b.ctx, tx, e); err != nil {
				return err
			}
			_, err := tx.Exec(b.ctx, `SET LOCAL lock_timeout = 0`)
			return err
		})
	}
	var pgErr *pgconn.PgError
	if err := try(withKey(2, "A")); !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.LockNotAvailable {
		t.Fatalf("second enqueue of key A while the first is uncommitted: %v, want lock timeout", err)
	}
	if err := try(withKey(3, "B")); err != nil {
		t.Fatalf("key B waited for key A: %v", err)
	}
	if err := try(event(4)); err != nil {
		t.Fatalf("unordered event waited: %v", err)
	}
	if err := tx1.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := try(withKey(5, "A")); err != nil {
		t.Fatal(err)
	}
	var first, second int64
	if err := b.pool.QueryRow(b.ctx, `SELECT min(seq), max(seq) FROM `+b.table()+` WHERE ordering_key = 'A'`).Scan(&first, &second); err != nil || first >= second {
		t.Fatalf("seqs %d, %d, %v", first, second, err)
	}
}

// Enqueue notifies the store's channel (delivered at commit).
func TestEnqueueNotifies(t *testing.T) {
	t.Parallel()
	bothEnqueueModes(t, func(t *testing.T, citus bool) {
		b := setup(t, outbox.Config{Notify: true, Citus: citus})
		conn := pgtest.Conn(t)
		if _, err := conn.Exec(b.ctx, `LISTEN `+pgx.Identifier{outbox.Channel(b.store)}.Sanitize()); err != nil {
			t.Fatal(err)
		}
		b.enqueue(t, event(1), event(2))
		n, err := conn.WaitForNotification(testwait.Context(t, b.ctx, testwait.Step))
		if err != nil || n.Channel != outbox.Channel(b.store) {
			t.Fatalf("notification %+v, %v", n, err)
		}
		// The one-batch form with pgtx.Abort notifies too, once, after
		// the last of its events: one event, then two.
		for _, evs := range [][]outbox.Event{{event(3)}, {event(4), event(5)}} {
			err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
				var qb pgx.Batch
				if err := b.store.QueueEnqueue(&qb, evs, nil, pgtx.Abort); err != nil {
					return err
				}
				return tx.SendBatch(b.ctx, &qb).Close()
			})
			if err != nil {
				t.Fatal(err)
			}
			n, err := conn.WaitForNotification(testwait.Context(t, b.ctx, testwait.Step))
			if err != nil || n.Channel != outbox.Channel(b.store) {
				t.Fatalf("%d events with pgtx.Abort: notification %+v, %v", len(evs), n, err)
			}
		}
	})
}

// The exported column limits mirror the table's VARCHAR lengths.
func TestColumnLimitsMatchTable(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	want := map[string]int{
		"dedup_key": outbox.MaxDedupKeyLen, "aggregate_type": outbox.MaxAggregateTypeLen,
		"aggregate_id": outbox.MaxAggregateIDLen, "topic": outbox.MaxTopicLen, "tag": outbox.MaxTagLen,
		"message_key": outbox.MaxMessageKeyLen, "ordering_key": outbox.MaxOrderingKeyLen, "locked_by": outbox.MaxOwnerLen,
	}
	rows, err := b.pool.Query(b.ctx, `SELECT column_name, character_maximum_length FROM information_schema.columns
		WHERE table_schema = $1 AND table_name = 'event_outbox' AND character_maximum_length IS NOT NULL`, b.schema)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for rows.Next() {
		var name string
		var n int
		if err := rows.Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		got[name] = n
	}
	if rows.Err() != nil || len(got) != len(want) {
		t.Fatalf("columns %v, %v", got, rows.Err())
	}
	for c, n := range want {
		if got[c] != n {
			t.Fatalf("%s: table %d, Go %d", c, got[c], n)
		}
	}
}

// TestEnqueueDuplicateWhileFirstCommits: a transaction enqueues an event
// and has not committed; a second enqueues the same dedup key (alone, with
// NOTIFY on and off, and among other events) and waits for it. When the
// first commits, the second reports the duplicate with the first's event
// id (its insert's snapshot cannot see that row: the read that follows
// the insert can), writes nothing for that key and commits.
func TestEnqueueDuplicateWhileFirstCommits(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		notify bool
		many   bool
		citus  bool
	}{{"one", false, false, false}, {"one notify", true, false, false}, {"many", false, true, false},
		{"citus/one notify", true, false, true}, {"citus/many", false, true, true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, outbox.Config{Notify: c.notify, Citus: c.citus})
			first, err := b.pool.Begin(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer first.Rollback(b.ctx) //nolint:errcheck // a no-op after the commit
			ev := event(1)
			firstRes, err := enqueueOne(b.ctx, b.store, first, ev)
			if err != nil || !firstRes.New {
				t.Fatalf("first: %+v, %v", firstRes, err)
			}
			dup := event(1)
			evs := []outbox.Event{dup}
			if c.many {
				evs = []outbox.Event{event(2), dup, event(3)}
			}
			type result struct {
				out []outbox.Enqueued
				err error
			}
			second := make(chan result, 1)
			go func() {
				var out []outbox.Enqueued
				err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
					var err error
					if c.many {
						out, err = b.store.Enqueue(b.ctx, tx, evs...)
						return err
					}
					out, err = b.store.Enqueue(b.ctx, tx, dup)
					return err
				})
				second <- result{out, err}
			}()
			// The second waits for the first's uncommitted row.
			deadline := time.Now().Add(testwait.Step)
			for {
				var waiting int
				if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
					WHERE wait_event_type = 'Lock' AND query LIKE '%event_outbox%'`).Scan(&waiting); err != nil {
					t.Fatal(err)
				}
				if waiting > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the second enqueue is not waiting for the first one after %v", testwait.Step)
				}
				time.Sleep(5 * time.Millisecond)
			}
			if err := first.Commit(b.ctx); err != nil {
				t.Fatal(err)
			}
			r := testwait.Recv(t, second, "the second transaction to return")
			if r.err != nil {
				t.Fatalf("second: %v", r.err)
			}
			at := 0
			if c.many {
				at = 1
				if !r.out[0].New || !r.out[2].New {
					t.Fatalf("the other events: %+v", r.out)
				}
			}
			if got := r.out[at]; got.New || got.EventID != firstRes.EventID {
				t.Fatalf("duplicate reported as %+v, want the first's event %s", got, firstRes.EventID)
			}
			if n := b.count(t, "dedup_key = $1", ev.DedupKey); n != 1 {
				t.Fatalf("%d rows hold the key, want 1", n)
			}
		})
	}
}
