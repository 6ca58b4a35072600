package emulator_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/testclock"
	"github.com/tgnotify/tgnotify/pkg/maxapi/emulator"
)

const token = "max-emulator-test-token_0123456789"

// newClock is a manual clock for the emulator's Config.Now.
func newClock() *testclock.Clock { return testclock.New(time.Unix(1_700_000_000, 0).UTC()) }

// env is an emulator on a manual clock behind a real HTTP server.
type env struct {
	t     *testing.T
	emu   *emulator.Emulator
	srv   *httptest.Server
	clock *testclock.Clock
}

func setup(t *testing.T, cfg emulator.Config) *env {
	t.Helper()
	c := newClock()
	cfg.Token = token
	if cfg.Now == nil {
		cfg.Now = c.Now
	}
	emu, err := emulator.New(cfg)
	if err != nil {
		t.Fatalf("emulator.New: %v", err)
	}
	srv := httptest.NewServer(emu)
	t.Cleanup(func() {
		emu.Close()
		srv.Close()
	})
	return &env{t: t, emu: emu, srv: srv, clock: c}
}

// answer is one HTTP answer.
type answer struct {
	status int
	header http.Header
	raw    string
	body   map[string]any
}

// code returns the error body's code.
func (a answer) code() string { s, _ := a.body["code"].(string); return s }

// message returns the error body's message.
func (a answer) message() string { s, _ := a.body["message"].(string); return s }

// do makes one request with the token in the Authorization header (unless
// auth is "-") and reads the answer.
func (e *env) do(method, path, body, auth string) answer {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(e.t.Context(), method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	switch auth {
	case "":
		req.Header.Set("Authorization", token)
	case "-":
	default:
		req.Header.Set("Authorization", auth)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: reading the answer: %v", method, path, err)
	}
	a := answer{status: resp.StatusCode, header: resp.Header, raw: string(data)}
	_ = json.Unmarshal(data, &a.body)
	return a
}

// send posts a text message to ?<query>.
func (e *env) send(query, text string) answer {
	e.t.Helper()
	body, _ := json.Marshal(map[string]any{"text": text, "format": "html"})
	return e.do(http.MethodPost, "/messages?"+query, string(body), "")
}

// control calls a control endpoint and decodes its JSON answer into out
// (when not nil); it returns the status.
func (e *env) control(method, path, body string, out any) int {
	e.t.Helper()
	a := e.do(method, path, body, "-")
	if out != nil {
		if err := json.Unmarshal([]byte(a.raw), out); err != nil {
			e.t.Fatalf("%s %s: decoding %q: %v", method, path, a.raw, err)
		}
	}
	return a.status
}

// waitFor polls cond until it holds, failing the test after 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
