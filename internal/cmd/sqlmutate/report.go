package main

import (
	"fmt"
	"io"
	"time"
)

// report prints a package's counts and each survivor and timeout.
func report(w io.Writer, pkg string, rs []result, wall time.Duration) {
	n := map[string]int{}
	reused := 0
	for _, r := range rs {
		n[r.Outcome]++
		if r.Reused {
			reused++
		}
	}
	detected := n[killed] + n[timedOut]
	efficacy := 100.0
	if detected+n[lived] > 0 {
		efficacy = 100 * float64(detected) / float64(detected+n[lived])
	}
	fmt.Fprintf(w, "== %s: %d mutants: %d killed, %d lived, %d invalid, %d timed out, %d not covered, %d not run; efficacy %.1f%%; wall %s; %d outcomes kept from the last run\n",
		pkg, len(rs), n[killed], n[lived], n[invalid], n[timedOut], n[uncovered], n[notRun], efficacy, wall.Round(time.Second), reused)
	for _, r := range rs {
		switch r.Outcome {
		case lived, timedOut, uncovered:
			fmt.Fprintf(w, "%s %s (%s:%d) %s\n\t- %s\n\t+ %s\n", r.Outcome, r.Statement, r.File, r.Line, r.Desc, r.Orig, r.New)
		}
	}
}
