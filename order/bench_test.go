package order_test

import (
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/pgtx"
)

// BenchmarkCreate: one transaction per order (BEGIN, Create, COMMIT).
func BenchmarkCreate(b *testing.B) {
	tb := setup(b)
	ins := make([]order.NewOrder, b.N)
	for i := range ins {
		ins[i] = newOrder(int64(i + 1))
	}
	b.ResetTimer()
	for i := range b.N {
		err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
			_, err := tb.store.Create(tb.ctx, tx, ins[i])
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCreateParallel: Create from GOMAXPROCS goroutines, distinct users.
func BenchmarkCreateParallel(b *testing.B) {
	tb := setup(b)
	var user atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			in := newOrder(user.Add(1))
			err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
				_, err := tb.store.Create(tb.ctx, tx, in)
				return err
			})
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkQueueCreate100: 100 orders per batch in one transaction;
// reports ns per order.
func BenchmarkQueueCreate100(b *testing.B) {
	tb := setup(b)
	user := int64(0)
	b.ResetTimer()
	for n := 0; n < b.N; n += 100 {
		err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
			batch := &pgx.Batch{}
			res := make([]order.Result, 100)
			for i := range res {
				user++
				if err := tb.store.QueueCreate(batch, newOrder(user), &res[i], pgtx.Return); err != nil {
					return err
				}
			}
			return tx.SendBatch(tb.ctx, batch).Close()
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTransitionOrder: CREATED -> PAID, one auto-committed statement
// per order.
func BenchmarkTransitionOrder(b *testing.B) {
	tb := setup(b)
	ids := make([]int64, b.N)
	for start := 0; start < b.N; start += 500 {
		err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
			batch := &pgx.Batch{}
			res := make([]order.Result, min(500, b.N-start))
			for i := range res {
				if err := tb.store.QueueCreate(batch, newOrder(int64(start+i+1)), &res[i], pgtx.Return); err != nil {
					return err
				}
			}
			if err := tx.SendBatch(tb.ctx, batch).Close(); err != nil {
				return err
			}
			for i := range res {
				ids[start+i] = res[i].Order.OrderID
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := range b.N {
		res, err := tb.store.TransitionOrder(tb.ctx, tb.pool, order.Transition{OrderID: ids[i], To: order.StatusPaid})
		if err != nil || !res.Changed {
			b.Fatal(res, err)
		}
	}
}
