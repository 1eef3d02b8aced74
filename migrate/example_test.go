package migrate_test

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/pgtx"
	"github.com/seckillkit/seckill/seckilltest"
)

func ExampleApply() {
	ctx := context.Background()
	db := seckilltest.Example() // a fresh, empty schema
	pool, schema := db.Pool, db.Schema

	widgets := migrate.Component{Name: "widgets", FS: os.DirFS("testdata/v2")}
	res, err := migrate.Apply(ctx, pool, schema, widgets)
	if err != nil {
		panic(err)
	}
	fmt.Println("applied:", res.Applied["widgets"])

	res, _ = migrate.Apply(ctx, pool, schema, widgets) // idempotent
	fmt.Println("applied again:", res.Applied["widgets"])
	fmt.Println("valid:", migrate.Validate(ctx, pool, schema, widgets) == nil)
	// Output:
	// applied: [1 2]
	// applied again: []
	// valid: true
}

// A service migrates the kit's tables together with its own, in its own
// transaction: both commit, or neither does.
func ExampleApplyTx() {
	ctx := context.Background()
	db := seckilltest.Example() // a fresh, empty schema
	widgets := migrate.Component{Name: "widgets", FS: os.DirFS("testdata/v2")}

	err := pgtx.RunInTx(ctx, db.Pool, pgtx.Options{}, func(tx pgx.Tx) error {
		res, err := migrate.ApplyTx(ctx, tx, db.Schema, widgets)
		if err != nil {
			return err
		}
		fmt.Println("applied:", res.Applied["widgets"])
		// ... the service's own migrations, in the same transaction ...
		_, err = tx.Exec(ctx, `CREATE TABLE `+pgx.Identifier{db.Schema, "service_settings"}.Sanitize()+` (k text PRIMARY KEY, v text)`)
		return err
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("valid:", migrate.Validate(ctx, db.Pool, db.Schema, widgets) == nil)
	// Output:
	// applied: [1 2]
	// valid: true
}
