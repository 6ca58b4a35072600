// Package reliability_test drives the built binaries with bad input, lost
// secrets and secured NATS: malformed payloads published with the real
// `nats` CLI, invalid settings and databases, abusive HTTP clients of the
// shop, a bot token that must never leak from the worker, and daemons
// authenticating to a server that requires TLS and credentials. The tests
// need `make build`; they find the binaries through $TGNOTIFY_BIN (set by
// `make test`) and skip without it. docs/RELIABILITY.md lists what they
// cover.
package reliability_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/builtbin"
	"github.com/tgnotify/tgnotify/internal/procs"
	"github.com/tgnotify/tgnotify/internal/system"
)

// bin returns the path of a built binary, or skips the test.
func bin(t *testing.T, name string) string {
	t.Helper()
	return filepath.Join(builtbin.Dir(t, name), name)
}

// result is how a short-lived run of a binary ended.
type result struct {
	code   int
	output string // standard output and error together
}

// runBinary runs a binary that is expected to exit by itself (a refused
// configuration) with args and extra environment, and returns its exit
// status and output. The daemons' own environment variables of the test's
// environment are not inherited.
func runBinary(t *testing.T, path string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = cleanEnviron(env)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("%s %v did not exit within 30s; output:\n%s", filepath.Base(path), args, out.String())
	case errors.As(err, &exit):
		return result{code: exit.ExitCode(), output: out.String()}
	case err != nil:
		t.Fatalf("running %s: %v", path, err)
	}
	return result{code: 0, output: out.String()}
}

// cleanEnviron is this process's environment minus the daemons' settings,
// plus extra.
func cleanEnviron(extra []string) []string {
	drop := map[string]bool{}
	for _, n := range system.CleanEnv() {
		drop[n] = true
	}
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !drop[name] {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// supervisor returns a process supervisor whose children die with the test.
func supervisor(t *testing.T) *procs.Supervisor {
	t.Helper()
	sup, err := procs.New(filepath.Join(t.TempDir(), "logs"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sup.Close)
	return sup
}

// start starts a daemon and waits until url answers 2xx.
func start(t *testing.T, sup *procs.Supervisor, spec procs.Spec, url string) *procs.Process {
	t.Helper()
	spec.Unset = append(spec.Unset, system.CleanEnv()...)
	p, err := sup.Start(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WaitReady(context.Background(), url, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return p
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := procs.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return procs.Addr(port)
}

// closedURL returns an http URL on a loopback port nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// get returns the status and body of a GET, or 0 and the error text.
func get(url string) (int, string) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, string(b)
}

// post sends an empty POST to url and returns the status and body.
func post(url string) (int, string) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Post(url, "application/json", nil)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, string(b)
}

// readLog returns the content of a process log.
func readLog(t *testing.T, p *procs.Process) string {
	t.Helper()
	b, err := os.ReadFile(p.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// syncLog is a log sink safe for the NATS client's callback goroutines.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was logged.
func (s *syncLog) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// logger returns a text logger writing to s.
func (s *syncLog) logger() *slog.Logger { return slog.New(slog.NewTextHandler(s, nil)) }
