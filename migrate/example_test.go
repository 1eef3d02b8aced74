package migrate_test

import (
	"context"
	"fmt"
	"os"

	"github.com/seckillkit/seckill/migrate"
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
