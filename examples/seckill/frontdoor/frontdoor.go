package frontdoor

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill/inventory"
)

// The refusals of [Door.Reserve] (and [ErrDown] of every method).
var (
	// ErrSoldOut: no bucket has a unit left.
	ErrSoldOut = errors.New("sold out")
	// ErrAlreadyBought: the user holds a reservation already (one per user).
	ErrAlreadyBought = errors.New("already reserved by this user")
	// ErrSaleClosed: the sale has not started or is over.
	ErrSaleClosed = errors.New("the sale is not open")
	// ErrDown: the front door cannot answer now (Redis down, or
	// restarted empty and being rebuilt from PostgreSQL); try again.
	ErrDown = errors.New("front door unavailable, try again")
)

// Reservation is what the front door hands to the queue for one purchase.
type Reservation struct {
	RequestID     uuid.UUID
	ReservationID uuid.UUID
	OrderID       int64
	UserID        int64
	Bucket        int16
	ReservedAt    time.Time
}

// ReleaseResult is what a release came to.
type ReleaseResult int

// What a release came to.
const (
	Released        ReleaseResult = iota // the unit went back to its bucket
	ReleasedAlready                      // released before: nothing changed
	ReleaseUnknown                       // not a reservation of this front door: nothing changed
)

// State is a front door's view, for the audit and the reconciliation.
type State struct {
	Available []int64             // per bucket
	Held      map[uuid.UUID]int16 // reservation → bucket, while held (not released)
	Drift     []int64             // per bucket: units added on purpose beyond PostgreSQL's (FrontDrift)
}

// Counters are a front door's counters without its reservations: what
// [Door.Counters] reads in time that does not grow with the sale.
type Counters struct {
	Available []int64 // per bucket
	Drift     []int64 // per bucket: units added on purpose beyond PostgreSQL's (FrontDrift)
	Held      int64   // reservations held (not released), all buckets
}

// Door is what the service needs of a front door.
type Door interface {
	// Name says what it is, for the report.
	Name() string
	// Reserve takes one unit for user from the bucket inventory.PickBucket
	// chooses, or the next bucket with stock; ErrSoldOut,
	// ErrAlreadyBought, ErrSaleClosed or ErrDown otherwise.
	Reserve(ctx context.Context, user int64) (Reservation, error)
	// Release gives a reservation's unit back, once: the events that
	// trigger it arrive at least once. forgetUser also drops the buyer
	// from the one-per-user set (the click was never queued).
	Release(ctx context.Context, id uuid.UUID, forgetUser int64) (ReleaseResult, error)
	// Forget drops a buyer from the one-per-user set, as a failover that
	// lost recent writes would.
	Forget(ctx context.Context, user int64) error
	// AddDrift makes the front door believe in extra units beyond
	// PostgreSQL's, spread over the buckets (PostgreSQL refuses them).
	AddDrift(ctx context.Context, extra int32) error
	// ReservationOf returns the reservation made for a request.
	ReservationOf(ctx context.Context, requestID uuid.UUID) (uuid.UUID, bool, error)
	// State reads the counters and the held reservations: its cost
	// follows the sale's reservations.
	State(ctx context.Context) (State, error)
	// Counters reads the counters and how many reservations are held,
	// not which: its cost follows the number of buckets only.
	Counters(ctx context.Context) (Counters, error)
}

// Memory is the in-memory front door of -stack memory.
type Memory struct {
	mu        sync.Mutex
	available []int32                 // per bucket
	drift     []int64                 // per bucket
	buyers    map[int64]uuid.UUID     // user → reservation
	held      map[uuid.UUID]int16     // reservation → bucket, while held
	released  map[uuid.UUID]bool      // reservations given back (idempotency)
	requests  map[uuid.UUID]uuid.UUID // request → reservation
	nextOrder func() int64            // order id generator
}

// NewMemory returns an in-memory front door holding bucketStock[b] units
// in bucket b; nextOrder hands out the order ids.
func NewMemory(bucketStock []int32, nextOrder func() int64) *Memory {
	return &Memory{
		available: append([]int32(nil), bucketStock...),
		drift:     make([]int64, len(bucketStock)),
		buyers:    map[int64]uuid.UUID{},
		held:      map[uuid.UUID]int16{},
		released:  map[uuid.UUID]bool{},
		requests:  map[uuid.UUID]uuid.UUID{},
		nextOrder: nextOrder,
	}
}

// Name says what it is, for the report.
func (f *Memory) Name() string { return "memory (in-process stand-in for Redis)" }

// Reserve implements [Door].
func (f *Memory) Reserve(_ context.Context, user int64) (Reservation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.buyers[user]; ok {
		return Reservation{}, ErrAlreadyBought
	}
	n := len(f.available)
	start, err := inventory.PickBucket(strconv.FormatInt(user, 10), n)
	if err != nil {
		return Reservation{}, err
	}
	for i := range n {
		b := (int(start) + i) % n
		if f.available[b] == 0 {
			continue
		}
		f.available[b]--
		r := Reservation{
			RequestID:     uuid.Must(uuid.NewV7()),
			ReservationID: uuid.Must(uuid.NewV7()),
			OrderID:       f.nextOrder(),
			UserID:        user,
			Bucket:        int16(b),
			ReservedAt:    time.Now(),
		}
		f.buyers[user] = r.ReservationID
		f.held[r.ReservationID] = int16(b)
		f.requests[r.RequestID] = r.ReservationID
		return r, nil
	}
	return Reservation{}, ErrSoldOut
}

// Release implements [Door].
func (f *Memory) Release(_ context.Context, id uuid.UUID, forgetUser int64) (ReleaseResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.released[id] {
		return ReleasedAlready, nil
	}
	b, ok := f.held[id]
	if !ok {
		return ReleaseUnknown, nil // not ours (another process's front door)
	}
	f.released[id] = true
	delete(f.held, id)
	f.available[b]++
	if forgetUser != 0 && f.buyers[forgetUser] == id {
		delete(f.buyers, forgetUser)
	}
	return Released, nil
}

// Forget implements [Door].
func (f *Memory) Forget(_ context.Context, user int64) error {
	f.mu.Lock()
	delete(f.buyers, user)
	f.mu.Unlock()
	return nil
}

// AddDrift implements [Door].
func (f *Memory) AddDrift(_ context.Context, extra int32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := int32(0); i < extra; i++ {
		b := int(i) % len(f.available)
		f.available[b]++
		f.drift[b]++
	}
	return nil
}

// ReservationOf implements [Door].
func (f *Memory) ReservationOf(_ context.Context, requestID uuid.UUID) (uuid.UUID, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id, ok := f.requests[requestID]
	return id, ok, nil
}

// State implements [Door].
func (f *Memory) State(context.Context) (State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := State{Available: make([]int64, len(f.available)), Held: make(map[uuid.UUID]int16, len(f.held)),
		Drift: append([]int64(nil), f.drift...)}
	for i, a := range f.available {
		st.Available[i] = int64(a)
	}
	for id, b := range f.held {
		st.Held[id] = b
	}
	return st, nil
}

// Counters implements [Door].
func (f *Memory) Counters(context.Context) (Counters, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := Counters{Available: make([]int64, len(f.available)), Drift: append([]int64(nil), f.drift...), Held: int64(len(f.held))}
	for i, a := range f.available {
		c.Available[i] = int64(a)
	}
	return c, nil
}

// TotalAvailable sums a state's per-bucket counters.
func (st State) TotalAvailable() int64 {
	var n int64
	for _, a := range st.Available {
		n += a
	}
	return n
}
