package frontdoor

import (
	"context"
	"errors"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/seckillkit/seckill/examples/internal/stackharness"
	"github.com/seckillkit/seckill/examples/seckill/flow"
)

// Tests of the Redis front door on its own: the scripts, the rebuild, the
// sale window and Redis Cluster.

func testRedis(t *testing.T, buckets int16, stock []int32) (*Redis, *redis.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rdb := stackharness.RedisClient(t)
	var next atomic.Int64
	f := NewRedis(rdb, "test:"+uuid.NewString()[:8], flow.SKU{ActivityID: 7, SKUID: 9, Buckets: buckets}, func() int64 { return next.Add(1) })
	if err := f.Rebuild(ctx, Image{available: stock, users: map[int64]uuid.UUID{}}, time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	return f, rdb
}

// TestRedisKeysShareOneSlot: every key of a sale carries the same hash tag,
// so the scripts (which name every key in KEYS) run on Redis Cluster.
func TestRedisKeysShareOneSlot(t *testing.T) {
	f := NewRedis(nil, "seckill:s", flow.SKU{ActivityID: 7, SKUID: 9, Buckets: 2}, nil)
	tag := regexp.MustCompile(`\{[^}]*\}`)
	for _, k := range f.keys {
		if got := tag.FindString(k); got != "{7:9}" {
			t.Errorf("key %q: hash tag %q, want {7:9} (the first {…} decides the slot)", k, got)
		}
		if strings.Index(k, "{") != strings.LastIndex(k, "{") {
			t.Errorf("key %q has more than one {", k)
		}
	}
}

func TestRedisReserveReleaseIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, _ := testRedis(t, 2, []int32{1, 1})
	a, err := f.Reserve(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Reserve(ctx, 1); !errors.Is(err, ErrAlreadyBought) {
		t.Fatalf("second reserve of user 1: %v, want ErrAlreadyBought", err)
	}
	b, err := f.Reserve(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if a.Bucket == b.Bucket {
		t.Fatalf("both units from bucket %d: the second reserve must move on to the bucket with stock", a.Bucket)
	}
	if _, err := f.Reserve(ctx, 3); !errors.Is(err, ErrSoldOut) {
		t.Fatalf("third buyer for 2 units: %v, want ErrSoldOut", err)
	}
	st, err := f.State(ctx)
	if err != nil || st.TotalAvailable() != 0 || len(st.Held) != 2 {
		t.Fatalf("state %+v, %v: want 0 available, 2 held", st, err)
	}
	for i, want := range []ReleaseResult{Released, ReleasedAlready, ReleasedAlready} {
		if got, err := f.Release(ctx, a.ReservationID, 0); err != nil || got != want {
			t.Fatalf("release %d of the same reservation: %v, %v; want %v", i+1, got, err, want)
		}
	}
	if got, err := f.Release(ctx, uuid.New(), 0); err != nil || got != ReleaseUnknown {
		t.Fatalf("release of an unknown reservation: %v, %v", got, err)
	}
	st, _ = f.State(ctx)
	if st.Available[a.Bucket] != 1 || st.TotalAvailable() != 1 || len(st.Held) != 1 {
		t.Fatalf("after one release (three times) and an unknown one: %+v, want exactly one unit back in bucket %d", st, a.Bucket)
	}
	countersAgree(t, ctx, f)
	// The released unit goes to another buyer; user 1 stays known (one
	// order per user), unless the release forgets the buyer.
	if _, err := f.Reserve(ctx, 1); !errors.Is(err, ErrAlreadyBought) {
		t.Fatalf("user 1 after the release: %v, want ErrAlreadyBought", err)
	}
	c, err := f.Reserve(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := f.Release(ctx, c.ReservationID, 3); got != Released {
		t.Fatalf("release with forget: %v", got)
	}
	if _, err := f.Reserve(ctx, 3); err != nil {
		t.Fatalf("a forgotten buyer may click again: %v", err)
	}
}

// TestRedisReserveSentTwice: go-redis sends a script again when its
// answer was lost (a read timeout, a dropped connection); the second
// run of the same call answers the same reservation, takes nothing more
// and does not call the buyer a second buyer.
func TestRedisReserveSentTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, rdb := testRedis(t, 2, []int32{2, 2})
	res, req := uuid.NewString(), uuid.NewString()
	run := func() []string {
		t.Helper()
		out, err := reserveScript.Run(ctx, rdb, f.keys, 5, 0, 2, res, req, time.Now().UnixMilli(), 77).StringSlice()
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	first, again := run(), run()
	if first[0] != "OK" || again[0] != "OK" || again[1] != first[1] {
		t.Fatalf("the same reserve twice: %v then %v; want OK with the same bucket both times", first, again)
	}
	if st, err := f.State(ctx); err != nil || len(st.Held) != 1 || st.TotalAvailable() != 3 {
		t.Fatalf("after the same reserve twice: %+v, %v; want one unit taken", st, err)
	}
	if _, err := f.Reserve(ctx, 5); !errors.Is(err, ErrAlreadyBought) {
		t.Fatalf("another click of the same buyer: %v, want ErrAlreadyBought", err)
	}
}

// TestRedisReserveWithoutAnswerIsUndone: a reserve whose answer never
// came (the server busy past the client's read timeout, no resend) may
// still have run; Reserve undoes it — at once, or at the next Reserve —
// so no unit stays held without an order message and the buyer may click
// again.
func TestRedisReserveWithoutAnswerIsUndone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, rdb := testRedis(t, 1, []int32{5})
	impatient := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr, ReadTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer impatient.Close()
	var next atomic.Int64
	f := NewRedis(impatient, "undo:"+uuid.NewString()[:8], flow.SKU{ActivityID: 1, SKUID: 2, Buckets: 1}, func() int64 { return next.Add(1) })
	if err := f.Rebuild(ctx, Image{available: []int32{5}, users: map[int64]uuid.UUID{}}, time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Reserve(ctx, 9); err != nil { // the script is in the server's cache: EVALSHA runs it
		t.Fatal(err)
	}
	// A script that keeps the server busy for 600ms: every command sent
	// meanwhile runs after it, too late for the impatient client.
	busy := make(chan error, 1)
	go func() {
		busy <- rdb.Eval(ctx, `local t = redis.call('TIME'); local s = t[1] * 1000000 + t[2]
			repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - s > 600000
			return 1`, nil).Err()
	}()
	time.Sleep(100 * time.Millisecond)
	if _, err := f.Reserve(ctx, 1); !errors.Is(err, ErrDown) {
		t.Fatalf("reserve while the server is busy: %v, want ErrDown", err)
	}
	if err := <-busy; err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the reserve without an answer to be undone", func() bool {
		if _, err := f.Reserve(ctx, 2); err != nil && !errors.Is(err, ErrAlreadyBought) {
			t.Fatal(err)
		}
		st, err := f.State(ctx)
		return err == nil && len(st.Held) == 2 && st.TotalAvailable() == 3
	})
	if _, err := f.Reserve(ctx, 1); err != nil {
		t.Fatalf("the buyer whose reserve was undone clicks again: %v", err)
	}
}

// TestRedisConcurrentReserveNeverOversells: many buyers at once on few
// units: exactly the stock is handed out, one per buyer.
func TestRedisConcurrentReserveNeverOversells(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, _ := testRedis(t, 4, []int32{5, 5, 5, 5})
	var ok, soldOut atomic.Int64
	var wg sync.WaitGroup
	for u := int64(1); u <= 100; u++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2 { // every buyer clicks twice
				_, err := f.Reserve(ctx, u)
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, ErrSoldOut):
					soldOut.Add(1)
				case errors.Is(err, ErrAlreadyBought):
				default:
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	st, err := f.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ok.Load() != 20 || st.TotalAvailable() != 0 || len(st.Held) != 20 {
		t.Fatalf("%d reserved, %d left, %d held: want 20, 0, 20", ok.Load(), st.TotalAvailable(), len(st.Held))
	}
	countersAgree(t, ctx, f)
	if err := f.AddDrift(ctx, 3); err != nil {
		t.Fatal(err)
	}
	countersAgree(t, ctx, f)
}

// TestRedisLostKeys: after Redis lost its data, every script answers
// ErrDown (never "sold out", never a reservation from nothing)
// until the front door is rebuilt, and the rebuild restores held
// reservations, released ones and the buyers.
func TestRedisLostKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, rdb := testRedis(t, 2, []int32{3, 3})
	r, err := f.Reserve(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Reserve(ctx, 2); !errors.Is(err, ErrDown) {
		t.Fatalf("reserve on an empty Redis: %v, want ErrDown", err)
	}
	if _, err := f.Release(ctx, r.ReservationID, 0); !errors.Is(err, ErrDown) {
		t.Fatalf("release on an empty Redis: %v, want ErrDown", err)
	}
	if _, err := f.Counters(ctx); !errors.Is(err, ErrDown) {
		t.Fatalf("counters of an empty Redis: %v, want ErrDown", err)
	}
	if ok, err := f.Built(ctx); err != nil || ok {
		t.Fatalf("built = %v, %v", ok, err)
	}
	if n, _ := rdb.DBSize(ctx).Result(); n != 0 {
		t.Fatalf("the failed scripts wrote %d keys", n)
	}
	gone := uuid.New()
	img := Image{available: []int32{2, 3}, users: map[int64]uuid.UUID{1: r.ReservationID, 5: gone},
		resv: []imageReservation{
			{id: r.ReservationID, request: r.RequestID, bucket: r.Bucket, user: 1, order: r.OrderID, held: true},
			{id: gone, request: uuid.New(), bucket: 1, user: 5, order: 99, held: false},
		}}
	if err := f.Rebuild(ctx, img, time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	st, err := f.State(ctx)
	if err != nil || st.TotalAvailable() != 5 || len(st.Held) != 1 {
		t.Fatalf("after the rebuild: %+v, %v", st, err)
	}
	if _, err := f.Reserve(ctx, 1); !errors.Is(err, ErrAlreadyBought) {
		t.Fatalf("a buyer with an order in PostgreSQL after the rebuild: %v, want ErrAlreadyBought", err)
	}
	if got, _ := f.Release(ctx, gone, 0); got != ReleasedAlready {
		t.Fatalf("release of a reservation PostgreSQL had released: %v, want ReleasedAlready", got)
	}
	countersAgree(t, ctx, f)
	if got, _ := f.Release(ctx, r.ReservationID, 0); got != Released {
		t.Fatalf("release of a held reservation after the rebuild: %v", got)
	}
	countersAgree(t, ctx, f)
	if id, ok, err := f.ReservationOf(ctx, r.RequestID); err != nil || !ok || id != r.ReservationID {
		t.Fatalf("ReservationOf after the rebuild: %v %v %v", id, ok, err)
	}
}

// TestRedisSaleWindow: a sale not open yet answers ErrSaleClosed.
func TestRedisSaleWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, _ := testRedis(t, 1, []int32{3})
	if err := f.Rebuild(ctx, Image{available: []int32{3}, users: map[int64]uuid.UUID{}}, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Reserve(ctx, 1); !errors.Is(err, ErrSaleClosed) {
		t.Fatalf("reserve before the start: %v, want ErrSaleClosed", err)
	}
	if st, _ := f.State(ctx); st.TotalAvailable() != 3 {
		t.Fatalf("a refused click took stock: %+v", st)
	}
}

// TestRedisClusterFrontDoor runs the front door on a three-node Redis
// Cluster: the scripts, the MULTI of the rebuild and the reads all work,
// because every key of a sale is in one slot (a key in another slot would
// fail with CROSSSLOT).
func TestRedisClusterFrontDoor(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := stackharness.StartThrowawayRedisCluster(ctx, stackharness.RedisClusterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs})
	defer rdb.Close()
	var next atomic.Int64
	// Several sales: their slots differ, so they land on different nodes.
	for sku := int64(1); sku <= 6; sku++ {
		f := NewRedis(rdb, "cluster", flow.SKU{ActivityID: 1, SKUID: sku, Buckets: 2}, func() int64 { return next.Add(1) })
		if err := f.Rebuild(ctx, Image{available: []int32{1, 1}, users: map[int64]uuid.UUID{}}, time.Now().Add(-time.Second)); err != nil {
			t.Fatalf("sku %d: rebuild: %v", sku, err)
		}
		a, err := f.Reserve(ctx, 1)
		if err != nil {
			t.Fatalf("sku %d: reserve: %v", sku, err)
		}
		if _, err := f.Reserve(ctx, 2); err != nil {
			t.Fatalf("sku %d: reserve: %v", sku, err)
		}
		if _, err := f.Reserve(ctx, 3); !errors.Is(err, ErrSoldOut) {
			t.Fatalf("sku %d: third reserve: %v, want sold out", sku, err)
		}
		if got, err := f.Release(ctx, a.ReservationID, 0); err != nil || got != Released {
			t.Fatalf("sku %d: release: %v %v", sku, got, err)
		}
		st, err := f.State(ctx)
		if err != nil || st.TotalAvailable() != 1 || len(st.Held) != 1 {
			t.Fatalf("sku %d: state %+v, %v", sku, st, err)
		}
	}
	// And a key outside the slot is refused by the cluster, which is what
	// the hash tag prevents.
	err = rdb.Eval(ctx, "return redis.call('GET', KEYS[2])", []string{"a:{x}", "b:{y}"}).Err()
	if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("a script over two slots: %v, want CROSSSLOT", err)
	}
}

// TestRedisClusterFailoverNeedsRebuild: on a Redis Cluster with a replica
// per master, the master of the sale's slot acknowledges reservations its
// replica never receives (the link cut, the replica frozen) and is killed;
// the replica is promoted with the sale's keys but without those
// reservations. The front door must not trust it: Built answers false
// once the promoted replica answers, and Recover rebuilds the keys from
// the image it is given (PostgreSQL's, in the service).
func TestRedisClusterFailoverNeedsRebuild(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := stackharness.StartThrowawayRedisCluster(ctx, stackharness.RedisClusterOptions{Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, MaxRetries: 1,
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	defer rdb.Close()
	var next atomic.Int64
	f := NewRedis(rdb, "failover", flow.SKU{ActivityID: 3, SKUID: 4, Buckets: 2}, func() int64 { return next.Add(1) })
	if err := f.Rebuild(ctx, Image{available: []int32{10, 10}, users: map[int64]uuid.UUID{}}, time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if ok, err := f.Built(ctx); err != nil || !ok {
		t.Fatalf("built after the rebuild: %v, %v", ok, err)
	}
	kept, err := f.Reserve(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	slot, err := cl.KeySlot(f.keys[keyMeta])
	if err != nil {
		t.Fatal(err)
	}
	master, replicas, err := cl.MasterOf(0, slot)
	if err != nil || len(replicas) != 1 {
		t.Fatalf("master of slot %d: %d, replicas %v, %v", slot, master, replicas, err)
	}
	replica := replicas[0]
	// Wait until the replica has the first reservation, then cut it off.
	waitFor(t, ctx, "the replica to receive the first reservation", func() bool {
		v, err := cl.Read(replica, "HGET", f.keys[keyResv], kept.ReservationID.String())
		return err == nil && v != ""
	})
	if err := cl.CutReplica(replica, master); err != nil {
		t.Fatal(err)
	}
	var lost []Reservation
	for u := int64(2); u <= 4; u++ {
		r, err := f.Reserve(ctx, u)
		if err != nil {
			cl.Thaw(replica)
			t.Fatal(err)
		}
		lost = append(lost, r)
	}
	cl.Kill(master)
	cl.Thaw(replica)
	waitFor(t, ctx, "the replica to be promoted", func() bool {
		m, _, err := cl.MasterOf(replica, slot)
		return err == nil && m == replica
	})
	// A click is refused (try again): the front door does not serve from
	// a server it did not fill.
	if _, err := f.Reserve(ctx, 9); !errors.Is(err, ErrDown) {
		t.Fatalf("reserve on the promoted replica before the rebuild: %v, want ErrDown", err)
	}
	// The promoted replica has the keys, not the last reservations.
	st, err := f.State(ctx)
	for err != nil && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
		st, err = f.State(ctx)
	}
	if _, ok := st.Held[kept.ReservationID]; !ok || len(st.Held) != 1 || st.TotalAvailable() != 19 {
		t.Fatalf("promoted replica: %d held, %d available; want the first reservation only (the link was cut after it)", len(st.Held), st.TotalAvailable())
	}
	waitFor(t, ctx, "Built to answer (false) on the promoted replica", func() bool {
		ok, err := f.Built(ctx)
		if ok {
			t.Fatal("Built trusts a promoted replica that missed acknowledged reservations")
		}
		return err == nil
	})
	img := Image{available: []int32{8, 8}, users: map[int64]uuid.UUID{}}
	for _, r := range append(lost, kept) {
		img.resv = append(img.resv, imageReservation{id: r.ReservationID, request: r.RequestID, bucket: r.Bucket, user: r.UserID, order: r.OrderID, held: true})
		img.users[r.UserID] = r.ReservationID
	}
	img.available[kept.Bucket]++
	for _, r := range lost {
		img.available[r.Bucket]--
	}
	img.available[0]++
	img.available[1]++ // 20 units, 4 held
	quiesced := false
	rebuilt, err := f.Recover(ctx, func(context.Context) error { quiesced = true; return nil },
		func(context.Context) (Image, error) { return img, nil }, nil)
	if err != nil || !rebuilt || !quiesced {
		t.Fatalf("recover: rebuilt %v, quiesced %v, %v", rebuilt, quiesced, err)
	}
	if ok, err := f.Built(ctx); err != nil || !ok {
		t.Fatalf("built after the recovery: %v, %v", ok, err)
	}
	st, err = f.State(ctx)
	if err != nil || len(st.Held) != 4 || st.TotalAvailable() != 16 {
		t.Fatalf("after the recovery: %+v, %v; want 4 held, 16 available", st, err)
	}
	for _, r := range lost {
		if _, err := f.Reserve(ctx, r.UserID); !errors.Is(err, ErrAlreadyBought) {
			t.Fatalf("buyer %d after the recovery: %v, want ErrAlreadyBought", r.UserID, err)
		}
	}
	if rebuilt, err := f.Recover(ctx, nil, nil, nil); err != nil || rebuilt {
		t.Fatalf("a second recovery: rebuilt %v, %v; want nothing to do", rebuilt, err)
	}
}

// waitFor polls cond every 50ms until it holds, failing the test with
// what when a minute passes (or ctx ends) first.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestDownClassifiesTimeouts: a dial or read timeout of go-redis's own is
// the front door being down (ErrDown: the click is answered "try again"),
// though net's timeout error matches context.DeadlineExceeded; once the
// caller's context is done the error stays the caller's.
func TestDownClassifiesTimeouts(t *testing.T) {
	t.Parallel()
	_, err := (&net.Dialer{Timeout: time.Nanosecond}).Dial("tcp", "127.0.0.1:1")
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("dial with a 1ns timeout: %v; want a timeout matching context.DeadlineExceeded", err)
	}
	if got := down(context.Background(), err); !errors.Is(got, ErrDown) {
		t.Errorf("down(live ctx, %v) = %v; want ErrDown", err, got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got := down(ctx, err); errors.Is(got, ErrDown) || got != err {
		t.Errorf("down(done ctx, %v) = %v; want the error itself", err, got)
	}
}

// countersAgree checks that Counters, the cheap read, says what State,
// the whole read, says: the same stock per bucket and drift, and the held
// count equal to the reservations held.
func countersAgree(t *testing.T, ctx context.Context, f Door) {
	t.Helper()
	st, err := f.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.Counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Available, st.Available) || !slices.Equal(c.Drift, st.Drift) || c.Held != int64(len(st.Held)) {
		t.Fatalf("counters %+v, state: available %v, drift %v, %d held", c, st.Available, st.Drift, len(st.Held))
	}
}

// TestRedisRebuildLargeImage: a rebuild of 200,000 reservations sends
// no round trip larger than a chunk's (one MULTI of the whole image
// outlasted the service's 2 s timeout at 1,000,000), switches the image
// in one MULTI, and leaves every reservation and buyer there with the
// held count, nothing of an earlier rebuild that stopped half-way; a
// second, smaller rebuild over it replaces it and leaves no staging key
// behind.
func TestRedisRebuildLargeImage(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rdb := stackharness.RedisClient(t)
	opts := *rdb.Options()
	watched := redis.NewClient(&opts)
	t.Cleanup(func() { _ = watched.Close() })
	var sizes argsHook
	watched.AddHook(&sizes)
	var next atomic.Int64
	g := NewRedis(watched, "test:"+uuid.NewString()[:8], flow.SKU{ActivityID: 7, SKUID: 9, Buckets: 4}, func() int64 { return next.Add(1) })
	const n = 200_000
	img := Image{available: []int32{5, 5, 5, 5}, users: map[int64]uuid.UUID{}}
	for i := range n {
		r := imageReservation{id: uuid.New(), request: uuid.New(), bucket: int16(i % 4), user: int64(i + 1), order: int64(i + 1), held: i%10 != 0}
		img.resv = append(img.resv, r)
		if r.held {
			img.users[r.user] = r.id
		}
	}
	// A rebuild that stopped half-way left a staged field behind: the
	// next one starts from nothing (the counts below would be one more).
	if err := rdb.HSet(ctx, g.keys[keyResv]+":rebuild", uuid.NewString(), "R:0:999999:1").Err(); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		if round == 1 {
			img.resv, img.users = img.resv[:n/2], map[int64]uuid.UUID{}
			for _, r := range img.resv {
				if r.held {
					img.users[r.user] = r.id
				}
			}
		}
		sizes.max.Store(0)
		if err := g.Rebuild(ctx, img, time.Now().Add(-time.Second)); err != nil {
			t.Fatalf("rebuild %d of %d reservations: %v", round+1, len(img.resv), err)
		}
		// Three hashes of a chunk each, with their commands' names and keys.
		if most := sizes.max.Load(); most > 3*(2*rebuildChunk+2) {
			t.Fatalf("rebuild %d sent %d arguments in one round trip; a chunk is %d fields", round+1, most, rebuildChunk)
		}
		c, err := g.Counters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wantHeld := int64(len(img.users))
		if c.Held != wantHeld || !slices.Equal(c.Available, []int64{5, 5, 5, 5}) {
			t.Fatalf("rebuild %d: counters %+v, want %d held and 5 in each bucket", round+1, c, wantHeld)
		}
		for key, want := range map[int]int64{keyResv: int64(len(img.resv)), keyReq: int64(len(img.resv)), keyUsers: wantHeld} {
			if got, err := rdb.HLen(ctx, g.keys[key]).Result(); err != nil || got != want {
				t.Fatalf("rebuild %d: %s holds %d fields (%v), want %d", round+1, g.keys[key], got, err, want)
			}
		}
		if left, err := rdb.Exists(ctx, g.keys[keyMeta]+":rebuild", g.keys[keyResv]+":rebuild").Result(); err != nil || left != 0 {
			t.Fatalf("rebuild %d left %d staging keys (%v)", round+1, left, err)
		}
	}
	if _, err := g.Reserve(ctx, 2); !errors.Is(err, ErrAlreadyBought) { // user 2 holds reservation 1
		t.Fatalf("a buyer of the image: %v, want ErrAlreadyBought", err)
	}
}

// argsHook records the most arguments a client sent in one round trip.
type argsHook struct{ max atomic.Int64 }

func (h *argsHook) record(n int) {
	for {
		m := h.max.Load()
		if int64(n) <= m || h.max.CompareAndSwap(m, int64(n)) {
			return
		}
	}
}

func (h *argsHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *argsHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.record(len(cmd.Args()))
		return next(ctx, cmd)
	}
}

func (h *argsHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, c := range cmds {
			n += len(c.Args())
		}
		h.record(n)
		return next(ctx, cmds)
	}
}
