package main

import "strings"

// lockEdits removes each locking clause (FOR UPDATE, FOR NO KEY UPDATE,
// FOR SHARE, FOR KEY SHARE, with its OF list and NOWAIT / SKIP LOCKED),
// and, separately, each SKIP LOCKED alone.
func lockEdits(text string, toks []token) []edit {
	var out []edit
	for i := 0; i < len(toks); i++ {
		if toks[i].upper != "FOR" || i+1 >= len(toks) {
			continue
		}
		j := lockStrength(toks, i+1)
		if j < 0 {
			continue
		}
		if j < len(toks) && toks[j].upper == "OF" {
			for j++; j < len(toks) && (toks[j].kind == tWord || toks[j].text == "," || toks[j].text == "."); j++ {
				if toks[j].kind == tWord && (toks[j].upper == "SKIP" || toks[j].upper == "NOWAIT" || stopWords[toks[j].upper]) {
					break
				}
			}
		}
		skip := j+1 < len(toks) && toks[j].upper == "SKIP" && toks[j+1].upper == "LOCKED"
		if skip {
			out = append(out, edit{start: toks[j].start, end: toks[j+1].end, kind: "lock", desc: "remove SKIP LOCKED"})
			j += 2
		} else if j < len(toks) && toks[j].upper == "NOWAIT" {
			j++
		}
		clause := text[toks[i].start:toks[j-1].end]
		out = append(out, edit{start: toks[i].start, end: toks[j-1].end, kind: "lock", desc: "remove " + oneLine(clause)})
	}
	return out
}

// lockStrength returns the index after the lock strength that starts at
// toks[i], or -1 when there is none.
func lockStrength(toks []token, i int) int {
	words := func(ws ...string) bool {
		for k, w := range ws {
			if i+k >= len(toks) || toks[i+k].upper != w {
				return false
			}
		}
		return true
	}
	switch {
	case words("UPDATE"):
		return i + 1
	case words("NO", "KEY", "UPDATE"):
		return i + 3
	case words("SHARE"):
		return i + 1
	case words("KEY", "SHARE"):
		return i + 2
	}
	return -1
}

// limitEdits drops each LIMIT: a literal becomes LIMIT ALL; an expression
// (a parameter) becomes a NULL of the same type, so that the parameter
// keeps the type the server infers for it.
func limitEdits(text string, toks []token) []edit {
	var out []edit
	for i := 0; i+1 < len(toks); i++ {
		if toks[i].upper != "LIMIT" || toks[i+1].upper == "ALL" {
			continue
		}
		j := i + 2
		if toks[i+1].text == "(" {
			d := 1
			for ; j < len(toks) && d > 0; j++ {
				if opens(toks[j]) {
					d++
				} else if closes(toks[j]) {
					d--
				}
			}
		}
		if j+1 < len(toks) && toks[j].text == "::" {
			j += 2
		}
		expr := text[toks[i+1].start:toks[j-1].end]
		repl := "LIMIT NULL + 0 * (" + expr + ")"
		if j == i+2 && toks[i+1].kind == tNumber {
			repl = "LIMIT ALL"
		}
		out = append(out, edit{start: toks[i].start, end: toks[j-1].end, repl: repl, kind: "limit", desc: "drop LIMIT " + oneLine(expr)})
	}
	return out
}

// around is the few tokens around toks[i], for a mutant's description.
func around(toks []token, i int) string {
	a, b := max(i-3, 0), min(i+4, len(toks))
	var w []string
	for _, t := range toks[a:b] {
		w = append(w, t.text)
	}
	return strings.Join(w, " ")
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}
