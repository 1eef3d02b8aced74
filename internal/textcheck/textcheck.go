// Package textcheck holds the checks every package makes on a value bound
// for a PostgreSQL text or varchar column, and the shared wording of the
// packages' ValidationError messages. Each package wraps the reason in its
// own ValidationError, so errors.As keeps working per package.
package textcheck

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Storable reports whether PostgreSQL text can hold s: valid UTF-8
// without NUL bytes.
func Storable(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

// Reason returns why s cannot be stored in a column of at most max
// characters (0: no limit), or "" when it can: empty when required, not
// valid UTF-8, a NUL byte, too long (counted in characters, as PostgreSQL
// counts them).
func Reason(s string, max int, required bool) string {
	switch {
	case s == "" && required:
		return "empty"
	case !utf8.ValidString(s):
		return "not valid UTF-8"
	case strings.IndexByte(s, 0) >= 0:
		return "contains a NUL byte"
	}
	if n := utf8.RuneCountInString(s); max > 0 && n > max {
		return fmt.Sprintf("%d characters, more than the column limit of %d", n, max)
	}
	return ""
}

// Message is the text of every package's ValidationError:
// "pkg: invalid Field: reason".
func Message(pkg, field, reason string) string {
	return pkg + ": invalid " + field + ": " + reason
}
