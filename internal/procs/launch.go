package procs

import (
	"context"
	"fmt"
	"time"
)

// MaxLaunchAttempts bounds how often Launch starts a process again after it
// lost the race for a free port to another program.
const MaxLaunchAttempts = 3

// Launch describes a process that listens on ports chosen at start.
type Launch struct {
	// Ports is how many fresh loopback ports Build receives.
	Ports int
	// Build returns the process to start on ports and the URL that answers
	// 2xx once it is ready.
	Build func(ports []int) (spec Spec, readyURL string, err error)
	// ReadyTimeout bounds the wait for the readiness URL.
	ReadyTimeout time.Duration
	// Started, if set, is called after each start, before the wait (the
	// demo prints a line per process).
	Started func(*Process)
}

// Launch starts the process l describes on l.Ports fresh loopback ports and
// waits until it is ready. A start that fails because a port was taken in
// the meantime (see [FreePort]) is retried on new ports, up to
// MaxLaunchAttempts times; any other failure is returned with the end of the
// process's log.
func (s *Supervisor) Launch(ctx context.Context, l Launch) (*Process, error) {
	for attempt := 1; ; attempt++ {
		ports, err := FreePorts(l.Ports)
		if err != nil {
			return nil, err
		}
		spec, readyURL, err := l.Build(ports)
		if err != nil {
			return nil, err
		}
		p, err := s.start(spec, true)
		if err != nil {
			return nil, err
		}
		if l.Started != nil {
			l.Started(p)
		}
		err = p.WaitReady(ctx, readyURL, l.ReadyTimeout)
		switch {
		case err == nil:
			p.endLaunch()
			return p, nil
		case ctx.Err() != nil:
			p.endLaunch()
			return nil, ctx.Err()
		case attempt < MaxLaunchAttempts && p.AddrInUse():
			// Not a failure of the system: the port went to another
			// program between FreePorts and the start.
			s.log.Info("lost a port to another program; starting again", "name", spec.Name)
			p.Expect()
			_ = p.Stop()
			p.endLaunch()
			continue
		}
		p.endLaunch()
		return nil, fmt.Errorf("starting %s: %w", spec.Name, err)
	}
}

// exitWhileLaunching records an exit during a launch and reports whether
// the exit must not be reported now.
func (p *Process) exitWhileLaunching() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.launching {
		p.exitedLaunching = true
	}
	return p.launching
}

// endLaunch ends the launch: an exit that happened during it, and was not
// asked for, is reported now.
func (p *Process) endLaunch() {
	p.mu.Lock()
	exited := p.exitedLaunching
	p.launching, p.exitedLaunching = false, false
	p.mu.Unlock()
	if exited {
		p.sup.processEnded(p, p.Err())
	}
}

// StopInOrder stops each process in turn (SIGTERM, then SIGKILL after its
// bound) and returns one line per process saying how it ended, and whether
// any did not exit cleanly.
func StopInOrder(ps []*Process) (lines []string, failed bool) {
	for _, p := range ps {
		start := time.Now()
		if err := p.Stop(); err != nil {
			failed = true
			lines = append(lines, fmt.Sprintf("%-16s FAILED: %v", p.Name(), err))
			continue
		}
		lines = append(lines, fmt.Sprintf("%-16s stopped cleanly in %v", p.Name(), time.Since(start).Round(time.Millisecond)))
	}
	return lines, failed
}

// Leftovers returns "name (pid N)" for each process the supervisor started
// that has not exited.
func (s *Supervisor) Leftovers() []string {
	var out []string
	for _, p := range s.Processes() {
		if !p.exited() {
			out = append(out, fmt.Sprintf("%s (pid %d)", p.Name(), p.Pid()))
		}
	}
	return out
}
