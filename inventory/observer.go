package inventory

import (
	"context"

	"github.com/google/uuid"
)

// Observer receives the classified result of every allocation and
// release, for metrics such as the per-bucket success rate and the
// partial sell-out rate (a bucket sold out while others hold stock). It
// has the shape of every observer of this module (see pgtx.Observer): a
// struct of hook functions, the context first, then the event
// ([StockEvent] for both hooks). A nil hook does nothing, so an observer
// sets only the hooks it needs and keeps compiling when hooks are added;
// the zero Observer observes nothing.
//
// Both hooks fire once per execution of the statement — per attempt, not
// per commit. They run on the caller's goroutine while the caller's
// transaction is still open, right after the statement's result was
// classified (for the Queue forms: inside the batch's result callback):
// an allocation reported as a success can still be rolled back, and a
// transaction that pgtx.RunInTx retries reports its allocation again. Use
// them for what happens at the bucket (contention, sold-out and duplicate
// rates); count stock actually sold after your transaction committed
// (pgtx.Observer's TxEnd, your own code after RunInTx returned nil) or
// from the ledger. There is no start hook: the statement is one round
// trip (or part of the caller's batch), which pgx's own tracer times.
//
// The direct forms ([Store.AllocateBucket], [Store.ReleaseStock]) pass their
// ctx. The Queue forms pass context.Background(): pgx runs a batch's
// result callbacks without the context given to SendBatch. Errors of the
// connection or the server (no classified result) are not reported.
//
// The hooks must be fast and safe for concurrent use.
type Observer struct {
	// AllocateEnd reports one classified [Store.AllocateBucket] or
	// [Store.QueueAllocateBucket] result. Per attempt.
	AllocateEnd func(ctx context.Context, e StockEvent)
	// ReleaseEnd reports one classified [Store.ReleaseStock] or
	// [Store.QueueReleaseStock] result. Per attempt.
	ReleaseEnd func(ctx context.Context, e StockEvent)
}

func (o Observer) allocateEnd(ctx context.Context, e StockEvent) {
	if o.AllocateEnd != nil {
		o.AllocateEnd(ctx, e)
	}
}

func (o Observer) releaseEnd(ctx context.Context, e StockEvent) {
	if o.ReleaseEnd != nil {
		o.ReleaseEnd(ctx, e)
	}
}

// StockEvent describes one classified allocation (AllocateEnd) or release
// (ReleaseEnd).
type StockEvent struct {
	ReservationID uuid.UUID // the reservation the stock is allocated to, or whose allocation is released
	// ActivityID, SKUID, Bucket and Quantity are the allocation's: for an
	// allocation, as asked; for a release, those of the released
	// allocation, zero (Bucket -1) when Err is set and the release found
	// nothing it could read them from.
	ActivityID int64
	SKUID      int64 // see ActivityID
	Bucket     int16 // see ActivityID
	Quantity   int16 // see ActivityID
	Batch      bool  // the Queue form
	// Err is nil when the stock was taken or given back (in the still open
	// transaction), otherwise the classified error: test it with
	// errors.Is against [ErrSoldOut], [ErrAlreadyApplied], [ErrNotOnSale],
	// [ErrNotAllocated], [ErrInconsistent], …
	Err error
}
