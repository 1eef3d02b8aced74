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
	s := &splitter{src: src, line: 1, atLineStart: true}
	for s.i < len(src) {
		if s.atLineStart {
			done, err := s.annotation()
			if err != nil {
				return nil, err
			}
			if done {
				continue
			}
		}
		s.atLineStart = false
		if err := s.lexeme(); err != nil {
			return nil, err
		}
	}
	if s.inBlock {
		return nil, errAt(s.blockAt, "-- +goose StatementBegin without StatementEnd")
	}
	s.flush()
	return s.out, nil
}

// splitter is the state of splitStatements: the position in src and the
// statement being read.
type splitter struct {
	src         string
	i           int  // next byte of src to read
	line        int  // line of src[i], 1-based
	atLineStart bool // src[i] starts a line (a goose annotation may follow)

	out     []statement
	sql     strings.Builder // current statement as written
	norm    strings.Builder // current statement normalised
	started bool            // the current statement has a token
	start   int             // line of its first token
	inBlock bool            // inside StatementBegin … StatementEnd
	blockAt int
	// In norm, whitespace and comments separate two tokens by one space
	// where both sides are word characters, and by nothing elsewhere.
	pendingSpace bool
}

func errAt(l int, format string, args ...any) error {
	return fmt.Errorf("line %d: %s", l, fmt.Sprintf(format, args...))
}

// space notes whitespace or a comment between two tokens.
func (s *splitter) space() { s.pendingSpace = s.started }

// token adds tok, a token of the current statement.
func (s *splitter) token(tok string) {
	if !s.started {
		s.started, s.start = true, s.line
	}
	if s.pendingSpace && s.norm.Len() > 0 && identByte(s.norm.String()[s.norm.Len()-1]) && identByte(tok[0]) {
		s.norm.WriteByte(' ')
	}
	s.pendingSpace = false
	s.sql.WriteString(tok)
	s.norm.WriteString(tok)
}

// flush ends the current statement, if it has a token.
func (s *splitter) flush() {
	if s.started {
		s.out = append(s.out, statement{
			sql:   strings.TrimSpace(s.sql.String()),
			norm:  strings.TrimSpace(s.norm.String()),
			line:  s.start,
			block: s.inBlock,
		})
	}
	s.sql.Reset()
	s.norm.Reset()
	s.started, s.pendingSpace = false, false
}

// restOfLine returns the length of the rest of the current line, without
// its newline.
func (s *splitter) restOfLine() int {
	end := strings.IndexByte(s.src[s.i:], '\n')
	if end < 0 {
		end = len(s.src) - s.i
	}
	return end
}

// annotation handles a goose annotation at the start of a line: done is
// true when the line was one (and has been read), false when it is SQL.
func (s *splitter) annotation() (done bool, err error) {
	end := s.restOfLine()
	switch cmd := gooseAnnotation(s.src[s.i : s.i+end]); cmd {
	case "":
		return false, nil
	case gooseUp:
		if s.inBlock {
			return false, errAt(s.line, "-- +goose Up inside a StatementBegin block")
		}
	case gooseStatementBegin:
		if s.inBlock {
			return false, errAt(s.line, "-- +goose StatementBegin inside the block begun on line %d", s.blockAt)
		}
		if s.started && strings.TrimSpace(s.sql.String()) != "" {
			return false, errAt(s.line, "-- +goose StatementBegin inside the statement begun on line %d (missing ';'?)", s.start)
		}
		s.flush()
		s.inBlock, s.blockAt = true, s.line
	case gooseStatementEnd:
		if !s.inBlock {
			return false, errAt(s.line, "-- +goose StatementEnd without StatementBegin")
		}
		sql := strings.TrimSpace(s.sql.String())
		if !s.started || sql == "" || sql == ";" {
			return false, errAt(s.line, "empty StatementBegin block (begun on line %d)", s.blockAt)
		}
		// The block's statement may end with its own ';'.
		trimEnd(&s.sql, &s.norm)
		s.flush()
		s.inBlock = false
	default:
		return false, errAt(s.line, "goose annotation %q: only Up, StatementBegin and StatementEnd are allowed "+
			"(a Down section belongs in a .down.sql file; golang-migrate would run it as part of the up migration)",
			strings.TrimSpace(s.src[s.i:s.i+end]))
	}
	s.i += end
	s.atLineStart = false
	return true, nil
}

// lexeme reads one piece of SQL: whitespace, a comment, a string or quoted
// identifier, a dollar quote, a ';' or any other byte of a token.
func (s *splitter) lexeme() error {
	src, i, c := s.src, s.i, s.src[s.i]
	switch {
	case c == '\n':
		s.line++
		s.atLineStart = true
		s.sql.WriteByte(c)
		s.space()
		s.i++
	case c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v':
		s.sql.WriteByte(c)
		s.space()
		s.i++
	case c == '-' && i+1 < len(src) && src[i+1] == '-':
		end := s.restOfLine()
		if s.started {
			s.sql.WriteString(src[i : i+end])
		}
		s.space()
		s.i += end
	case c == '/' && i+1 < len(src) && src[i+1] == '*':
		n, lines, ok := blockComment(src[i:])
		if !ok {
			return errAt(s.line, "comment /* never closed")
		}
		if s.started {
			s.sql.WriteString(src[i : i+n])
		}
		s.space()
		s.line += lines
		s.i += n
	case c == '\'' || c == '"':
		return s.quotedToken(c)
	case c == '$' && (i == 0 || !identByte(src[i-1])):
		return s.dollarToken()
	case c == ';' && !s.inBlock:
		s.flush()
		s.i++
	default:
		s.token(src[i : i+1])
		s.i++
	}
	return nil
}

// quotedToken reads a string ('…', E'…' with backslash escapes) or a quoted
// identifier ("…") starting with quote q.
func (s *splitter) quotedToken(q byte) error {
	src, i := s.src, s.i
	escapes := q == '\'' && i > 0 && (src[i-1] == 'E' || src[i-1] == 'e') && (i < 2 || !identByte(src[i-2]))
	n, lines, ok := quoted(src[i:], q, escapes)
	if !ok {
		what := "string"
		if q == '"' {
			what = "quoted identifier"
		}
		return errAt(s.line, "%s never closed", what)
	}
	s.token(src[i : i+n])
	s.line += lines
	s.i += n
	return nil
}

// dollarToken reads a dollar-quoted body ($$…$$, $tag$…$tag$), or a '$'
// that starts none (a parameter such as $1, or a plain '$').
func (s *splitter) dollarToken() error {
	src, i := s.src, s.i
	tag, ok := dollarTag(src[i:])
	if !ok {
		s.token(src[i : i+1])
		s.i++
		return nil
	}
	end := strings.Index(src[i+len(tag):], tag)
	if end < 0 {
		return errAt(s.line, "dollar quote %s never closed", tag)
	}
	n := len(tag) + end + len(tag)
	s.token(src[i : i+n])
	s.line += strings.Count(src[i:i+n], "\n")
	s.i += n
	return nil
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
