package racetest

import (
	"strings"
	"testing"
)

type fakeStore struct{}

func (*fakeStore) Guarded()   {}
func (*fakeStore) Read()      {}
func (*fakeStore) NewMethod() {}

// TestUncoveredNamesEveryGap: a method in neither list, a method in both,
// a name that is no method and a reason left empty are each reported; a
// complete table reports nothing.
func TestUncoveredNamesEveryGap(t *testing.T) {
	t.Parallel()
	races := []Race{{Method: "Guarded"}, {Method: "Read"}, {Method: "Gone"}}
	got := strings.Join(Uncovered(&fakeStore{}, races, map[string]string{"Read": "read only", "Old": ""}), "\n")
	for _, want := range []string{
		"NewMethod has no row in the race table",
		"Read is both in the race table and listed as guarding nothing",
		"names Gone, which is not a method",
		"names Old, which is not a method",
		"Old is listed as guarding nothing without a reason",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if p := Uncovered(&fakeStore{}, []Race{{Method: "Guarded"}, {Method: "NewMethod"}}, map[string]string{"Read": "read only"}); len(p) != 0 {
		t.Errorf("complete table reported %v", p)
	}
}
