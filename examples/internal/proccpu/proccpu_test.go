package proccpu

import (
	"os"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	t.Parallel()
	// utime 7, stime 3 (fields 14 and 15), a command name with a space and a ')'.
	got, ok := parse("4242 (postgres: a) b) S 17 4242 4242 0 -1 4194560 100 0 0 0 7 3 20 5 20 0 1 0 12345 0 0\n")
	if !ok || got != 100*time.Millisecond {
		t.Fatalf("parse = %v, %v; want 100ms", got, ok)
	}
	for _, bad := range []string{"4242 no name S 1", "4242 (x) S 1 2 3", "4242 (x) S 1 2 3 4 5 6 7 8 9 10 x 3 20"} {
		if _, ok := parse(bad); ok {
			t.Errorf("parse(%q) read a time", bad)
		}
	}
}

func TestThisProcess(t *testing.T) {
	t.Parallel()
	self, err := Self()
	if err != nil || self <= 0 {
		t.Fatalf("Self = %v, %v", self, err)
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc:", err)
	}
	end := time.Now().Add(30 * time.Millisecond)
	for time.Now().Before(end) { // use some CPU, so that the clock ticks
	}
	if got, ok := Of(os.Getpid()); !ok || got <= 0 {
		t.Fatalf("Of(self) = %v, %v", got, ok)
	}
	if _, ok := Of(0); ok {
		t.Fatal("Of(0) read a time")
	}
}
