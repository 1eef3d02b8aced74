package main

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill/inventory"
)

// The front door stands in for the Redis pre-reservation of a real
// deployment: per-bucket counters and a one-per-user set in memory. It
// filters the crowd; PostgreSQL remains the source of truth, so nothing it
// gets wrong can oversell.

var (
	errFrontSoldOut  = errors.New("sold out")
	errAlreadyBought = errors.New("already reserved by this user")
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

type frontDoor struct {
	mu        sync.Mutex
	available []int32                 // per bucket
	buyers    map[int64]uuid.UUID     // user → reservation
	held      map[uuid.UUID]int16     // reservation → bucket, while held
	released  map[uuid.UUID]bool      // reservations given back (idempotency)
	requests  map[uuid.UUID]uuid.UUID // request → reservation
	nextOrder func() (int64, error)   // order id generator

	reserved, rejectedSoldOut, rejectedDup, releases, duplicateReleases atomic.Int64
}

func newFrontDoor(bucketStock []int32, nextOrder func() (int64, error)) *frontDoor {
	return &frontDoor{
		available: append([]int32(nil), bucketStock...),
		buyers:    map[int64]uuid.UUID{},
		held:      map[uuid.UUID]int16{},
		released:  map[uuid.UUID]bool{},
		requests:  map[uuid.UUID]uuid.UUID{},
		nextOrder: nextOrder,
	}
}

// Reserve takes one unit for user from the bucket PickBucket chooses, or
// the next bucket with stock (the choice is recorded in the reservation and
// never changes afterwards).
func (f *frontDoor) Reserve(user int64) (reservation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.buyers[user]; ok {
		f.rejectedDup.Add(1)
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
		orderID, err := f.nextOrder()
		if err != nil {
			return reservation{}, err
		}
		f.available[b]--
		r := reservation{
			RequestID:     uuid.Must(uuid.NewV7()),
			ReservationID: uuid.Must(uuid.NewV7()),
			OrderID:       orderID,
			UserID:        user,
			Bucket:        int16(b),
			ReservedAt:    time.Now(),
		}
		f.buyers[user] = r.ReservationID
		f.held[r.ReservationID] = int16(b)
		f.requests[r.RequestID] = r.ReservationID
		f.reserved.Add(1)
		return r, nil
	}
	f.rejectedSoldOut.Add(1)
	return reservation{}, errFrontSoldOut
}

// Release gives a reservation's unit back to its bucket, once: the
// compensation events that trigger it are delivered at least once.
func (f *frontDoor) Release(id uuid.UUID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.released[id] {
		f.duplicateReleases.Add(1)
		return
	}
	b, ok := f.held[id]
	if !ok {
		return // not ours (another process's front door)
	}
	f.released[id] = true
	delete(f.held, id)
	f.available[b]++
	f.releases.Add(1)
}

// Available is the front door's view of the stock left.
func (f *frontDoor) Available() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var n int64
	for _, a := range f.available {
		n += int64(a)
	}
	return n
}

// Held is how many reservations the front door holds (not released).
func (f *frontDoor) Held() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.held)
}

// forget drops a buyer from the one-per-user set, as a front-door failover
// that lost recent writes would.
func (f *frontDoor) forget(user int64) {
	f.mu.Lock()
	delete(f.buyers, user)
	f.mu.Unlock()
}

// ReservationOf returns the reservation the front door made for a request.
func (f *frontDoor) ReservationOf(requestID uuid.UUID) (uuid.UUID, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id, ok := f.requests[requestID]
	return id, ok
}
