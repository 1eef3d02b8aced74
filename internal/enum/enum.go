// Package enum holds the code every status type of the kit shares: the
// names of a small integer enumeration mirrored 1:1 from a CHECK
// constraint, its valid values in order, and a transition table. Each
// package keeps its own exported type and constants and delegates to a Set
// and a Transitions declared once beside them.
package enum

import (
	"slices"
	"strconv"
)

// Integer is the underlying type of the kit's status codes.
type Integer interface {
	~int16 | ~int32 | ~int64 | ~int
}

// Set is an enumeration's names: its valid values and the name of each. A
// Set is built once (New) and never modified.
type Set[T Integer] struct {
	typeName string
	values   []T
	names    map[T]string
}

// New returns the Set of the given values and names; typeName is used by
// Name for a value outside the set ("Status(7)").
func New[T Integer](typeName string, names map[T]string) *Set[T] {
	s := &Set[T]{typeName: typeName, names: names}
	for v := range names {
		s.values = append(s.values, v)
	}
	slices.Sort(s.values)
	return s
}

// Values returns every value in ascending order, as a fresh slice.
func (s *Set[T]) Values() []T { return slices.Clone(s.values) }

// Valid reports whether v is one of the values.
func (s *Set[T]) Valid(v T) bool {
	_, ok := s.names[v]
	return ok
}

// Name returns v's name, or "TypeName(v)" for a value outside the set.
func (s *Set[T]) Name(v T) string {
	if n, ok := s.names[v]; ok {
		return n
	}
	return s.typeName + "(" + strconv.FormatInt(int64(v), 10) + ")"
}

// Transitions is a state machine's table: target → the states it may be
// reached from, in ascending order. It is never modified.
type Transitions[T Integer] map[T][]T

// AllowedFrom returns the states from which to may be reached, as a fresh
// slice; nil when to is no target.
func (t Transitions[T]) AllowedFrom(to T) []T { return slices.Clone(t[to]) }

// Can reports whether the table allows from → to.
func (t Transitions[T]) Can(from, to T) bool { return slices.Contains(t[to], from) }
