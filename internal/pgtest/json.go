package pgtest

import (
	"encoding/json"
	"testing"
)

// JSONSame reports whether two JSON texts hold the same value (jsonb
// normalises spacing and key order, so stored JSON rarely comes back byte
// for byte).
func JSONSame(t testing.TB, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	p, _ := json.Marshal(x)
	q, _ := json.Marshal(y)
	return string(p) == string(q)
}
