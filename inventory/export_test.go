package inventory

import (
	"context"
	"errors"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/pgtx"
)

// Test-only access to the package's unexported limits, defaults, keys and
// state-machine helpers (they were exported before v1; the tests keep
// checking them).

const (
	MaxBuckets        = maxBuckets
	MaxCodeLength     = maxCodeLength
	MaxEvidenceLength = maxEvidenceLength

	DefaultAllocateReason    = defaultAllocateReason
	DefaultReleaseReason     = defaultReleaseReason
	DefaultExpireCode        = defaultExpireCode
	DefaultRebalanceOperator = defaultRebalanceOperator
	DefaultRebalanceReason   = defaultRebalanceReason

	LedgerAllocate  = "ALLOCATE"
	LedgerRelease   = "RELEASE"
	LedgerAdjust    = "ADJUST"
	LedgerProvision = "PROVISION"

	FindingBucketConservation    = findingBucketConservation
	FindingNegative              = findingNegative
	FindingSKUTotal              = findingSKUTotal
	FindingBucketCount           = findingBucketCount
	FindingReplayAvailable       = findingReplayAvailable
	FindingReplayAllocated       = findingReplayAllocated
	FindingReplayTotal           = findingReplayTotal
	FindingDuplicateAllocate     = findingDuplicateAllocate
	FindingDuplicateRelease      = findingDuplicateRelease
	FindingOrphanRelease         = findingOrphanRelease
	FindingReleaseMismatch       = findingReleaseMismatch
	FindingMissingAllocate       = findingMissingAllocate
	FindingMissingRelease        = findingMissingRelease
	FindingLeakedAllocation      = findingLeakedAllocation
	FindingAdjustWithoutEvidence = findingAdjustWithoutEvidence
	FindingTokenClaim            = findingTokenClaim
)

var (
	AllocateKey         = allocateKey
	ReleaseKey          = releaseKey
	AdjustKey           = adjustKey
	LegacyAdjustKey     = legacyAdjustKey
	BucketStock         = bucketStock
	CanChangeSale       = canChangeSale
	CanTransition       = canTransition
	AllowedFrom         = allowedFrom
	ReservationStatuses = reservationStatuses
	SaleStatuses        = saleStatuses
)

// ValidStatus reports whether s is a defined reservation status.
func ValidStatus(s ReservationStatus) bool { return s.valid() }

// LedgerTypeCodes returns every ledger type's code in ascending order.
func LedgerTypeCodes() []int {
	var out []int
	for _, t := range ledgerTypeSet.Values() {
		out = append(out, int(t))
	}
	return out
}

// LedgerTypeName returns the name of ledger type code, e.g. "ADJUST".
func LedgerTypeName(code int) string { return ledgerTypeSet.Name(ledgerType(code)) }

// SchemaOf returns the schema s works in.
func SchemaOf(s *Store) string { return s.schema }

// Allocation returns the Allocation of r's stock: its bucket, quantity and
// buyer, with the given order id (0: none) and message (uuid.Nil:
// FirstMessageID). (Reservation.Allocation before v1; services build the
// Allocation from their seckill.Request.)
func (r Reservation) Allocation(orderID int64, messageID uuid.UUID) Allocation {
	if messageID == uuid.Nil {
		messageID = r.FirstMessageID
	}
	return Allocation{Request: seckill.Request{
		ReservationID: r.ReservationID, ActivityID: r.ActivityID, SKUID: r.SKUID,
		Bucket: r.Bucket, Quantity: r.Quantity, UserID: r.UserID,
		OrderID: orderID, MessageID: messageID,
	}}
}

// BucketsOf reads a SKU's buckets through Store.Stock; an unknown SKU gives
// none (Store.Buckets before v1).
func BucketsOf(s *Store, ctx context.Context, db pgtx.Querier, activityID, skuID int64) ([]Bucket, error) {
	st, err := s.Stock(ctx, db, activityID, skuID)
	if errors.Is(err, ErrUnknownSKU) {
		return nil, nil
	}
	return st.Buckets, err
}

// ValidateSKU is Provision's check of its input.
func ValidateSKU(k SKU) error { return k.validate() }

// MaxTokens is the largest stock of a token SKU.
const MaxTokens = maxTokens
