package jsonb_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/seckillkit/seckill/internal/jsonb"
	"github.com/seckillkit/seckill/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// FuzzCheckAgreesWithPostgres: for valid JSON, Check accepts only what
// PostgreSQL's jsonb input accepts (and, outside absurd zero-valued
// exponents, rejects what it rejects).
func FuzzCheckAgreesWithPostgres(f *testing.F) {
	pool := pgtest.Pool(f)
	ctx := pgtest.Context(f, 5*time.Minute)
	for _, s := range []string{`{}`, `"\u0000"`, `"\\u0000"`, `"\ud800"`, `"\udc00"`, `"\ud800\udc00"`, `"\ud800\u0041"`,
		`"\uD83D\uDE80"`, `"\ud800\n"`, `["\ud83d", "\ude80"]`, `1e131071`, `1e131072`, `1.5e131071`, `123456789e131064`,
		`1e-16383`, `1e-16384`, `0.1e-16382`, `0.0e-99999999`, `-0`, `1E+2`, `{"a":[1,2,{"b":"\u00e9"}]}`,
		"0." + strings.Repeat("1", 16383), "0." + strings.Repeat("1", 16384)} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		checkErr := jsonb.Check(b)
		var out []byte
		pgErr := pool.QueryRow(ctx, `SELECT $1::jsonb::text`, string(b)).Scan(&out)
		if checkErr == nil && pgErr != nil {
			t.Fatalf("Check accepted %q, PostgreSQL rejects it: %v", b, pgErr)
		}
		if checkErr != nil && pgErr == nil && !strings.ContainsAny(string(b), "eE") {
			t.Fatalf("Check rejected %q (%v), PostgreSQL accepts it", b, checkErr)
		}
	})
}
