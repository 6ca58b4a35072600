package emulator_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
)

func within(t *testing.T, what string, got, want, tolerance int) {
	t.Helper()
	if got < want-tolerance || got > want+tolerance {
		t.Errorf("%s: admitted %d, want %d ±%d", what, got, want, tolerance)
	}
}

// TestLimitRates measures each scope with a sender that saturates it while
// honouring retry_after: over d it must admit burst + rate×d, ±1.
func TestLimitRates(t *testing.T) {
	t.Parallel()
	t.Run("bot 30/s", func(t *testing.T) {
		t.Parallel()
		e := setup(t, emulator.Config{Limits: emulator.DefaultLimits()})
		next := counter() // a new chat each time: only the bot limit binds
		got := e.flood(10*time.Second, time.Millisecond, func() answer { return e.send(next(), "x") })
		within(t, "bot over 10s", got, 30+300, 1)
	})
	t.Run("private chat 1/s", func(t *testing.T) {
		t.Parallel()
		e := setup(t, emulator.Config{Limits: emulator.DefaultLimits()})
		got := e.flood(10*time.Second, time.Millisecond, func() answer { return e.send(42, "x") })
		within(t, "one chat over 10s", got, 3+10, 1)
	})
	t.Run("group 20/min", func(t *testing.T) {
		t.Parallel()
		e := setup(t, emulator.Config{Limits: emulator.DefaultLimits()})
		got := e.flood(60*time.Second, 10*time.Millisecond, func() answer { return e.send(-42, "x") })
		within(t, "one group over 60s", got, 3+20, 1)
	})
	t.Run("paid 1000/s", func(t *testing.T) {
		t.Parallel()
		e := setup(t, emulator.Config{Limits: emulator.DefaultLimits()})
		next := counter()
		got := e.flood(10*time.Second, time.Millisecond, func() answer { return e.sendPaid(next(), "x") })
		within(t, "paid over 10s", got, 1000+10000, 1)
		if s := e.emu.Stats(); s.RateLimitedByScope[emulator.ScopePaid] == 0 || s.RateLimitedByScope[emulator.ScopeBot] != 0 {
			t.Errorf("429s by scope = %v, want only paid", s.RateLimitedByScope)
		}
	})
	t.Run("custom rates", func(t *testing.T) {
		t.Parallel()
		l := emulator.DefaultLimits()
		l.BotRate, l.BotBurst = 7, 2
		e := setup(t, emulator.Config{Limits: l})
		next := counter()
		got := e.flood(20*time.Second, time.Millisecond, func() answer { return e.send(next(), "x") })
		// The bucket holds 2, so each 1s pause loses what it cannot hold:
		// 2 per second plus the first burst.
		within(t, "7/s with burst 2 over 20s", got, 2+2*20, 1)
	})
}

// TestPacedSenderIsNeverLimited checks the boundary exactly: a sender at
// exactly the bot rate, with no burst, is never refused, and one 1% faster is.
func TestPacedSenderIsNeverLimited(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		rate  float64
		want  bool // any 429
		count int
	}{
		{"at the rate", 30, false, 300},
		{"1% over the rate", 30.3, true, 303},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := emulator.DefaultLimits()
			l.BotBurst = 1
			e := setup(t, emulator.Config{Limits: l})
			limited := false
			for k := range tt.count {
				e.at(time.Duration(float64(k) * float64(time.Second) / tt.rate))
				a := e.send(int64(k+1), "x")
				if !a.OK {
					limited = true
					break
				}
			}
			if limited != tt.want {
				t.Errorf("a sender at %v/s was limited: %v, want %v", tt.rate, limited, tt.want)
			}
		})
	}
}

// TestRetryAfterIsHonest checks that a request exactly at the announced end
// of a pause succeeds, and one a nanosecond before it is refused and
// punished.
func TestRetryAfterIsHonest(t *testing.T) {
	t.Parallel()
	const chat = 7
	exhaust := func(e *env) int64 {
		t.Helper()
		for range 3 {
			if a := e.send(chat, "x"); !a.OK {
				t.Fatalf("burst refused: %d %s", a.status, a.Description)
			}
		}
		a := e.send(chat, "x")
		if a.status != http.StatusTooManyRequests || a.Description != "Too Many Requests: retry after 1" || a.retryAfter() != 1 {
			t.Fatalf("got %d %q retry_after %d, want 429 retry after 1", a.status, a.Description, a.retryAfter())
		}
		return a.retryAfter()
	}
	t.Run("at the announced time", func(t *testing.T) {
		t.Parallel()
		e := setup(t, emulator.Config{Limits: emulator.DefaultLimits()})
		ra := exhaust(e)
		e.at(time.Duration(ra) * time.Second)
		if a := e.send(chat, "x"); !a.OK {
			t.Errorf("at the announced time: %d %s, want 200", a.status, a.Description)
		}
		if s := e.emu.Stats(); s.InPause != 0 || s.InAnyPause != 0 {
			t.Errorf("stats %+v, want nothing inside a pause", s)
		}
	})
	t.Run("before the announced time", func(t *testing.T) {
		t.Parallel()
		e := setup(t, emulator.Config{Limits: emulator.DefaultLimits()})
		exhaust(e)
		// 1ns early: punished with max(ceil(1ns), 2 × 1s) = 2s.
		e.at(time.Second - 1)
		a := e.send(chat, "x")
		if a.status != http.StatusTooManyRequests || a.retryAfter() != 2 {
			t.Fatalf("1ns early: %d retry_after %d, want 429 retry_after 2", a.status, a.retryAfter())
		}
		// Inside the extended pause: punished with max(ceil(1s-1ns), 2 × 1s) = 2s.
		e.at(2 * time.Second)
		if a := e.send(chat, "x"); a.retryAfter() != 2 {
			t.Fatalf("inside the extended pause: retry_after %d, want 2", a.retryAfter())
		}
		s := e.emu.Stats()
		if s.InPause != 2 || s.InAnyPause != 2 || s.RateLimited != 3 {
			t.Errorf("InPause %d, InAnyPause %d, RateLimited %d; want 2, 2, 3", s.InPause, s.InAnyPause, s.RateLimited)
		}
		e.at(4*time.Second - 1)
		if a := e.send(chat, "x"); a.OK {
			t.Errorf("1ns before the extended pause ends: admitted, want 429")
		}
		// That pushed the end to 4s-1ns + 2s.
		e.at(6*time.Second - 1)
		if a := e.send(chat, "x"); !a.OK {
			t.Errorf("at the end of the extended pause: %d %s, want 200", a.status, a.Description)
		}
	})
	t.Run("a violator waits twice the announced pause", func(t *testing.T) {
		t.Parallel()
		e := setup(t, emulator.Config{})
		if err := e.emu.OpenPause(emulator.PauseRequest{Scope: emulator.ScopeBot, RetryAfter: 30}); err != nil {
			t.Fatal(err)
		}
		if a := e.send(1, "x"); a.retryAfter() != 30 {
			t.Fatalf("retry_after %d, want 30", a.retryAfter())
		}
		// Violations do not compound: each one is told 2 × 30s from itself.
		for _, at := range []time.Duration{10 * time.Second, 10*time.Second + time.Millisecond, 11 * time.Second} {
			e.at(at)
			if a := e.send(1, "x"); a.retryAfter() != 60 {
				t.Fatalf("at %v: retry_after %d, want 60", at, a.retryAfter())
			}
		}
		e.at(71*time.Second - 1)
		if a := e.send(1, "x"); a.OK {
			t.Fatal("1ns before the end: admitted, want 429")
		}
		e.at(71*time.Second - 1 + 60*time.Second)
		if a := e.send(1, "x"); !a.OK {
			t.Fatalf("at the end: %d %s, want 200", a.status, a.Description)
		}
	})
}

func TestOpenPause(t *testing.T) {
	t.Parallel()
	t.Run("bot", func(t *testing.T) {
		t.Parallel()
		e := setup(t, emulator.Config{})
		if err := e.emu.OpenPause(emulator.PauseRequest{Scope: emulator.ScopeBot, RetryAfter: 5}); err != nil {
			t.Fatal(err)
		}
		e.at(time.Hour) // the pause starts when it is announced, not when it is opened
		a := e.send(1, "x")
		if a.status != 429 || a.retryAfter() != 5 || a.Description != "Too Many Requests: retry after 5" {
			t.Fatalf("got %d %q, want 429 retry after 5", a.status, a.Description)
		}
		if s := e.emu.Stats(); s.InPause != 0 || s.InAnyPause != 0 {
			t.Errorf("the announcing request was counted inside the pause: %+v", s)
		}
		e.at(time.Hour + 4*time.Second)
		if a := e.send(2, "x"); a.status != 429 || a.retryAfter() != 10 {
			t.Errorf("inside the pause: %d retry_after %d, want 429 retry_after 10", a.status, a.retryAfter())
		}
		if s := e.emu.Stats(); s.InPause != 1 || s.InAnyPause != 1 || s.RateLimitedByScope[emulator.ScopeBot] != 2 {
			t.Errorf("stats %+v, want one request inside the bot pause", s)
		}
		e.at(time.Hour + 14*time.Second)
		if a := e.send(3, "x"); !a.OK {
			t.Errorf("after the pause: %d %s, want 200", a.status, a.Description)
		}
		if a := e.sendPaid(4, "x"); !a.OK {
			t.Errorf("paid request: %d %s, want 200", a.status, a.Description)
		}
	})
	t.Run("chat", func(t *testing.T) {
		t.Parallel()
		e := setup(t, emulator.Config{})
		if err := e.emu.OpenPause(emulator.PauseRequest{Scope: emulator.ScopeChat, ChatID: 9, RetryAfter: 3}); err != nil {
			t.Fatal(err)
		}
		if a := e.send(8, "x"); !a.OK {
			t.Errorf("another chat: %d, want 200", a.status)
		}
		if a := e.send(9, "x"); a.retryAfter() != 3 {
			t.Errorf("the paused chat: retry_after %d, want 3", a.retryAfter())
		}
		// Another chat during chat 9's pause: admitted, but inside "any" pause.
		e.at(time.Second)
		if a := e.send(8, "x"); !a.OK {
			t.Errorf("another chat during the pause: %d, want 200", a.status)
		}
		if s := e.emu.Stats(); s.InPause != 0 || s.InAnyPause != 1 {
			t.Errorf("InPause %d, InAnyPause %d; want 0, 1", s.InPause, s.InAnyPause)
		}
		e.at(3 * time.Second)
		if a := e.send(8, "x"); !a.OK {
			t.Errorf("after the pause: %d", a.status)
		}
		if s := e.emu.Stats(); s.InAnyPause != 1 {
			t.Errorf("InAnyPause %d after the pause ended, want 1", s.InAnyPause)
		}
	})
	t.Run("invalid", func(t *testing.T) {
		t.Parallel()
		e := setup(t, emulator.Config{})
		for _, p := range []emulator.PauseRequest{
			{Scope: "everything", RetryAfter: 1},
			{Scope: emulator.ScopeBot, RetryAfter: 0},
			{Scope: emulator.ScopeChat, RetryAfter: 1},
		} {
			if err := e.emu.OpenPause(p); err == nil {
				t.Errorf("OpenPause(%+v) succeeded, want an error", p)
			}
		}
	})
}

func TestLimitsDisabled(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{})
	for i := range 1000 {
		if a := e.send(42, "x"); !a.OK {
			t.Fatalf("request %d: %d %s, want 200 with limits off", i, a.status, a.Description)
		}
	}
}

func TestLimitsValidation(t *testing.T) {
	t.Parallel()
	for _, l := range []emulator.Limits{
		{Enabled: true, BotRate: -1},
		{Enabled: true, ChatBurst: -3},
		{Enabled: true, GroupPerMinute: -20},
	} {
		if _, err := emulator.New(emulator.Config{Token: token, Limits: l}); err == nil {
			t.Errorf("New with %+v succeeded, want an error", l)
		}
	}
}

// SentInAnyPause judges a request on arrival: one already on its way when
// another request's 429 announced a pause (it waited out the latency) is not
// counted; one sent after the 429 was answered is.
func TestSentInAnyPauseJudgedOnArrival(t *testing.T) {
	clk := newClock()
	emu, err := emulator.New(emulator.Config{Token: "1:t", Latency: 200 * time.Millisecond, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer emu.Close()
	srv := httptest.NewServer(emu)
	defer srv.Close()
	if err := emu.OpenPause(emulator.PauseRequest{Scope: emulator.ScopeBot, RetryAfter: 5}); err != nil {
		t.Fatal(err)
	}
	send := func(chat int) <-chan int { return sendAsync(srv.URL, chat, false) }
	first := send(1)
	// The second request leaves while the first is still in the emulator's
	// latency, i.e. before the pause is announced.
	natstest.WaitFor(t, 5*time.Second, func() bool { return emu.Stats().Requests >= 1 }, "first request received")
	second := send(2)
	if c := <-first; c != http.StatusTooManyRequests {
		t.Fatalf("first request = %d, want 429", c)
	}
	<-second
	if s := emu.Stats(); s.SentInAnyPause != 0 || s.InAnyPause != 1 {
		t.Fatalf("SentInAnyPause %d, InAnyPause %d; want 0 (sent before the announcement) and 1", s.SentInAnyPause, s.InAnyPause)
	}
	// Sent after the 429 was answered, sooner than a sender can react to
	// it: it crossed the answer.
	<-send(3)
	// The emulator records a 429 as known once it is flushed, which the
	// client may see first.
	natstest.WaitFor(t, 5*time.Second, func() bool { return emu.Stats().Answered429 == 3 }, "the three 429s recorded as written")
	if s := emu.Stats(); s.SentInAnyPause != 0 || s.SentCrossing429 != 1 {
		t.Fatalf("within the reaction time: SentInAnyPause %d, SentCrossing429 %d; want 0 and 1", s.SentInAnyPause, s.SentCrossing429)
	}
	clk.Advance(emulator.SenderReactionTime)
	<-send(4) // sent when the sender knew of the pause
	s := emu.Stats()
	if s.SentInAnyPause != 1 {
		t.Fatalf("SentInAnyPause %d after a request sent inside the pause, want 1", s.SentInAnyPause)
	}
	// The request is kept with the requests whose 429s announced the
	// pauses it was sent in: the first, and the two punished since.
	if len(s.SentInPauseRequests) != 1 {
		t.Fatalf("SentInPauseRequests = %+v, want the one request", s.SentInPauseRequests)
	}
	got := s.SentInPauseRequests[0]
	if got.ChatID != 4 || !got.Arrived.Equal(clk.Now()) || got.PauseLeft <= 0 || got.UserAgent == "" {
		t.Errorf("kept request = %+v, want chat 4 arriving now, with pause left and its User-Agent", got)
	}
	var chats []int64
	for _, o := range got.Openers {
		chats = append(chats, o.ChatID)
		if o.Answered.Before(o.Arrived) || o.UserAgent == "" {
			t.Errorf("opener %+v: answered before it arrived, or without its User-Agent", o)
		}
	}
	// The first two 429s are written by concurrent handlers after the
	// same latency: either may be recorded first.
	slices.Sort(chats)
	if !slices.Equal(chats, []int64{1, 2, 3}) {
		t.Errorf("openers' chats = %v, want 1, 2 and 3", chats)
	}
}

// heldAnswer is a ResponseWriter that holds the answer back: WriteHeader
// reports that the emulator has decided, then waits for release.
type heldAnswer struct {
	http.ResponseWriter
	decided chan<- struct{}
	release <-chan struct{}
}

func (h heldAnswer) WriteHeader(code int) {
	close(h.decided)
	<-h.release
	h.ResponseWriter.WriteHeader(code)
}

func (h heldAnswer) Unwrap() http.ResponseWriter { return h.ResponseWriter }

// A request that arrives after a pause was decided but before its 429 was
// written crossed the answer: no sender could have held it back, so it is
// counted in SentCrossing429, not in SentInAnyPause.
func TestRequestCrossingThe429IsNotSentInPause(t *testing.T) {
	clk := newClock()
	emu, err := emulator.New(emulator.Config{Token: "1:t", Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer emu.Close()
	decided, release := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Hold-Answer") != "" {
			w = heldAnswer{ResponseWriter: w, decided: decided, release: release}
		}
		emu.ServeHTTP(w, r)
	}))
	defer srv.Close()
	if err := emu.OpenPause(emulator.PauseRequest{Scope: emulator.ScopeBot, RetryAfter: 30}); err != nil {
		t.Fatal(err)
	}
	send := func(chat int, hold bool) <-chan int { return sendAsync(srv.URL, chat, hold) }
	first := send(1, true)
	<-decided // the pause is decided; its 429 is not written yet
	if c := <-send(2, false); c != http.StatusTooManyRequests {
		t.Fatalf("request inside the decided pause = %d, want 429", c)
	}
	if s := emu.Stats(); s.SentCrossing429 != 1 || s.SentInAnyPause != 0 {
		t.Fatalf("before the 429 was written: SentCrossing429 %d, SentInAnyPause %d; want 1 and 0", s.SentCrossing429, s.SentInAnyPause)
	}
	close(release)
	if c := <-first; c != http.StatusTooManyRequests {
		t.Fatalf("first request = %d, want 429", c)
	}
	// The second request was punished with its own 429, written when it
	// returned; a third arrives after both answers, later than a sender
	// takes to react.
	clk.Advance(emulator.SenderReactionTime)
	if c := <-send(3, false); c != http.StatusTooManyRequests {
		t.Fatalf("request after the 429 = %d, want 429", c)
	}
	if s := emu.Stats(); s.SentCrossing429 != 1 || s.SentInAnyPause != 1 {
		t.Fatalf("after the 429 was written: SentCrossing429 %d, SentInAnyPause %d; want 1 and 1", s.SentCrossing429, s.SentInAnyPause)
	}
}

// sendAsync posts a sendMessage for chat to the emulator at url and
// delivers the answer's status (0 when the request failed) on the returned
// channel. With hold, the request asks the test server to hold its answer
// back (heldAnswer).
func sendAsync(url string, chat int, hold bool) <-chan int {
	done := make(chan int, 1)
	go func() {
		req, err := http.NewRequest(http.MethodPost, url+"/bot1:t/sendMessage", strings.NewReader(fmt.Sprintf(`{"chat_id":%d,"text":"x"}`, chat)))
		if err != nil {
			done <- 0
			return
		}
		req.Header.Set("Content-Type", "application/json")
		if hold {
			req.Header.Set("X-Hold-Answer", "1")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	return done
}
