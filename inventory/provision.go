package inventory

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/pgtx"
)

// maxBuckets is the largest bucket count a SKU may be split into; bucket
// numbers run from 0 to maxBuckets-1.
const maxBuckets = 256

// maxTokens is the largest stock a SKU may be provisioned with as tokens
// (one row per unit).
const maxTokens = 10_000_000

// SKU identifies a SKU's stock and how it is split: the input of
// [Store.Provision].
type SKU struct {
	ActivityID int64 // > 0
	SKUID      int64 // > 0
	// Stock is the planned total, >= 0.
	Stock int32
	// Buckets is the number of buckets, 1 to 256. 1 is the plain
	// single-row case (bucket 0 only).
	Buckets int16
	// Tokens provisions the stock as inventory tokens, one row per unit
	// (at most 10,000,000), instead of counters in buckets: an allocation
	// claims free tokens with FOR UPDATE SKIP LOCKED, so concurrent
	// allocations of one SKU never wait for one another, and a release
	// frees them (see "Buckets or tokens" in the package doc). Buckets
	// must be 1: the reservations and the ledger rows of a token SKU name
	// bucket 0.
	Tokens bool
}

func (k SKU) validate() error {
	switch {
	case k.ActivityID <= 0:
		return invalid("ActivityID", "must be positive")
	case k.SKUID <= 0:
		return invalid("SKUID", "must be positive")
	case k.Stock < 0:
		return invalid("Stock", "must not be negative")
	case k.Buckets < 1 || k.Buckets > maxBuckets:
		return invalid("Buckets", fmt.Sprintf("must be between 1 and %d", maxBuckets))
	case k.Tokens && k.Buckets != 1:
		return invalid("Buckets", "must be 1 with Tokens")
	case k.Tokens && k.Stock > maxTokens:
		return invalid("Stock", fmt.Sprintf("must be at most %d with Tokens (one row per unit)", maxTokens))
	}
	return nil
}

// Provisioned is the result of [Store.Provision].
type Provisioned struct {
	// Created is true when this call created the SKU and its buckets and
	// false when the identical split already existed (nothing written).
	Created bool
	// Buckets is the number of bucket rows this call inserted (0 when not
	// Created, and for token stock).
	Buckets int
}

// bucketStock returns how much of stock bucket b (0-based) of n buckets
// gets: stock/n, plus one for the first stock%n buckets. It is the split
// [Store.Provision] writes. A negative stock, a bucket count outside
// 1..256 or a bucket outside 0..n-1 gives a *Error
// ([ErrInvalidArgument]), never a panic.
func bucketStock(stock int32, n int16, b int16) (int32, error) {
	switch {
	case stock < 0:
		return 0, invalid("Stock", "must not be negative")
	case n < 1 || n > maxBuckets:
		return 0, invalid("Buckets", fmt.Sprintf("must be between 1 and %d", maxBuckets))
	case b < 0 || b >= n:
		return 0, invalid("Bucket", fmt.Sprintf("must be between 0 and %d", n-1))
	}
	q, r := stock/int32(n), stock%int32(n)
	if int32(b) < r {
		return q + 1, nil
	}
	return q, nil
}

// Provision splits a SKU's planned stock into k.Buckets buckets (the
// remainder spread over the first buckets, stock/n each, plus one for the first stock%n) and writes one
// PROVISION ledger row per bucket, all in one statement: either everything
// is written or nothing.
//
// With k.Tokens it writes one free token row per unit instead of the
// buckets, and one PROVISION row (bucket 0).
//
// It is idempotent: when the SKU already exists with the same stock,
// bucket count and mode (buckets or tokens) it writes nothing and returns Created false ("already
// provisioned"); with a different stock, bucket count or mode it returns a
// *Error (matching [ErrProvisionConflict]) and writes
// nothing. Bad input gives a *Error before anything is sent.
//
// db may be a pool, a connection or a transaction. In a Read Committed
// transaction (or on a pool) a concurrent first provisioning of the same SKU
// is resolved by running the statement again (at most three times).
func (s *Store) Provision(ctx context.Context, db pgtx.Querier, k SKU) (_ Provisioned, err error) {
	defer s.fail.Explain(&err)
	if db == nil {
		return Provisioned{}, nilHandle("db")
	}
	if err := k.validate(); err != nil {
		return Provisioned{}, err
	}
	for range 3 {
		var (
			created bool
			stock   int32
			buckets int16
			tokens  bool
			n       int
		)
		err := db.QueryRow(ctx, s.sql.provision, k.ActivityID, k.SKUID, k.Stock, k.Buckets, k.Tokens).Scan(&created, &stock, &buckets, &tokens, &n)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // a concurrent provisioning committed after our snapshot
		}
		if err != nil {
			return Provisioned{}, fmt.Errorf("inventory: provision activity %d sku %d: %w", k.ActivityID, k.SKUID, err)
		}
		if !created && (stock != k.Stock || buckets != k.Buckets || tokens != k.Tokens) {
			e := &Error{Err: ErrProvisionConflict,
				ActivityID: k.ActivityID, SKUID: k.SKUID,
				ExistingStock: stock, ExistingBuckets: buckets,
				RequestedStock: k.Stock, RequestedBuckets: k.Buckets,
			}
			if tokens != k.Tokens {
				e.Field, e.Found, e.Asked = "token_stock", stockMode(tokens), stockMode(k.Tokens)
			}
			return Provisioned{}, e
		}
		if created {
			s.log.InfoContext(ctx, "inventory: provisioned", "activity_id", k.ActivityID, "sku_id", k.SKUID,
				"stock", k.Stock, "buckets", k.Buckets, "tokens", k.Tokens)
		}
		return Provisioned{Created: created, Buckets: n}, nil
	}
	return Provisioned{}, fmt.Errorf("inventory: provision activity %d sku %d: %w", k.ActivityID, k.SKUID, ErrConcurrentInsert)
}

// stockMode names how a SKU's stock is kept: "tokens" or "buckets".
func stockMode(tokens bool) string {
	if tokens {
		return "tokens"
	}
	return "buckets"
}
