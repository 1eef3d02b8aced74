package main

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestDatabaseUnavailable: what a payment callback retries through a
// failover (no server, a server shutting down or read-only, a cut
// connection) and what it does not (a refused request, a cancelled run).
func TestDatabaseUnavailable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{&pgconn.PgError{Code: "25006"}, true}, // read-only: a demoted leader
		{&pgconn.PgError{Code: "57P01"}, true}, // terminated by a shutdown
		{&pgconn.PgError{Code: "08006"}, true}, // connection failure
		{fmt.Errorf("pay: %w", &pgconn.PgError{Code: "57P03"}), true},
		{&pgconn.PgError{Code: "23505"}, false}, // a unique violation is an answer
		{&pgconn.PgError{Code: "22P02"}, false},
		{errors.New("amount does not match"), false},
		{context.Canceled, false},
	} {
		if got := databaseUnavailable(tc.err); got != tc.want {
			t.Errorf("databaseUnavailable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
