package emulator_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
)

// live is an emulator behind a real HTTP server.
type live struct {
	emu *emulator.Emulator
	srv *httptest.Server
}

func startLive(t *testing.T, cfg emulator.Config) *live {
	t.Helper()
	cfg.Token = token
	emu, err := emulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(emu)
	t.Cleanup(func() {
		emu.Close()
		srv.Close()
	})
	return &live{emu: emu, srv: srv}
}

// post sends a message over HTTP and returns the status, body and error.
func (l *live) post(ctx context.Context, chatID int64) (int, string, error) {
	body := `{"chat_id":` + itoa(chatID) + `,"text":"x"}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.srv.URL+"/bot"+token+"/sendMessage", strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.srv.Client().Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// waitFor polls cond every millisecond until it holds, failing the test
// after 5s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(5 * time.Second)
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

func TestFaults(t *testing.T) {
	t.Parallel()
	t.Run("5xx page", func(t *testing.T) {
		t.Parallel()
		l := startLive(t, emulator.Config{Outage: &emulator.Outage{Mode: emulator.Fault5xx}})
		code, body, err := l.post(t.Context(), 1)
		if err != nil || code != 502 || !strings.Contains(body, "<title>502 Bad Gateway</title>") || !strings.Contains(body, "nginx") {
			t.Fatalf("got %d %q %v, want the nginx 502 page", code, body, err)
		}
		s := l.emu.Stats()
		if s.Faulted != 1 || s.ByFault[emulator.Fault5xx] != 1 || s.ByCode[502] != 1 || s.Delivered != 0 {
			t.Errorf("stats %+v", s)
		}
	})
	t.Run("JSON 5xx with a custom status", func(t *testing.T) {
		t.Parallel()
		l := startLive(t, emulator.Config{Outage: &emulator.Outage{Mode: emulator.FaultJSON5xx, Status: 503}})
		code, body, err := l.post(t.Context(), 1)
		if want := `{"ok":false,"error_code":503,"description":"Service Unavailable"}`; err != nil || code != 503 || body != want {
			t.Fatalf("got %d %q %v, want 503 %s", code, body, err, want)
		}
	})
	t.Run("drop", func(t *testing.T) {
		t.Parallel()
		l := startLive(t, emulator.Config{Outage: &emulator.Outage{Mode: emulator.FaultDrop}})
		if _, _, err := l.post(t.Context(), 1); err == nil {
			t.Fatal("got an answer, want a dropped connection")
		}
		if s := l.emu.Stats(); s.Dropped != 1 || s.Delivered != 0 || len(s.ByCode) != 0 {
			t.Errorf("stats %+v, want one drop and nothing delivered", s)
		}
	})
	t.Run("deliver then drop", func(t *testing.T) {
		t.Parallel()
		l := startLive(t, emulator.Config{Outage: &emulator.Outage{Mode: emulator.FaultDeliverDrop}, Blocked: []int64{2}})
		if _, _, err := l.post(t.Context(), 1); err == nil {
			t.Fatal("got an answer, want a dropped connection")
		}
		// A request that is not delivered is answered.
		if code, _, err := l.post(t.Context(), 2); err != nil || code != 403 {
			t.Fatalf("blocked chat: %d %v, want 403", code, err)
		}
		msgs := l.emu.Messages()
		if len(msgs) != 1 || msgs[0].ChatID != 1 || !msgs[0].ResponseDropped {
			t.Fatalf("messages %+v, want chat 1 delivered with its response dropped", msgs)
		}
		if s := l.emu.Stats(); s.Delivered != 1 || s.Dropped != 1 {
			t.Errorf("stats %+v", s)
		}
	})
	t.Run("blackhole until the client gives up", func(t *testing.T) {
		t.Parallel()
		l := startLive(t, emulator.Config{Outage: &emulator.Outage{Mode: emulator.FaultBlackhole}})
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		if _, _, err := l.post(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want the client's deadline", err)
		}
	})
	t.Run("blackhole released by StopOutage", func(t *testing.T) {
		t.Parallel()
		l := startLive(t, emulator.Config{Outage: &emulator.Outage{Mode: emulator.FaultBlackhole}})
		errc := make(chan error, 1)
		go func() {
			_, _, err := l.post(t.Context(), 1)
			errc <- err
		}()
		waitFor(t, "the request to be held", func() bool { return l.emu.Stats().ByFault[emulator.FaultBlackhole] == 1 })
		l.emu.StopOutage()
		if err := <-errc; err == nil {
			t.Fatal("got an answer, want the connection closed")
		}
		if code, _, err := l.post(t.Context(), 1); err != nil || code != 200 {
			t.Errorf("after the outage: %d %v, want 200", code, err)
		}
	})
	t.Run("slow", func(t *testing.T) {
		t.Parallel()
		l := startLive(t, emulator.Config{Outage: &emulator.Outage{Mode: emulator.FaultSlow, Delay: 50 * time.Millisecond}})
		start := time.Now()
		code, _, err := l.post(t.Context(), 1)
		if err != nil || code != 200 {
			t.Fatalf("got %d %v, want 200", code, err)
		}
		if d := time.Since(start); d < 50*time.Millisecond {
			t.Errorf("answered after %v, want at least 50ms", d)
		}
	})
	t.Run("latency", func(t *testing.T) {
		t.Parallel()
		l := startLive(t, emulator.Config{Latency: 30 * time.Millisecond, LatencyJitter: 10 * time.Millisecond, Seed: 7})
		start := time.Now()
		if code, _, err := l.post(t.Context(), 1); err != nil || code != 200 {
			t.Fatalf("got %d %v, want 200", code, err)
		}
		if d := time.Since(start); d < 20*time.Millisecond {
			t.Errorf("answered after %v, want at least 20ms", d)
		}
	})
}

func TestOutageProbabilityAndDuration(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{Seed: 42})
	if err := e.emu.StartOutage(emulator.Outage{Mode: emulator.FaultJSON5xx, Probability: 0.3, Duration: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	failed := 0
	const n = 2000
	for i := range n {
		if a := e.send(int64(i+1), "x"); a.status == 500 {
			failed++
		}
	}
	if failed < n*25/100 || failed > n*35/100 {
		t.Errorf("%d of %d requests failed, want about 30%%", failed, n)
	}
	e.at(10*time.Second - 1)
	if e.emu.CurrentOutage() == nil {
		t.Error("the outage ended early")
	}
	e.at(10 * time.Second)
	if o := e.emu.CurrentOutage(); o != nil {
		t.Errorf("outage %+v still running after its duration", o)
	}
	for i := range 100 {
		if a := e.send(int64(n+i+1), "x"); !a.OK {
			t.Fatalf("after the outage: %d %s", a.status, a.Description)
		}
	}
	// The same seed gives the same faults.
	e2 := setup(t, emulator.Config{Seed: 42})
	if err := e2.emu.StartOutage(emulator.Outage{Mode: emulator.FaultJSON5xx, Probability: 0.3}); err != nil {
		t.Fatal(err)
	}
	failed2 := 0
	for i := range n {
		if a := e2.send(int64(i+1), "x"); a.status == 500 {
			failed2++
		}
	}
	if failed2 != failed {
		t.Errorf("seed 42 failed %d then %d requests, want the same", failed, failed2)
	}
}

func TestOutageValidation(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{})
	for _, o := range []emulator.Outage{
		{Mode: "meteor"},
		{Mode: emulator.Fault5xx, Probability: 1.5},
		{Mode: emulator.Fault5xx, Status: 404},
		{Mode: emulator.FaultSlow, Delay: -time.Second},
		{Mode: emulator.FaultDrop, Duration: -time.Second},
	} {
		if err := e.emu.StartOutage(o); err == nil {
			t.Errorf("StartOutage(%+v) succeeded, want an error", o)
		}
	}
	if _, err := emulator.New(emulator.Config{Token: token, Outage: &emulator.Outage{Mode: "x"}}); err == nil {
		t.Error("New with an invalid outage succeeded")
	}
}

// TestCloseReleasesBlackhole checks that a server can shut down while a
// request is held.
func TestCloseReleasesBlackhole(t *testing.T) {
	t.Parallel()
	emu, err := emulator.New(emulator.Config{Token: token, Outage: &emulator.Outage{Mode: emulator.FaultBlackhole}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(emu)
	errc := make(chan error, 1)
	go func() {
		resp, err := http.Post(srv.URL+"/bot"+token+"/getMe", "application/json", bytes.NewReader(nil))
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	waitFor(t, "the request to be held", func() bool { return emu.Stats().ByFault[emulator.FaultBlackhole] == 1 })
	emu.Close()
	emu.Close() // idempotent
	srv.Close() // returns only once the held handler has returned
	if err := <-errc; err == nil {
		t.Error("got an answer, want the connection closed")
	}
}
