package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/builtbin"
)

// demoBinary returns $TGNOTIFY_BIN/demo, or skips the test: the demo starts
// the real binaries, which `make build` puts there.
func demoBinary(t *testing.T) string {
	t.Helper()
	return filepath.Join(builtbin.Dir(t, append(binaries(false, false), "demo")...), "demo")
}

// demoRun is the demo running as a child process of the test.
type demoRun struct {
	cmd  *exec.Cmd
	dir  string
	done chan struct{}

	mu   sync.Mutex
	out  bytes.Buffer
	pids map[string]int
}

// startedLine is how the demo announces each process it starts.
var startedLine = regexp.MustCompile(`^started (\S+)\s+pid (\d+)`)

func startDemo(t *testing.T, args ...string) *demoRun {
	t.Helper()
	bin := demoBinary(t)
	r := &demoRun{dir: t.TempDir(), done: make(chan struct{}), pids: map[string]int{}}
	conf, err := filepath.Abs("../../configs/nats-server.conf")
	if err != nil {
		t.Fatal(err)
	}
	clusterConf, err := filepath.Abs("../../configs/nats-cluster")
	if err != nil {
		t.Fatal(err)
	}
	args = append([]string{"-dir", r.dir, "-nats-config", conf, "-cluster-config", clusterConf, "-progress", "lines", "-emulator"}, args...)
	r.cmd = exec.Command(bin, args...)
	// Never the real Telegram from a test, whatever the developer exported.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TELEGRAM_") {
			r.cmd.Env = append(r.cmd.Env, kv)
		}
	}
	pr, pw := io.Pipe()
	r.cmd.Stdout, r.cmd.Stderr = pw, pw
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			r.mu.Lock()
			r.out.WriteString(line + "\n")
			if m := startedLine.FindStringSubmatch(line); m != nil {
				pid, _ := strconv.Atoi(m[2])
				r.pids[m[1]] = pid
			}
			r.mu.Unlock()
		}
	}()
	go func() {
		_ = r.cmd.Wait()
		pw.Close()
		<-read // every line of the output is in r.out before done
		close(r.done)
	}()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			_ = r.cmd.Process.Kill()
			<-r.done
		}
		r.checkNoLeftovers(t, 15*time.Second)
		if t.Failed() {
			t.Logf("demo output:\n%s", r.output())
		}
	})
	return r
}

func (r *demoRun) output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out.String()
}

func (r *demoRun) started() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.pids))
	for k, v := range r.pids {
		out[k] = v
	}
	return out
}

// wait waits for the demo to exit and returns its exit status.
func (r *demoRun) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(timeout):
		t.Fatalf("the demo did not exit within %v", timeout)
	}
	return r.cmd.ProcessState.ExitCode()
}

// waitOutput waits until the demo's output contains s.
func (r *demoRun) waitOutput(t *testing.T, s string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(r.output(), s) {
		select {
		case <-r.done:
			t.Fatalf("the demo exited before printing %q", s)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo did not print %q within %v", s, timeout)
		}
	}
}

// checkNoLeftovers fails the test if any process the demo started still
// exists once the demo is gone (allowing the kernel timeout to deliver a
// parent-death signal), or any process mentions the demo's directory.
func (r *demoRun) checkNoLeftovers(t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		left := r.leftovers()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("processes left behind by the demo: %v", left)
			return
		}
		<-time.After(50 * time.Millisecond) // the next look at the process table
	}
}

func (r *demoRun) leftovers() []string {
	var left []string
	for name, pid := range r.started() {
		if alive(pid, name) {
			left = append(left, name+" pid "+strconv.Itoa(pid))
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(r.dir)) {
			left = append(left, strings.ReplaceAll(string(b), "\x00", " ")+" ("+filepath.Base(filepath.Dir(p))+")")
		}
	}
	return left
}

// alive reports whether pid exists and still runs the binary name (a reused
// pid running something else does not count). Zombies are not alive.
func alive(pid int, name string) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return !os.IsNotExist(err)
	}
	// Fields: pid (comm) state ...
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return true
	}
	if s[i+2] == 'Z' {
		return false
	}
	comm := s[strings.IndexByte(s, '(')+1 : i]
	return strings.HasPrefix(name, comm) // comm is cut at 15 bytes
}

// requireAllAlive checks that every process the demo starts is running, so
// that a later check for leftovers means something.
func (r *demoRun) requireAllAlive(t *testing.T) {
	t.Helper()
	started := r.started()
	for _, name := range binaries(false, false) {
		pid, ok := started[name]
		if !ok || !alive(pid, name) {
			t.Fatalf("%s is not running (pid %d); started: %v", name, pid, started)
		}
	}
}

func TestDemoRunsAndLeavesNothingBehind(t *testing.T) {
	r := startDemo(t, "-orders", "40", "-timeout", "2m")
	code := r.wait(t, 4*time.Minute)
	out := r.output()
	if code != exitOK {
		t.Fatalf("demo exit status: got %d, want 0", code)
	}
	for _, want := range []string{"RESULT: PASS", "every order delivered by exactly one channel", "emails in Mailpit",
		"orders with a phone delivered by SMS, no Telegram copy", "the shop's GET /orders/{id} shows how each notification ended"} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q", want)
		}
	}
	if got, want := len(r.started()), len(binaries(false, false)); got != want {
		t.Errorf("processes started: got %d, want %d", got, want)
	}
	r.checkNoLeftovers(t, 5*time.Second)
}

// With -cluster the demo runs NATS as three nodes, steps NOTIFY's leader
// down and SIGKILLs a node during the burst, and still passes every check;
// the report tells what it did and the longest silence.
func TestDemoOnACluster(t *testing.T) {
	builtbin.Dir(t, "tgnotify")
	r := startDemo(t, "-cluster", "-orders", "80", "-outage-orders", "2", "-timeout", "2m")
	code := r.wait(t, 5*time.Minute)
	out := r.output()
	if code != exitOK {
		t.Fatalf("demo -cluster exit status: got %d, want 0\n%s", code, out)
	}
	for _, want := range []string{"RESULT: PASS", "provisioned NOTIFY, NOTIFY_DEAD, the consumers and the buckets with 3 replicas",
		"stepped down (what bin/nats stream cluster step-down NOTIFY asks)", "SIGKILL of node", "started again on its store",
		"[ok  ] cluster: NOTIFY's leader stepped down and a node SIGKILLed", "silence         longest"} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q", want)
		}
	}
	for _, n := range []string{"nats-n1", "nats-n2", "nats-n3"} {
		if _, ok := r.started()[n]; !ok {
			t.Errorf("%s was not started", n)
		}
	}
	r.checkNoLeftovers(t, 5*time.Second)
}

func TestDemoInterruptedStopsEverything(t *testing.T) {
	r := startDemo(t, "-orders", "5000", "-timeout", "5m")
	r.waitOutput(t, "placing 5000 orders", 2*time.Minute)
	r.requireAllAlive(t)
	if err := r.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := r.wait(t, 2*time.Minute); code != exitInterrupted {
		t.Errorf("exit status after SIGINT: got %d, want %d", code, exitInterrupted)
	}
	r.checkNoLeftovers(t, 5*time.Second)
}

func TestDemoKilledLeavesNothingBehind(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs Linux: the parent-death signal keeps children from outliving a killed demo")
	}
	r := startDemo(t, "-orders", "5000", "-timeout", "5m")
	r.waitOutput(t, "placing 5000 orders", 2*time.Minute)
	r.requireAllAlive(t)
	if err := r.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	r.wait(t, time.Minute)
	r.checkNoLeftovers(t, 15*time.Second)
}

func TestDemoKeepShowsWhereToLook(t *testing.T) {
	r := startDemo(t, "-orders", "20", "-outage-orders", "2", "-timeout", "2m", "-keep")
	r.waitOutput(t, "Everything keeps running until Ctrl-C", 3*time.Minute)
	r.waitOutput(t, "api/v1/messages", 10*time.Second)
	m := regexp.MustCompile(`Mailpit \(the emails\)\s+(http://127\.0\.0\.1:\d+)/`).FindStringSubmatch(r.output())
	if m == nil {
		t.Fatalf("-keep printed no Mailpit address:\n%s", r.output())
	}
	for _, want := range []string{"what the emulated MAX received", "the SMS the emulated Twilio created", "/orders/"} {
		if !strings.Contains(r.output(), want) {
			t.Errorf("-keep output lacks %q", want)
		}
	}
	resp, err := http.Get(m[1] + "/api/v1/messages")
	if err != nil {
		t.Fatalf("Mailpit at the printed address: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("Mailpit at the printed address: got %s, want 200", resp.Status)
	}
	if err := r.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := r.wait(t, 2*time.Minute); code != exitOK {
		t.Errorf("exit status after Ctrl-C with -keep: got %d, want %d (the checks passed)", code, exitOK)
	}
	r.checkNoLeftovers(t, 5*time.Second)
}
