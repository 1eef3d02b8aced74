package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of the CPU times in /proc/<pid>/stat: USER_HZ,
// 100 on every Linux architecture Go runs on (sysconf(_SC_CLK_TCK) needs
// cgo; the kernel reports in USER_HZ whatever its own HZ).
const clockTick = 10 * time.Millisecond

// procTimes are the CPU times of one process from /proc/<pid>/stat: its
// own (utime + stime, every thread) and those of its children that have
// exited and been waited for (cutime + cstime).
type procTimes struct {
	ppid        int
	self, child time.Duration
}

// readProcTimes reads /proc/<pid>/stat. A zombie (exited, not yet
// waited for) still reports its times there.
func readProcTimes(pid int) (procTimes, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procTimes{}, err
	}
	return parseProcStat(string(b))
}

// parseProcStat parses one /proc/<pid>/stat line. The command name, field
// 2, is in parentheses and may hold spaces and parentheses: the fields
// after it are counted from the last ')'.
func parseProcStat(s string) (procTimes, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procTimes{}, fmt.Errorf("/proc stat: no command name in %q", s)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); ppid is field 4, utime..cstime fields 14..17.
	if len(f) < 15 {
		return procTimes{}, fmt.Errorf("/proc stat: %d fields after the command name", len(f))
	}
	var n [5]int64
	for k, idx := range []int{1, 11, 12, 13, 14} {
		v, err := strconv.ParseInt(f[idx], 10, 64)
		if err != nil {
			return procTimes{}, fmt.Errorf("/proc stat field %d: %w", idx+3, err)
		}
		n[k] = v
	}
	return procTimes{ppid: int(n[0]), self: time.Duration(n[1]+n[2]) * clockTick, child: time.Duration(n[3]+n[4]) * clockTick}, nil
}

// processCPUOf is the CPU time process pid has used so far (every thread),
// 0 when pid is 0 or gone.
func processCPUOf(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	t, err := readProcTimes(pid)
	if err != nil {
		return 0
	}
	return t.self
}

// treeCPU is the CPU time the tree of process root has used so far: its
// own, its waited-for children's (cutime + cstime: every PostgreSQL
// backend that has exited, since the postmaster waits for each), and the
// live children's own and waited-for children's. A backend alive at the
// first reading and gone at the second is counted once either way: in the
// children's sum, then in the root's cutime. Children of children that
// are still alive (none in PostgreSQL: its workers are the postmaster's
// children) are not counted.
func treeCPU(root int) (time.Duration, error) {
	rt, err := readProcTimes(root)
	if err != nil {
		return 0, err
	}
	total := rt.self + rt.child
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == root {
			continue
		}
		t, err := readProcTimes(pid)
		if err != nil || t.ppid != root { // gone since ReadDir, or not a child
			continue
		}
		total += t.self + t.child
	}
	return total, nil
}
