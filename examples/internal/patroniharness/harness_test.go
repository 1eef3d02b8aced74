package patroniharness

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
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

// TestFailedStartStopsEverything: a Start that fails half-way (its
// context ends while the nodes bootstrap) stops what it started: no
// process and no directory is left.
func TestFailedStartStopsEverything(t *testing.T) {
	tmp, err := os.MkdirTemp("", "seckill-harness-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, 0o755); err != nil { // as /tmp: the server's OS user may enter it
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	c, err := Start(ctx, Options{})
	if err == nil {
		_ = c.Stop()
		t.Fatal("Start succeeded within 4s; the test wants it cut short")
	}
	if errors.Is(err, ErrMissingProgram) {
		t.Fatal(err)
	}
	t.Logf("Start: %.200s", err)
	if left := Leftovers(tmp); len(left) > 0 {
		t.Errorf("processes left after a failed Start: %v", left)
	}
	entries, _ := os.ReadDir(tmp)
	if len(entries) > 0 {
		t.Errorf("%d entries left in the temporary directory", len(entries))
	}
}
