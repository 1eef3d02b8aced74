package order

import (
	"math/rand/v2"
	"strconv"
	"time"
)

// IDEpoch is the zero of the millisecond clock inside order ids
// (2024-01-01T00:00:00Z). 41 bits of milliseconds reach into 2093.
var IDEpoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

const idRandomBits = 22

// NewOrderID returns a new positive, time-ordered BIGINT order id: the 41
// high bits (below the sign bit) are milliseconds since [IDEpoch], the 22
// low bits are random. Ids of different milliseconds sort by time, so
// inserts land at the right edge of the primary-key B-tree (seed §8.3).
//
// Two ids generated in the same millisecond collide with probability
// 2^-22. A collision is never silent: the primary key (and uq_orders_order_no
// for the derived order number) rejects the second insert, and Create
// classifies it as [ErrIDCollision] — generate a new id and retry.
// NewOrderID is safe for concurrent use and keeps no state.
func NewOrderID() int64 {
	return orderIDAt(time.Now(), rand.Uint64())
}

func orderIDAt(t time.Time, random uint64) int64 {
	ms := t.Sub(IDEpoch).Milliseconds()
	if ms < 0 {
		ms = 0
	}
	ms &= 1<<41 - 1
	return ms<<idRandomBits | int64(random&(1<<idRandomBits-1))
}

// OrderIDTime returns the millisecond at which NewOrderID generated id.
func OrderIDTime(id int64) time.Time {
	return IDEpoch.Add(time.Duration(id>>idRandomBits) * time.Millisecond).UTC()
}

// FormatOrderNo returns the order number Create derives from an order id
// when NewOrder.OrderNo is empty: "SK" + the UTC date of the id +
// the id in decimal, e.g. "SK20261130" + "1234567890123456". At most 29
// characters (the column allows 40). Because the id's low bits are random
// the number reveals no sales volume, and equal ids give equal numbers, so
// a redelivered request derives the same order_no.
func FormatOrderNo(id int64) string {
	return "SK" + OrderIDTime(id).Format("20060102") + strconv.FormatInt(id, 10)
}
