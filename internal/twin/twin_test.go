package twin_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/internal/twin"
)

var errOdd = errors.New("odd")

// square reads n*n and refuses odd results, recording how it was called.
func square(n int, calls *[]bool) twin.Row[int] {
	return twin.Row[int]{
		SQL:  `SELECT $1::int * $1::int`,
		Args: []any{n},
		Scan: func(ctx context.Context, batch bool, row pgx.Row, dst *int) error {
			*calls = append(*calls, batch)
			if err := row.Scan(dst); err != nil {
				return err
			}
			if *dst%2 == 1 {
				return errOdd
			}
			return nil
		},
	}
}

// TestRunAndQueueAgree runs the same Row directly and in a batch, on a real
// server, and checks that both read the same value, classify the same
// error, and tell Scan which form called it.
func TestRunAndQueueAgree(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	var calls []bool

	got, err := square(4, &calls).Run(ctx, pool)
	if err != nil || got != 16 {
		t.Fatalf("Run(4) = %d, %v; want 16, nil", got, err)
	}
	if _, err := square(3, &calls).Run(ctx, pool); !errors.Is(err, errOdd) {
		t.Fatalf("Run(3) error = %v; want errOdd", err)
	}

	b := &pgx.Batch{}
	var even, odd int
	square(6, &calls).Queue(b, &even)
	square(5, &calls).Queue(b, &odd)
	// pgx runs the callbacks as Close reads the results, and returns the
	// first callback's error.
	if err := pool.SendBatch(ctx, b).Close(); !errors.Is(err, errOdd) {
		t.Fatalf("batch error = %v; want errOdd from the second statement", err)
	}
	if even != 36 || odd != 25 {
		t.Fatalf("queued results = %d, %d; want 36, 25", even, odd)
	}
	want := []bool{false, false, true, true}
	if len(calls) != len(want) {
		t.Fatalf("Scan calls %v; want %v", calls, want)
	}
	for i := range want {
		if calls[i] != want[i] {
			t.Fatalf("Scan calls %v; want %v", calls, want)
		}
	}
}

// TestRunReportsServerError checks that a statement the server rejects
// reaches Scan (pgx reports it there) and comes back from Run.
func TestRunReportsServerError(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	r := twin.Row[int]{
		SQL:  `SELECT 1 / $1::int`,
		Args: []any{0},
		Scan: func(_ context.Context, _ bool, row pgx.Row, dst *int) error { return row.Scan(dst) },
	}
	if _, err := r.Run(ctx, pool); err == nil {
		t.Fatal("division by zero: no error")
	}
}

func TestMain(m *testing.M) { pgtest.Main(m) }

// sumAndProduct is a two-statement Batch: the second callback reads what
// the first one left.
func sumAndProduct(x, y int, calls *[]bool) twin.Batch[[2]int] {
	return twin.Batch[[2]int]{Add: func(_ context.Context, batch bool, b *pgx.Batch, dst *[2]int) {
		*calls = append(*calls, batch)
		b.Queue(`SELECT $1::int + $2::int`, x, y).QueryRow(func(row pgx.Row) error { return row.Scan(&dst[0]) })
		b.Queue(`SELECT $1::int * $2::int`, x, y).QueryRow(func(row pgx.Row) error {
			if err := row.Scan(&dst[1]); err != nil {
				return err
			}
			if dst[0]%2 == 1 {
				return errOdd
			}
			return nil
		})
	}}
}

func TestBatchRunAndQueueAgree(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	var calls []bool

	got, err := sumAndProduct(2, 4, &calls).Run(ctx, pool)
	if err != nil || got != [2]int{6, 8} {
		t.Fatalf("Run(2, 4) = %v, %v; want [6 8], nil", got, err)
	}
	if got, err := sumAndProduct(2, 3, &calls).Run(ctx, pool); !errors.Is(err, errOdd) || got != [2]int{5, 6} {
		t.Fatalf("Run(2, 3) = %v, %v; want [5 6], errOdd", got, err)
	}

	b := &pgx.Batch{}
	var queued [2]int
	b.Queue(`SELECT 1`)
	sumAndProduct(3, 5, &calls).Queue(b, &queued)
	if err := pool.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	if queued != [2]int{8, 15} {
		t.Fatalf("queued = %v; want [8 15]", queued)
	}
	if want := []bool{false, false, true}; len(calls) != 3 || calls[0] != want[0] || calls[1] != want[1] || calls[2] != want[2] {
		t.Fatalf("Add calls %v; want %v", calls, want)
	}
	if _, err := (twin.Batch[[2]int]{Add: func(_ context.Context, _ bool, b *pgx.Batch, dst *[2]int) {
		b.Queue(`SELECT 1 / $1::int`, 0).QueryRow(func(row pgx.Row) error { return row.Scan(&dst[0]) })
	}}).Run(ctx, pool); err == nil {
		t.Fatal("division by zero: no error")
	}
}
