package procs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultStopTimeout is how long Stop waits after SIGTERM before it sends
// SIGKILL, when the Spec does not say.
const DefaultStopTimeout = 15 * time.Second

// startMarker begins the line written to a log before each start.
const startMarker = "--- procs "

// ErrClosed is returned by Start once the supervisor is closed.
var ErrClosed = errors.New("procs: supervisor closed")

// ErrKilled is matched by the error of a process that had to be killed
// because it did not stop within its bound after SIGTERM.
var ErrKilled = errors.New("did not stop after SIGTERM and was killed")

// Spec describes a process to start.
type Spec struct {
	// Name identifies the process in logs and errors, and names its log
	// file (<Name>.log in the supervisor's directory). Names are unique
	// within a supervisor.
	Name string
	// Path is the executable.
	Path string
	// Args are the arguments after the program name.
	Args []string
	// Env are extra NAME=value entries. The child gets the supervisor's
	// environment with these added (later entries win), minus the names in
	// Unset.
	Env []string
	// Unset names environment variables the child must not inherit.
	Unset []string
	// Dir is the working directory; empty means the supervisor's.
	Dir string
	// StopTimeout bounds how long Stop waits after SIGTERM before SIGKILL.
	// Zero means DefaultStopTimeout.
	StopTimeout time.Duration
}

// Failure is a process that ended without being asked to stop.
type Failure struct {
	// Name is the process's Spec.Name.
	Name string
	// Pid is its process id.
	Pid int
	// Err is what Wait reported (nil for a clean exit 0, which is still
	// unexpected for a daemon).
	Err error
	// LogPath is the file holding its output.
	LogPath string
}

// Error describes the failure with the exit status.
func (f Failure) Error() string {
	status := "exited with status 0"
	if f.Err != nil {
		status = f.Err.Error()
	}
	return fmt.Sprintf("%s (pid %d) ended unexpectedly: %s; log: %s", f.Name, f.Pid, status, f.LogPath)
}

// Supervisor starts processes and keeps track of them until Close.
type Supervisor struct {
	dir string
	log *slog.Logger

	mu       sync.Mutex
	procs    []*Process
	closed   bool
	failures []Failure
	failed   chan struct{} // closed at the first unexpected exit
}

// New returns a supervisor that writes process logs into dir, creating it
// if needed. A nil logger discards the supervisor's own messages.
func New(dir string, log *slog.Logger) (*Supervisor, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the log directory: %w", err)
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Supervisor{dir: dir, log: log, failed: make(chan struct{})}, nil
}

// Dir returns the directory holding the process logs.
func (s *Supervisor) Dir() string { return s.dir }

// Failed returns a channel closed when any process ends without having been
// asked to stop.
func (s *Supervisor) Failed() <-chan struct{} { return s.failed }

// Failures returns the processes that ended without having been asked to
// stop, in the order they ended.
func (s *Supervisor) Failures() []Failure {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.failures)
}

// Processes returns the processes started so far, in start order.
func (s *Supervisor) Processes() []*Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.procs)
}

// Start starts the process spec describes, with its standard output and
// error appended to <dir>/<Name>.log. It returns once the process runs; use
// [Process.WaitReady] to wait until it serves.
func (s *Supervisor) Start(spec Spec) (*Process, error) { return s.start(spec, false) }

// start starts spec; launching marks the process as being launched (see
// Launch) from before it can exit.
func (s *Supervisor) start(spec Spec, launching bool) (*Process, error) {
	if spec.Name == "" || strings.ContainsAny(spec.Name, `/\`) {
		return nil, fmt.Errorf("procs: invalid process name %q", spec.Name)
	}
	if spec.StopTimeout <= 0 {
		spec.StopTimeout = DefaultStopTimeout
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	for _, p := range s.procs {
		if p.spec.Name == spec.Name && !p.exited() {
			return nil, fmt.Errorf("procs: %s is already running (pid %d)", spec.Name, p.Pid())
		}
	}
	logPath := filepath.Join(s.dir, spec.Name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the log of %s: %w", spec.Name, err)
	}
	defer logFile.Close() // the child holds its own descriptor
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Dir = spec.Dir
	cmd.Env = childEnv(os.Environ(), spec.Env, spec.Unset)
	cmd.Stdin = nil
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	fmt.Fprintf(logFile, "%s%s: starting %s %s\n", startMarker, time.Now().Format(time.RFC3339Nano), spec.Path, strings.Join(spec.Args, " "))
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", spec.Name, err)
	}
	p := &Process{spec: spec, cmd: cmd, logPath: logPath, sup: s, done: make(chan struct{}), launching: launching}
	s.procs = append(s.procs, p)
	s.log.Debug("started", "name", spec.Name, "pid", cmd.Process.Pid, "log", logPath)
	go p.wait()
	return p, nil
}

// processEnded records an exit nobody asked for.
func (s *Supervisor) processEnded(p *Process, err error) {
	if p.exitWhileLaunching() {
		return // Launch reports it, or reports it when it ends (endLaunch)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || p.stopRequested() {
		return
	}
	f := Failure{Name: p.spec.Name, Pid: p.Pid(), Err: err, LogPath: p.logPath}
	s.failures = append(s.failures, f)
	s.log.Error("process ended unexpectedly", "name", f.Name, "pid", f.Pid, "err", err, "log", f.LogPath)
	if len(s.failures) == 1 {
		close(s.failed)
	}
}

// StopAll stops every running process in reverse start order (SIGTERM, then
// SIGKILL after each one's bound) and returns the errors of those that did
// not exit cleanly.
func (s *Supervisor) StopAll() error {
	procs := s.Processes()
	var errs []error
	for i := len(procs) - 1; i >= 0; i-- {
		if err := procs[i].Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Close kills every process still running, immediately, with SIGKILL to its
// whole process group, waits for them to be reaped, and refuses further
// starts. It is meant for a deferred call: a graceful stop is StopAll.
// Calling it twice is safe.
func (s *Supervisor) Close() {
	s.mu.Lock()
	s.closed = true
	procs := slices.Clone(s.procs)
	s.mu.Unlock()
	for _, p := range procs {
		p.markStopping()
		p.kill()
	}
	for _, p := range procs {
		<-p.done
	}
}

// Process is a started process.
type Process struct {
	spec    Spec
	cmd     *exec.Cmd
	logPath string
	sup     *Supervisor
	done    chan struct{}

	mu       sync.Mutex
	stopping bool
	killed   bool
	err      error // from Wait, set before done is closed
	// launching is set while Launch waits for the process to be ready:
	// an exit then is Launch's error to return, not a failure to report,
	// unless Launch ends without retrying (endLaunch).
	launching, exitedLaunching bool
}

// Name returns the process's Spec.Name.
func (p *Process) Name() string { return p.spec.Name }

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// LogPath returns the file that receives the process's output.
func (p *Process) LogPath() string { return p.logPath }

// Done returns a channel closed once the process has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err returns what Wait reported once the process exited: nil for status 0.
// Before the exit it returns nil.
func (p *Process) Err() error {
	select {
	case <-p.done:
	default:
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *Process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *Process) stopRequested() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopping
}

func (p *Process) markStopping() {
	p.mu.Lock()
	p.stopping = true
	p.mu.Unlock()
}

// wait reaps the process and reports an unexpected end.
func (p *Process) wait() {
	err := p.cmd.Wait()
	p.mu.Lock()
	p.err = err
	p.mu.Unlock()
	close(p.done)
	p.sup.processEnded(p, err)
}

// Signal sends sig to the process. Signals other than SIGTERM and SIGKILL do
// not count as a request to stop: if the process ends because of them, the
// end is reported as unexpected unless Expect was called first.
func (p *Process) Signal(sig os.Signal) error {
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signalling %s: %w", p.spec.Name, err)
	}
	return nil
}

// Expect marks the process's next exit as intended (for a chaos test that
// kills it on purpose), so it is not reported as a failure.
func (p *Process) Expect() { p.markStopping() }

// Kill sends SIGKILL to the process's group at once and waits until it is
// reaped. The exit is not reported as a failure.
func (p *Process) Kill() {
	p.markStopping()
	p.kill()
	<-p.done
}

func (p *Process) kill() {
	if p.exited() {
		return
	}
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	// The group first, for any child the process started (its leader was
	// running a moment ago, so the group is still its own); then the
	// process itself through its handle, which is safe even after a reap.
	_ = killGroup(p.cmd.Process.Pid)
	_ = p.cmd.Process.Kill()
}

// Stop asks the process to stop with SIGTERM and waits up to its
// StopTimeout; if it is still running then, it is killed and the error
// matches ErrKilled. It returns nil when the process exited with status 0,
// or had already exited cleanly after an earlier Stop; otherwise an error
// naming the process, its exit status and its log. Calling it twice is safe.
func (p *Process) Stop() error {
	p.markStopping()
	if !p.exited() {
		_ = p.Signal(syscall.SIGTERM)
		t := time.NewTimer(p.spec.StopTimeout)
		defer t.Stop()
		select {
		case <-p.done:
		case <-t.C:
			p.kill()
			<-p.done
			return fmt.Errorf("%s (pid %d) %w after %v; log: %s", p.spec.Name, p.Pid(), ErrKilled, p.spec.StopTimeout, p.logPath)
		}
	}
	p.mu.Lock()
	err, killed := p.err, p.killed
	p.mu.Unlock()
	switch {
	case killed:
		return fmt.Errorf("%s (pid %d) %w; log: %s", p.spec.Name, p.Pid(), ErrKilled, p.logPath)
	case err != nil:
		return fmt.Errorf("%s (pid %d) did not exit cleanly: %w; log: %s", p.spec.Name, p.Pid(), err, p.logPath)
	}
	return nil
}

// Tail returns the last n lines of the process's log, for error messages.
func (p *Process) Tail(n int) string {
	return TailFile(p.logPath, n)
}

// WaitReady polls url with GET every interval until it answers with a 2xx
// status, the process exits, ctx ends or timeout passes. The error of a
// failed wait names the process, the last answer and the end of its log.
func (p *Process) WaitReady(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last, err := pollHTTP(ctx, url, p.done)
	if err == nil {
		return nil
	}
	switch {
	case p.exited():
		return fmt.Errorf("%s exited before it was ready (%v); last lines of %s:\n%s", p.spec.Name, p.Err(), p.logPath, p.Tail(15))
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s was not ready within %v at %s (%s); last lines of %s:\n%s", p.spec.Name, timeout, url, last, p.logPath, p.Tail(15))
	}
	return fmt.Errorf("waiting for %s: %w", p.spec.Name, err)
}

// childEnv returns base with extra added (replacing same-named entries) and
// the names in unset removed.
func childEnv(base, extra, unset []string) []string {
	drop := map[string]bool{}
	for _, n := range unset {
		drop[n] = true
	}
	for _, kv := range extra {
		name, _, _ := strings.Cut(kv, "=")
		drop[name] = true
	}
	env := make([]string, 0, len(base)+len(extra))
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if !drop[name] {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}
