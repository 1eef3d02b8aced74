package inbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/pgtx"
)

// Lookup returns the inbox row of key as db sees it: a committed row, or
// one claimed earlier in the transaction db is. No row returns an error
// matching [ErrNotFound]. It writes nothing.
func (in *Store) Lookup(ctx context.Context, db pgtx.Querier, key Key) (_ Record, err error) {
	defer in.fail.Explain(&err)
	if db == nil {
		return Record{}, nilHandle("db")
	}
	if err := key.validate("Key."); err != nil {
		return Record{}, err
	}
	c, err := scanClaim(db.QueryRow(ctx, in.sql.lookup, key.Group, key.MessageID), key)
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, notFound("look up", key)
	}
	if err != nil {
		return Record{}, fmt.Errorf("inbox: look up message %s in group %q: %w", key.MessageID, key.Group, err)
	}
	return c.Record, nil
}
