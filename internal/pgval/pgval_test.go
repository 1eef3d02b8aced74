package pgval_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/internal/pgval"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The converted values bind as the same uuid (or NULL) in every query exec
// mode, including those that infer the parameter type from the Go value.
func TestUUIDBindsInEveryMode(t *testing.T) {
	t.Parallel()
	id := uuid.Must(uuid.NewV7())
	modes := append([]pgx.QueryExecMode{pgx.QueryExecModeCacheStatement}, pgtest.ExecModes...)
	for _, mode := range modes {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		pool := pgtest.NewPool(t, pgtest.WithExecMode(mode))
		var got string
		var isNull bool
		if err := pool.QueryRow(ctx, `SELECT $1::uuid::text, $2::uuid IS NULL`, pgval.UUID(id), pgval.UUIDPtr(nil)).Scan(&got, &isNull); err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		if got != id.String() || !isNull {
			t.Fatalf("%s: bound %s (NULL %v), want %s and NULL", mode, got, isNull, id)
		}
		if err := pool.QueryRow(ctx, `SELECT $1 = $2::uuid`, pgval.UUIDPtr(&id), id.String()).Scan(&isNull); err != nil || !isNull {
			t.Fatalf("%s: UUIDPtr(&id) = %v, %v", mode, isNull, err)
		}
	}
}

// BenchmarkUUID compares pgx encoding a google uuid through its
// driver.Valuer with encoding pgval.UUID.
func BenchmarkUUID(b *testing.B) {
	m := pgtype.NewMap()
	id := uuid.New()
	buf := make([]byte, 0, 64)
	b.Run("uuid.UUID", func(b *testing.B) {
		for b.Loop() {
			if _, err := m.Encode(pgtype.UUIDOID, pgtype.BinaryFormatCode, id, buf[:0]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pgval.UUID", func(b *testing.B) {
		for b.Loop() {
			if _, err := m.Encode(pgtype.UUIDOID, pgtype.BinaryFormatCode, pgval.UUID(id), buf[:0]); err != nil {
				b.Fatal(err)
			}
		}
	})
}
