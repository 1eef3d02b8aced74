// Package orderid is the example service's order id scheme: positive,
// time-ordered BIGINT ids (41 bits of milliseconds since an epoch, 22 low
// bits) and the order numbers derived from them. The order package takes
// whatever OrderID and OrderNo the service gives it; this is one scheme a
// service can copy, not part of the library.
package orderid

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"time"
)

// EpochUnixMilli is the zero of the millisecond clock inside order ids:
// 2024-01-01T00:00:00Z in Unix milliseconds. 41 bits of milliseconds reach
// into 2093.
const EpochUnixMilli int64 = 1704067200000

const (
	idLowBits  = 22 // below the millisecond
	idSeqBits  = 12 // Generator: sequence within a millisecond
	idNodeBits = idLowBits - idSeqBits
	idMSMask   = 1<<41 - 1
)

// New returns a new positive, time-ordered BIGINT order id: the 41
// bits below the sign bit are milliseconds since [EpochUnixMilli], the 22
// low bits are random. Ids of different milliseconds sort by time, so inserts land
// at the right edge of the primary-key B-tree. It keeps no
// state and is safe for concurrent use.
//
// Two ids drawn in the same millisecond collide with probability 2^-22, so
// at k ids per millisecond about k²/2^23 collisions happen per millisecond
// (at 10,000 orders/s, one every ~100 s). A collision is never silent: the
// primary key rejects the insert and order.Store.Create returns
// order.ErrIDCollision;
// generate a new id and retry. Services with high rates should use an
// [Generator], which does not collide within a process.
func New() int64 {
	return At(time.Now(), rand.Uint64())
}

// At is New's deterministic core: the id of millisecond t with the given
// low bits (only the 22 lowest are used).
func At(t time.Time, low uint64) int64 {
	ms := t.UnixMilli() - EpochUnixMilli
	if ms < 0 {
		ms = 0
	}
	return (ms&idMSMask)<<idLowBits | int64(low&(1<<idLowBits-1))
}

// Generator makes order ids in the same layout as [New] (41 bits
// of milliseconds, 22 low bits) but strictly increasing and collision-free
// within the generator: the low bits are a 10-bit node number, chosen at
// random on first use, and a 12-bit sequence within the millisecond. When
// 4,096 ids are used up within a millisecond it borrows the next one.
// Two generators collide only if they drew the same node (1 in 1,024) and
// hand out the same sequence in the same millisecond; the primary key still
// catches that (order.ErrIDCollision). The zero value is ready to use and safe
// for concurrent use; keep one per process.
type Generator struct {
	mu     sync.Mutex
	inited bool
	node   int64
	lastMS int64
	seq    int64
}

// Next returns the next id.
func (g *Generator) Next() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.inited {
		g.node = int64(rand.Uint64() & (1<<idNodeBits - 1))
		g.inited = true
	}
	ms := max(time.Now().UnixMilli()-EpochUnixMilli, 0) & idMSMask
	switch {
	case ms > g.lastMS:
		g.lastMS = ms
		g.seq = 0
	case g.seq+1 < 1<<idSeqBits:
		g.seq++
	default: // sequence exhausted (or clock went back): borrow the next millisecond
		g.lastMS++
		g.seq = 0
	}
	return g.lastMS<<idLowBits | g.node<<idSeqBits | g.seq
}

// Time returns the millisecond encoded in an order id.
func Time(id int64) time.Time {
	return time.UnixMilli(EpochUnixMilli + id>>idLowBits).UTC()
}

// FormatNo returns the order number the example derives from an order
// id (order.NewOrder.OrderNo): "SK", the UTC date of the id, then the
// id in decimal, e.g. "SK20261130385781806788462873" (at most 29 of the
// column's 40 characters). The id's low bits carry no sequence count, so
// the number reveals no sales volume; equal ids give equal numbers, so a
// redelivered request derives the same order_no.
func FormatNo(id int64) string {
	return "SK" + Time(id).Format("20060102") + strconv.FormatInt(id, 10)
}
