package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is the unit of utime and stime in /proc/<pid>/stat (USER_HZ),
// 100 per second on every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// ProcessCPU returns the CPU time (user + system, all threads) the process
// pid has used, from /proc/<pid>/stat, with a resolution of 10 ms.
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("reading CPU time of pid %d: %w", pid, err)
	}
	// The command name (field 2) is in parentheses and may contain spaces:
	// count fields after its closing parenthesis. utime and stime are
	// fields 14 and 15, so the 12th and 13th after it.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("reading CPU time of pid %d: malformed stat line", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("reading CPU time of pid %d: malformed stat line", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("reading CPU time of pid %d: malformed utime/stime", pid)
	}
	return time.Duration(utime+stime) * clockTick, nil
}

// SelfCPU returns the CPU time (user + system) this process has used.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Memory is a process's resident set size from /proc/<pid>/status.
type Memory struct {
	// RSS is the current resident set (VmRSS), HWM its peak (VmHWM), in
	// bytes.
	RSS, HWM int64
}

// ProcessMemory reads VmRSS and VmHWM of pid.
func ProcessMemory(pid int) (Memory, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Memory{}, fmt.Errorf("reading memory of pid %d: %w", pid, err)
	}
	var m Memory
	for _, f := range []struct {
		name string
		dst  *int64
	}{{"VmRSS", &m.RSS}, {"VmHWM", &m.HWM}} {
		v, ok := procField(b, f.name, ':')
		if !ok {
			return Memory{}, fmt.Errorf("reading memory of pid %d: no %s", pid, f.name)
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(v, "kB")), 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("reading memory of pid %d: %s %q: %w", pid, f.name, v, err)
		}
		*f.dst = kb << 10
	}
	return m, nil
}

// mib converts bytes to MiB.
func mib(b int64) float64 { return float64(b) / (1 << 20) }
