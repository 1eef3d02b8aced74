package patroniharness

import (
	"errors"
	"strings"
	"testing"
)

// TestMissingProgram: a program that is not installed fails with one
// sentence naming the package. (The cluster itself is exercised by the
// drills in examples/internal/drills, each of which also checks that Stop
// leaves no process behind.)
func TestMissingProgram(t *testing.T) {
	_, err := findProgram("seckill-no-such-program", "some-package")
	if !errors.Is(err, ErrMissingProgram) || !strings.Contains(err.Error(), "apt-get install some-package") {
		t.Fatalf("err = %v", err)
	}
}
