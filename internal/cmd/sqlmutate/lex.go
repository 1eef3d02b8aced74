package main

import (
	"strings"
)

// tokKind is the kind of one lexical token of a statement.
type tokKind int

const (
	tWord   tokKind = iota // identifier, keyword, "quoted", {schema}
	tNumber                // 10, 1.5
	tString                // 'text', E'text', $$text$$
	tParam                 // $1
	tOp                    // = <> <= :: || …
	tPunct                 // ( ) , ; [ ] .
)

// token is one token of a statement's text: text[start:end].
type token struct {
	kind       tokKind
	start, end int
	text       string
	upper      string // text in upper case, for keywords
}

const opChars = "+-*/<>=~!@#%^&|`?:"

// lex splits a statement into tokens. It knows enough of PostgreSQL's
// lexical rules for the statements of this module: no comments (sqlfile
// keeps them in the header), quoted identifiers, strings, dollar quotes,
// parameters, and the {schema} placeholder.
func lex(s string) []token {
	var out []token
	for i := 0; i < len(s); {
		c := s[i]
		start := i
		var kind tokKind
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
			continue
		case c == '{':
			kind, i = tWord, i+strings.IndexByte(s[i:], '}')+1
		case c == '"':
			kind, i = tWord, i+1+strings.IndexByte(s[i+1:], '"')+1
		case c == '\'' || ((c == 'E' || c == 'e') && i+1 < len(s) && s[i+1] == '\''):
			kind, i = tString, endOfString(s, i)
		case c == '$' && i+1 < len(s) && isDigit(s[i+1]):
			kind, i = tParam, scan(s, i+1, isDigit)
		case c == '$':
			end := strings.IndexByte(s[i+1:], '$')
			tag := s[i : i+end+2]
			kind, i = tString, i+len(tag)+strings.Index(s[i+len(tag):], tag)+len(tag)
		case isDigit(c):
			kind, i = tNumber, scan(s, i, func(b byte) bool { return isDigit(b) || b == '.' })
		case isWord(c):
			kind, i = tWord, scan(s, i, isWord)
		case strings.IndexByte(opChars, c) >= 0:
			kind, i = tOp, scan(s, i, func(b byte) bool { return strings.IndexByte(opChars, b) >= 0 })
		default:
			kind, i = tPunct, i+1
		}
		out = append(out, token{kind: kind, start: start, end: i, text: s[start:i], upper: strings.ToUpper(s[start:i])})
	}
	return out
}

func endOfString(s string, i int) int {
	i = strings.IndexByte(s[i:], '\'') + i + 1
	for i < len(s) {
		if s[i] == '\'' {
			if i+1 < len(s) && s[i+1] == '\'' {
				i += 2
				continue
			}
			return i + 1
		}
		i++
	}
	return i
}

func scan(s string, i int, ok func(byte) bool) int {
	for i < len(s) && ok(s[i]) {
		i++
	}
	return i
}

func isDigit(b byte) bool { return b >= '0' && b <= '9' }

func isWord(b byte) bool {
	return b == '_' || isDigit(b) || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z')
}
