package procs_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/procs"
)

// The test binary doubles as the supervised program: with PROCS_HELPER set
// it behaves as that mode says instead of running tests.
func TestMain(m *testing.M) {
	if mode := os.Getenv("PROCS_HELPER"); mode != "" {
		helper(mode)
		return
	}
	os.Exit(m.Run())
}

// helper is the child program. Modes:
//
//	serve        serve 200 on /ready at $PROCS_ADDR; exit 0 on SIGTERM
//	stubborn     like serve, but ignore SIGTERM
//	exit3        print a line and exit with status 3
//	env          print $PROCS_SHOW and $PROCS_GONE, then wait for SIGTERM
func helper(mode string) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	switch mode {
	case "exit3":
		fmt.Println("helper failing on purpose")
		os.Exit(3)
	case "env":
		fmt.Printf("show=%q gone=%q\n", os.Getenv("PROCS_SHOW"), os.Getenv("PROCS_GONE"))
		<-sigs
		os.Exit(0)
	case "serve", "stubborn":
		ln, err := net.Listen("tcp", os.Getenv("PROCS_ADDR"))
		if err != nil {
			fmt.Println("listen:", err)
			os.Exit(1)
		}
		fmt.Println("helper listening")
		go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
		for range sigs {
			if mode == "serve" {
				fmt.Println("helper stopping")
				os.Exit(0)
			}
			fmt.Println("helper ignoring SIGTERM")
		}
	default:
		fmt.Println("unknown helper mode", mode)
		os.Exit(2)
	}
}

func setup(t *testing.T) *procs.Supervisor {
	t.Helper()
	s, err := procs.New(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func helperSpec(t *testing.T, name, mode string, env ...string) procs.Spec {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return procs.Spec{Name: name, Path: exe, Env: append([]string{"PROCS_HELPER=" + mode}, env...), StopTimeout: 5 * time.Second}
}

func startServing(t *testing.T, s *procs.Supervisor, name, mode string) (*procs.Process, string) {
	t.Helper()
	port, err := procs.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Start(helperSpec(t, name, mode, "PROCS_ADDR="+procs.Addr(port)))
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + procs.Addr(port) + "/ready"
	if err := p.WaitReady(context.Background(), url, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	return p, url
}

func TestStartReadyStop(t *testing.T) {
	s := setup(t)
	p, _ := startServing(t, s, "web", "serve")
	if err := p.Stop(); err != nil {
		t.Fatalf("Stop: got %v, want nil", err)
	}
	if err := p.Stop(); err != nil {
		t.Fatalf("second Stop: got %v, want nil", err)
	}
	if got := p.Tail(5); !strings.Contains(got, "helper listening") || !strings.Contains(got, "helper stopping") {
		t.Errorf("log tail %q lacks the helper's output", got)
	}
	if f := s.Failures(); len(f) != 0 {
		t.Errorf("failures after a requested stop: %v", f)
	}
}

func TestStopKillsAfterBound(t *testing.T) {
	s := setup(t)
	spec := helperSpec(t, "stubborn", "stubborn")
	port, err := procs.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	spec.Env = append(spec.Env, "PROCS_ADDR="+procs.Addr(port))
	spec.StopTimeout = 300 * time.Millisecond
	p, err := s.Start(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WaitReady(context.Background(), "http://"+procs.Addr(port)+"/", 20*time.Second); err != nil {
		t.Fatal(err)
	}
	err = p.Stop()
	if !errors.Is(err, procs.ErrKilled) {
		t.Fatalf("Stop of a process ignoring SIGTERM: got %v, want ErrKilled", err)
	}
	if !strings.Contains(p.Tail(5), "helper ignoring SIGTERM") {
		t.Errorf("the helper never received SIGTERM; log:\n%s", p.Tail(5))
	}
}

func TestUnexpectedExitIsReported(t *testing.T) {
	s := setup(t)
	p, err := s.Start(helperSpec(t, "crasher", "exit3"))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Failed():
	case <-time.After(20 * time.Second):
		t.Fatal("Failed() was not closed after the process exited on its own")
	}
	f := s.Failures()
	if len(f) != 1 || f[0].Name != "crasher" || f[0].Pid != p.Pid() {
		t.Fatalf("Failures: got %+v, want one for crasher", f)
	}
	var exit *exec.ExitError
	if !errors.As(f[0].Err, &exit) || exit.ExitCode() != 3 {
		t.Errorf("failure error: got %v, want exit status 3", f[0].Err)
	}
	if !strings.Contains(f[0].Error(), p.LogPath()) {
		t.Errorf("failure %q does not name the log", f[0].Error())
	}
	if err := p.Stop(); err == nil {
		t.Error("Stop of a process that had exited with status 3: got nil, want an error")
	}
}

func TestWaitReadyFailsFastWhenTheProcessExits(t *testing.T) {
	s := setup(t)
	p, err := s.Start(helperSpec(t, "early", "exit3"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = p.WaitReady(context.Background(), "http://127.0.0.1:1/never", time.Minute)
	if err == nil {
		t.Fatal("WaitReady: got nil for a process that exited")
	}
	if time.Since(start) > 30*time.Second {
		t.Errorf("WaitReady took %v; it should return when the process exits", time.Since(start))
	}
	if !strings.Contains(err.Error(), "helper failing on purpose") {
		t.Errorf("error %q does not show the end of the log", err)
	}
}

func TestWaitReadyDeadline(t *testing.T) {
	s := setup(t)
	p, err := s.Start(helperSpec(t, "silent", "env"))
	if err != nil {
		t.Fatal(err)
	}
	port, err := procs.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	err = p.WaitReady(context.Background(), "http://"+procs.Addr(port)+"/", 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "not ready within") {
		t.Fatalf("WaitReady against a closed port: got %v, want a deadline error", err)
	}
	// On a busy machine the helper may still be starting: a SIGTERM before
	// it handles the signal would end it uncleanly. It prints once it does.
	waitPrinted(t, p, "show=")
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
}

func TestEnvironment(t *testing.T) {
	t.Setenv("PROCS_GONE", "inherited")
	s := setup(t)
	spec := helperSpec(t, "env", "env", "PROCS_SHOW=given")
	spec.Unset = []string{"PROCS_GONE"}
	p, err := s.Start(spec)
	if err != nil {
		t.Fatal(err)
	}
	waitPrinted(t, p, "show=")
	if got, want := p.Tail(1), `show="given" gone=""`; got != want {
		t.Errorf("child environment: got %s, want %s", got, want)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
}

// waitPrinted waits until the helper's log shows text.
func waitPrinted(t *testing.T, p *procs.Process, text string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(p.Tail(3), text) {
		if time.Now().After(deadline) {
			t.Fatalf("the helper did not print %q; log:\n%s", text, p.Tail(5))
		}
		select {
		case <-p.Done():
			t.Fatalf("helper exited: %v", p.Err())
		case <-time.After(procs.PollInterval):
		}
	}
}

func TestCloseKillsEverything(t *testing.T) {
	s, err := procs.New(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := startServing(t, s, "a", "stubborn")
	b, _ := startServing(t, s, "b", "serve")
	s.Close()
	for _, p := range []*procs.Process{a, b} {
		select {
		case <-p.Done():
		default:
			t.Errorf("%s still running after Close", p.Name())
		}
		if err := syscall.Kill(p.Pid(), 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d): kill -0 after Close: got %v, want ESRCH", p.Name(), p.Pid(), err)
		}
	}
	if f := s.Failures(); len(f) != 0 {
		t.Errorf("Close reported failures: %v", f)
	}
	if _, err := s.Start(helperSpec(t, "late", "serve")); !errors.Is(err, procs.ErrClosed) {
		t.Errorf("Start after Close: got %v, want ErrClosed", err)
	}
	s.Close()
}

func TestStopAll(t *testing.T) {
	s := setup(t)
	first, url := startServing(t, s, "first", "serve")
	second, _ := startServing(t, s, "second", "serve")
	if err := s.StopAll(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*procs.Process{first, second} {
		if p.Err() != nil {
			t.Errorf("%s: exit %v", p.Name(), p.Err())
		}
	}
	if err := procs.WaitHTTP(context.Background(), url, 200*time.Millisecond); err == nil {
		t.Error("the first process still answers after StopAll")
	}
}

func TestDuplicateName(t *testing.T) {
	s := setup(t)
	startServing(t, s, "same", "serve")
	if _, err := s.Start(helperSpec(t, "same", "serve")); err == nil {
		t.Error("starting a second process under a running name: got nil error")
	}
	if _, err := s.Start(procs.Spec{Name: "../x", Path: "/bin/true"}); err == nil {
		t.Error("a name with a slash: got nil error")
	}
}
