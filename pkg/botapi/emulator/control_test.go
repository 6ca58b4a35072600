package emulator_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
)

// control calls a control endpoint and decodes its JSON answer into out.
func (l *live) control(t *testing.T, method, path, body string, out any) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, l.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := l.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return resp.StatusCode
}

func TestControlEndpoints(t *testing.T) {
	t.Parallel()
	l := startLive(t, emulator.Config{Blocked: []int64{9}})
	ok := func(code int, what string) {
		t.Helper()
		if code != http.StatusOK {
			t.Fatalf("%s: HTTP %d, want 200", what, code)
		}
	}
	var health struct{ OK bool }
	ok(l.control(t, "GET", "/emulator/healthz", "", &health), "healthz")

	// Block and unblock.
	ok(l.control(t, "POST", "/emulator/chats/5/block", "", nil), "block")
	if code, _, _ := l.post(t.Context(), 5); code != 403 {
		t.Errorf("blocked chat: %d, want 403", code)
	}
	var st struct {
		ChatID int64  `json:"chat_id"`
		State  string `json:"state"`
	}
	ok(l.control(t, "GET", "/emulator/chats/5", "", &st), "chat state")
	if st.State != "blocked" {
		t.Errorf("state %q, want blocked", st.State)
	}
	ok(l.control(t, "DELETE", "/emulator/chats/5/block", "", nil), "unblock")
	if code, _, _ := l.post(t.Context(), 5); code != 200 {
		t.Errorf("unblocked chat: %d, want 200", code)
	}
	ok(l.control(t, "POST", "/emulator/chats/6/state", `{"state":"deactivated"}`, nil), "state")
	if _, body, _ := l.post(t.Context(), 6); !strings.Contains(body, "user is deactivated") {
		t.Errorf("deactivated chat: %s", body)
	}

	// Migration.
	ok(l.control(t, "POST", "/emulator/chats/-7/migrate", `{"to_chat_id":-1007000000007}`, nil), "migrate")
	if _, body, _ := l.post(t.Context(), -7); !strings.Contains(body, `"migrate_to_chat_id":-1007000000007`) {
		t.Errorf("migrated chat: %s", body)
	}
	ok(l.control(t, "DELETE", "/emulator/chats/-7/migrate", "", nil), "unmigrate")
	if code, _, _ := l.post(t.Context(), -7); code != 200 {
		t.Errorf("after removing the migration: %d, want 200", code)
	}

	// Outage.
	var o struct {
		Mode     string `json:"mode"`
		Duration string `json:"duration"`
		Status   int    `json:"status"`
	}
	ok(l.control(t, "POST", "/emulator/outage", `{"mode":"5xx","duration":"1m"}`, &o), "start outage")
	if o.Mode != "5xx" || o.Duration != "1m0s" || o.Status != 502 {
		t.Errorf("outage %+v, want 5xx for 1m0s with status 502", o)
	}
	if code, _, _ := l.post(t.Context(), 1); code != 502 {
		t.Errorf("during the outage: %d, want 502", code)
	}
	ok(l.control(t, "DELETE", "/emulator/outage", "", nil), "stop outage")
	var none *emulator.Outage
	ok(l.control(t, "GET", "/emulator/outage", "", &none), "get outage")
	if none != nil {
		t.Errorf("outage %+v after DELETE, want null", none)
	}

	// Rate-limit pause.
	ok(l.control(t, "POST", "/emulator/ratelimit", `{"scope":"chat","chat_id":1,"retry_after":5}`, nil), "pause")
	if _, body, _ := l.post(t.Context(), 1); body != `{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 5","parameters":{"retry_after":5}}` {
		t.Errorf("paused chat: %s", body)
	}

	// Messages and stats.
	var msgs struct {
		Count    int                `json:"count"`
		Messages []emulator.Message `json:"messages"`
	}
	ok(l.control(t, "GET", "/emulator/messages", "", &msgs), "messages")
	if msgs.Count != 2 || len(msgs.Messages) != 2 {
		t.Errorf("messages %+v, want 2", msgs)
	}
	ok(l.control(t, "GET", "/emulator/messages?chat_id=-7", "", &msgs), "messages of a chat")
	if msgs.Count != 1 || msgs.Messages[0].ChatID != -7 || msgs.Messages[0].Time.IsZero() {
		t.Errorf("messages of chat -7: %+v", msgs)
	}
	var stats emulator.Stats
	ok(l.control(t, "GET", "/emulator/stats", "", &stats), "stats")
	if stats.Requests != 7 || stats.Delivered != 2 || stats.RateLimited != 1 || stats.ByCode[502] != 1 || stats.ByMethod["sendMessage"] != 7 {
		t.Errorf("stats %+v", stats)
	}

	// Reset restores the configuration.
	ok(l.control(t, "POST", "/emulator/reset", "", nil), "reset")
	ok(l.control(t, "GET", "/emulator/stats", "", &stats), "stats")
	if stats.Requests != 0 || stats.Delivered != 0 {
		t.Errorf("stats after reset %+v, want zero", stats)
	}
	if code, _, _ := l.post(t.Context(), 9); code != 403 {
		t.Errorf("configured blocked chat after reset: %d, want 403", code)
	}
	if code, _, _ := l.post(t.Context(), 6); code != 200 {
		t.Errorf("chat deactivated at run time, after reset: %d, want 200", code)
	}
}

func TestControlErrors(t *testing.T) {
	t.Parallel()
	l := startLive(t, emulator.Config{})
	for _, tt := range []struct{ method, path, body string }{
		{"POST", "/emulator/chats/abc/block", ""},
		{"POST", "/emulator/chats/0/block", ""},
		{"POST", "/emulator/chats/5/state", `{"state":"asleep"}`},
		{"POST", "/emulator/chats/5/state", `{"stat":"blocked"}`},
		{"POST", "/emulator/chats/5/migrate", `{}`},
		{"POST", "/emulator/outage", `{"mode":"meteor"}`},
		{"POST", "/emulator/outage", `{"mode":"5xx","duration":"soon"}`},
		{"POST", "/emulator/ratelimit", `{"scope":"chat","retry_after":5}`},
		{"POST", "/emulator/ratelimit", `not json`},
		{"GET", "/emulator/messages?chat_id=x", ""},
	} {
		var body struct {
			OK    bool   `json:"ok"`
			Error string `json:"error"`
		}
		if code := l.control(t, tt.method, tt.path, tt.body, &body); code != 400 || body.OK || body.Error == "" {
			t.Errorf("%s %s %s: %d %+v, want 400 with an error", tt.method, tt.path, tt.body, code, body)
		}
	}
}

func TestOutageJSON(t *testing.T) {
	t.Parallel()
	o := emulator.Outage{Mode: emulator.FaultSlow, Probability: 0.5, Duration: 90 * time.Second, Delay: 2 * time.Second}
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"mode":"slow","probability":0.5,"duration":"1m30s","delay":"2s"}`; string(b) != want {
		t.Errorf("Marshal = %s, want %s", b, want)
	}
	var back emulator.Outage
	if err := json.Unmarshal(b, &back); err != nil || back != o {
		t.Errorf("Unmarshal = %+v, %v, want %+v", back, err, o)
	}
}
