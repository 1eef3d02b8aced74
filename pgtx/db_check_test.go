package pgtx_test

import (
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/pgtx"
)

var (
	_ pgtx.Querier    = (*pgxpool.Pool)(nil)
	_ pgtx.TxBeginner = (*pgxpool.Pool)(nil)
	_ pgtx.Querier    = (*pgxpool.Conn)(nil)
)
