package web

import "github.com/seckillkit/seckill/examples/seckill/flow"

// CheckStatus is how a check is printed: PASS, FAIL, or SKIP for a check
// exact only at rest that a live audit could not judge.
func CheckStatus(c flow.Check) string {
	switch {
	case c.Skipped:
		return "SKIP"
	case c.Pass:
		return "PASS"
	}
	return "FAIL"
}

// Skipped counts the checks a live audit could not judge.
func Skipped(checks []flow.Check) int {
	n := 0
	for _, c := range checks {
		if c.Skipped {
			n++
		}
	}
	return n
}
