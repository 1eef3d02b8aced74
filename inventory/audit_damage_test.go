package inventory_test

import (
	"cmp"
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inventory"
)

// damageEnv is one case of TestAuditsFindEachDamageAndOnlyIt: SKU (9,
// sku), the one the case damages, and its neighbour (10, sku), the same
// SKU id in another activity, provisioned alike.
type damageEnv struct {
	t   *testing.T
	tb  testBundle
	sku int64
}

// f is a finding of the damaged SKU (9, sku).
func (e damageEnv) f(kind string, bucket int, res uuid.UUID, expected, actual int64) inventory.Finding {
	return inventory.Finding{Kind: kind, ActivityID: 9, SKUID: e.sku, Bucket: bucket, ReservationID: res, Expected: expected, Actual: actual}
}

// nf is a finding of the neighbour (10, sku).
func (e damageEnv) nf(kind string, bucket int, res uuid.UUID, expected, actual int64) inventory.Finding {
	f := e.f(kind, bucket, res, expected, actual)
	f.ActivityID = 10
	return f
}

func (e damageEnv) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.tb.pool.Exec(e.tb.ctx, sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

// buy sells qty units of (activity, sku) from bucket in the order
// transaction: the reservation is ORDERED.
func (e damageEnv) buyIn(activity int64, bucket int16, qty int16) inventory.NewReservation {
	e.t.Helper()
	r := e.tb.newReservation(activity, e.sku, bucket)
	r.Quantity = qty
	if err := e.tb.buy(e.tb.ctx, r); err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e damageEnv) buy(bucket int16, qty int16) inventory.NewReservation {
	e.t.Helper()
	return e.buyIn(9, bucket, qty)
}

func (e damageEnv) release(r inventory.NewReservation) {
	e.t.Helper()
	if _, err := e.tb.releaseIn(r.ReservationID); err != nil {
		e.t.Fatal(err)
	}
}

// status sets r's status by hand (with the columns its CHECK constraints
// ask for), as a bug or a manual fix could.
func (e damageEnv) status(r inventory.NewReservation, s inventory.ReservationStatus) {
	e.t.Helper()
	e.exec(`UPDATE `+e.tb.table("inventory_reservation")+`
		   SET status = $2::smallint, order_id = CASE WHEN $2::smallint IN (0, 20) THEN NULL ELSE order_id END,
		       released_at = CASE WHEN $2::smallint = 40 THEN now() ELSE released_at END
		 WHERE reservation_id = $1`, r.ReservationID, int16(s))
}

// adjust adds delta units to bucket 0 of (9, sku) through AdjustStock,
// with its evidence, and returns the ledger id of its row.
func (e damageEnv) adjust(approval string, delta int32) int64 {
	e.t.Helper()
	var id int64
	if err := inTx(e.tb.ctx, e.tb.pool, func(tx pgx.Tx) error {
		le, err := e.tb.store.AdjustStock(e.tb.ctx, tx, inventory.Adjustment{ActivityID: 9, SKUID: e.sku, Bucket: 0, Delta: delta,
			Operator: "ops", ApprovalRef: approval, Reason: "RECOUNT"})
		id = le.LedgerID
		return err
	}); err != nil {
		e.t.Fatal(err)
	}
	return id
}

// orphanRelease moves r's ALLOCATE row to a reservation that does not
// exist: r is left with its RELEASE row only.
func (e damageEnv) orphanRelease(r inventory.NewReservation) {
	e.t.Helper()
	stranger := uuid.Must(uuid.NewV7())
	e.exec(`UPDATE `+e.tb.table("inventory_ledger")+` SET reservation_id = $2::uuid, idempotency_key = 'ALLOCATE:' || $2::uuid::text
		 WHERE reservation_id = $1 AND ledger_type = 10`, r.ReservationID, stranger)
}

// copyLedgerRow writes a second row of r's ledger row of type typ (10
// ALLOCATE, 20 RELEASE) under another key: the duplicate a missing
// uniqueness guard would let in.
func (e damageEnv) copyLedgerRow(r inventory.NewReservation, typ int) {
	e.t.Helper()
	led := e.tb.table("inventory_ledger")
	e.exec(`INSERT INTO `+led+` (idempotency_key, reservation_id, source_message_id, activity_id, sku_id, user_id, inventory_bucket,
	        ledger_type, available_delta, allocated_delta, before_available, after_available, before_allocated, after_allocated, reason)
	      SELECT 'AGAIN:' || idempotency_key, reservation_id, source_message_id, activity_id, sku_id, user_id, inventory_bucket,
	        ledger_type, available_delta, allocated_delta, before_available, after_available, before_allocated, after_allocated, reason
	        FROM `+led+` WHERE reservation_id = $1 AND ledger_type = $2`, r.ReservationID, typ)
}

// damageCase damages SKU (9, sku) after the first checkpoint and returns
// what the audits must find:
//   - want: Audit's findings, scoped to (9, sku) or (10, sku), to an
//     activity, or unscoped (the neighbour's findings are those with
//     activity 10);
//   - atRest: those of want AuditIncremental cannot see (their evidence is
//     gone from the ledger after the watermark);
//   - unscoped: when not nil, the case's findings of the unscoped audits
//     (both), where they differ from want's.
type damageCase struct {
	name   string
	tokens bool // (9, sku) and (10, sku) are inventory token SKUs of 4 tokens; else 10 units in 2 buckets
	damage func(e damageEnv) (want, atRest, unscoped []inventory.Finding)
}

func damageCases() []damageCase {
	const (
		replayAvail = inventory.FindingReplayAvailable
		replayAlloc = inventory.FindingReplayAllocated
		replayTotal = inventory.FindingReplayTotal
		none        = -1
	)
	nobody := uuid.Nil
	orphan := func(s inventory.ReservationStatus, missingAllocate bool) func(e damageEnv) (want, atRest, unscoped []inventory.Finding) {
		return func(e damageEnv) (want, atRest, unscoped []inventory.Finding) {
			r := e.buy(0, 1)
			e.release(r)
			e.orphanRelease(r)
			e.status(r, s)
			want = []inventory.Finding{e.f(inventory.FindingOrphanRelease, 0, r.ReservationID, 1, 0)}
			if missingAllocate {
				want = append(want, e.f(inventory.FindingMissingAllocate, 0, r.ReservationID, 1, 0))
			}
			return want, nil, nil
		}
	}
	leaked := func(s inventory.ReservationStatus) func(e damageEnv) (want, atRest, unscoped []inventory.Finding) {
		return func(e damageEnv) (want, atRest, unscoped []inventory.Finding) {
			r := e.buy(1, 2)
			e.status(r, s)
			return []inventory.Finding{e.f(inventory.FindingLeakedAllocation, 1, r.ReservationID, 0, 2)}, nil, nil
		}
	}
	return []damageCase{
		{name: "clean: sold, released, rejected after its release, adjusted", damage: func(e damageEnv) (want, atRest, unscoped []inventory.Finding) {
			e.buy(1, 1)
			r := e.buy(0, 1)
			e.release(r)
			e.status(r, inventory.StatusReleased)
			r = e.buy(0, 2)
			e.release(r)
			e.status(r, inventory.StatusRejected)
			e.adjust("CLEAN-"+uuid.NewString(), 1)
			return nil, nil, nil
		}},
		{name: "stock taken behind the ledger", damage: func(e damageEnv) (want, atRest, unscoped []inventory.Finding) {
			e.buy(1, 1)
			e.exec(`UPDATE `+e.tb.table("sku_inventory")+` SET available_stock = available_stock - 1, total_stock = total_stock - 1
				 WHERE activity_id = 9 AND sku_id = $1 AND bucket_no = 0`, e.sku)
			return []inventory.Finding{e.f(replayAvail, 0, nobody, 5, 4), e.f(replayTotal, 0, nobody, 5, 4),
				e.f(inventory.FindingSKUTotal, none, nobody, 10, 9)}, nil, nil
		}},
		{name: "allocated behind the ledger", damage: func(e damageEnv) (want, atRest, unscoped []inventory.Finding) {
			e.exec(`UPDATE `+e.tb.table("sku_inventory")+` SET available_stock = available_stock - 1, allocated_stock = allocated_stock + 1
				 WHERE activity_id = 9 AND sku_id = $1 AND bucket_no = 1`, e.sku)
			return []inventory.Finding{e.f(replayAvail, 1, nobody, 5, 4), e.f(replayAlloc, 1, nobody, 0, 1)}, nil, nil
		}},
		{name: "bucket lost", damage: func(e damageEnv) (want, atRest, unscoped []inventory.Finding) {
			e.buy(1, 1)
			e.exec(`DELETE FROM `+e.tb.table("sku_inventory")+` WHERE activity_id = 9 AND sku_id = $1 AND bucket_no = 0`, e.sku)
			return []inventory.Finding{e.f(inventory.FindingBucketCount, none, nobody, 2, 1), e.f(replayTotal, 0, nobody, 5, 0),
				e.f(inventory.FindingSKUTotal, none, nobody, 10, 5)}, nil, nil
		}},
		{name: "a bucket numbered bucket_count", damage: func(e damageEnv) (want, atRest, unscoped []inventory.Finding) {
			e.exec(`INSERT INTO `+e.tb.table("sku_inventory")+` (activity_id, sku_id, bucket_no, total_stock, available_stock)
				VALUES (9, $1, 2, 0, 0)`, e.sku)
			return []inventory.Finding{e.f(inventory.FindingBucketCount, none, nobody, 2, 3), e.f(inventory.FindingBucketCount, 2, nobody, 2, 2)}, nil, nil
		}},
		{name: "planned stock changed", damage: func(e damageEnv) (want, atRest, unscoped []inventory.Finding) {
			e.exec(`UPDATE `+e.tb.table("inventory_sku")+` SET planned_stock = 11 WHERE activity_id = 9 AND sku_id = $1`, e.sku)
			return []inventory.Finding{e.f(inventory.FindingSKUTotal, none, nobody, 11, 10)}, nil, nil
		}},
		{name: "ordered with a release and no allocation", damage: orphan(inventory.StatusOrdered, true)},
		{name: "release pending with a release and no allocation", damage: orphan(inventory.StatusReleasePending, true)},
		{name: "released with a release and no allocation", damage: orphan(inventory.StatusReleased, true)},
		{name: "expired with a release and no allocation", damage: orphan(inventory.StatusExpired, false)},
		{name: "rejected with a release and no allocation", damage: orphan(inventory.StatusRejected, false)},
		{name: "ordered without any ledger row", damage: func(e damageEnv) (want, atRest, unscoped []inventory.Finding) {
			r := e.buy(0, 1)
			e.exec(`DELETE FROM `+e.tb.table("inventory_ledger")+` WHERE reservation_id = $1`, r.ReservationID)
			e.exec(`UPDATE `+e.tb.table("sku_inventory")+` SET available_stock = available_stock + 1, allocated_stock = allocated_stock - 1
				 WHERE activity_id = 9 AND sku_id = $1 AND bucket_no = 0`, e.sku)
			f := e.f(inventory.FindingMissingAllocate, 0, r.ReservationID, 1, 0)
			return []inventory.Finding{f}, []inventory.Finding{f}, nil
		}},
		{name: "released without a release row", damage: func(e damageEnv) (want, atRest, unscoped []inventory.Finding) {
			r := e.buy(1, 1)
			e.status(r, inventory.StatusReleased)
			return []inventory.Finding{e.f(inventory.FindingMissingRelease, 1, r.ReservationID, 1, 0)}, nil, nil
		}},
		{name: "pending while holding stock", damage: leaked(inventory.StatusPendingDB)},
		{name: "rejected while holding stock", damage: leaked(inventory.StatusRejected)},
		{name: "expired while holding stock", damage: leaked(inventory.StatusExpired)},
		{name: "allocated twice, released once", damage: func(e damageEnv) (want, atRest, unscoped []inventory.Finding) {
			r := e.buy(0, 1)
			e.release(r)
			e.copyLedgerRow(r, 10)
			return []inventory.Finding{e.f(inventory.FindingDuplicateAllocate, none, r.ReservationID, 1, 2),
				e.f(replayAvail, 0, nobody, 4, 5), e.f(replayAlloc, 0, nobody, 1, 0)}, nil, nil
		}},
		{name: "released twice", damage: func(e damageEnv) (want, atRest, unscoped []inventory.Finding) {
			r := e.buy(0, 1)
			e.release(r)
			e.copyLedgerRow(r, 20)
			return []inventory.Finding{e.f(inventory.FindingDuplicateRelease, none, r.ReservationID, 1, 2),
				e.f(replayAvail, 0, nobody, 6, 5), e.f(replayAlloc, 0, nobody, -1, 0)}, nil, nil
		}},
		{name: "released a different quantity", damage: func(e damageEnv) (want, atRest, unscoped []inventory.Finding) {
			r := e.buy(0, 2)
			e.release(r)
			e.exec(`UPDATE `+e.tb.table("inventory_ledger")+`
				   SET available_delta = 1, allocated_delta = -1, after_available = before_available + 1, after_allocated = before_allocated - 1
				 WHERE reservation_id = $1 AND ledger_type = 20`, r.ReservationID)
			return []inventory.Finding{e.f(inventory.FindingReleaseMismatch, 0, r.ReservationID, 2, 1),
				e.f(replayAvail, 0, nobody, 4, 5), e.f(replayAlloc, 0, nobody, 1, 0)}, nil, nil
		}},
		{name: "released to a higher bucket", damage: func(e damageEnv) (want, atRest, unscoped []inventory.Finding) {
			r := e.buy(0, 1)
			e.release(r)
			e.exec(`UPDATE `+e.tb.table("inventory_ledger")+` SET inventory_bucket = 1 WHERE reservation_id = $1 AND ledger_type = 20`, r.ReservationID)
			return []inventory.Finding{e.f(inventory.FindingReleaseMismatch, 1, r.ReservationID, 1, 1),
				e.f(replayAvail, 0, nobody, 4, 5), e.f(replayAlloc, 0, nobody, 1, 0),
				e.f(replayAvail, 1, nobody, 6, 5), e.f(replayAlloc, 1, nobody, -1, 0)}, nil, nil
		}},
		{name: "released to a lower bucket", damage: func(e damageEnv) (want, atRest, unscoped []inventory.Finding) {
			r := e.buy(1, 1)
			e.release(r)
			e.exec(`UPDATE `+e.tb.table("inventory_ledger")+` SET inventory_bucket = 0 WHERE reservation_id = $1 AND ledger_type = 20`, r.ReservationID)
			return []inventory.Finding{e.f(inventory.FindingReleaseMismatch, 0, r.ReservationID, 1, 1),
				e.f(replayAvail, 0, nobody, 6, 5), e.f(replayAlloc, 0, nobody, -1, 0),
				e.f(replayAvail, 1, nobody, 4, 5), e.f(replayAlloc, 1, nobody, 1, 0)}, nil, nil
		}},
		{name: "an adjustment that names a reservation is neither allocation nor release", damage: func(e damageEnv) (want, atRest, unscoped []inventory.Finding) {
			// The reservation is PENDING, with no ledger row of its own: the
			// adjustment's row is the one that makes AuditIncremental read it.
			r := e.tb.newReservation(9, e.sku, 0)
			e.tb.insertReservations(e.t, []inventory.NewReservation{r})
			id := e.adjust("NAMED-"+uuid.NewString(), 2)
			e.exec(`UPDATE `+e.tb.table("inventory_ledger")+` SET reservation_id = $2 WHERE ledger_id = $1`, id, r.ReservationID)
			return nil, nil, nil
		}},
		{name: "adjustments without their evidence", damage: func(e damageEnv) (want, atRest, unscoped []inventory.Finding) {
			ids := []int64{e.adjust("E1-"+uuid.NewString(), 1), e.adjust("E2-"+uuid.NewString(), 2), e.adjust("E3-"+uuid.NewString(), 3)}
			led := e.tb.table("inventory_ledger")
			// The rows an older version wrote before ck_ledger_adjust_evidence,
			// and rows changed by hand with it dropped.
			e.exec(`ALTER TABLE ` + led + ` DROP CONSTRAINT ck_ledger_adjust_evidence`)
			e.exec(`UPDATE `+led+` SET operator = NULL WHERE ledger_id = $1`, ids[0])
			e.exec(`UPDATE `+led+` SET approval_ref = '' WHERE ledger_id = $1`, ids[1])
			e.exec(`UPDATE `+led+` SET operator = '', approval_ref = NULL WHERE ledger_id = $1`, ids[2])
			e.exec(`ALTER TABLE ` + led + ` ADD CONSTRAINT ck_ledger_adjust_evidence CHECK (ledger_type <> 30
				OR (coalesce(operator, '') <> '' AND coalesce(approval_ref, '') <> '')) NOT VALID`)
			return []inventory.Finding{e.f(inventory.FindingAdjustWithoutEvidence, 0, nobody, 0, 1),
				e.f(inventory.FindingAdjustWithoutEvidence, 0, nobody, 0, 2), e.f(inventory.FindingAdjustWithoutEvidence, 0, nobody, 0, 3)}, nil, nil
		}},
		{name: "tokens clean: held, and released", tokens: true, damage: func(e damageEnv) (want, atRest, unscoped []inventory.Finding) {
			e.buy(0, 1)
			r := e.buy(0, 2)
			e.release(r)
			e.status(r, inventory.StatusReleased)
			return nil, nil, nil
		}},
		{name: "tokens: a token of another activity claimed for a reservation", tokens: true, damage: func(e damageEnv) (want, atRest, unscoped []inventory.Finding) {
			r := e.buy(0, 2)
			tok := e.tb.table("inventory_token")
			e.exec(`UPDATE `+tok+` SET reservation_id = $2
				 WHERE (activity_id, sku_id, token_no) = (SELECT activity_id, sku_id, min(token_no) FROM `+tok+`
				        WHERE activity_id = 10 AND sku_id = $1 AND reservation_id IS NULL GROUP BY 1, 2)`, e.sku, r.ReservationID)
			// The neighbour's counts (2 free, 2 held before) moved; scoped to it,
			// the token is held by a reservation of no ALLOCATE row of that SKU;
			// unscoped, by one whose ALLOCATE row holds 2.
			replay := []inventory.Finding{e.nf(replayAvail, 0, nobody, 2, 1), e.nf(replayAlloc, 0, nobody, 2, 3)}
			claim := e.nf(inventory.FindingTokenClaim, 0, r.ReservationID, 0, 1)
			all := e.nf(inventory.FindingTokenClaim, 0, r.ReservationID, 2, 1)
			return append(slices.Clone(replay), claim), []inventory.Finding{claim}, append(replay, all)
		}},
	}
}

// perReservation reports whether a finding's evidence is a reservation's
// ledger rows or an ADJUST row (AuditIncremental reads those after the
// watermark only), as opposed to the counters and the replay.
func perReservation(f inventory.Finding) bool {
	switch f.Kind {
	case inventory.FindingBucketConservation, inventory.FindingNegative, inventory.FindingSKUTotal,
		inventory.FindingBucketCount, inventory.FindingReplayAvailable, inventory.FindingReplayAllocated, inventory.FindingReplayTotal:
		return false
	}
	return true
}

func sortFindings(fs []inventory.Finding) []inventory.Finding {
	fs = slices.Clone(fs)
	slices.SortFunc(fs, func(a, b inventory.Finding) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.ActivityID, b.ActivityID), cmp.Compare(a.SKUID, b.SKUID),
			cmp.Compare(a.Bucket, b.Bucket), slices.Compare(a.ReservationID[:], b.ReservationID[:]),
			cmp.Compare(a.Expected, b.Expected), cmp.Compare(a.Actual, b.Actual))
	})
	return fs
}

// TestAuditsFindEachDamageAndOnlyIt damages one SKU per case the way a bug
// or a hand-made fix could, beside the same SKU id in another activity
// (sold before and after the checkpoint, clean) and the other cases' SKUs
// of the same activity, and checks the exact findings (kind, SKU, bucket,
// reservation, expected and actual) of Audit and AuditIncremental, in one
// snapshot, scoped to each SKU, to each activity and unscoped. The damage
// comes after a checkpoint: AuditIncremental finds all of it but what
// lies before the watermark (a reservation whose rows were deleted). After
// a second checkpoint it finds only what the counters and the replay show
// (the checkpoint's sums include the damaged rows, as Audit's replay
// does), and Audit finds the same as before.
func TestAuditsFindEachDamageAndOnlyIt(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	cases := damageCases()
	envs := make([]damageEnv, len(cases))
	for i, tc := range cases {
		e := damageEnv{t: t, tb: tb, sku: int64(100 + i)}
		e.tb.tokens = tc.tokens
		stock, buckets := int32(10), int16(2)
		if tc.tokens {
			stock, buckets = 4, 1
		}
		e.tb.provision(t, 9, e.sku, stock, buckets)
		e.tb.provision(t, 10, e.sku, stock, buckets)
		e.buyIn(10, 0, 1)
		envs[i] = e
	}
	if _, err := tb.store.Checkpoint(tb.ctx, tb.pool); err != nil {
		t.Fatal(err)
	}
	type expect struct{ full, incr []inventory.Finding }
	scoped := map[[2]int64]*expect{}
	var all expect
	add := func(x *expect, full, atRest []inventory.Finding) {
		x.full = append(x.full, full...)
		for _, f := range full {
			if !slices.Contains(atRest, f) {
				x.incr = append(x.incr, f)
			}
		}
	}
	for i, tc := range cases {
		e := envs[i]
		nb := int16(1) // the neighbour sells after the watermark too, from its other bucket
		if tc.tokens {
			nb = 0
		}
		e.buyIn(10, nb, 1)
		want, atRest, unscoped := tc.damage(e)
		for _, f := range want {
			k := [2]int64{f.ActivityID, f.SKUID}
			if scoped[k] == nil {
				scoped[k] = &expect{}
			}
			add(scoped[k], []inventory.Finding{f}, atRest)
			k[1] = 0
			if scoped[k] == nil {
				scoped[k] = &expect{}
			}
			add(scoped[k], []inventory.Finding{f}, atRest)
		}
		if unscoped == nil {
			unscoped = want
		}
		add(&all, unscoped, atRest)
	}
	check := func(stage string, activity, sku int64, x expect, afterSecond bool) {
		t.Helper()
		full, incr := tb.bothAudits(t, tb.ctx, activity, sku)
		wantIncr := x.incr
		if afterSecond {
			wantIncr = slices.DeleteFunc(slices.Clone(x.full), perReservation)
		}
		if got, want := sortFindings(full), sortFindings(x.full); !slices.Equal(got, want) {
			t.Errorf("%s: Audit(%d, %d):\n got %+v\nwant %+v", stage, activity, sku, got, want)
		}
		if got, want := sortFindings(incr), sortFindings(wantIncr); !slices.Equal(got, want) {
			t.Errorf("%s: AuditIncremental(%d, %d):\n got %+v\nwant %+v", stage, activity, sku, got, want)
		}
	}
	checkAll := func(stage string, afterSecond bool) {
		t.Helper()
		for i, tc := range cases {
			for _, act := range []int64{9, 10} {
				x := scoped[[2]int64{act, envs[i].sku}]
				if x == nil {
					x = &expect{}
				}
				check(stage+": "+tc.name, act, envs[i].sku, *x, afterSecond)
			}
		}
		for _, act := range []int64{9, 10} {
			x := scoped[[2]int64{act, 0}]
			if x == nil {
				x = &expect{}
			}
			check(stage, act, 0, *x, afterSecond)
		}
		check(stage, 0, 0, all, afterSecond)
	}
	checkAll("after the damage", false)
	if _, err := tb.store.Checkpoint(tb.ctx, tb.pool); err != nil {
		t.Fatal(err)
	}
	tb.checkpointMatchesLedger(t)
	checkAll("after a second checkpoint", true)
}

// A reservation of one token SKU that also holds a token of another SKU of
// its activity (claimed by hand): scoped to its own SKU, both audits find
// its tokens and ledger in agreement; the other SKU's audit finds the
// stray claim, and so do the activity's audits, which read both SKUs'
// tokens.
func TestAuditTokenClaimsScopedToTheSKU(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.tokens = true
	tb.provision(t, 1, 1, 4, 1)
	tb.provision(t, 1, 2, 4, 1)
	if _, err := tb.store.Checkpoint(tb.ctx, tb.pool); err != nil {
		t.Fatal(err)
	}
	r := tb.newReservation(1, 1, 0)
	r.Quantity = 2
	if _, err := tb.allocateIn(t, r); err != nil {
		t.Fatal(err)
	}
	tb.exec(t, `UPDATE `+tb.table("inventory_token")+` SET reservation_id = $1 WHERE activity_id = 1 AND sku_id = 2 AND token_no = 0`, r.ReservationID)
	if full, incr := tb.bothAudits(t, tb.ctx, 1, 1); len(full) != 0 || len(incr) != 0 {
		t.Fatalf("scoped to SKU 1/1: Audit %+v, AuditIncremental %+v; want both clean", full, incr)
	}
	claim := func(fs []inventory.Finding, expected int64) bool {
		for _, f := range fs {
			if f.Kind == inventory.FindingTokenClaim && f.SKUID == 2 && f.ReservationID == r.ReservationID && f.Expected == expected && f.Actual == 1 {
				return true
			}
		}
		return false
	}
	if full, _ := tb.bothAudits(t, tb.ctx, 1, 2); !claim(full, 0) {
		t.Fatalf("Audit(1, 2) = %+v; want the stray claim (no ALLOCATE row of SKU 1/2 holds it)", full)
	}
	if full, incr := tb.bothAudits(t, tb.ctx, 1, 0); !claim(full, 2) || !claim(incr, 2) {
		t.Fatalf("scoped to activity 1: Audit %+v, AuditIncremental %+v; want the stray claim against the reservation's 2 units", full, incr)
	}
}
