package pgtx_test

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/pgtx"
)

// BenchmarkRunInTxOneBatch: a transaction whose fn sends one batch of two
// inserts, with BEGIN in a round trip of its own and deferred into the
// batch (Options.DeferBegin), side by side.
func BenchmarkRunInTxOneBatch(b *testing.B) {
	bb := setup(b)
	id := 0
	for _, opts := range []pgtx.Options{{}, {DeferBegin: true}} {
		name := "eager"
		if opts.DeferBegin {
			name = "deferred"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				id += 2
				err := pgtx.RunInTx(bb.ctx, bb.pool, opts, func(tx pgx.Tx) error {
					batch := &pgx.Batch{}
					batch.Queue(`INSERT INTO `+bb.table+` VALUES ($1, 0)`, id)
					batch.Queue(`INSERT INTO `+bb.table+` VALUES ($1, 0)`, id+1)
					return tx.SendBatch(bb.ctx, batch).Close()
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRunBatch: the same two inserts sent with RunBatch (BEGIN, the
// batch and COMMIT in one round trip), with and without ResolveCommit
// (which adds the padded transaction id read to the pipeline).
func BenchmarkRunBatch(b *testing.B) {
	bb := setup(b)
	id := 0
	for _, opts := range []pgtx.Options{{}, {ResolveCommit: true}} {
		name := "plain"
		if opts.ResolveCommit {
			name = "resolve"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				id += 2
				batch := &pgx.Batch{}
				batch.Queue(`INSERT INTO `+bb.table+` VALUES ($1, 0)`, id)
				batch.Queue(`INSERT INTO `+bb.table+` VALUES ($1, 0)`, id+1)
				if err := pgtx.RunBatch(bb.ctx, bb.pool, opts, batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
