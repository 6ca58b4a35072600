package emulator_test

import (
	"net/http"
	"testing"

	"github.com/tgnotify/tgnotify/pkg/maxapi/emulator"
)

func TestControlRecipients(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{})
	var st struct {
		Recipient string `json:"recipient"`
		State     string `json:"state"`
		Error     string `json:"error"`
	}
	if code := e.control(http.MethodPost, "/emulator/users/42/block", "", &st); code != http.StatusOK || st.Recipient != "u42" || st.State != "blocked" {
		t.Errorf("block: %d %+v", code, st)
	}
	if a := e.send("user_id=42", "x"); a.status != http.StatusForbidden {
		t.Errorf("blocked user: %d, want 403", a.status)
	}
	if code := e.control(http.MethodPost, "/emulator/chats/-7/state", `{"state":"not_found"}`, &st); code != http.StatusOK || st.Recipient != "c-7" {
		t.Errorf("state: %d %+v", code, st)
	}
	if a := e.send("chat_id=-7", "x"); a.status != http.StatusNotFound || a.code() != "chat.not.found" {
		t.Errorf("chat not found: %d %s", a.status, a.raw)
	}
	if e.control(http.MethodGet, "/emulator/chats/-7", "", &st); st.State != "not_found" {
		t.Errorf("GET state: %+v, want not_found", st)
	}
	if code := e.control(http.MethodDelete, "/emulator/users/42/block", "", &st); code != http.StatusOK || st.State != "ok" {
		t.Errorf("unblock: %d %+v", code, st)
	}
	if a := e.send("user_id=42", "x"); a.status != http.StatusOK {
		t.Errorf("unblocked user: %d, want 200", a.status)
	}
	for _, bad := range []struct{ method, path, body string }{
		{http.MethodPost, "/emulator/users/0/block", ""},
		{http.MethodPost, "/emulator/users/-1/block", ""},
		{http.MethodPost, "/emulator/chats/x/block", ""},
		{http.MethodPost, "/emulator/users/1/state", `{"state":"gone"}`},
		{http.MethodPost, "/emulator/users/1/state", `{"state":"blocked","extra":1}`},
	} {
		st.Error = ""
		if code := e.control(bad.method, bad.path, bad.body, &st); code != http.StatusBadRequest || st.Error == "" {
			t.Errorf("%s %s %s: %d %+v, want 400 with an error", bad.method, bad.path, bad.body, code, st)
		}
	}
}

func TestControlMessagesStatsReset(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{})
	e.send("user_id=1", "to user")
	e.send("chat_id=1", "to chat")
	var list struct {
		Count    int                `json:"count"`
		Messages []emulator.Message `json:"messages"`
	}
	e.control(http.MethodGet, "/emulator/messages", "", &list)
	if list.Count != 2 {
		t.Errorf("all messages: %+v, want 2", list)
	}
	e.control(http.MethodGet, "/emulator/messages?user_id=1", "", &list)
	if list.Count != 1 || list.Messages[0].Text != "to user" || list.Messages[0].UserID != 1 || list.Messages[0].MessageID == "" {
		t.Errorf("user 1's messages: %+v", list)
	}
	e.control(http.MethodGet, "/emulator/messages?chat_id=1", "", &list)
	if list.Count != 1 || list.Messages[0].Text != "to chat" {
		t.Errorf("chat 1's messages: %+v", list)
	}
	if code := e.control(http.MethodGet, "/emulator/messages?user_id=x", "", nil); code != http.StatusBadRequest {
		t.Errorf("bad filter: %d, want 400", code)
	}
	var st emulator.Stats
	e.control(http.MethodGet, "/emulator/stats", "", &st)
	if st.Requests != 2 || st.Delivered != 2 || st.ByEndpoint[emulator.EndpointSend] != 2 || st.ByCode[200] != 2 {
		t.Errorf("stats %+v", st)
	}
	var ok struct{ OK bool }
	if e.control(http.MethodPost, "/emulator/reset", "", &ok); !ok.OK {
		t.Error("reset did not answer ok")
	}
	if st := e.emu.Stats(); st.Requests != 0 || len(e.emu.Messages()) != 0 {
		t.Errorf("after reset: %+v, want nothing", st)
	}
	if e.control(http.MethodGet, "/emulator/healthz", "", &ok); !ok.OK {
		t.Error("healthz did not answer ok")
	}
}

func TestControlOutageAndPause(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{})
	var o *emulator.Outage
	if code := e.control(http.MethodPost, "/emulator/outage", `{"mode":"json5xx","status":503,"duration":"1m"}`, &o); code != http.StatusOK ||
		o == nil || o.Mode != emulator.FaultJSON5xx || o.Status != 503 {
		t.Fatalf("start outage: %d %+v", code, o)
	}
	if a := e.send("user_id=1", "x"); a.status != 503 || a.code() != "service.unavailable" {
		t.Errorf("during the outage: %d %s", a.status, a.raw)
	}
	e.control(http.MethodGet, "/emulator/outage", "", &o)
	if o == nil || o.Duration.String() != "1m0s" {
		t.Errorf("GET outage: %+v", o)
	}
	e.control(http.MethodDelete, "/emulator/outage", "", nil)
	if e.control(http.MethodGet, "/emulator/outage", "", &o); o != nil {
		t.Errorf("after DELETE: %+v, want null", o)
	}
	if code := e.control(http.MethodPost, "/emulator/outage", `{"mode":"meteor"}`, nil); code != http.StatusBadRequest {
		t.Errorf("bad outage: %d, want 400", code)
	}
	if code := e.control(http.MethodPost, "/emulator/ratelimit", `{"retry_after":4}`, nil); code != http.StatusOK {
		t.Fatalf("ratelimit: %d", code)
	}
	if a := e.send("user_id=1", "x"); a.status != http.StatusTooManyRequests || a.header.Get("Retry-After") != "4" {
		t.Errorf("after POST /emulator/ratelimit: %d Retry-After %q, want 429 with 4", a.status, a.header.Get("Retry-After"))
	}
	for _, bad := range []string{`{"retry_after":0}`, `{"scope":"bot","retry_after":1}`, `nope`} {
		if code := e.control(http.MethodPost, "/emulator/ratelimit", bad, nil); code != http.StatusBadRequest {
			t.Errorf("ratelimit %s: %d, want 400", bad, code)
		}
	}
}
