package pgtx

import (
	"reflect"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
)

// deferredTxMethods are the pgx.Tx methods deferredTx implements on
// purpose, each deciding whether it may travel behind BEGIN or must begin
// the transaction first. A method pgx adds to pgx.Tx needs that decision
// too: add it to deferredTx and to this list.
var deferredTxMethods = []string{
	"Begin", "Commit", "Conn", "CopyFrom", "Exec", "LargeObjects",
	"Prepare", "Query", "QueryRow", "Rollback", "SendBatch",
}

// TestDeferredTxCoversPgxTx fails when pgx.Tx's method set differs from
// the list deferredTx was written against (the compile-time assertion in
// deferred.go only catches a missing method; this names it, and also a
// method pgx removed).
func TestDeferredTxCoversPgxTx(t *testing.T) {
	it := reflect.TypeFor[pgx.Tx]()
	var got []string
	for i := range it.NumMethod() {
		got = append(got, it.Method(i).Name)
	}
	want := slices.Clone(deferredTxMethods)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("pgx.Tx has methods %v; deferredTx was written for %v: decide how each new method begins the deferred transaction, then update deferredTxMethods", got, want)
	}
	dt := reflect.TypeFor[*deferredTx]()
	for _, m := range want {
		if _, ok := dt.MethodByName(m); !ok {
			t.Errorf("deferredTx lacks %s", m)
		}
	}
}
