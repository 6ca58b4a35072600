package emulator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/pkg/maxapi/emulator"
)

// post sends a message with a client of its own and returns the error the
// transport saw, if any.
func (e *env) post(ctx context.Context, query string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+"/messages?"+query, strings.NewReader(`{"text":"x"}`))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", token)
	return e.srv.Client().Do(req)
}

func TestFault5xx(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{Outage: &emulator.Outage{Mode: emulator.Fault5xx}})
	a := e.send("user_id=1", "x")
	if a.status != http.StatusBadGateway || !strings.Contains(a.raw, "<title>502 Bad Gateway</title>") || !strings.HasPrefix(a.header.Get("Content-Type"), "text/html") {
		t.Errorf("got %d %q, want nginx's 502 page", a.status, a.raw)
	}
	if st := e.emu.Stats(); st.Faulted != 1 || st.ByFault[emulator.Fault5xx] != 1 || st.Delivered != 0 {
		t.Errorf("stats %+v, want one faulted request and nothing delivered", st)
	}
}

func TestFaultJSON5xx(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{})
	for _, tt := range []struct {
		status int
		code   string
	}{{0, "internal.error"}, {503, "service.unavailable"}} {
		if err := e.emu.StartOutage(emulator.Outage{Mode: emulator.FaultJSON5xx, Status: tt.status}); err != nil {
			t.Fatal(err)
		}
		want := tt.status
		if want == 0 {
			want = http.StatusInternalServerError
		}
		if a := e.send("user_id=1", "x"); a.status != want || a.code() != tt.code {
			t.Errorf("got %d %s, want %d %s", a.status, a.raw, want, tt.code)
		}
	}
}

func TestFaultDrop(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{Outage: &emulator.Outage{Mode: emulator.FaultDrop}})
	resp, err := e.post(t.Context(), "user_id=1")
	if err == nil {
		resp.Body.Close()
		t.Fatalf("got HTTP %d, want a dropped connection", resp.StatusCode)
	}
	if st := e.emu.Stats(); st.Dropped != 1 || st.Delivered != 0 {
		t.Errorf("stats %+v, want one dropped request", st)
	}
}

func TestFaultDeliverDrop(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{Outage: &emulator.Outage{Mode: emulator.FaultDeliverDrop}})
	resp, err := e.post(t.Context(), "user_id=1")
	if err == nil {
		resp.Body.Close()
		t.Fatalf("got HTTP %d, want a dropped connection", resp.StatusCode)
	}
	ms := e.emu.Messages()
	if len(ms) != 1 || !ms[0].ResponseDropped {
		t.Errorf("recorded %+v, want the message delivered with its answer dropped", ms)
	}
	if err := e.emu.SetState(emulator.User(2), emulator.StateBlocked); err != nil {
		t.Fatal(err)
	}
	if a := e.send("user_id=2", "x"); a.status != http.StatusForbidden {
		t.Errorf("undelivered request: %d, want its 403 answered", a.status)
	}
}

func TestFaultSlow(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{Outage: &emulator.Outage{Mode: emulator.FaultSlow, Delay: 50 * time.Millisecond}})
	start := time.Now()
	if a := e.send("user_id=1", "x"); a.status != http.StatusOK {
		t.Fatalf("got %d, want 200", a.status)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("answered after %v, want at least the 50ms delay", d)
	}
}

func TestFaultBlackholeReleasedByStopOutage(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{Outage: &emulator.Outage{Mode: emulator.FaultBlackhole}})
	done := make(chan error, 1)
	go func() {
		resp, err := e.post(context.Background(), "user_id=1")
		if err == nil {
			resp.Body.Close()
			err = errors.New("answered")
		}
		done <- err
	}()
	waitFor(t, "the request to be held", func() bool { return e.emu.Stats().Faulted == 1 })
	e.emu.StopOutage()
	select {
	case err := <-done:
		if err.Error() == "answered" {
			t.Error("a blackholed request was answered, want its connection closed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("StopOutage did not release the request")
	}
	if st := e.emu.Stats(); st.Dropped != 1 {
		t.Errorf("dropped %d, want 1", st.Dropped)
	}
}

func TestOutageProbabilityAndDuration(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{Seed: 7})
	if err := e.emu.StartOutage(emulator.Outage{Mode: emulator.FaultJSON5xx, Probability: 0.5, Duration: time.Minute}); err != nil {
		t.Fatal(err)
	}
	const n = 200
	for range n {
		e.send("user_id=1", "x")
	}
	st := e.emu.Stats()
	if st.Faulted < n/4 || st.Faulted > 3*n/4 || st.Delivered+st.Faulted != n {
		t.Errorf("faulted %d and delivered %d of %d, want about half faulted", st.Faulted, st.Delivered, n)
	}
	e.clock.Advance(time.Minute)
	if o := e.emu.CurrentOutage(); o != nil {
		t.Errorf("outage %+v still running after its duration", o)
	}
}

func TestOutageJSON(t *testing.T) {
	t.Parallel()
	in := `{"mode":"slow","probability":0.25,"duration":"30s","delay":"2s"}`
	var o emulator.Outage
	if err := json.Unmarshal([]byte(in), &o); err != nil {
		t.Fatal(err)
	}
	if o.Mode != emulator.FaultSlow || o.Probability != 0.25 || o.Duration != 30*time.Second || o.Delay != 2*time.Second {
		t.Errorf("decoded %+v", o)
	}
	out, err := json.Marshal(o)
	if err != nil || !bytes.Equal(out, []byte(in)) {
		t.Errorf("encoded %s, %v; want %s", out, err, in)
	}
	for _, bad := range []emulator.Outage{
		{Mode: "meteor"}, {Mode: emulator.Fault5xx, Status: 404}, {Mode: emulator.FaultDrop, Probability: 2},
		{Mode: emulator.FaultDrop, Duration: -1}, {Mode: emulator.FaultSlow, Delay: -1},
	} {
		e := setup(t, emulator.Config{})
		if err := e.emu.StartOutage(bad); err == nil {
			t.Errorf("StartOutage(%+v) succeeded, want an error", bad)
		}
	}
}
