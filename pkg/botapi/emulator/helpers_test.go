package emulator_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/testclock"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
)

const token = "123456789:TEST-emulator-token"

// newClock is a manual clock for the emulator's Config.Now.
func newClock() *testclock.Clock { return testclock.New(time.Unix(1_700_000_000, 0).UTC()) }

// env is an emulator on a manual clock, called in-process.
type env struct {
	t     *testing.T
	emu   *emulator.Emulator
	clock *testclock.Clock
	start time.Time
}

func setup(t *testing.T, cfg emulator.Config) *env {
	t.Helper()
	c := newClock()
	cfg.Token = token
	cfg.Now = c.Now
	emu, err := emulator.New(cfg)
	if err != nil {
		t.Fatalf("emulator.New: %v", err)
	}
	t.Cleanup(emu.Close)
	return &env{t: t, emu: emu, clock: c, start: c.Now()}
}

// at sets the clock to start+d.
func (e *env) at(d time.Duration) { e.clock.Set(e.start.Add(d)) }

// answer is a Bot API answer.
type answer struct {
	status      int
	contentType string
	OK          bool            `json:"ok"`
	Result      json.RawMessage `json:"result"`
	ErrorCode   int             `json:"error_code"`
	Description string          `json:"description"`
	Parameters  *struct {
		RetryAfter      int64 `json:"retry_after"`
		MigrateToChatID int64 `json:"migrate_to_chat_id"`
	} `json:"parameters"`
}

func (a answer) retryAfter() int64 {
	if a.Parameters == nil {
		return 0
	}
	return a.Parameters.RetryAfter
}

// serve runs one request through the handler.
func (e *env) serve(r *http.Request) answer {
	e.t.Helper()
	w := httptest.NewRecorder()
	e.emu.ServeHTTP(w, r)
	a := answer{status: w.Code, contentType: w.Header().Get("Content-Type")}
	if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil {
		e.t.Fatalf("answer is not JSON: %v: %q", err, w.Body.String())
	}
	if a.OK != (w.Code == 200) || (!a.OK && a.ErrorCode != w.Code) {
		e.t.Fatalf("envelope %s does not match HTTP status %d", w.Body.String(), w.Code)
	}
	return a
}

// call posts a JSON body to a Bot API method.
func (e *env) call(method string, params map[string]any) answer {
	e.t.Helper()
	body, err := json.Marshal(params)
	if err != nil {
		e.t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/bot"+token+"/"+method, bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	return e.serve(r)
}

// send sends a text message.
func (e *env) send(chatID int64, text string) answer {
	return e.call("sendMessage", map[string]any{"chat_id": chatID, "text": text})
}

// sendPaid sends a text message with allow_paid_broadcast.
func (e *env) sendPaid(chatID int64, text string) answer {
	return e.call("sendMessage", map[string]any{"chat_id": chatID, "text": text, "allow_paid_broadcast": true})
}

// flood simulates a sender that keeps the emulator saturated but honours
// every retry_after: at each step from 0 to d inclusive, once its own pause
// is over, it sends until it gets a 429, and then pauses for retry_after
// seconds. It returns the number of messages admitted.
func (e *env) flood(d, step time.Duration, send func() answer) int {
	e.t.Helper()
	admitted := 0
	var pausedUntil time.Duration
	for now := time.Duration(0); now <= d; now += step {
		if now < pausedUntil {
			continue
		}
		e.at(now)
		for {
			a := send()
			if a.OK {
				admitted++
				continue
			}
			if a.status != http.StatusTooManyRequests || a.retryAfter() < 1 {
				e.t.Fatalf("at %v: got %d %q, want 200 or 429 with retry_after", now, a.status, a.Description)
			}
			pausedUntil = now + time.Duration(a.retryAfter())*time.Second
			break
		}
	}
	if s := e.emu.Stats(); s.InPause != 0 || s.InAnyPause != 0 {
		e.t.Fatalf("a sender honouring retry_after was counted inside a pause: %+v", s)
	}
	return admitted
}

// counter returns a function yielding 1, 2, 3, ….
func counter() func() int64 {
	var n int64
	return func() int64 { n++; return n }
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
