package emulator_test

import (
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/pkg/maxapi/emulator"
)

// TestRateLimit checks the bucket at 30 requests per second with a burst of
// 30 on the manual clock: the burst passes, the next request gets 429 with
// Retry-After 1 and opens a pause that refuses everything until it ends.
func TestRateLimit(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{Limits: emulator.DefaultLimits()})
	for i := range emulator.DefaultBurst {
		if a := e.send("user_id=1", "burst"); a.status != http.StatusOK {
			t.Fatalf("request %d of the burst: %d %s", i+1, a.status, a.raw)
		}
	}
	a := e.send("user_id=2", "over")
	if a.status != http.StatusTooManyRequests || a.code() != "too.many.requests" || a.header.Get("Retry-After") != "1" {
		t.Fatalf("over the burst: %d %s Retry-After %q, want 429 too.many.requests with Retry-After 1", a.status, a.raw, a.header.Get("Retry-After"))
	}
	// Inside the pause, even when the bucket would admit one again, and
	// GET /me too: the pause is the bot's.
	e.clock.Advance(500 * time.Millisecond)
	for _, req := range []func() answer{
		func() answer { return e.send("user_id=3", "inside") },
		func() answer { return e.do(http.MethodGet, "/me", "", "") },
	} {
		if a := req(); a.status != http.StatusTooManyRequests || a.header.Get("Retry-After") != "1" {
			t.Errorf("inside the pause: %d %s Retry-After %q, want 429 with the 0.5s left rounded up", a.status, a.raw, a.header.Get("Retry-After"))
		}
	}
	e.clock.Advance(500 * time.Millisecond)
	if a := e.send("user_id=3", "after"); a.status != http.StatusOK {
		t.Errorf("at the end of the pause: %d %s, want 200", a.status, a.raw)
	}
	st := e.emu.Stats()
	if st.RateLimited != 3 || st.InPause != 2 || st.Delivered != 31 || st.ByCode[http.StatusTooManyRequests] != 3 {
		t.Errorf("stats %+v: want 3 429s, 2 of them inside the pause, 31 delivered", st)
	}
}

// TestRateLimitRefills checks the steady rate: one request per 1/30 s.
func TestRateLimitRefills(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{Limits: emulator.Limits{Enabled: true, Rate: 30, Burst: 1}})
	interval := time.Second / 30
	for i := range 60 {
		if a := e.send("user_id=1", "steady"); a.status != http.StatusOK {
			t.Fatalf("request %d at the rate: %d %s", i, a.status, a.raw)
		}
		e.clock.Advance(interval + time.Microsecond)
	}
	e.send("user_id=1", "x")
	if a := e.send("user_id=1", "too soon"); a.status != http.StatusTooManyRequests {
		t.Errorf("two requests at once with a burst of 1: %d, want 429", a.status)
	}
}

func TestLimitsOff(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{})
	for range 100 {
		if a := e.send("user_id=1", "x"); a.status != http.StatusOK {
			t.Fatalf("limits off: %d %s", a.status, a.raw)
		}
	}
}

func TestOpenPause(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{})
	if err := e.emu.OpenPause(emulator.PauseRequest{RetryAfter: 3}); err != nil {
		t.Fatal(err)
	}
	if err := e.emu.OpenPause(emulator.PauseRequest{RetryAfter: 0}); err == nil {
		t.Error("OpenPause(0) succeeded, want an error")
	}
	a := e.send("user_id=1", "announces")
	if a.status != http.StatusTooManyRequests || a.header.Get("Retry-After") != "3" {
		t.Fatalf("first request: %d Retry-After %q, want 429 with 3", a.status, a.header.Get("Retry-After"))
	}
	e.clock.Advance(2*time.Second + time.Millisecond)
	if a := e.send("user_id=1", "inside"); a.status != http.StatusTooManyRequests || a.header.Get("Retry-After") != "1" {
		t.Errorf("inside: %d Retry-After %q, want 429 with 1", a.status, a.header.Get("Retry-After"))
	}
	e.clock.Advance(time.Second)
	if a := e.send("user_id=1", "after"); a.status != http.StatusOK {
		t.Errorf("after: %d %s, want 200", a.status, a.raw)
	}
	if st := e.emu.Stats(); st.RateLimited != 2 || st.InPause != 1 {
		t.Errorf("stats %+v, want 2 429s, 1 inside the pause", st)
	}
}

func TestOmitRetryAfter(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{OmitRetryAfter: true})
	if err := e.emu.OpenPause(emulator.PauseRequest{RetryAfter: 2}); err != nil {
		t.Fatal(err)
	}
	a := e.send("user_id=1", "x")
	if a.status != http.StatusTooManyRequests || a.header.Values("Retry-After") != nil {
		t.Errorf("got %d with Retry-After %q, want 429 without the header", a.status, a.header.Values("Retry-After"))
	}
}

// TestSentInPause checks how requests inside a pause are judged on
// arrival: one that arrives before its sender could have read the 429
// crossed it; one that arrives later was sent by a sender that knew.
func TestSentInPause(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{})
	if err := e.emu.OpenPause(emulator.PauseRequest{RetryAfter: 1}); err != nil {
		t.Fatal(err)
	}
	e.send("user_id=1", "announces")
	e.send("user_id=2", "crosses") // same instant: within SenderReactionTime
	e.clock.Advance(emulator.SenderReactionTime + time.Millisecond)
	e.send("user_id=3", "knew")
	st := e.emu.Stats()
	if st.SentCrossing429 != 1 || st.SentInPause != 1 || st.InPause != 2 {
		t.Errorf("stats %+v: want 1 crossing, 1 sent in the pause, 2 decided in it", st)
	}
}

// A request sent inside a pause whose 429 its sender could have read is
// described with the 429s that announced the pause, so that a harness can
// tell whether the sender could have held it back; one that crossed the
// 429 is only counted.
func TestSentInPauseRequestsNameTheirOpeners(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{})
	if err := e.emu.OpenPause(emulator.PauseRequest{RetryAfter: 3}); err != nil {
		t.Fatal(err)
	}
	opened := e.clock.Now()
	if a := e.send("user_id=1", "announces"); a.status != http.StatusTooManyRequests {
		t.Fatalf("first request: %d, want 429", a.status)
	}
	if a := e.send("chat_id=-7", "crosses"); a.status != http.StatusTooManyRequests {
		t.Fatalf("crossing request: %d, want 429", a.status)
	}
	e.clock.Advance(emulator.SenderReactionTime)
	if a := e.send("user_id=2", "inside"); a.status != http.StatusTooManyRequests {
		t.Fatalf("request inside: %d, want 429", a.status)
	}
	e.clock.Advance(time.Second)
	if a := e.do(http.MethodGet, "/me", "", ""); a.status != http.StatusTooManyRequests {
		t.Fatalf("GET /me inside: %d, want 429", a.status)
	}
	st := e.emu.Stats()
	if st.SentInPause != 2 || st.SentCrossing429 != 1 || len(st.SentInPauseRequests) != 2 {
		t.Fatalf("stats: sent in pause %d, crossing %d, described %d; want 2, 1, 2", st.SentInPause, st.SentCrossing429, len(st.SentInPauseRequests))
	}
	// Every 429 written tells its sender of the pause, the one to the
	// crossing request and the one to the request inside it too.
	ua := "Go-http-client/1.1"
	u1 := emulator.PauseOpener{Endpoint: emulator.EndpointSend, Recipient: "u1", Arrived: opened, Answered: opened, UserAgent: ua}
	c7 := emulator.PauseOpener{Endpoint: emulator.EndpointSend, Recipient: "c-7", Arrived: opened, Answered: opened, UserAgent: ua}
	inside := opened.Add(emulator.SenderReactionTime)
	u2 := emulator.PauseOpener{Endpoint: emulator.EndpointSend, Recipient: "u2", Arrived: inside, Answered: inside, UserAgent: ua}
	for i, want := range []emulator.SentInPause{
		{Endpoint: emulator.EndpointSend, Recipient: "u2", Arrived: inside, PauseLeft: 3*time.Second - emulator.SenderReactionTime,
			UserAgent: ua, Openers: []emulator.PauseOpener{u1, c7}},
		{Endpoint: emulator.EndpointMe, Arrived: inside.Add(time.Second), PauseLeft: 2*time.Second - emulator.SenderReactionTime,
			UserAgent: ua, Openers: []emulator.PauseOpener{u1, c7, u2}},
	} {
		if got := st.SentInPauseRequests[i]; !reflect.DeepEqual(got, want) {
			t.Errorf("request %d: %+v\nwant %+v", i, got, want)
		}
	}
	// Stats returns a copy: changing it changes nothing in the emulator.
	st.SentInPauseRequests[0].Openers[0].Recipient = "changed"
	if again := e.emu.Stats(); again.SentInPauseRequests[0].Openers[0].Recipient != "u1" {
		t.Errorf("Stats shares its openers with the emulator")
	}
}
