package procs_test

import (
	"context"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/procs"
)

// A process that loses its port to another program is started again on
// fresh ports; once ready it is listed as left over until stopped.
func TestLaunchRetriesATakenPortAndStops(t *testing.T) {
	s := setup(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	var builds, starts int
	p, err := s.Launch(context.Background(), procs.Launch{
		Ports:        1,
		ReadyTimeout: 20 * time.Second,
		Build: func(ports []int) (procs.Spec, string, error) {
			builds++
			addr := procs.Addr(ports[0])
			if builds == 1 {
				addr = taken.Addr().String() // lost to "another program"
			}
			return helperSpec(t, "web", "serve", "PROCS_ADDR="+addr), "http://" + addr + "/ready", nil
		},
		Started: func(*procs.Process) { starts++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	if builds != 2 || starts != 2 {
		t.Fatalf("built %d and started %d times, want 2 each", builds, starts)
	}
	if got := s.Leftovers(); len(got) != 1 || !strings.HasPrefix(got[0], "web (pid ") {
		t.Fatalf("Leftovers = %v, want the running process", got)
	}
	lines, failed := procs.StopInOrder([]*procs.Process{p})
	if failed || len(lines) != 1 || !strings.Contains(lines[0], "stopped cleanly") {
		t.Fatalf("StopInOrder = %v, %v", lines, failed)
	}
	if got := s.Leftovers(); len(got) != 0 {
		t.Fatalf("Leftovers after the stop = %v", got)
	}
}

// A process that fails for another reason is not started again.
func TestLaunchGivesUpOnOtherFailures(t *testing.T) {
	s := setup(t)
	builds := 0
	_, err := s.Launch(context.Background(), procs.Launch{
		Ports:        1,
		ReadyTimeout: 10 * time.Second,
		Build: func(ports []int) (procs.Spec, string, error) {
			builds++
			return helperSpec(t, "broken", "exit3"), "http://" + procs.Addr(ports[0]) + "/ready", nil
		},
	})
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready") || builds != 1 {
		t.Fatalf("Launch = %v after %d builds, want one failed start", err, builds)
	}
}

// Losing a port during a launch is not a failure of the system; a process
// that dies after it became ready is.
func TestLaunchReportsOnlyRealFailures(t *testing.T) {
	s := setup(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	first := true
	p, err := s.Launch(context.Background(), procs.Launch{
		Ports:        1,
		ReadyTimeout: 20 * time.Second,
		Build: func(ports []int) (procs.Spec, string, error) {
			addr := procs.Addr(ports[0])
			if first {
				addr, first = taken.Addr().String(), false
			}
			return helperSpec(t, "web", "serve", "PROCS_ADDR="+addr), "http://" + addr + "/ready", nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if f := s.Failures(); len(f) != 0 {
		t.Fatalf("failures after a retried launch: %v", f)
	}
	if err := p.Signal(syscall.SIGHUP); err != nil { // the helper does not handle it: it dies
		t.Fatal(err)
	}
	select {
	case <-s.Failed():
	case <-time.After(10 * time.Second):
		t.Fatal("a launched process died and no failure was reported")
	}
}

// Reserved ports stay taken until Release, so a listener the caller opens
// meanwhile on port 0 cannot be given one of them (a cluster's proxy was
// once given a node's route port); after Release they are free.
func TestReservePortsHoldsThemUntilRelease(t *testing.T) {
	r, err := procs.ReservePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Ports) != 3 || r.Ports[0] == r.Ports[1] || r.Ports[1] == r.Ports[2] || r.Ports[0] == r.Ports[2] {
		t.Fatalf("ports %v, want 3 distinct", r.Ports)
	}
	for _, p := range r.Ports {
		if ln, err := net.Listen("tcp", procs.Addr(p)); err == nil {
			ln.Close()
			t.Fatalf("port %d could be taken while reserved", p)
		}
	}
	r.Release()
	r.Release() // twice does nothing
	for _, p := range r.Ports {
		ln, err := net.Listen("tcp", procs.Addr(p))
		if err != nil {
			t.Fatalf("port %d still taken after Release: %v", p, err)
		}
		ln.Close()
	}
}
