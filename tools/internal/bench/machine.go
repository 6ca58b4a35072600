package bench

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Machine describes the computer a report was measured on.
type Machine struct {
	// CPU is the model name from /proc/cpuinfo.
	CPU string
	// Cores is the number of logical CPUs the Go runtime sees.
	Cores int
	// MemoryMiB is MemTotal from /proc/meminfo.
	MemoryMiB int64
	// Go is the toolchain that built the benchmark (`go version` when
	// available, else the runtime's version).
	Go string
	// Kernel is the kernel release and OS.
	Kernel string
	// Date is when the suite started.
	Date time.Time
	// LoadBefore and LoadAfter are the 1, 5 and 15 minute load averages
	// from /proc/loadavg when the suite started and ended: other work on
	// a shared machine shows here.
	LoadBefore, LoadAfter string
}

// DescribeMachine reads the machine's description. Missing sources leave
// their fields as "unknown"; it never fails.
func DescribeMachine(now time.Time) Machine {
	m := Machine{CPU: "unknown", Cores: runtime.NumCPU(), Go: runtime.Version(), Kernel: runtime.GOOS, Date: now, LoadBefore: LoadAverage()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		if v, ok := procField(b, "model name", ':'); ok {
			m.CPU = v
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if v, ok := procField(b, "MemTotal", ':'); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(v, " kB"), 10, 64)
			m.MemoryMiB = kb / 1024
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = runtime.GOOS + " " + strings.TrimSpace(string(b))
	}
	if out, err := exec.Command("go", "version").Output(); err == nil {
		m.Go = strings.TrimSpace(string(out))
	}
	return m
}

// LoadAverage returns the 1, 5 and 15 minute load averages, "unknown" when
// /proc/loadavg cannot be read.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// procField returns the value of the first "name<sep> value" line of a
// /proc file.
func procField(b []byte, name string, sep byte) (string, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		k, v, ok := strings.Cut(line, string(sep))
		if ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}
