package emufault_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/emufault"
)

// pageIs5xx is how Telegram's and MAX's emulators name their 5xx modes:
// "5xx" is the HTML page.
func pageIs5xx() emufault.Kind {
	return emufault.Kind{JSON5xx: emufault.ModeJSON5xx, HTML5xx: emufault.Mode5xx}
}

// jsonIs5xx is how Twilio's emulator names them: "5xx" is the API's JSON
// error.
func jsonIs5xx() emufault.Kind {
	return emufault.Kind{JSON5xx: emufault.Mode5xx, HTML5xx: emufault.ModeHTML5xx}
}

func TestParseTakesOnlyTheKindsModes(t *testing.T) {
	for _, tc := range []struct {
		kind emufault.Kind
		in   string
		want emufault.Mode
		err  string
	}{
		{pageIs5xx(), " JSON5xx ", emufault.ModeJSON5xx, ""},
		{pageIs5xx(), "deliver-drop", emufault.ModeDeliverDrop, ""},
		{pageIs5xx(), "html5xx", "", `unknown fault mode "html5xx" (want 5xx, json5xx, drop, slow, blackhole or deliver-drop)`},
		{jsonIs5xx(), "html5xx", emufault.ModeHTML5xx, ""},
		{jsonIs5xx(), "json5xx", "", `unknown fault mode "json5xx" (want 5xx, html5xx, drop, slow, blackhole or deliver-drop)`},
		{jsonIs5xx(), "", "", `unknown fault mode ""`},
	} {
		got, err := tc.kind.Parse(tc.in)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("Parse(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.err)):
			t.Errorf("Parse(%q) error = %v; want it to start with %q", tc.in, err, tc.err)
		}
	}
}

func TestWithDefaultsFillsAndRefuses(t *testing.T) {
	o, err := pageIs5xx().WithDefaults(emufault.Outage{Mode: emufault.Mode5xx})
	if err != nil || o.Probability != 1 || o.Status != http.StatusBadGateway || o.Delay != 5*time.Second {
		t.Errorf("an HTML 5xx outage with defaults: %+v, %v", o, err)
	}
	if o, err := pageIs5xx().WithDefaults(emufault.Outage{Mode: emufault.ModeJSON5xx}); err != nil || o.Status != http.StatusInternalServerError {
		t.Errorf("a JSON 5xx outage's default status: %+v, %v; want 500", o, err)
	}
	if o, err := jsonIs5xx().WithDefaults(emufault.Outage{Mode: emufault.Mode5xx}); err != nil || o.Status != http.StatusInternalServerError {
		t.Errorf("Twilio's 5xx (its JSON error) default status: %+v, %v; want 500", o, err)
	}
	for _, tc := range []struct {
		o    emufault.Outage
		want string
	}{
		{emufault.Outage{Mode: "flood"}, `unknown fault mode "flood"`},
		{emufault.Outage{Mode: emufault.ModeDrop, Probability: 1.5}, "outage probability must be in (0, 1], got 1.5"},
		{emufault.Outage{Mode: emufault.ModeDrop, Probability: -0.1}, "outage probability must be in (0, 1], got -0.1"},
		{emufault.Outage{Mode: emufault.ModeDrop, Duration: -time.Second}, "outage duration must not be negative, got -1s"},
		{emufault.Outage{Mode: emufault.Mode5xx, Status: 404}, "outage status must be 500..599, got 404"},
		{emufault.Outage{Mode: emufault.ModeSlow, Delay: -time.Second}, "outage delay must not be negative, got -1s"},
	} {
		if _, err := pageIs5xx().WithDefaults(tc.o); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("WithDefaults(%+v) = %v; want an error starting with %q", tc.o, err, tc.want)
		}
	}
}

func TestOutageJSON(t *testing.T) {
	for _, tc := range []struct {
		o    emufault.Outage
		want string
	}{
		{emufault.Outage{Mode: emufault.Mode5xx, Probability: 0.5, Duration: 30 * time.Second, Status: 503, Delay: time.Second},
			`{"mode":"5xx","probability":0.5,"duration":"30s","status":503}`},
		{emufault.Outage{Mode: emufault.ModeHTML5xx, Status: 502}, `{"mode":"html5xx","status":502}`},
		{emufault.Outage{Mode: emufault.ModeSlow, Status: 502, Delay: 2 * time.Second}, `{"mode":"slow","delay":"2s"}`},
		{emufault.Outage{Mode: emufault.ModeBlackhole, Status: 502, Delay: 2 * time.Second}, `{"mode":"blackhole"}`},
	} {
		b, err := json.Marshal(tc.o)
		if err != nil || string(b) != tc.want {
			t.Errorf("Marshal(%+v) = %s, %v; want %s", tc.o, b, err, tc.want)
		}
	}
	var o emufault.Outage
	if err := json.Unmarshal([]byte(`{"mode":"slow","probability":0.25,"duration":"1m","status":500,"delay":"1.5s"}`), &o); err != nil {
		t.Fatal(err)
	}
	if want := (emufault.Outage{Mode: emufault.ModeSlow, Probability: 0.25, Duration: time.Minute, Status: 500, Delay: 1500 * time.Millisecond}); o != want {
		t.Errorf("Unmarshal = %+v, want %+v", o, want)
	}
	for in, want := range map[string]string{
		`{"mode":"drop","duration":"soon"}`: "outage duration: ",
		`{"mode":"slow","delay":"5"}`:       "outage delay: ",
	} {
		if err := json.Unmarshal([]byte(in), &o); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("Unmarshal(%s) = %v; want an error starting with %q", in, err, want)
		}
	}
}

// A running outage ends at its duration on the caller's clock, or when it
// is stopped or replaced, and each end releases the requests it held.
func TestRunningOutageEndsAndReleases(t *testing.T) {
	r := emufault.NewRunning(slog.New(slog.DiscardHandler))
	rng := rand.New(rand.NewPCG(1, 2))
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	if _, hit := r.Pick(t0, rng); hit || r.Current(t0) != nil || r.Stop() != nil {
		t.Fatal("a Running with no outage hits, reports or stops one")
	}

	r.Start(emufault.Outage{Mode: emufault.ModeBlackhole, Probability: 1, Duration: 10 * time.Second, Status: 502}, t0)
	f, hit := r.Pick(t0.Add(9*time.Second), rng)
	if !hit || f.Mode != emufault.ModeBlackhole || f.Status != 502 {
		t.Fatalf("inside its duration: %+v, hit %v", f, hit)
	}
	if got := r.Current(t0.Add(9 * time.Second)); got == nil || got.Duration != 10*time.Second {
		t.Fatalf("Current inside its duration = %+v", got)
	}
	if _, hit := r.Pick(t0.Add(10*time.Second), rng); hit {
		t.Fatal("the outage hits a request at its end")
	}
	released(t, f.Release, "at its end")
	if r.Current(t0.Add(10*time.Second)) != nil {
		t.Fatal("an outage past its end is still current")
	}

	r.Start(emufault.Outage{Mode: emufault.ModeDrop, Probability: 1}, t0)
	first, _ := r.Pick(t0, rng)
	r.Start(emufault.Outage{Mode: emufault.ModeSlow, Probability: 1, Delay: time.Second}, t0)
	released(t, first.Release, "when another replaced it")
	second, _ := r.Pick(t0.Add(time.Hour), rng)
	if second.Mode != emufault.ModeSlow || second.Delay != time.Second {
		t.Fatalf("the replacing outage (no duration) an hour later: %+v", second)
	}
	if o := r.Stop(); o == nil || o.Mode != emufault.ModeSlow {
		t.Fatalf("Stop returned %+v, want the slow outage", o)
	}
	released(t, second.Release, "when stopped")
}

func released(t *testing.T, c <-chan struct{}, when string) {
	t.Helper()
	select {
	case <-c:
	default:
		t.Fatalf("the outage's held requests are not released %s", when)
	}
}

// An outage with a probability hits about that fraction of requests.
func TestRunningOutageHitsItsFraction(t *testing.T) {
	r := emufault.NewRunning(slog.New(slog.DiscardHandler))
	rng := rand.New(rand.NewPCG(3, 4))
	now := time.Unix(0, 0)
	r.Start(emufault.Outage{Mode: emufault.ModeDrop, Probability: 0.25}, now)
	hits := 0
	for range 10000 {
		if _, hit := r.Pick(now, rng); hit {
			hits++
		}
	}
	if hits < 2300 || hits > 2700 {
		t.Fatalf("%d of 10000 requests hit by an outage of probability 0.25", hits)
	}
}

func TestGatewayPageAndDroppedConnection(t *testing.T) {
	if p := emufault.GatewayPage(503); !strings.Contains(p, "<title>503 Service Unavailable</title>") || !strings.Contains(p, "nginx") {
		t.Errorf("GatewayPage(503) = %q", p)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { emufault.DropConnection(w) }))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		t.Fatalf("a dropped connection answered %s", resp.Status)
	}
	if !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "EOF") {
		t.Fatalf("a dropped connection failed with %v, want EOF", err)
	}
}

func TestSleepEndsEarly(t *testing.T) {
	if !emufault.Sleep(context.Background(), nil, 0) {
		t.Error("Sleep(0) reports that it was cut short")
	}
	stop := make(chan struct{})
	close(stop)
	if emufault.Sleep(context.Background(), stop, time.Hour) {
		t.Error("Sleep ran its hour past a closed stop channel")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if emufault.Sleep(ctx, nil, time.Hour) {
		t.Error("Sleep ran its hour past a cancelled context")
	}
}
