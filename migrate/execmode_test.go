package migrate_test

import (
	"errors"
	"testing"
	"time"

	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/migrate"
)

// TestQueryExecModes runs Apply and Validate through pools in the query exec
// modes where pgx does not learn parameter types from the server (exec,
// simple_protocol: what PgBouncer in transaction mode needs) or encodes from
// a cached description (cache_describe).
func TestQueryExecModes(t *testing.T) {
	t.Parallel()
	for _, mode := range pgtest.ExecModes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			ctx := pgtest.Context(t, time.Minute)
			pool, schema := pgtest.NewPool(t, pgtest.WithExecMode(mode)), pgtest.Schema(t)

			if err := migrate.Validate(ctx, pool, schema, good); !errors.Is(err, migrate.ErrPending) {
				t.Fatalf("Validate before Apply = %v, want ErrPending", err)
			}
			res, err := migrate.Apply(ctx, pool, schema, good)
			if err != nil || len(res.Applied["widgets"]) != 1 {
				t.Fatalf("Apply = %v, %v; want version 1 applied", res, err)
			}
			if err := migrate.Validate(ctx, pool, schema, good); err != nil {
				t.Fatalf("Validate after Apply: %v", err)
			}
			var ve *migrate.Error
			if err := migrate.Validate(ctx, pool, schema, v2); !errors.As(err, &ve) || ve.Applied != 1 || ve.Latest != 2 {
				t.Fatalf("Validate of v2 = %v, want a *migrate.Error 1 < 2", err)
			}
			if res, err = migrate.Apply(ctx, pool, schema, v2); err != nil || len(res.Applied["widgets"]) != 1 || res.Applied["widgets"][0] != 2 {
				t.Fatalf("Apply v2 = %v, %v; want version 2 applied", res, err)
			}
			if err := migrate.Validate(ctx, pool, schema, good); !errors.Is(err, migrate.ErrSchemaNewer) {
				t.Fatalf("Validate of v1 code on a v2 schema = %v, want ErrSchemaNewer", err)
			}
			if res, err = migrate.Apply(ctx, pool, schema, v2); err != nil || len(res.Applied) != 0 {
				t.Fatalf("repeated Apply = %v, %v; want nothing applied", res, err)
			}
		})
	}
}
