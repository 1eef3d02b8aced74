package inbox_test

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/pgtx"
)

func TestClaimFreshThenDuplicate(t *testing.T) {
	t.Parallel()
	bothClaimModes(t, func(t *testing.T, b *testBundle) {
		msg := newMessage("billing")
		msg.Ref = "reservation-42"

		b.inTx(t, func(tx pgx.Tx) error {
			c, err := b.in.ClaimMessage(b.ctx, tx, msg)
			if err != nil {
				return err
			}
			if !c.Fresh || c.Record.Status != inbox.StatusClaimed || c.Record.Result.Code != "" {
				t.Errorf("first claim = %+v, want fresh CLAIMED without result", c)
			}
			// A second claim in the same transaction is a duplicate of its own.
			again, err := b.in.ClaimMessage(b.ctx, tx, msg)
			if err != nil || again.Fresh {
				t.Errorf("second claim in the same tx = %+v, %v; want duplicate", again, err)
			}
			return b.in.Complete(b.ctx, tx, msg.Key(), inbox.Result{Code: "ORDER_CREATED", Payload: []byte(`{"order_id": 7}`)})
		})

		b.inTx(t, func(tx pgx.Tx) error {
			c, err := b.in.ClaimMessage(b.ctx, tx, msg)
			if err != nil {
				return err
			}
			r := c.Record
			if c.Fresh || r.Status != inbox.StatusProcessed || r.Result.Code != "ORDER_CREATED" ||
				string(r.Result.Payload) != `{"order_id": 7}` || !bytes.Equal(r.PayloadHash, msg.PayloadHash) ||
				r.Key != msg.Key() || r.ProcessedAt.Before(r.CreatedAt) {
				t.Errorf("duplicate claim = %+v", c)
			}
			return nil
		})
		rec, err := b.in.Lookup(b.ctx, b.pool, msg.Key())
		if err != nil || rec.Result.Code != "ORDER_CREATED" {
			t.Fatalf("Lookup = %+v, %v", rec, err)
		}
		if n := b.count(t, nil); n != 1 {
			t.Fatalf("%d rows, want 1", n)
		}
	})
}

// TestClaimConcurrentDuplicates: 1,000 transactions claim the same message
// at once and commit. Exactly one owns it; every other one gets the result
// the owner committed.
func TestClaimConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	bothClaimModes(t, func(t *testing.T, b *testBundle) {
		claimsOneWinner(t, b, b.pool, 1000)
	})
}

// claimsOneWinner runs n transactions on db that claim the same message at
// once and commit: exactly one owns it, every other one gets the result
// the owner committed, and one row exists.
func claimsOneWinner(t *testing.T, b *testBundle, db pgtx.TxBeginner, n int) {
	t.Helper()
	msg := newMessage("orders")
	claims := make([]inbox.Claim, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = pgx.BeginTxFunc(b.ctx, db, pgx.TxOptions{}, func(tx pgx.Tx) error {
				c, err := b.in.ClaimMessage(b.ctx, tx, msg)
				if err != nil {
					return err
				}
				claims[i] = c
				if c.Fresh {
					return b.in.Complete(b.ctx, tx, msg.Key(), inbox.Result{Code: "DONE", Payload: fmt.Appendf(nil, `{"winner": %d}`, i)})
				}
				return nil
			})
		})
	}
	close(start)
	testwait.WaitWithin(t, &wg, testwait.Long, "the concurrent transactions")

	winner := -1
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		if claims[i].Fresh {
			if winner >= 0 {
				t.Fatalf("calls %d and %d both claimed the message", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatal("no call claimed the message")
	}
	want := fmt.Sprintf(`{"winner": %d}`, winner)
	for i, c := range claims {
		if i != winner && (c.Record.Status != inbox.StatusProcessed || c.Record.Result.Code != "DONE" || string(c.Record.Result.Payload) != want) {
			t.Fatalf("call %d saw %+v, want the winner's result %s", i, c.Record, want)
		}
	}
	if got := b.count(t, nil); got != 1 {
		t.Fatalf("%d rows, want 1", got)
	}
}

// holdClaim claims msg in a transaction on its own connection and leaves
// the transaction open; it returns the transaction and its backend pid.
func holdClaim(t *testing.T, b *testBundle, pool *pgxpool.Pool, msg inbox.Message, code string) (pgx.Tx, uint32) {
	t.Helper()
	tx, err := pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(b.ctx) })
	c, err := b.in.ClaimMessage(b.ctx, tx, msg)
	if err != nil || !c.Fresh {
		t.Fatalf("holder claim = %+v, %v", c, err)
	}
	if err := b.in.Complete(b.ctx, tx, msg.Key(), inbox.Result{Code: code}); err != nil {
		t.Fatal(err)
	}
	var pid uint32
	if err := tx.QueryRow(b.ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return tx, pid
}

// waitBlocked polls until n backends are blocked by the backend pid, or the
// context ends. Polling a server-side condition is the signal here: the
// waiters are inside a blocking statement and cannot report it themselves.
func waitBlocked(t *testing.T, b *testBundle, pid uint32, n int) {
	t.Helper()
	ctx := testwait.Context(t, b.ctx, testwait.Step)
	for {
		var got int
		if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))`,
			pid).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got == n {
			return
		}
		if got > n {
			t.Fatalf("%d backends blocked, want %d", got, n)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("only %d of %d backends blocked: %v", got, n, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestClaimWaitsForInFlightOwner: while the first processing is still in
// flight, duplicates block; when it commits they all get its result (the
// path where the claiming statement cannot see the row and ClaimMessage
// looks it up in a second statement); when it rolls back exactly one of
// them becomes the new owner and the rest get that owner's result.
func TestClaimWaitsForInFlightOwner(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{true, false} {
		t.Run(fmt.Sprintf("commit=%v", commit), func(t *testing.T) {
			t.Parallel()
			bothClaimModes(t, func(t *testing.T, b *testBundle) {
				const waiters = 24
				pool := pgtest.NewPool(t, func(c *pgxpool.Config) { c.MaxConns = waiters + 1 })
				msg := newMessage("slow")
				holder, pid := holdClaim(t, b, pool, msg, "HOLDER")

				type outcome struct {
					claim inbox.Claim
					err   error
				}
				out := make(chan outcome, waiters)
				for i := range waiters {
					go func() {
						var c inbox.Claim
						err := pgx.BeginFunc(b.ctx, pool, func(tx pgx.Tx) error {
							var err error
							if c, err = b.in.ClaimMessage(b.ctx, tx, msg); err != nil || !c.Fresh {
								return err
							}
							return b.in.Complete(b.ctx, tx, msg.Key(), inbox.Result{Code: fmt.Sprintf("WAITER-%d", i)})
						})
						out <- outcome{c, err}
					}()
				}
				waitBlocked(t, b, pid, waiters)
				if commit {
					if err := holder.Commit(b.ctx); err != nil {
						t.Fatal(err)
					}
				} else if err := holder.Rollback(b.ctx); err != nil {
					t.Fatal(err)
				}

				var fresh []inbox.Claim
				var dups []inbox.Claim
				for range waiters {
					o := testwait.Recv(t, out, "a waiter to return")
					if o.err != nil {
						t.Fatal(o.err)
					}
					if o.claim.Fresh {
						fresh = append(fresh, o.claim)
					} else {
						dups = append(dups, o.claim)
					}
				}
				rec, err := b.in.Lookup(b.ctx, b.pool, msg.Key())
				if err != nil {
					t.Fatal(err)
				}
				wantFresh, wantCode := 0, "HOLDER"
				if !commit {
					wantFresh, wantCode = 1, rec.Result.Code
				}
				if len(fresh) != wantFresh {
					t.Fatalf("%d waiters became owner, want %d", len(fresh), wantFresh)
				}
				if !commit && (wantCode == "HOLDER" || wantCode == "") {
					t.Fatalf("stored result %q, want a waiter's", wantCode)
				}
				for _, c := range dups {
					if c.Record.Status != inbox.StatusProcessed || c.Record.Result.Code != wantCode {
						t.Fatalf("waiter saw %+v, want result %q", c.Record, wantCode)
					}
				}
				if n := b.count(t, nil); n != 1 {
					t.Fatalf("%d rows, want 1", n)
				}
			})
		})
	}
}

func TestClaimRollbackLeavesNoRow(t *testing.T) {
	t.Parallel()
	bothClaimModes(t, func(t *testing.T, b *testBundle) {
		msg := newMessage("g")
		errBoom := errors.New("business failure")
		err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			c, err := b.in.ClaimMessage(b.ctx, tx, withResult(msg, inbox.Result{Code: "X"}))
			if err != nil || !c.Fresh {
				t.Fatalf("claim = %+v, %v", c, err)
			}
			return errBoom
		})
		if !errors.Is(err, errBoom) {
			t.Fatal(err)
		}
		if n := b.count(t, nil); n != 0 {
			t.Fatalf("%d rows after rollback, want 0", n)
		}
		if _, err := b.in.Lookup(b.ctx, b.pool, msg.Key()); !errors.Is(err, inbox.ErrNotFound) {
			t.Fatalf("Lookup after rollback = %v, want ErrNotFound", err)
		}
		b.inTx(t, func(tx pgx.Tx) error {
			c, err := b.in.ClaimMessage(b.ctx, tx, msg)
			if err == nil && !c.Fresh {
				t.Error("message not claimable again after rollback")
			}
			return err
		})
		if n := b.count(t, nil); n != 1 {
			t.Fatalf("%d rows, want 1", n)
		}
	})
}

func TestClaimPayloadMismatch(t *testing.T) {
	t.Parallel()
	bothClaimModes(t, func(t *testing.T, b *testBundle) {
		msg := newMessage("g")
		b.inTx(t, func(tx pgx.Tx) error {
			_, err := b.in.ClaimMessage(b.ctx, tx, withResult(msg, inbox.Result{Code: "OK", Payload: []byte(`[1]`)}))
			return err
		})
		before, err := b.in.Lookup(b.ctx, b.pool, msg.Key())
		if err != nil {
			t.Fatal(err)
		}

		other := msg
		other.PayloadHash = inbox.HashPayload([]byte("another body"))
		noHash := msg
		noHash.PayloadHash = nil
		for _, m := range []inbox.Message{other, noHash} {
			b.inTx(t, func(tx pgx.Tx) error {
				_, err := b.in.ClaimMessage(b.ctx, tx, withResult(m, inbox.Result{Code: "CHANGED"}))
				var pm *inbox.Error
				if !errors.Is(err, inbox.ErrPayloadMismatch) || !errors.As(err, &pm) {
					t.Fatalf("claim with hash %x = %v, want ErrPayloadMismatch", m.PayloadHash, err)
				}
				if !bytes.Equal(pm.Record.PayloadHash, msg.PayloadHash) || !bytes.Equal(pm.Given, m.PayloadHash) ||
					pm.Key != msg.Key() || pm.Record.Result.Code != "OK" {
					t.Errorf("mismatch error = %+v", pm)
				}
				// The transaction is still usable: the mismatch is found
				// client-side and nothing was written.
				return nil
			})
		}
		after, err := b.in.Lookup(b.ctx, b.pool, msg.Key())
		if err != nil {
			t.Fatal(err)
		}
		if after.Result.Code != before.Result.Code || !after.ProcessedAt.Equal(before.ProcessedAt) || string(after.Result.Payload) != "[1]" {
			t.Fatalf("row changed: before %+v, after %+v", before, after)
		}
		if n := b.count(t, nil); n != 1 {
			t.Fatalf("%d rows, want 1", n)
		}
	})
}

func TestClaimGroupsAreIndependent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := newMessage("group-a")
	c := a
	c.Group = "group-b"
	for _, m := range []inbox.Message{a, c} {
		b.inTx(t, func(tx pgx.Tx) error {
			cl, err := b.in.ClaimMessage(b.ctx, tx, withResult(m, inbox.Result{Code: "BY-" + m.Group}))
			if err == nil && !cl.Fresh {
				t.Errorf("group %s: duplicate of the other group", m.Group)
			}
			return err
		})
	}
	for _, m := range []inbox.Message{a, c} {
		rec, err := b.in.Lookup(b.ctx, b.pool, m.Key())
		if err != nil || rec.Result.Code != "BY-"+m.Group {
			t.Fatalf("group %s: %+v, %v", m.Group, rec, err)
		}
	}
	if n := b.count(t, nil); n != 2 {
		t.Fatalf("%d rows, want 2", n)
	}
}

func TestComplete(t *testing.T) {
	t.Parallel()
	bothClaimModes(t, func(t *testing.T, b *testBundle) {
		msg := newMessage("g")
		b.inTx(t, func(tx pgx.Tx) error {
			if err := b.in.Complete(b.ctx, tx, msg.Key(), inbox.Result{Code: "A"}); !errors.Is(err, inbox.ErrNotFound) {
				t.Errorf("Complete before claim = %v, want ErrNotFound", err)
			}
			if _, err := b.in.ClaimMessage(b.ctx, tx, msg); err != nil {
				return err
			}
			if err := b.in.Complete(b.ctx, tx, msg.Key(), inbox.Result{Code: "A"}); err != nil {
				return err
			}
			err := b.in.Complete(b.ctx, tx, msg.Key(), inbox.Result{Code: "B"})
			var se *inbox.Error
			if !errors.Is(err, inbox.ErrAlreadyCompleted) || !errors.As(err, &se) || se.Record.Status != inbox.StatusProcessed {
				t.Errorf("second Complete = %v, want ErrAlreadyCompleted", err)
			}
			return nil
		})
		// A message claimed with its result is PROCESSED at once.
		m2 := newMessage("g")
		b.inTx(t, func(tx pgx.Tx) error {
			c, err := b.in.ClaimMessage(b.ctx, tx, withResult(m2, inbox.Result{Code: "UP-FRONT"}))
			if err != nil || c.Record.Status != inbox.StatusProcessed || c.Record.Result.Code != "UP-FRONT" {
				t.Errorf("ClaimMessage with a result = %+v, %v", c, err)
			}
			if err := b.in.Complete(b.ctx, tx, m2.Key(), inbox.Result{Code: "B"}); !errors.Is(err, inbox.ErrAlreadyCompleted) {
				t.Errorf("Complete after ClaimMessage with a result = %v, want ErrAlreadyCompleted", err)
			}
			return nil
		})
		for k, want := range map[inbox.Key]string{msg.Key(): "A", m2.Key(): "UP-FRONT"} {
			rec, err := b.in.Lookup(b.ctx, b.pool, k)
			if err != nil || rec.Result.Code != want {
				t.Fatalf("Lookup = %+v, %v; want %s", rec, err, want)
			}
		}
		// A message committed without a result stays CLAIMED, and its
		// duplicates say so.
		m3 := newMessage("g")
		b.inTx(t, func(tx pgx.Tx) error { _, err := b.in.ClaimMessage(b.ctx, tx, m3); return err })
		b.inTx(t, func(tx pgx.Tx) error {
			c, err := b.in.ClaimMessage(b.ctx, tx, m3)
			if err != nil || c.Fresh || c.Record.Status != inbox.StatusClaimed || c.Record.Result.Payload != nil {
				t.Errorf("duplicate of a result-less message = %+v, %v", c, err)
			}
			return err
		})
	})
}

func TestQueue(t *testing.T) {
	t.Parallel()
	bothClaimModes(t, func(t *testing.T, b *testBundle) {
		queueFormsWork(t, b, b.pool)
	})
}

// queueFormsWork runs the batch forms through db, in transactions of
// pgtx.RunInTx: claim and complete in one batch, a queued duplicate
// answered with the stored result, and the callback errors (completing
// twice, a payload mismatch) returned by Close.
func queueFormsWork(t *testing.T, b *testBundle, db *pgxpool.Pool) {
	t.Helper()
	msg := newMessage("pipe")
	res := inbox.Result{Code: "OK", Payload: []byte(`{"a":1}`)}
	run := func(fn func(*pgx.Batch)) error {
		return pgtx.RunInTx(b.ctx, db, pgtx.Options{}, func(tx pgx.Tx) error {
			batch := &pgx.Batch{}
			fn(batch)
			return tx.SendBatch(b.ctx, batch).Close()
		})
	}
	var first, second, third inbox.Claim
	if err := run(func(batch *pgx.Batch) {
		must(t, b.in.QueueClaimMessage(batch, msg, &first, pgtx.Return))
		must(t, b.in.QueueComplete(batch, msg.Key(), res))
	}); err != nil {
		t.Fatal(err)
	}
	if !first.Fresh {
		t.Fatalf("first = %+v, want fresh", first)
	}
	if err := run(func(batch *pgx.Batch) {
		must(t, b.in.QueueClaimMessage(batch, withResult(msg, inbox.Result{Code: "IGNORED"}), &second, pgtx.Return))
	}); err != nil {
		t.Fatal(err)
	}
	if second.Fresh || second.Record.Result.Code != "OK" || string(second.Record.Result.Payload) != `{"a": 1}` ||
		string(second.Record.PayloadHash) != string(msg.PayloadHash) {
		t.Fatalf("second = %+v, want the stored result", second)
	}
	if err := run(func(batch *pgx.Batch) {
		must(t, b.in.QueueComplete(batch, msg.Key(), res))
	}); !errors.Is(err, inbox.ErrAlreadyCompleted) {
		t.Fatalf("queued second Complete = %v, want ErrAlreadyCompleted", err)
	}
	bad := msg
	bad.PayloadHash = []byte{1}
	if err := run(func(batch *pgx.Batch) {
		must(t, b.in.QueueClaimMessage(batch, bad, &third, pgtx.Return))
	}); !errors.Is(err, inbox.ErrPayloadMismatch) {
		t.Fatalf("queued mismatching claim = %v, want ErrPayloadMismatch", err)
	}
	rec, err := b.in.Lookup(b.ctx, db, msg.Key())
	if err != nil || rec.Status != inbox.StatusProcessed || rec.Result.Code != "OK" {
		t.Fatalf("Lookup = %+v, %v", rec, err)
	}
	if n := b.count(t, nil); n != 1 {
		t.Fatalf("%d rows, want 1", n)
	}
}

// TestQueueClaimWaitedForCommit: a queued claim waits for a concurrent
// owner that then commits. The default batch form cannot run a second
// statement, so it reports ErrConcurrentClaim (Lookup then sees the
// result); with Config.Citus the look-up is queued with the insert and
// the claim comes back as a duplicate carrying the owner's result.
func TestQueueClaimWaitedForCommit(t *testing.T) {
	t.Parallel()
	bothClaimModes(t, func(t *testing.T, b *testBundle) {
		pool := pgtest.NewPool(t, func(c *pgxpool.Config) { c.MaxConns = 2 })
		msg := newMessage("pipe")
		holder, pid := holdClaim(t, b, pool, msg, "HOLDER")

		done := make(chan error, 1)
		var dst inbox.Claim
		go func() {
			done <- pgx.BeginFunc(b.ctx, pool, func(tx pgx.Tx) error {
				batch := &pgx.Batch{}
				if err := b.in.QueueClaimMessage(batch, msg, &dst, pgtx.Return); err != nil {
					return err
				}
				return tx.SendBatch(b.ctx, batch).Close()
			})
		}()
		waitBlocked(t, b, pid, 1)
		if err := holder.Commit(b.ctx); err != nil {
			t.Fatal(err)
		}
		err := testwait.Recv(t, done, "the blocked call to return")
		switch {
		case b.citus && (err != nil || dst.Record.Result.Code != "HOLDER"):
			t.Fatalf("queued claim = %+v, %v; want the holder's result", dst, err)
		case !b.citus && !errors.Is(err, inbox.ErrConcurrentClaim):
			t.Fatalf("queued claim = %v, want ErrConcurrentClaim", err)
		}
		if dst.Fresh {
			t.Fatal("queued claim reported fresh")
		}
		rec, err := b.in.Lookup(b.ctx, b.pool, msg.Key())
		if err != nil || rec.Result.Code != "HOLDER" {
			t.Fatalf("Lookup = %+v, %v", rec, err)
		}
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestClaimRepeatableReadRace: under REPEATABLE READ a claim that waited for
// a concurrent owner that committed fails with SQLSTATE 40001 (the row is
// invisible to the transaction's snapshot), which a retry loop such as
// pgtx.RunInTx retries; the retry is a plain duplicate.
func TestClaimRepeatableReadRace(t *testing.T) {
	t.Parallel()
	bothClaimModes(t, func(t *testing.T, b *testBundle) {
		pool := pgtest.NewPool(t, func(c *pgxpool.Config) { c.MaxConns = 2 })
		msg := newMessage("rr")
		holder, pid := holdClaim(t, b, pool, msg, "HOLDER")

		tx, err := pool.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(b.ctx) }()
		if _, err := tx.Exec(b.ctx, `SELECT 1`); err != nil { // take the snapshot now
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := b.in.ClaimMessage(b.ctx, tx, msg)
			done <- err
		}()
		waitBlocked(t, b, pid, 1)
		if err := holder.Commit(b.ctx); err != nil {
			t.Fatal(err)
		}
		var pe *pgconn.PgError
		if err := testwait.Recv(t, done, "the blocked call to return"); !errors.As(err, &pe) || pe.Code != "40001" {
			t.Fatalf("repeatable-read claim = %v, want SQLSTATE 40001", err)
		}
		_ = tx.Rollback(b.ctx)
		err = pgx.BeginTxFunc(b.ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
			c, err := b.in.ClaimMessage(b.ctx, tx, msg)
			if err == nil && (c.Fresh || c.Record.Result.Code != "HOLDER") {
				t.Errorf("retry = %+v, want the holder's result", c)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// Complete checks the claimer: a CLAIMED row committed by another
// transaction cannot be completed by this one (nothing written), while a
// claim made inside a savepoint of this transaction can, before and after
// the savepoint is released.
func TestCompleteChecksTheClaimer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other := newMessage("g")
	b.inTx(t, func(tx pgx.Tx) error { _, err := b.in.ClaimMessage(b.ctx, tx, other); return err })
	b.inTx(t, func(tx pgx.Tx) error {
		err := b.in.Complete(b.ctx, tx, other.Key(), inbox.Result{Code: "STOLEN"})
		var se *inbox.Error
		if !errors.Is(err, inbox.ErrNotClaimer) || !errors.As(err, &se) || se.Record.Status != inbox.StatusClaimed || errors.Is(err, inbox.ErrAlreadyCompleted) {
			t.Errorf("Complete of another transaction's claim = %v, want ErrNotClaimer", err)
		}
		// The transaction stays usable.
		_, err = tx.Exec(b.ctx, "SELECT 1")
		return err
	})
	if rec, err := b.in.Lookup(b.ctx, b.pool, other.Key()); err != nil || rec.Status != inbox.StatusClaimed || rec.Result.Code != "" {
		t.Fatalf("row after refused Complete: %+v, %v", rec, err)
	}

	for _, release := range []bool{false, true} {
		m := newMessage("g")
		b.inTx(t, func(tx pgx.Tx) error {
			if _, err := tx.Exec(b.ctx, "SAVEPOINT s"); err != nil {
				return err
			}
			if _, err := b.in.ClaimMessage(b.ctx, tx, m); err != nil {
				return err
			}
			if release {
				if _, err := tx.Exec(b.ctx, "RELEASE SAVEPOINT s"); err != nil {
					return err
				}
			}
			return b.in.Complete(b.ctx, tx, m.Key(), inbox.Result{Code: "MINE"})
		})
		if rec, err := b.in.Lookup(b.ctx, b.pool, m.Key()); err != nil || rec.Result.Code != "MINE" {
			t.Fatalf("savepoint claim (released %v): %+v, %v", release, rec, err)
		}
	}
}

// TestQueueClaimMessageNilDst: a nil destination is accepted by both
// refusal modes (the outcome is discarded) and the claim is made.
func TestQueueClaimMessageNilDst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, on := range []pgtx.OnRefusal{pgtx.Return, pgtx.Abort} {
		msg := newMessage("nil-dst")
		var batch pgx.Batch
		if err := b.in.QueueClaimMessage(&batch, withResult(msg, inbox.Result{Code: "OK"}), nil, on); err != nil || batch.Len() == 0 {
			t.Fatalf("QueueClaimMessage(nil dst, %v) = %v, queued %d", on, err, batch.Len())
		}
		if err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error { return tx.SendBatch(b.ctx, &batch).Close() }); err != nil {
			t.Fatal(err)
		}
		if rec, err := b.in.Lookup(b.ctx, b.pool, msg.Key()); err != nil || rec.Result.Code != "OK" {
			t.Fatalf("Lookup after the claim = %+v, %v", rec, err)
		}
	}
}
