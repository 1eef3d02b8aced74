package otelseckill

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckillkit/seckill/inventory"
)

// inventoryObserver is the hooks of an inventory.Observer (see observer):
// counters by result and an event on the caller's span.
type inventoryObserver struct {
	allocations metric.Int64Counter
	releases    metric.Int64Counter
}

// observer is the inventory.Observer of o's hooks.
func (o *inventoryObserver) observer() inventory.Observer {
	return inventory.Observer{AllocateEnd: o.AllocateEnd, ReleaseEnd: o.ReleaseEnd}
}

func newInventoryObserver(meter metric.Meter) (*inventoryObserver, error) {
	o := &inventoryObserver{}
	var err error
	if o.allocations, err = meter.Int64Counter(MetricAllocations, metric.WithUnit("{allocation}"),
		metric.WithDescription("Classified inventory allocations by result and bucket, per attempt.")); err != nil {
		return nil, fmt.Errorf("otelseckill: %w", err)
	}
	if o.releases, err = meter.Int64Counter(MetricReleases, metric.WithUnit("{release}"),
		metric.WithDescription("Classified inventory releases by result, per attempt.")); err != nil {
		return nil, fmt.Errorf("otelseckill: %w", err)
	}
	return o, nil
}

// allocateResult names an allocation's result.
func allocateResult(err error) string {
	switch {
	case err == nil:
		return "allocated"
	case errors.Is(err, inventory.ErrSoldOut):
		return "sold_out"
	case errors.Is(err, inventory.ErrAlreadyApplied):
		return "already_applied"
	case errors.Is(err, inventory.ErrNotOnSale):
		return "not_on_sale"
	case errors.Is(err, inventory.ErrUnknownBucket), errors.Is(err, inventory.ErrUnknownSKU):
		return "unknown_bucket"
	}
	return "error"
}

// releaseResult names a release's result.
func releaseResult(err error) string {
	switch {
	case err == nil:
		return "released"
	case errors.Is(err, inventory.ErrNotAllocated):
		return "not_allocated"
	case errors.Is(err, inventory.ErrAlreadyApplied):
		return "already_applied"
	case errors.Is(err, inventory.ErrInconsistent):
		return "inconsistent"
	}
	return "error"
}

// AllocateEnd counts the allocation and adds an event to ctx's span.
func (o *inventoryObserver) AllocateEnd(ctx context.Context, e inventory.StockEvent) {
	result := AttrInventoryResult.String(allocateResult(e.Err))
	o.allocations.Add(ctx, 1, metric.WithAttributes(result, AttrInventoryBucket.Int(int(e.Bucket))))
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent("inventory.allocate", trace.WithAttributes(result,
			AttrInventoryBucket.Int(int(e.Bucket)), AttrActivityID.Int64(e.ActivityID), AttrSKUID.Int64(e.SKUID),
			AttrReservationID.String(e.ReservationID.String()), AttrQuantity.Int(int(e.Quantity))))
	}
}

// ReleaseEnd counts the release and adds an event to ctx's span.
func (o *inventoryObserver) ReleaseEnd(ctx context.Context, e inventory.StockEvent) {
	result := AttrInventoryResult.String(releaseResult(e.Err))
	o.releases.Add(ctx, 1, metric.WithAttributes(result))
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		attrs := []attribute.KeyValue{result, AttrReservationID.String(e.ReservationID.String())}
		if e.Err == nil {
			attrs = append(attrs, AttrInventoryBucket.Int(int(e.Bucket)), AttrActivityID.Int64(e.ActivityID),
				AttrSKUID.Int64(e.SKUID), AttrQuantity.Int(int(e.Quantity)))
		}
		span.AddEvent("inventory.release", trace.WithAttributes(attrs...))
	}
}
