package pgtx

import (
	"strings"
)

// endsTx returns the first statement of sql (a queued query's text, one
// statement or several separated by semicolons) that would end the
// transaction RunBatch wraps the batch in before RunBatch's own COMMIT:
// COMMIT, END, ROLLBACK or ABORT (AND CHAIN or not), or PREPARE
// TRANSACTION, as its leading words in upper case; "" when there is none.
// ROLLBACK TO (a savepoint) keeps the transaction and is not one; nor are
// COMMIT PREPARED and ROLLBACK PREPARED, which the server refuses inside a
// transaction block. Words inside comments, quoted strings, quoted
// identifiers and dollar-quoted bodies are not statements.
func endsTx(sql string) string {
	l := lexer{s: sql}
	for {
		first := l.word()
		switch first {
		case "":
		case "COMMIT", "ROLLBACK":
			switch l.word() {
			case "TO", "PREPARED":
			default:
				return first
			}
		case "END", "ABORT":
			return first
		case "PREPARE":
			if l.word() == "TRANSACTION" {
				return "PREPARE TRANSACTION"
			}
		}
		// Most texts are one statement: no semicolon, nothing more to read.
		if strings.IndexByte(l.s[l.i:], ';') < 0 || !l.nextStatement() {
			return ""
		}
	}
}

// lexer walks SQL text for endsTx.
type lexer struct {
	s string
	i int
}

// skip moves past white space and comments.
func (l *lexer) skip() {
	for l.i < len(l.s) {
		c := l.s[l.i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			l.i++
		case strings.HasPrefix(l.s[l.i:], "--"):
			if n := strings.IndexByte(l.s[l.i:], '\n'); n >= 0 {
				l.i += n + 1
			} else {
				l.i = len(l.s)
			}
		case strings.HasPrefix(l.s[l.i:], "/*"):
			l.blockComment()
		default:
			return
		}
	}
}

// blockComment moves past a block comment, nested ones included.
func (l *lexer) blockComment() {
	depth := 0
	for l.i < len(l.s) {
		switch {
		case strings.HasPrefix(l.s[l.i:], "/*"):
			depth++
			l.i += 2
		case strings.HasPrefix(l.s[l.i:], "*/"):
			depth--
			l.i += 2
			if depth == 0 {
				return
			}
		default:
			l.i++
		}
	}
}

// word returns the next bare word after white space and comments, in upper
// case, and moves past it; "" when the next token is not a word.
func (l *lexer) word() string {
	l.skip()
	start := l.i
	for l.i < len(l.s) {
		c := l.s[l.i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= 0x80 || l.i > start && c >= '0' && c <= '9' {
			l.i++
			continue
		}
		break
	}
	return strings.ToUpper(l.s[start:l.i])
}

// nextStatement moves past the rest of the statement and its semicolon,
// over quoted text and comments; it reports whether there is text after.
func (l *lexer) nextStatement() bool {
	for l.i < len(l.s) {
		n := strings.IndexAny(l.s[l.i:], ";'\"$-/")
		if n < 0 {
			l.i = len(l.s)
			return false
		}
		l.i += n
		c := l.s[l.i]
		switch {
		case c == ';':
			l.i++
			return l.i < len(l.s)
		case c == '\'' || c == '"':
			l.quoted(c)
		case c == '$':
			l.dollar()
		case strings.HasPrefix(l.s[l.i:], "--"), strings.HasPrefix(l.s[l.i:], "/*"):
			l.skip()
		default:
			l.i++
		}
	}
	return false
}

// quoted moves past a string or quoted identifier opened by q. A doubled q
// stands for itself; a backslash escapes the next byte only in an E”
// string, as with standard_conforming_strings on (PostgreSQL's default
// since 9.1, and what pgx requires).
func (l *lexer) quoted(q byte) {
	escapes := q == '\'' && l.i > 0 && (l.s[l.i-1] == 'e' || l.s[l.i-1] == 'E')
	l.i++
	for l.i < len(l.s) {
		switch c := l.s[l.i]; {
		case c == '\\' && escapes:
			l.i += 2
		case c == q:
			if l.i+1 < len(l.s) && l.s[l.i+1] == q {
				l.i += 2
				continue
			}
			l.i++
			return
		default:
			l.i++
		}
	}
}

// dollar moves past a dollar-quoted body ($$…$$ or $tag$…$tag$); a $ that
// does not open one ($1, a $ inside a word) is passed over alone.
func (l *lexer) dollar() {
	j := l.i + 1
	for j < len(l.s) && (l.s[j] == '_' || l.s[j] >= 'a' && l.s[j] <= 'z' || l.s[j] >= 'A' && l.s[j] <= 'Z' || l.s[j] >= 0x80 || j > l.i+1 && l.s[j] >= '0' && l.s[j] <= '9') {
		j++
	}
	if j >= len(l.s) || l.s[j] != '$' || l.i > 0 && isIdentByte(l.s[l.i-1]) {
		l.i++
		return
	}
	tag := l.s[l.i : j+1]
	if end := strings.Index(l.s[j+1:], tag); end >= 0 {
		l.i = j + 1 + end + len(tag)
	} else {
		l.i = len(l.s)
	}
}

// isIdentByte reports whether c can continue an identifier.
func isIdentByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}
