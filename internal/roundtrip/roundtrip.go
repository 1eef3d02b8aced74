// Package roundtrip counts the round trips a pgx connection makes: every
// query (BEGIN and COMMIT included), every batch and every prepare. The
// benchmark program reports them per order and a test holds the order
// transaction to one.
package roundtrip

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// Counter is a pgx tracer (ConnConfig.Tracer) that counts round trips.
// It is safe for concurrent use by every connection of a pool.
type Counter struct{ n atomic.Int64 }

// Load returns the count so far.
func (c *Counter) Load() int64 { return c.n.Load() }

// Store sets the count, e.g. to 0 before a measured call.
func (c *Counter) Store(v int64) { c.n.Store(v) }

// TraceQueryStart counts a query.
func (c *Counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

// TraceQueryEnd does nothing.
func (c *Counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart counts a batch: one round trip for all its statements.
func (c *Counter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}

// TraceBatchQuery does nothing.
func (c *Counter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd does nothing.
func (c *Counter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TracePrepareStart counts a prepare.
func (c *Counter) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	c.n.Add(1)
	return ctx
}

// TracePrepareEnd does nothing.
func (c *Counter) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}
