package textcheck

import (
	"strings"
	"testing"
)

func TestReason(t *testing.T) {
	for _, c := range []struct {
		s        string
		max      int
		required bool
		want     string
	}{
		{"", 3, true, "empty"},
		{"", 3, false, ""},
		{"abc", 3, true, ""},
		{"日本語", 3, true, ""},
		{"abcd", 3, true, "4 characters, more than the column limit of 3"},
		{strings.Repeat("x", 1000), 0, true, ""},
		{"a\x00b", 3, true, "contains a NUL byte"},
		{"a\xffb", 3, true, "not valid UTF-8"},
	} {
		if got := Reason(c.s, c.max, c.required); got != c.want {
			t.Errorf("Reason(%q, %d, %v) = %q, want %q", c.s, c.max, c.required, got, c.want)
		}
	}
	if Storable("a\x00") || Storable("\xff") || !Storable("ok") {
		t.Error("Storable")
	}
	if got := Message("inbox", "Message.Group", "empty"); got != "inbox: invalid Message.Group: empty" {
		t.Error(got)
	}
}
