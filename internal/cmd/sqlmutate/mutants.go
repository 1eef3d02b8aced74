package main

import (
	"sort"
	"strconv"
	"strings"
)

// mutant is one mutation of one statement's guard.
type mutant struct {
	Statement string `json:"statement"` // pkg.name
	Kind      string `json:"kind"`      // conjunct, disjunct, compare, status, lock, limit
	Desc      string `json:"desc"`
	File      string `json:"file"` // its .sql file
	Line      int    `json:"line"` // the changed line in File
	Orig      string `json:"orig"` // that line before
	New       string `json:"new"`  // and after the mutation
	Text      string `json:"-"`    // the whole mutated statement
}

// edit replaces text[start:end] with repl.
type edit struct {
	start, end int
	repl       string
	kind, desc string
}

// enums maps a column (matched by the longest suffix of the identifier
// before a literal) to the values of its status enumeration.
type enums map[string][]int

// generate returns the guard mutants of text, deduplicated, in the order
// of their position in the text.
func generate(text string, statuses enums) []mutant {
	toks := lex(text)
	var edits []edit
	edits = append(edits, conditionEdits(text, toks)...)
	edits = append(edits, compareEdits(toks)...)
	edits = append(edits, statusEdits(toks, statuses)...)
	edits = append(edits, lockEdits(text, toks)...)
	edits = append(edits, limitEdits(text, toks)...)
	sort.SliceStable(edits, func(i, j int) bool { return edits[i].start < edits[j].start })
	seen := map[string]bool{text: true}
	var out []mutant
	for _, e := range edits {
		m := text[:e.start] + e.repl + text[e.end:]
		if seen[m] {
			continue
		}
		seen[m] = true
		line := strings.Count(text[:e.start], "\n")
		out = append(out, mutant{
			Kind: e.kind, Desc: e.desc, Line: line,
			Orig: strings.TrimSpace(strings.Split(text, "\n")[line]),
			New:  strings.TrimSpace(strings.Split(m, "\n")[line]),
			Text: m,
		})
	}
	return out
}

// levels returns, for each token, the nesting depth before it: ( and [
// and CASE open a level, ) and ] and END close one.
func levels(toks []token) []int {
	lv := make([]int, len(toks))
	d := 0
	for i, t := range toks {
		if closes(t) {
			d--
		}
		lv[i] = d
		if opens(t) {
			d++
		}
	}
	return lv
}

func opens(t token) bool {
	return (t.kind == tPunct && (t.text == "(" || t.text == "[")) || (t.kind == tWord && t.upper == "CASE")
}

func closes(t token) bool {
	return (t.kind == tPunct && (t.text == ")" || t.text == "]")) || (t.kind == tWord && t.upper == "END")
}

// stopWords end a WHERE, HAVING or ON condition at its own level.
var stopWords = map[string]bool{
	"GROUP": true, "ORDER": true, "LIMIT": true, "OFFSET": true, "FOR": true, "RETURNING": true,
	"UNION": true, "EXCEPT": true, "INTERSECT": true, "HAVING": true, "WINDOW": true, "DO": true,
	"JOIN": true, "LEFT": true, "RIGHT": true, "INNER": true, "FULL": true, "CROSS": true,
	"WHERE": true, "ON": true, "FETCH": true, "USING": true, "SET": true,
}

// conditionEdits drops, one at a time, each conjunct (or disjunct) of
// every WHERE, HAVING, JOIN … ON and CASE WHEN condition, nested
// parenthesised conditions included.
func conditionEdits(text string, toks []token) []edit {
	var out []edit
	for i, t := range toks {
		if t.kind != tWord {
			continue
		}
		switch t.upper {
		case "WHERE", "HAVING", "WHEN":
		case "ON":
			if i+1 < len(toks) && (toks[i+1].upper == "CONFLICT" || toks[i+1].upper == "CONSTRAINT") {
				continue
			}
			if i > 0 && toks[i-1].upper == "CONFLICT" {
				continue
			}
		default:
			continue
		}
		end := conditionEnd(toks, i+1, t.upper == "WHEN")
		out = append(out, splitEdits(text, toks, i+1, end, t.upper)...)
	}
	return out
}

// conditionEnd returns the index of the token after the condition that
// starts at toks[start].
func conditionEnd(toks []token, start int, when bool) int {
	d := 0
	for j := start; j < len(toks); j++ {
		t := toks[j]
		switch {
		case opens(t):
			d++
		case closes(t):
			if d == 0 {
				return j
			}
			d--
		case d != 0:
		case t.kind == tPunct && (t.text == "," || t.text == ";"):
			return j
		case t.kind == tWord && when && t.upper == "THEN":
			return j
		case t.kind == tWord && !when && stopWords[t.upper]:
			return j
		}
	}
	return len(toks)
}

// splitEdits splits toks[s:e] at its top-level OR (or, without one, at its
// top-level AND) and drops each part; a part wholly in parentheses is split
// in turn.
func splitEdits(text string, toks []token, s, e int, clause string) []edit {
	if s >= e {
		return nil
	}
	parts := split(toks, s, e, "OR")
	kind, repl := "disjunct", "(false AND (%s) IS NULL)"
	if len(parts) == 1 {
		parts = split(toks, s, e, "AND")
		kind, repl = "conjunct", "(true OR (%s) IS NULL)"
	}
	var out []edit
	for _, p := range parts {
		a, b := toks[p[0]].start, toks[p[1]-1].end
		part := text[a:b]
		out = append(out, edit{start: a, end: b, repl: strings.Replace(repl, "%s", part, 1),
			kind: kind, desc: "drop " + kind + " of " + clause + ": " + oneLine(part)})
		if inner, ok := parenthesised(toks, p[0], p[1]); ok {
			out = append(out, splitEdits(text, toks, inner[0], inner[1], clause)...)
		}
	}
	return out
}

// split returns the [start, end) token ranges of toks[s:e] between the
// top-level keywords sep (the AND of a BETWEEN excepted).
func split(toks []token, s, e int, sep string) [][2]int {
	var parts [][2]int
	d, from, between := 0, s, false
	for j := s; j < e; j++ {
		t := toks[j]
		switch {
		case opens(t):
			d++
		case closes(t):
			d--
		case d == 0 && t.kind == tWord && t.upper == "BETWEEN":
			between = true
		case d == 0 && t.kind == tWord && t.upper == sep:
			if sep == "AND" && between {
				between = false
				continue
			}
			if j > from {
				parts = append(parts, [2]int{from, j})
			}
			from = j + 1
		}
	}
	if e > from {
		parts = append(parts, [2]int{from, e})
	}
	return parts
}

// parenthesised reports whether toks[s:e] is one parenthesised condition
// (not a subquery) and returns its inside.
func parenthesised(toks []token, s, e int) ([2]int, bool) {
	if e-s < 3 || toks[s].text != "(" || toks[e-1].text != ")" {
		return [2]int{}, false
	}
	d := 0
	for j := s; j < e-1; j++ {
		if opens(toks[j]) {
			d++
		} else if closes(toks[j]) {
			d--
		}
		if d == 0 {
			return [2]int{}, false // the first ( closes before the end
		}
	}
	switch toks[s+1].upper {
	case "SELECT", "WITH", "VALUES":
		return [2]int{}, false
	}
	return [2]int{s + 1, e - 1}, true
}

var flips = map[string]string{"<": "<=", "<=": "<", ">": ">=", ">=": ">", "=": "<>", "<>": "=", "!=": "="}

// compareEdits flips each comparison operator; the = of a SET list is an
// assignment and stays.
func compareEdits(toks []token) []edit {
	assign := assignments(toks)
	var out []edit
	for i, t := range toks {
		to, ok := flips[t.text]
		if t.kind != tOp || !ok || assign[i] {
			continue
		}
		out = append(out, edit{start: t.start, end: t.end, repl: to, kind: "compare",
			desc: "flip " + t.text + " to " + to + " in " + around(toks, i)})
	}
	return out
}

// assignments marks the = tokens of SET lists.
func assignments(toks []token) map[int]bool {
	lv := levels(toks)
	out := map[int]bool{}
	for i, t := range toks {
		if t.kind != tWord || t.upper != "SET" {
			continue
		}
		for j := i + 1; j < len(toks) && lv[j] >= lv[i]; j++ {
			u := toks[j]
			if lv[j] == lv[i] && u.kind == tWord && (u.upper == "WHERE" || u.upper == "FROM" || u.upper == "RETURNING") {
				break
			}
			if lv[j] == lv[i] && u.text == "=" {
				out[j] = true
			}
		}
	}
	return out
}

// statusEdits swaps each status literal (a number of the column's enum
// compared with, or assigned to, a column whose name ends in a key of
// statuses) for the next value of its enum.
func statusEdits(toks []token, statuses enums) []edit {
	var out []edit
	for i, t := range toks {
		if t.kind != tNumber {
			continue
		}
		col := statusColumn(toks, i)
		vals := statuses.of(col)
		v, err := strconv.Atoi(t.text)
		k := indexOf(vals, v)
		if col == "" || err != nil || k < 0 || len(vals) < 2 {
			continue
		}
		to := strconv.Itoa(vals[(k+1)%len(vals)])
		out = append(out, edit{start: t.start, end: t.end, repl: to, kind: "status",
			desc: "status literal " + t.text + " to " + to + " in " + around(toks, i)})
	}
	return out
}

// statusColumn returns the identifier a literal is compared with or
// assigned to (status = 10, status IN (10, 20), status <> ALL ('{…}')…).
func statusColumn(toks []token, i int) string {
	for j := i - 1; j >= 0; j-- {
		t := toks[j]
		switch {
		case t.kind == tNumber, t.kind == tPunct && (t.text == "," || t.text == "(" || t.text == "["),
			t.kind == tOp && flips[t.text] != "":
		case t.kind == tWord && (t.upper == "IN" || t.upper == "ANY" || t.upper == "ARRAY" || t.upper == "NOT" || t.upper == "ALL"):
		case t.kind == tWord:
			return strings.ToLower(t.text)
		default:
			return ""
		}
	}
	return ""
}

// of returns the enum of the column col: the longest key col ends with.
func (e enums) of(col string) []int {
	best := ""
	for k := range e {
		if strings.HasSuffix(col, k) && len(k) > len(best) {
			best = k
		}
	}
	return e[best]
}

func indexOf(vals []int, v int) int {
	for k, x := range vals {
		if x == v {
			return k
		}
	}
	return -1
}
