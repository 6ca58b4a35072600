package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// syncCounter counts the synced writes of a process with perf(1): its
// fsync and fdatasync calls and the files it opens with O_SYNC or O_DSYNC
// (nats-server writes its consumer and batch state files that way, one
// write each). It counts only between enable and disable, which perf
// acknowledges, so the count covers exactly the span measured. It needs
// perf with the syscalls tracepoints; without it the figure is missing
// from the report, nothing else.
type syncCounter struct {
	cmd      *exec.Cmd
	out      string
	ctl, ack *os.File
	ackR     *bufio.Reader
	// done is closed when perf has ended.
	done chan struct{}
	once sync.Once
}

// syncEvents are perf's events and filters: fsync, fdatasync, and openat
// with O_DSYNC (0x1000, part of O_SYNC).
var syncEvents = []string{
	"-e", "syscalls:sys_enter_fsync",
	"-e", "syscalls:sys_enter_fdatasync",
	"-e", "syscalls:sys_enter_openat", "--filter", "flags & 0x1000",
}

// startSyncCounter attaches perf to pid, counting nothing yet.
func startSyncCounter(pid int, dir string) (*syncCounter, error) {
	perf, err := exec.LookPath("perf")
	if err != nil {
		return nil, err
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	ackR, ackW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return nil, err
	}
	c := &syncCounter{out: filepath.Join(dir, fmt.Sprintf("perf-%d.csv", pid)), ctl: ctlW, ack: ackR, ackR: bufio.NewReader(ackR), done: make(chan struct{})}
	args := append([]string{"stat", "-x", ",", "--delay=-1", "--control", "fd:3,4", "-o", c.out, "-p", strconv.Itoa(pid)}, syncEvents...)
	c.cmd = exec.Command(perf, args...)
	c.cmd.ExtraFiles = []*os.File{ctlR, ackW}
	err = c.cmd.Start()
	ctlR.Close()
	ackW.Close()
	if err != nil {
		ctlW.Close()
		ackR.Close()
		return nil, err
	}
	go func() {
		_ = c.cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// control sends a command to perf and waits for its acknowledgement.
func (c *syncCounter) control(ctx context.Context, cmd string) error {
	if _, err := io.WriteString(c.ctl, cmd+"\n"); err != nil {
		return fmt.Errorf("perf %s: %w", cmd, err)
	}
	got := make(chan error, 1)
	go func() {
		line, err := c.ackR.ReadString('\n')
		if err == nil && strings.Trim(line, "\x00 \n") != "ack" {
			err = fmt.Errorf("perf answered %q", line)
		}
		got <- err
	}()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	select {
	case err := <-got:
		if err != nil {
			return fmt.Errorf("perf %s: %w", cmd, err)
		}
		return nil
	case <-c.done:
		return fmt.Errorf("perf %s: perf ended; see %s", cmd, c.out)
	case <-ctx.Done():
		return fmt.Errorf("perf %s: no acknowledgement: %w", cmd, ctx.Err())
	}
}

// enable starts counting.
func (c *syncCounter) enable(ctx context.Context) error { return c.control(ctx, "enable") }

// stop stops counting, ends perf and returns the synced writes counted.
func (c *syncCounter) stop(ctx context.Context) (int64, error) {
	err := c.control(ctx, "disable")
	c.close()
	if err != nil {
		return 0, err
	}
	return parsePerfCounts(c.out)
}

// close ends perf (it writes its counts as it ends); safe to call twice.
func (c *syncCounter) close() {
	if c == nil {
		return
	}
	c.once.Do(func() {
		c.ctl.Close()
		c.ack.Close()
		_ = c.cmd.Process.Signal(syscall.SIGINT)
		t := time.NewTimer(10 * time.Second)
		defer t.Stop()
		select {
		case <-c.done:
		case <-t.C:
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	})
}

// parsePerfCounts adds up the counts of perf stat's CSV output (-x ,):
// the first field of every event line.
func parsePerfCounts(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var total int64
	events := 0
	for line := range strings.Lines(string(b)) {
		f := strings.Split(strings.TrimSpace(line), ",")
		if len(f) < 3 || !strings.HasPrefix(f[2], "syscalls:") {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("perf counted %q for %s: not a number (is the tracepoint readable?)", f[0], f[2])
		}
		total += n
		events++
	}
	if events != 3 {
		return 0, errors.New("perf counted " + strconv.Itoa(events) + " of its 3 events; see " + path)
	}
	return total, nil
}
