package inventory

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/enum"
	"github.com/seckillkit/seckill/pgtx"
)

// SaleStatus is the sale status of a SKU (inventory_sku.sale_status). The
// values mirror the CHECK constraint ck_inventory_sku_sale_status.
// [Store.SetSaleStatus] allows, target <- from:
//
//	ON_SALE <- ON_SALE, PAUSED
//	PAUSED  <- ON_SALE, PAUSED
//	ENDED   <- ON_SALE, PAUSED
//
// ENDED is final; a change to the current status changes the window only.
type SaleStatus int16

// Sale statuses. [Store.AllocateBucket] takes stock only from an ON_SALE
// SKU inside its sale window.
const (
	// SaleOnSale: buyers may take stock (the default of a provisioned SKU).
	SaleOnSale SaleStatus = 10
	// SalePaused: temporarily closed; may go back to ON_SALE.
	SalePaused SaleStatus = 20
	// SaleEnded: closed for good; no transition leaves it.
	SaleEnded SaleStatus = 30
)

// saleStatuses returns every sale status in ascending order.
func saleStatuses() []SaleStatus { return saleStatusSet.Values() }

// String returns the status name, e.g. "ON_SALE".
func (s SaleStatus) String() string { return saleStatusSet.Name(s) }

var saleStatusSet = enum.New("SaleStatus", map[SaleStatus]string{
	SaleOnSale: "ON_SALE", SalePaused: "PAUSED", SaleEnded: "ENDED",
})

// saleTransitions: for every target, the statuses it may be entered from.
// A change to the current status is allowed (it changes the window only).
var saleTransitions = enum.Transitions[SaleStatus]{
	SaleOnSale: {SaleOnSale, SalePaused},
	SalePaused: {SaleOnSale, SalePaused},
	SaleEnded:  {SaleOnSale, SalePaused},
}

// canChangeSale reports whether a SKU may go from sale status from to to
// (the table at [SaleStatus]).
func canChangeSale(from, to SaleStatus) bool { return saleTransitions.Can(from, to) }

// SaleChange asks [Store.SetSaleStatus] to set a SKU's sale status and
// window.
type SaleChange struct {
	ActivityID, SKUID int64      // > 0
	To                SaleStatus // the new status; the current one is allowed (it changes the window only), see [SaleStatus]
	// StartsAt and EndsAt are the new sale window; zero means open on
	// that side. When both are set StartsAt must be before EndsAt.
	StartsAt, EndsAt time.Time
	// Operator (who, up to 128 characters) and Reason (why, up to 256)
	// are required; they go to the audit log with the time.
	Operator, Reason string
}

func (c SaleChange) validate() error {
	switch {
	case c.ActivityID <= 0:
		return invalid("ActivityID", "must be positive")
	case c.SKUID <= 0:
		return invalid("SKUID", "must be positive")
	case saleTransitions[c.To] == nil:
		return invalid("To", fmt.Sprintf("%s is not a sale status", c.To))
	case !c.StartsAt.IsZero() && !c.EndsAt.IsZero() && !c.StartsAt.Before(c.EndsAt):
		return invalid("EndsAt", "must be after StartsAt")
	}
	for _, f := range []struct {
		name, v string
		max     int
	}{{"Operator", c.Operator, 128}, {"Reason", c.Reason, 256}} {
		if err := checkText(f.name, f.v, f.max, true); err != nil {
			return err
		}
	}
	return nil
}

// SaleChanged is the result of [Store.SetSaleStatus]: the SKU's sale state
// before and after, and the audit log row. Announce it (for example with an
// outbox event in the same transaction) so the front door follows.
type SaleChanged struct {
	ActivityID, SKUID int64      // the SKU
	From, To          SaleStatus // the status before the change and after it
	StartsAt, EndsAt  time.Time  // the new window; zero: open
	Version           int64      // the SKU's sale_version after the change
	LogID             int64      // the inventory_sale_log row written
	Operator, Reason  string     // as given, recorded in the log row
	ChangedAt         time.Time  // the log row's created_at: the server time of the change's statement
}

// SetSaleStatus sets a SKU's sale status and window and writes the audit
// log row (operator, reason, time) in one statement, in the caller's
// transaction tx: put the announcement event in the same transaction. The
// SKU row is locked first and the transition decided on its latest status
// (see [SaleStatus]); the window is replaced as given (zero bounds are
// open). A change to the current status just replaces the window, and is
// logged too.
//
// Errors: [ErrUnknownSKU] (not provisioned); *Error
// ([ErrIllegalTransition]) from ENDED, nothing written; *Error
// for bad input, nothing sent. Allocations already running keep the state
// of their statement's snapshot; every later statement sees the change.
func (s *Store) SetSaleStatus(ctx context.Context, tx pgx.Tx, c SaleChange) (_ SaleChanged, err error) {
	defer s.fail.Explain(&err)
	if tx == nil {
		return SaleChanged{}, nilHandle("tx")
	}
	if err := c.validate(); err != nil {
		return SaleChanged{}, err
	}
	from := make([]int16, 0, 2)
	for _, f := range saleTransitions[c.To] {
		from = append(from, int16(f))
	}
	var starts, ends *time.Time
	if !c.StartsAt.IsZero() {
		starts = &c.StartsAt
	}
	if !c.EndsAt.IsZero() {
		ends = &c.EndsAt
	}
	var (
		cur     int16
		version *int64
		logID   *int64
		at      *time.Time
	)
	err = tx.QueryRow(ctx, s.sql.setSale, c.ActivityID, c.SKUID, int16(c.To), starts, ends, from, c.Operator, c.Reason).
		Scan(&cur, &version, &logID, &at)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return SaleChanged{}, fmt.Errorf("inventory: activity %d sku %d: %w", c.ActivityID, c.SKUID, ErrUnknownSKU)
	case err != nil:
		return SaleChanged{}, fmt.Errorf("inventory: set sale status of activity %d sku %d: %w", c.ActivityID, c.SKUID, err)
	case version == nil:
		return SaleChanged{}, &Error{Err: ErrIllegalTransition, ActivityID: c.ActivityID, SKUID: c.SKUID, From: SaleStatus(cur), To: c.To}
	}
	return SaleChanged{
		ActivityID: c.ActivityID, SKUID: c.SKUID, From: SaleStatus(cur), To: c.To,
		StartsAt: c.StartsAt, EndsAt: c.EndsAt, Version: *version, LogID: *logID,
		Operator: c.Operator, Reason: c.Reason, ChangedAt: *at,
	}, nil
}

// SaleLog returns a SKU's sale changes, oldest first, each as
// [Store.SetSaleStatus] returned it (Version included), except the window
// bounds, which are read back at the server's microsecond precision.
func (s *Store) SaleLog(ctx context.Context, db pgtx.Querier, activityID, skuID int64) (_ []SaleChanged, err error) {
	defer s.fail.Explain(&err)
	if db == nil {
		return nil, nilHandle("db")
	}
	rows, err := db.Query(ctx, s.sql.saleLog, activityID, skuID)
	if err != nil {
		return nil, fmt.Errorf("inventory: sale log: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (SaleChanged, error) {
		var c SaleChanged
		var from, to int16
		var starts, ends *time.Time
		err := row.Scan(&c.LogID, &c.ActivityID, &c.SKUID, &from, &to, &starts, &ends, &c.Operator, &c.Reason, &c.ChangedAt, &c.Version)
		c.From, c.To = SaleStatus(from), SaleStatus(to)
		if starts != nil {
			c.StartsAt = *starts
		}
		if ends != nil {
			c.EndsAt = *ends
		}
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("inventory: sale log: %w", err)
	}
	return out, nil
}
