package enum

import (
	"slices"
	"testing"
)

type color int16

func TestSet(t *testing.T) {
	s := New("color", map[color]string{30: "BLUE", 10: "RED", 20: "GREEN"})
	if got := s.Values(); !slices.Equal(got, []color{10, 20, 30}) {
		t.Fatalf("Values = %v", got)
	}
	v := s.Values()
	v[0] = 99
	if s.Values()[0] != 10 {
		t.Fatal("Values shares its slice with the caller")
	}
	if !s.Valid(20) || s.Valid(0) {
		t.Fatal("Valid")
	}
	if s.Name(10) != "RED" || s.Name(-7) != "color(-7)" {
		t.Fatalf("Name: %q %q", s.Name(10), s.Name(-7))
	}
}

func TestTransitions(t *testing.T) {
	tr := Transitions[color]{20: {10}, 30: {10, 20}}
	if !tr.Can(10, 30) || tr.Can(30, 10) || tr.Can(20, 20) {
		t.Fatal("Can")
	}
	a := tr.AllowedFrom(30)
	a[0] = 99
	if tr.AllowedFrom(30)[0] != 10 {
		t.Fatal("AllowedFrom shares its slice")
	}
	if tr.AllowedFrom(10) != nil {
		t.Fatal("AllowedFrom of a non-target")
	}
}
