package frontdoor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/order"
)

// Redis is the front door on Redis. Every key of a sale shares the
// hash tag {activity:sku}, so they live in one slot and the scripts, which
// name every key in KEYS, run on Redis Cluster too:
//
//	…{a:s}:meta   hash: status ("open"), starts_ms, ends_ms, left (units), held (reservations)
//	…{a:s}:stock  hash: bucket → units the front door may still hand out
//	…{a:s}:users  hash: user → reservation (one per user)
//	…{a:s}:resv   hash: reservation → "R:bucket:user:order" while held, "X:…" once released
//	…{a:s}:req    hash: request → reservation
//
// Redis only filters. It is filled from PostgreSQL (warm-up) and, after it
// lost its data, rebuilt from PostgreSQL's bucket counters and reservations,
// never the other way round. Losing the data includes a failover: Redis
// replication is asynchronous, so a promoted replica may lack the last
// reservations its master acknowledged (or hold one whose answer never
// reached the service). The front door remembers which server (run_id)
// its last rebuild wrote to, and [Redis.Built] answers false once another
// one serves its keys: [Redis.Recover] then rebuilds it. Reserve compares
// the server too, once a second, so a failover that no call saw fail (a
// quiet moment of the sale) is noticed at the next click.
type Redis struct {
	rdb       redis.UniversalClient
	keys      []string // meta, stock, users, resv, req
	buckets   int
	nextOrder func() int64

	mu      sync.Mutex
	drift   []int64 // per bucket, since the last (re)build
	builtOn string  // run_id of the server the last (re)build wrote to

	checked atomic.Int64 // when Reserve last compared the server with builtOn (unix ns)

	undoMu sync.Mutex
	undos  map[uuid.UUID]int64 // reservations whose reserve answered no one and whose undo failed → user
}

// serverCheckEvery is how often Reserve compares the server that holds
// the keys with the one the last rebuild wrote to: a failover between two
// failed calls is noticed within it.
const serverCheckEvery = time.Second

const (
	keyMeta = iota
	keyStock
	keyUsers
	keyResv
	keyReq
)

// reserveScript: KEYS meta stock users resv req; ARGV user, first bucket,
// buckets, reservation, request, now (ms), order id. Returns {"OK", bucket},
// {"ALREADY", reservation}, {"SOLD_OUT"}, {"CLOSED"} or {"NOT_READY"} (the
// keys are gone: Redis restarted empty). It is idempotent: go-redis sends
// a command again when its answer did not arrive (a read timeout, a
// dropped connection), and the same call finds its own reservation and
// answers {"OK", bucket} again instead of "ALREADY".
var reserveScript = redis.NewScript(`
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {'NOT_READY'} end
if redis.call('HGET', KEYS[3], ARGV[1]) == ARGV[4] then
  local v = redis.call('HGET', KEYS[4], ARGV[4])
  local b = v and string.match(v, '^R:(%d+):')
  if b then return {'OK', b} end
end
if status ~= 'open' then return {'CLOSED'} end
local now = tonumber(ARGV[6])
local starts = tonumber(redis.call('HGET', KEYS[1], 'starts_ms') or '0')
local ends = tonumber(redis.call('HGET', KEYS[1], 'ends_ms') or '0')
if now < starts or (ends > 0 and now >= ends) then return {'CLOSED'} end
local prev = redis.call('HGET', KEYS[3], ARGV[1])
if prev then return {'ALREADY', prev} end
if tonumber(redis.call('HGET', KEYS[1], 'left') or '0') <= 0 then return {'SOLD_OUT'} end
local n = tonumber(ARGV[3])
local first = tonumber(ARGV[2])
for i = 0, n - 1 do
  local b = tostring((first + i) % n)
  if tonumber(redis.call('HGET', KEYS[2], b) or '0') > 0 then
    redis.call('HINCRBY', KEYS[2], b, -1)
    redis.call('HINCRBY', KEYS[1], 'left', -1)
    redis.call('HINCRBY', KEYS[1], 'held', 1)
    redis.call('HSET', KEYS[3], ARGV[1], ARGV[4])
    redis.call('HSET', KEYS[4], ARGV[4], 'R:' .. b .. ':' .. ARGV[1] .. ':' .. ARGV[7])
    redis.call('HSET', KEYS[5], ARGV[5], ARGV[4])
    return {'OK', b}
  end
end
return {'SOLD_OUT'}
`)

// releaseScript: KEYS meta stock resv users; ARGV reservation, user to
// forget ("" for none). RESERVED → RELEASED once: returns "RELEASED",
// "ALREADY", "UNKNOWN" (changes nothing) or "NOT_READY".
var releaseScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 'NOT_READY' end
local v = redis.call('HGET', KEYS[3], ARGV[1])
if not v then return 'UNKNOWN' end
if string.sub(v, 1, 1) == 'X' then return 'ALREADY' end
local b = string.match(v, '^R:(%d+):')
redis.call('HINCRBY', KEYS[2], b, 1)
redis.call('HINCRBY', KEYS[1], 'left', 1)
redis.call('HINCRBY', KEYS[1], 'held', -1)
redis.call('HSET', KEYS[3], ARGV[1], 'X' .. string.sub(v, 2))
if ARGV[2] ~= '' and redis.call('HGET', KEYS[4], ARGV[2]) == ARGV[1] then
  redis.call('HDEL', KEYS[4], ARGV[2])
end
return 'RELEASED'
`)

// driftScript: KEYS meta stock; ARGV bucket, units.
var driftScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 'NOT_READY' end
redis.call('HINCRBY', KEYS[2], ARGV[1], ARGV[2])
redis.call('HINCRBY', KEYS[1], 'left', ARGV[2])
return 'OK'
`)

// NewRedis returns the front door of item on rdb, its keys under prefix;
// nextOrder hands out the order ids. It holds nothing until [Redis.Rebuild].
func NewRedis(rdb redis.UniversalClient, prefix string, item flow.SKU, nextOrder func() int64) *Redis {
	tag := fmt.Sprintf("%s:{%d:%d}:", prefix, item.ActivityID, item.SKUID)
	return &Redis{
		rdb: rdb, buckets: int(item.Buckets), nextOrder: nextOrder,
		keys:  []string{tag + "meta", tag + "stock", tag + "users", tag + "resv", tag + "req"},
		drift: make([]int64, item.Buckets),
	}
}

// Name says what it is, for the report.
func (f *Redis) Name() string {
	if _, ok := f.rdb.(*redis.ClusterClient); ok {
		return "redis cluster (Lua scripts, keys in one {activity:sku} slot)"
	}
	return "redis (Lua scripts, keys in one {activity:sku} slot)"
}

// down turns connection trouble, and a Redis that cannot serve yet
// (loading, a read-only replica, a cluster without a master or whose
// slots are moving), into
// ErrDown; other errors (a script error) stay what they are, and so does
// any error once ctx is done (the caller gave up: not Redis's failure).
// A dial or read timeout of go-redis's own is connection trouble, though
// it matches context.DeadlineExceeded (net's timeout error does), so ctx,
// not the error, tells the two apart.
func down(ctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil {
		return err
	}
	var rerr redis.Error
	if errors.As(err, &rerr) && !errors.Is(err, redis.Nil) {
		msg := rerr.Error()
		transient := false
		for _, p := range []string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "MOVED", "ASK"} {
			transient = transient || strings.HasPrefix(msg, p)
		}
		if !transient {
			return fmt.Errorf("front door: %w", err)
		}
	}
	return fmt.Errorf("%w: %v", ErrDown, err)
}

// Reserve implements [Door].
func (f *Redis) Reserve(ctx context.Context, user int64) (Reservation, error) {
	start, err := inventory.PickBucket(strconv.FormatInt(user, 10), f.buckets)
	if err != nil {
		return Reservation{}, err
	}
	if err := f.checkServer(ctx); err != nil {
		return Reservation{}, err
	}
	f.retryUndos(ctx)
	r := Reservation{
		RequestID: uuid.Must(uuid.NewV7()), ReservationID: uuid.Must(uuid.NewV7()),
		OrderID: f.nextOrder(), UserID: user, ReservedAt: time.Now(),
	}
	res, err := reserveScript.Run(ctx, f.rdb, f.keys, user, int(start), f.buckets, r.ReservationID.String(),
		r.RequestID.String(), r.ReservedAt.UnixMilli(), r.OrderID).StringSlice()
	if err != nil {
		if err = down(ctx, err); errors.Is(err, ErrDown) {
			f.undo(ctx, r.ReservationID, user)
		}
		return Reservation{}, err
	}
	switch res[0] {
	case "OK":
		b, err := strconv.Atoi(res[1])
		if err != nil {
			return Reservation{}, fmt.Errorf("reserve script: bucket %q: %w", res[1], err)
		}
		r.Bucket = int16(b)
		return r, nil
	case "ALREADY":
		return Reservation{}, ErrAlreadyBought
	case "SOLD_OUT":
		return Reservation{}, ErrSoldOut
	case "CLOSED":
		return Reservation{}, ErrSaleClosed
	case "NOT_READY":
		return Reservation{}, fmt.Errorf("%w: the front door's keys are gone (Redis restarted empty); rebuilding from PostgreSQL", ErrDown)
	}
	return Reservation{}, fmt.Errorf("reserve script: unexpected answer %q", res)
}

// Release implements [Door].
func (f *Redis) Release(ctx context.Context, id uuid.UUID, forgetUser int64) (ReleaseResult, error) {
	forget := ""
	if forgetUser != 0 {
		forget = strconv.FormatInt(forgetUser, 10)
	}
	res, err := releaseScript.Run(ctx, f.rdb, []string{f.keys[keyMeta], f.keys[keyStock], f.keys[keyResv], f.keys[keyUsers]},
		id.String(), forget).Text()
	if err != nil {
		return 0, down(ctx, err)
	}
	switch res {
	case "RELEASED":
		return Released, nil
	case "ALREADY":
		return ReleasedAlready, nil
	case "UNKNOWN":
		return ReleaseUnknown, nil
	case "NOT_READY":
		return 0, fmt.Errorf("%w: the front door's keys are gone (Redis restarted empty)", ErrDown)
	}
	return 0, fmt.Errorf("release script: unexpected answer %q", res)
}

// Forget implements [Door].
func (f *Redis) Forget(ctx context.Context, user int64) error {
	return down(ctx, f.rdb.HDel(ctx, f.keys[keyUsers], strconv.FormatInt(user, 10)).Err())
}

// AddDrift implements [Door].
func (f *Redis) AddDrift(ctx context.Context, extra int32) error {
	per := make([]int64, f.buckets)
	for i := int32(0); i < extra; i++ {
		per[int(i)%f.buckets]++
	}
	for b, n := range per {
		if n == 0 {
			continue
		}
		res, err := driftScript.Run(ctx, f.rdb, f.keys[:2], b, n).Text()
		if err != nil {
			return down(ctx, err)
		}
		if res != "OK" {
			return ErrDown
		}
		f.mu.Lock()
		f.drift[b] += n
		f.mu.Unlock()
	}
	return nil
}

// ReservationOf implements [Door].
func (f *Redis) ReservationOf(ctx context.Context, requestID uuid.UUID) (uuid.UUID, bool, error) {
	v, err := f.rdb.HGet(ctx, f.keys[keyReq], requestID.String()).Result()
	if errors.Is(err, redis.Nil) {
		return uuid.Nil, false, nil
	}
	if err != nil {
		return uuid.Nil, false, down(ctx, err)
	}
	id, err := uuid.Parse(v)
	return id, err == nil, err
}

// State implements [Door].
func (f *Redis) State(ctx context.Context) (State, error) {
	st := State{Available: make([]int64, f.buckets), Held: map[uuid.UUID]int16{}}
	stock, err := f.rdb.HGetAll(ctx, f.keys[keyStock]).Result()
	if err != nil {
		return st, down(ctx, err)
	}
	if st.Available, err = f.parseStock(stock); err != nil {
		return st, err
	}
	var cursor uint64
	for {
		kv, next, err := f.rdb.HScan(ctx, f.keys[keyResv], cursor, "", 1000).Result()
		if err != nil {
			return st, down(ctx, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			id, err := uuid.Parse(kv[i])
			parts := strings.SplitN(kv[i+1], ":", 3)
			if err != nil || len(parts) < 2 {
				return st, fmt.Errorf("front door: reservation %q = %q", kv[i], kv[i+1])
			}
			if parts[0] != "R" {
				continue
			}
			b, err := strconv.Atoi(parts[1])
			if err != nil {
				return st, fmt.Errorf("front door: reservation %q = %q", kv[i], kv[i+1])
			}
			st.Held[id] = int16(b)
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	f.mu.Lock()
	st.Drift = append([]int64(nil), f.drift...)
	f.mu.Unlock()
	return st, nil
}

// Counters implements [Door]: the stock counters and the held count,
// which the scripts keep beside the held reservations (the reserve adds
// one, the release takes one), in one round trip.
func (f *Redis) Counters(ctx context.Context) (Counters, error) {
	var c Counters
	var stock *redis.MapStringStringCmd
	var held *redis.StringCmd
	if _, err := f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		stock = p.HGetAll(ctx, f.keys[keyStock])
		held = p.HGet(ctx, f.keys[keyMeta], "held")
		return nil
	}); err != nil {
		return c, down(ctx, err)
	}
	var err error
	if c.Available, err = f.parseStock(stock.Val()); err != nil {
		return c, err
	}
	if c.Held, err = strconv.ParseInt(held.Val(), 10, 64); err != nil {
		return c, fmt.Errorf("front door: held count %q: %w", held.Val(), err)
	}
	f.mu.Lock()
	c.Drift = append([]int64(nil), f.drift...)
	f.mu.Unlock()
	return c, nil
}

// parseStock reads the stock hash's bucket → units fields.
func (f *Redis) parseStock(stock map[string]string) ([]int64, error) {
	out := make([]int64, f.buckets)
	for k, v := range stock {
		b, err1 := strconv.Atoi(k)
		n, err2 := strconv.ParseInt(v, 10, 64)
		if err1 != nil || err2 != nil || b < 0 || b >= f.buckets {
			return nil, fmt.Errorf("front door: stock field %q = %q", k, v)
		}
		out[b] = n
	}
	return out, nil
}

// Image is what PostgreSQL says the front door should hold.
type Image struct {
	available []int32 // per bucket
	resv      []imageReservation
	users     map[int64]uuid.UUID // every user with an order
}

type imageReservation struct {
	id, request uuid.UUID
	bucket      int16
	user, order int64
	held        bool // a live order holds its unit
}

// LoadImage reads the bucket counters and the reservations with their
// orders in one REPEATABLE READ snapshot.
func LoadImage(ctx context.Context, fs *flow.Service) (Image, error) {
	img := Image{users: map[int64]uuid.UUID{}}
	err := pgx.BeginTxFunc(ctx, fs.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		st, err := fs.Inventory.Stock(ctx, tx, fs.Item.ActivityID, fs.Item.SKUID)
		if err != nil {
			return err
		}
		buckets := st.Buckets
		img.available = make([]int32, len(buckets))
		for _, b := range buckets {
			img.available[b.BucketNo] = b.Available
		}
		rows, err := tx.Query(ctx, `SELECT r.reservation_id, r.request_id, r.inventory_bucket, r.user_id, coalesce(o.order_id, 0),
				coalesce(o.status IN ($3, $4, $5, $6), false), o.order_id IS NOT NULL
			FROM `+pgx.Identifier{fs.Schema, "inventory_reservation"}.Sanitize()+` r
			LEFT JOIN `+pgx.Identifier{fs.Schema, "orders"}.Sanitize()+` o ON o.reservation_id = r.reservation_id
			WHERE r.activity_id = $1 AND r.sku_id = $2`,
			fs.Item.ActivityID, fs.Item.SKUID, int16(order.StatusCreated), int16(order.StatusPaying), int16(order.StatusPaid), int16(order.StatusRefundPending))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r imageReservation
			var hasOrder bool
			if err := rows.Scan(&r.id, &r.request, &r.bucket, &r.user, &r.order, &r.held, &hasOrder); err != nil {
				return err
			}
			img.resv = append(img.resv, r)
			if hasOrder {
				img.users[r.user] = r.id
			}
		}
		return rows.Err()
	})
	return img, err
}

// rebuildChunk is how many hash fields one round trip of a rebuild
// writes: small enough that each stays well inside the client's read
// timeout whatever the image's size (one MULTI of a million reservations
// took longer than the service's 2 s).
const rebuildChunk = 5000

// Rebuild replaces the front door's keys with img, atomically: it writes
// the image into keys of its own beside the live ones (in the same hash
// slot), rebuildChunk fields a round trip, then one MULTI unlinks the
// live keys and renames the new ones onto them, so a script never sees
// half an image. The sale opens at startsAt.
func (f *Redis) Rebuild(ctx context.Context, img Image, startsAt time.Time) error {
	// The server is read before the MULTI: a failover between the two
	// makes the next Built answer false (one rebuild more), never true for
	// a server that may have missed this rebuild.
	node, err := f.node(ctx)
	if err != nil {
		return down(ctx, err)
	}
	staged := make([]string, len(f.keys))
	for i, k := range f.keys {
		staged[i] = k + ":rebuild"
	}
	written, err := f.stage(ctx, img, startsAt, staged)
	if err != nil {
		return down(ctx, err)
	}
	_, err = f.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Unlink(ctx, f.keys...)
		for i := range f.keys {
			if written[i] {
				p.Rename(ctx, staged[i], f.keys[i])
			}
		}
		return nil
	})
	if err != nil {
		return down(ctx, err)
	}
	f.mu.Lock()
	clear(f.drift)
	f.builtOn = node
	f.mu.Unlock()
	return nil
}

// stage writes img into the keys staged (a leftover of a rebuild that
// did not finish is dropped first), and reports which it wrote: an empty
// hash is no key.
func (f *Redis) stage(ctx context.Context, img Image, startsAt time.Time, staged []string) ([]bool, error) {
	if err := f.rdb.Unlink(ctx, staged...).Err(); err != nil {
		return nil, err
	}
	written := make([]bool, len(staged))
	var left, held int64
	stock := make([]any, 0, 2*len(img.available))
	for b, a := range img.available {
		stock = append(stock, strconv.Itoa(b), a)
		left += int64(a)
	}
	var resv, req, users []any
	flush := func() error {
		_, err := f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, kv := range map[int][]any{keyResv: resv, keyReq: req, keyUsers: users} {
				if len(kv) > 0 {
					p.HSet(ctx, staged[i], kv...)
					written[i] = true
				}
			}
			return nil
		})
		resv, req, users = resv[:0], req[:0], users[:0]
		return err
	}
	for _, r := range img.resv {
		state := "X"
		if r.held {
			state = "R"
			held++
		}
		resv = append(resv, r.id.String(), fmt.Sprintf("%s:%d:%d:%d", state, r.bucket, r.user, r.order))
		req = append(req, r.request.String(), r.id.String())
		if len(resv) >= 2*rebuildChunk {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	for u, id := range img.users {
		users = append(users, strconv.FormatInt(u, 10), id.String())
		if len(users) >= 2*rebuildChunk {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	_, err := f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		if len(stock) > 0 {
			p.HSet(ctx, staged[keyStock], stock...)
			written[keyStock] = true
		}
		p.HSet(ctx, staged[keyMeta], "status", "open", "starts_ms", startsAt.UnixMilli(), "ends_ms", 0, "left", left, "held", held)
		written[keyMeta] = true
		return nil
	})
	return written, err
}

// Built reports whether the front door's keys are there, on the server its
// last rebuild wrote to. False means Redis lost them (restarted empty) or
// another server serves them now (a failover promoted a replica, which may
// lack the last writes): rebuild. An error means Redis cannot tell now.
func (f *Redis) Built(ctx context.Context) (bool, error) {
	n, err := f.rdb.Exists(ctx, f.keys[keyMeta]).Result()
	if err != nil {
		f.reload(ctx)
		return false, down(ctx, err)
	}
	if n == 0 {
		return false, nil
	}
	node, err := f.node(ctx)
	if err != nil {
		f.reload(ctx)
		return false, down(ctx, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return node == f.builtOn, nil
}

// undo releases a reservation whose reserve got no answer (it may have
// run: Redis took the unit and the buyer, and nobody will queue its order
// message) and forgets its buyer, who may click again. Release is
// idempotent and leaves a reservation that was never made unknown. An undo
// that fails is tried again by the next Reserve.
func (f *Redis) undo(ctx context.Context, id uuid.UUID, user int64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_, err := f.Release(ctx, id, user)
	f.undoMu.Lock()
	defer f.undoMu.Unlock()
	switch {
	case err == nil:
		delete(f.undos, id)
	case f.undos == nil:
		f.undos = map[uuid.UUID]int64{id: user}
	default:
		f.undos[id] = user
	}
}

// retryUndos tries the failed undos again, one Reserve at a time.
func (f *Redis) retryUndos(ctx context.Context) {
	if !f.undoMu.TryLock() {
		return
	}
	pending := maps.Clone(f.undos)
	f.undoMu.Unlock()
	for id, user := range pending {
		f.undo(ctx, id, user)
	}
}

// checkServer compares, at most once every serverCheckEvery (one caller
// does it, the others go on), the server that serves the keys with the
// one the last rebuild wrote to: ErrDown when it changed.
func (f *Redis) checkServer(ctx context.Context) error {
	now, last := time.Now().UnixNano(), f.checked.Load()
	if now-last < int64(serverCheckEvery) || !f.checked.CompareAndSwap(last, now) {
		return nil
	}
	node, err := f.node(ctx)
	if err != nil {
		f.reload(ctx)
		return down(ctx, err)
	}
	f.mu.Lock()
	changed := f.builtOn != "" && node != f.builtOn
	f.mu.Unlock()
	if changed {
		return fmt.Errorf("%w: another Redis server holds the front door's keys (a failover: it may lack the last writes); rebuilding from PostgreSQL", ErrDown)
	}
	return nil
}

// reload makes a cluster client read the slots' masters again (in the
// background): after a failover its map names a master that is gone
// until it does, and by itself it reads the map again only every 10s.
func (f *Redis) reload(ctx context.Context) {
	if c, ok := f.rdb.(*redis.ClusterClient); ok {
		c.ReloadState(ctx)
	}
}

// node returns the run_id of the server that serves the front door's keys
// (the master of their slot on Redis Cluster); "" for a client of another
// kind, whose server is then not compared.
func (f *Redis) node(ctx context.Context) (string, error) {
	var c *redis.Client
	switch rdb := f.rdb.(type) {
	case *redis.Client:
		c = rdb
	case *redis.ClusterClient:
		var err error
		if c, err = rdb.MasterForKey(ctx, f.keys[keyMeta]); err != nil {
			return "", err
		}
	default:
		return "", nil
	}
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(info, "\n") {
		if id, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
			return id, nil
		}
	}
	return "", errors.New("front door: INFO server names no run_id")
}

// Recover brings a front door that answered [ErrDown] back, once Redis
// answers: when [Redis.Built] says its keys are gone or served by another
// server, it calls quiesce, which must return once every reservation made
// before the loss has reached PostgreSQL (clicks in flight published,
// queued order messages consumed), then rebuilds the keys from load's
// image (normally [LoadImage]) with [Redis.Rebuild]. It returns whether it
// rebuilt; it tries again until ctx ends (its error then) or quiesce
// fails. Clicks meanwhile must be answered ErrDown by the caller.
func (f *Redis) Recover(ctx context.Context, quiesce func(context.Context) error, load func(context.Context) (Image, error), log *slog.Logger) (rebuilt bool, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for {
		ok, err := f.Built(ctx)
		if err == nil && ok {
			return false, nil // not lost after all (a connection blip)
		}
		if err == nil {
			if err := quiesce(ctx); err != nil {
				return false, err
			}
			img, lerr := load(ctx)
			if err = lerr; err == nil {
				err = f.Rebuild(ctx, img, time.Now().Add(-time.Second))
			}
			if err == nil {
				log.Warn("front door rebuilt from PostgreSQL", "reservations", img.Reservations())
				return true, nil
			}
			log.Warn("front door rebuild failed; trying again", "error", err)
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Reservations is the number of reservations the image holds (held or
// released), for the rebuild's log line.
func (img Image) Reservations() int { return len(img.resv) }

// Available reads the per-bucket stock counters only (not the held
// reservations): one HGETALL, cheap enough for the operator page's
// sampling. A field it cannot parse reads as 0.
func (f *Redis) Available(ctx context.Context) ([]int64, error) {
	stock, err := f.rdb.HGetAll(ctx, f.keys[keyStock]).Result()
	if err != nil {
		return nil, err
	}
	out := make([]int64, f.buckets)
	for k, v := range stock {
		b, err1 := strconv.Atoi(k)
		n, err2 := strconv.ParseInt(v, 10, 64)
		if err1 == nil && err2 == nil && b >= 0 && b < len(out) {
			out[b] = n
		}
	}
	return out, nil
}
