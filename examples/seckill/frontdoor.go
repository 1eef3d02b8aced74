package main

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill/inventory"
)

// The front door filters the crowd before anything reaches the broker:
// per-bucket counters, a one-per-user set and a state per reservation. It
// is Redis in a real deployment (redisfront.go) and an in-memory stand-in
// with -stack memory. PostgreSQL remains the source of truth, so nothing a
// front door gets wrong can oversell.

var (
	errFrontSoldOut  = errors.New("sold out")
	errAlreadyBought = errors.New("already reserved by this user")
	errSaleClosed    = errors.New("the sale is not open")
	// errFrontDoorDown: the front door cannot answer now (Redis down, or
	// restarted empty and being rebuilt from PostgreSQL); try again.
	errFrontDoorDown = errors.New("front door unavailable, try again")
)

// reservation is what the front door hands to the queue for one purchase.
type reservation struct {
	RequestID     uuid.UUID
	ReservationID uuid.UUID
	OrderID       int64
	UserID        int64
	Bucket        int16
	ReservedAt    time.Time
}

// releaseResult is what a release came to.
type releaseResult int

const (
	released        releaseResult = iota // the unit went back to its bucket
	releasedAlready                      // released before: nothing changed
	releaseUnknown                       // not a reservation of this front door: nothing changed
)

// frontState is a front door's view, for the audit and the reconciliation.
type frontState struct {
	Available []int64             // per bucket
	Held      map[uuid.UUID]int16 // reservation → bucket, while held (not released)
	Drift     []int64             // per bucket: units added on purpose beyond PostgreSQL's (FrontDrift)
}

// frontDoor is what the service needs of a front door.
type frontDoor interface {
	// Name says what it is, for the report.
	Name() string
	// Reserve takes one unit for user from the bucket inventory.PickBucket
	// chooses, or the next bucket with stock; errFrontSoldOut,
	// errAlreadyBought, errSaleClosed or errFrontDoorDown otherwise.
	Reserve(ctx context.Context, user int64) (reservation, error)
	// Release gives a reservation's unit back, once: the events that
	// trigger it arrive at least once. forgetUser also drops the buyer
	// from the one-per-user set (the click was never queued).
	Release(ctx context.Context, id uuid.UUID, forgetUser int64) (releaseResult, error)
	// Forget drops a buyer from the one-per-user set, as a failover that
	// lost recent writes would.
	Forget(ctx context.Context, user int64) error
	// AddDrift makes the front door believe in extra units beyond
	// PostgreSQL's, spread over the buckets (PostgreSQL refuses them).
	AddDrift(ctx context.Context, extra int32) error
	// ReservationOf returns the reservation made for a request.
	ReservationOf(ctx context.Context, requestID uuid.UUID) (uuid.UUID, bool, error)
	// State reads the counters and the held reservations.
	State(ctx context.Context) (frontState, error)
}

// memFront is the in-memory front door of -stack memory.
type memFront struct {
	mu        sync.Mutex
	available []int32                 // per bucket
	drift     []int64                 // per bucket
	buyers    map[int64]uuid.UUID     // user → reservation
	held      map[uuid.UUID]int16     // reservation → bucket, while held
	released  map[uuid.UUID]bool      // reservations given back (idempotency)
	requests  map[uuid.UUID]uuid.UUID // request → reservation
	nextOrder func() int64            // order id generator
}

func newMemFront(bucketStock []int32, nextOrder func() int64) *memFront {
	return &memFront{
		available: append([]int32(nil), bucketStock...),
		drift:     make([]int64, len(bucketStock)),
		buyers:    map[int64]uuid.UUID{},
		held:      map[uuid.UUID]int16{},
		released:  map[uuid.UUID]bool{},
		requests:  map[uuid.UUID]uuid.UUID{},
		nextOrder: nextOrder,
	}
}

func (f *memFront) Name() string { return "memory (in-process stand-in for Redis)" }

func (f *memFront) Reserve(_ context.Context, user int64) (reservation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.buyers[user]; ok {
		return reservation{}, errAlreadyBought
	}
	n := len(f.available)
	start, err := inventory.PickBucket(strconv.FormatInt(user, 10), n)
	if err != nil {
		return reservation{}, err
	}
	for i := range n {
		b := (int(start) + i) % n
		if f.available[b] == 0 {
			continue
		}
		f.available[b]--
		r := reservation{
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
	return reservation{}, errFrontSoldOut
}

func (f *memFront) Release(_ context.Context, id uuid.UUID, forgetUser int64) (releaseResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.released[id] {
		return releasedAlready, nil
	}
	b, ok := f.held[id]
	if !ok {
		return releaseUnknown, nil // not ours (another process's front door)
	}
	f.released[id] = true
	delete(f.held, id)
	f.available[b]++
	if forgetUser != 0 && f.buyers[forgetUser] == id {
		delete(f.buyers, forgetUser)
	}
	return released, nil
}

func (f *memFront) Forget(_ context.Context, user int64) error {
	f.mu.Lock()
	delete(f.buyers, user)
	f.mu.Unlock()
	return nil
}

func (f *memFront) AddDrift(_ context.Context, extra int32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := int32(0); i < extra; i++ {
		b := int(i) % len(f.available)
		f.available[b]++
		f.drift[b]++
	}
	return nil
}

func (f *memFront) ReservationOf(_ context.Context, requestID uuid.UUID) (uuid.UUID, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id, ok := f.requests[requestID]
	return id, ok, nil
}

func (f *memFront) State(context.Context) (frontState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := frontState{Available: make([]int64, len(f.available)), Held: make(map[uuid.UUID]int16, len(f.held)),
		Drift: append([]int64(nil), f.drift...)}
	for i, a := range f.available {
		st.Available[i] = int64(a)
	}
	for id, b := range f.held {
		st.Held[id] = b
	}
	return st, nil
}

// totalAvailable sums a state's per-bucket counters.
func (st frontState) totalAvailable() int64 {
	var n int64
	for _, a := range st.Available {
		n += a
	}
	return n
}
