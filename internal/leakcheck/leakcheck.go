// Package leakcheck finds goroutines that are still running code of this
// module. Tests call it after stopping a background service, and
// pgtest.Main calls it after every test of a package has finished.
package leakcheck

import (
	"fmt"
	"runtime"
	"strings"
	"time"
)

// ModulePrefix is what a goroutine's stack must mention to count.
const ModulePrefix = "github.com/seckillkit/seckill/"

// Find returns the stacks of the goroutines (other than the caller's) whose
// stack mentions ModulePrefix+match and not "_test.go" frames only, i.e.
// goroutines running library code of the packages named by match ("" means
// any package of the module). Test-only code and the harness are ignored.
func Find(match string) []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for i, g := range strings.Split(string(buf), "\n\n") {
		if i == 0 { // the caller
			continue
		}
		if libraryFrame(g, ModulePrefix+match) {
			out = append(out, g)
		}
	}
	return out
}

func libraryFrame(stack, prefix string) bool {
	for _, line := range strings.Split(stack, "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		if strings.Contains(line, "/internal/") || strings.Contains(line, "_test.") || strings.Contains(line, ".Test") {
			continue
		}
		return true
	}
	return false
}

// Wait polls [Find] until it returns nothing or timeout passes, and then
// returns an error listing what is left.
func Wait(match string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		left := Find(match)
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("leakcheck: %d goroutine(s) still running %s%s after %v:\n\n%s",
				len(left), ModulePrefix, match, timeout, strings.Join(left, "\n\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
