// Package proccpu reads the CPU time processes have used, for the
// benchmarks that report CPU per operation beside a server's.
package proccpu

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Self is this process's CPU time so far (user + system, every thread).
func Self() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// Of is process pid's CPU time so far (user + system, every thread), from
// /proc/<pid>/stat; false when it cannot be read (pid 0, a process gone or
// on another machine).
func Of(pid int) (time.Duration, bool) {
	if pid <= 0 {
		return 0, false
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	return parse(string(raw))
}

// parse reads utime and stime (fields 14 and 15, in clock ticks) of a
// /proc/<pid>/stat line.
func parse(s string) (time.Duration, bool) {
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces and parentheses
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3, the state
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * (time.Second / 100), true // USER_HZ is 100 on Linux
}
