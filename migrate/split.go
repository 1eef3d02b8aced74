package migrate

import (
	"fmt"
	"strings"
)

// statement is one SQL statement of a migration file.
type statement struct {
	sql   string // as written, from its first token to its end (no ';')
	norm  string // without comments, whitespace runs outside quotes as one space
	line  int    // line of its first token, 1-based
	block bool   // written between -- +goose StatementBegin and StatementEnd
}

// goose annotations this package understands. A file may carry them so
// that goose can run it; golang-migrate and PostgreSQL read them as
// comments.
const (
	gooseUp             = "up"
	gooseStatementBegin = "statementbegin"
	gooseStatementEnd   = "statementend"
)

// gooseAnnotation returns the lower-cased command of a goose annotation
// line ("-- +goose Up" gives "up"), or "" when line is not one.
func gooseAnnotation(line string) string {
	line = strings.TrimSpace(line)
	rest, ok := strings.CutPrefix(line, "-- +goose ")
	if !ok {
		return ""
	}
	return strings.ToLower(strings.TrimSpace(rest))
}

// splitStatements splits a migration file into the statements it holds,
// each to be sent on its own. It knows what a semicolon inside a statement
// can be: part of a string ('…', E'…' with backslash escapes), a quoted
// identifier ("…"), a dollar-quoted body ($$…$$, $tag$…$tag$) or a comment
// (-- … and nested /* … */). A statement written between the goose
// annotations -- +goose StatementBegin and -- +goose StatementEnd is one
// statement whatever it contains (for bodies such as BEGIN ATOMIC … END).
// Comments and blank text between statements are dropped. A file that
// ends inside a string, identifier, dollar quote or comment, or whose goose
// annotations are unbalanced or not Up, StatementBegin or StatementEnd
// (for example a -- +goose Down section, which golang-migrate would run),
// gives an error saying where.
func splitStatements(src string) ([]statement, error) {
	var (
		out     []statement
		sql     strings.Builder // current statement as written
		norm    strings.Builder // current statement normalised
		started bool            // the current statement has a token
		start   int             // line of its first token
		inBlock bool            // inside StatementBegin … StatementEnd
		blockAt int
		line    = 1
	)
	// In norm, whitespace and comments separate two tokens by one space
	// where both sides are word characters, and by nothing elsewhere.
	pendingSpace := false
	space := func() { pendingSpace = started }
	token := func(s string) {
		if !started {
			started, start = true, line
		}
		if pendingSpace && norm.Len() > 0 && identByte(norm.String()[norm.Len()-1]) && identByte(s[0]) {
			norm.WriteByte(' ')
		}
		pendingSpace = false
		sql.WriteString(s)
		norm.WriteString(s)
	}
	flush := func() {
		if started {
			out = append(out, statement{
				sql:   strings.TrimSpace(sql.String()),
				norm:  strings.TrimSpace(norm.String()),
				line:  start,
				block: inBlock,
			})
		}
		sql.Reset()
		norm.Reset()
		started, pendingSpace = false, false
	}
	errAt := func(l int, format string, args ...any) error {
		return fmt.Errorf("line %d: %s", l, fmt.Sprintf(format, args...))
	}
	atLineStart := true
	for i := 0; i < len(src); {
		c := src[i]
		if atLineStart {
			end := strings.IndexByte(src[i:], '\n')
			if end < 0 {
				end = len(src) - i
			}
			switch cmd := gooseAnnotation(src[i : i+end]); cmd {
			case "":
			case gooseUp:
				if inBlock {
					return nil, errAt(line, "-- +goose Up inside a StatementBegin block")
				}
				i += end
				atLineStart = false
				continue
			case gooseStatementBegin:
				if inBlock {
					return nil, errAt(line, "-- +goose StatementBegin inside the block begun on line %d", blockAt)
				}
				if started && strings.TrimSpace(sql.String()) != "" {
					return nil, errAt(line, "-- +goose StatementBegin inside the statement begun on line %d (missing ';'?)", start)
				}
				flush()
				inBlock, blockAt = true, line
				i += end
				atLineStart = false
				continue
			case gooseStatementEnd:
				if !inBlock {
					return nil, errAt(line, "-- +goose StatementEnd without StatementBegin")
				}
				s := strings.TrimSpace(sql.String())
				if !started || s == "" || s == ";" {
					return nil, errAt(line, "empty StatementBegin block (begun on line %d)", blockAt)
				}
				// The block's statement may end with its own ';'.
				trimEnd(&sql, &norm)
				flush()
				inBlock = false
				i += end
				atLineStart = false
				continue
			default:
				return nil, errAt(line, "goose annotation %q: only Up, StatementBegin and StatementEnd are allowed "+
					"(a Down section belongs in a .down.sql file; golang-migrate would run it as part of the up migration)",
					strings.TrimSpace(src[i:i+end]))
			}
		}
		atLineStart = false
		switch {
		case c == '\n':
			line++
			atLineStart = true
			sql.WriteByte(c)
			space()
			i++
		case c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v':
			sql.WriteByte(c)
			space()
			i++
		case c == '-' && i+1 < len(src) && src[i+1] == '-':
			end := strings.IndexByte(src[i:], '\n')
			if end < 0 {
				end = len(src) - i
			}
			if started {
				sql.WriteString(src[i : i+end])
			}
			space()
			i += end
		case c == '/' && i+1 < len(src) && src[i+1] == '*':
			n, lines, ok := blockComment(src[i:])
			if !ok {
				return nil, errAt(line, "comment /* never closed")
			}
			if started {
				sql.WriteString(src[i : i+n])
			}
			space()
			line += lines
			i += n
		case c == '\'' || c == '"':
			escapes := c == '\'' && i > 0 && (src[i-1] == 'E' || src[i-1] == 'e') && (i < 2 || !identByte(src[i-2]))
			n, lines, ok := quoted(src[i:], c, escapes)
			if !ok {
				what := "string"
				if c == '"' {
					what = "quoted identifier"
				}
				return nil, errAt(line, "%s never closed", what)
			}
			token(src[i : i+n])
			line += lines
			i += n
		case c == '$' && (i == 0 || !identByte(src[i-1])):
			tag, ok := dollarTag(src[i:])
			if !ok { // a parameter such as $1, or a plain '$'
				token(src[i : i+1])
				i++
				break
			}
			end := strings.Index(src[i+len(tag):], tag)
			if end < 0 {
				return nil, errAt(line, "dollar quote %s never closed", tag)
			}
			n := len(tag) + end + len(tag)
			token(src[i : i+n])
			line += strings.Count(src[i:i+n], "\n")
			i += n
		case c == ';' && !inBlock:
			flush()
			i++
		default:
			token(src[i : i+1])
			i++
		}
	}
	if inBlock {
		return nil, errAt(blockAt, "-- +goose StatementBegin without StatementEnd")
	}
	flush()
	return out, nil
}

// trimEnd removes a trailing ';' (and the space after it) from a block's
// statement.
func trimEnd(sql, norm *strings.Builder) {
	for _, b := range []*strings.Builder{sql, norm} {
		s := strings.TrimRight(b.String(), " \t\r\n")
		s = strings.TrimSuffix(s, ";")
		b.Reset()
		b.WriteString(s)
	}
}

func identByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

// blockComment returns the length of the (possibly nested) /* … */
// comment at the start of s and the newlines in it.
func blockComment(s string) (n, lines int, ok bool) {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '/' && i+1 < len(s) && s[i+1] == '*':
			depth++
			i++
		case s[i] == '*' && i+1 < len(s) && s[i+1] == '/':
			depth--
			i++
			if depth == 0 {
				return i + 1, lines, true
			}
		case s[i] == '\n':
			lines++
		}
	}
	return 0, 0, false
}

// quoted returns the length of the string or identifier quoted with q at
// the start of s (a doubled quote is part of it; with escapes, so is a
// backslash-escaped character) and the newlines in it.
func quoted(s string, q byte, escapes bool) (n, lines int, ok bool) {
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if escapes {
				i++
				if i < len(s) && s[i] == '\n' {
					lines++
				}
			}
		case '\n':
			lines++
		case q:
			if i+1 < len(s) && s[i+1] == q {
				i++
				continue
			}
			return i + 1, lines, true
		}
	}
	return 0, 0, false
}

// dollarTag returns the opening dollar quote ($$ or $tag$) at the start of
// s, if there is one.
func dollarTag(s string) (string, bool) {
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '$':
			return s[:i+1], true
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80:
		case c >= '0' && c <= '9' && i > 1:
		default:
			return "", false
		}
	}
	return "", false
}
