package emulator_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
)

// waitUntil polls cond until it holds or the deadline passes.
func waitUntil(t *testing.T, d time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		<-tick.C
	}
}

// botUpdate is the part of an update the tests read.
type botUpdate struct {
	UpdateID     int64 `json:"update_id"`
	MyChatMember *struct {
		Chat struct {
			ID   int64  `json:"id"`
			Type string `json:"type"`
		} `json:"chat"`
		From          struct{ ID int64 } `json:"from"`
		Date          int64              `json:"date"`
		OldChatMember struct {
			Status string `json:"status"`
			User   struct {
				ID    int64 `json:"id"`
				IsBot bool  `json:"is_bot"`
			} `json:"user"`
		} `json:"old_chat_member"`
		NewChatMember struct {
			Status string `json:"status"`
		} `json:"new_chat_member"`
	} `json:"my_chat_member"`
	Message *struct {
		MessageID int64 `json:"message_id"`
		Chat      struct {
			ID int64 `json:"id"`
		} `json:"chat"`
		From     struct{ ID int64 } `json:"from"`
		Text     string             `json:"text"`
		Entities []struct {
			Type   string `json:"type"`
			Length int    `json:"length"`
		} `json:"entities"`
	} `json:"message"`
}

// call posts a JSON body to a Bot API method over HTTP.
func (l *live) call(ctx context.Context, t *testing.T, method string, params map[string]any) answer {
	t.Helper()
	body, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.srv.URL+"/bot"+token+"/"+method, strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.srv.Client().Do(req)
	if err != nil {
		t.Errorf("%s: %v", method, err)
		return answer{}
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode}
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &a); err != nil {
		t.Errorf("%s: answer is not JSON: %q", method, b)
	}
	return a
}

// getUpdates calls getUpdates and decodes the updates.
func (l *live) getUpdates(t *testing.T, offset int64, timeout int) ([]botUpdate, answer) {
	t.Helper()
	a := l.call(t.Context(), t, "getUpdates", map[string]any{"offset": offset, "timeout": timeout, "allowed_updates": []string{"message", "my_chat_member"}})
	var ups []botUpdate
	if a.OK {
		if err := json.Unmarshal(a.Result, &ups); err != nil {
			t.Fatalf("getUpdates result: %v: %s", err, a.Result)
		}
	}
	return ups, a
}

// TestGetUpdatesLongPollAndOffset: a user blocks the bot (a my_chat_member
// update, and sending answers 403), the update stays until an offset above
// it confirms it, and a long poll waiting for the next update returns as
// soon as the user unblocks the bot.
func TestGetUpdatesLongPollAndOffset(t *testing.T) {
	t.Parallel()
	l := startLive(t, emulator.Config{})
	id, err := l.emu.BlockByUser(42)
	if err != nil || id == 0 {
		t.Fatalf("BlockByUser = %d, %v", id, err)
	}
	if code, body, _ := l.post(t.Context(), 42); code != 403 || !strings.Contains(body, "bot was blocked by the user") {
		t.Fatalf("sending to the chat that blocked the bot: %d %s", code, body)
	}
	for range 2 { // not confirmed: the same update again
		ups, a := l.getUpdates(t, 0, 0)
		if !a.OK || len(ups) != 1 || ups[0].UpdateID != id || ups[0].MyChatMember == nil {
			t.Fatalf("getUpdates = %+v %s, want update %d", ups, a.Description, id)
		}
		m := ups[0].MyChatMember
		if m.Chat.ID != 42 || m.Chat.Type != "private" || m.OldChatMember.Status != "member" || m.NewChatMember.Status != "kicked" ||
			m.From.ID != 42 || !m.OldChatMember.User.IsBot || m.OldChatMember.User.ID != 123456789 || m.Date == 0 {
			t.Fatalf("my_chat_member = %+v, want chat 42 from user 42, the bot member -> kicked", m)
		}
	}

	type polled struct {
		ups []botUpdate
		a   answer
	}
	done := make(chan polled, 1)
	go func() {
		ups, a := l.getUpdates(t, id+1, 10)
		done <- polled{ups, a}
	}()
	waitUntil(t, 5*time.Second, func() bool { return l.emu.Updates().Polls == 3 }, "the long poll to start")
	if l.emu.Updates().Pending != 0 {
		t.Fatalf("pending after offset %d: %+v, want the blocked update confirmed", id+1, l.emu.Updates())
	}
	next, err := l.emu.UnblockByUser(42)
	if err != nil || next != id+1 {
		t.Fatalf("UnblockByUser = %d, %v; want update %d", next, err, id+1)
	}
	var p polled
	select {
	case p = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the long poll did not return when the update arrived")
	}
	if !p.a.OK || len(p.ups) != 1 || p.ups[0].UpdateID != next || p.ups[0].MyChatMember.NewChatMember.Status != "member" {
		t.Fatalf("long poll = %+v %s, want update %d kicked -> member", p.ups, p.a.Description, next)
	}
	if code, _, _ := l.post(t.Context(), 42); code != 200 {
		t.Fatalf("sending after the unblock: %d, want 200", code)
	}
	// A poll that times out answers an empty list.
	if ups, a := l.getUpdates(t, next+1, 1); !a.OK || len(ups) != 0 {
		t.Fatalf("idle poll = %+v %s, want []", ups, a.Description)
	}
}

// TestSendStartUnblocksAndWrites: /start from a chat that blocked the bot
// unblocks it first (my_chat_member), then writes the command, with its
// bot_command entity; in a group the command names the bot.
func TestSendStartUnblocksAndWrites(t *testing.T) {
	t.Parallel()
	l := startLive(t, emulator.Config{Blocked: []int64{7}})
	ids, err := l.emu.SendStart(7, 0, "A1")
	if err != nil || len(ids) != 2 {
		t.Fatalf("SendStart = %v, %v; want two updates", ids, err)
	}
	if _, err := l.emu.SendStart(-500, 9, ""); err != nil {
		t.Fatal(err)
	}
	ups, a := l.getUpdates(t, 0, 0)
	if !a.OK || len(ups) != 3 {
		t.Fatalf("getUpdates = %+v %s", ups, a.Description)
	}
	if m := ups[0].MyChatMember; m == nil || m.OldChatMember.Status != "kicked" || m.NewChatMember.Status != "member" {
		t.Errorf("first update = %+v, want my_chat_member kicked -> member", ups[0])
	}
	if m := ups[1].Message; m == nil || m.Text != "/start A1" || m.Chat.ID != 7 || m.From.ID != 7 ||
		len(m.Entities) != 1 || m.Entities[0].Type != "bot_command" || m.Entities[0].Length != 6 {
		t.Errorf("second update = %+v, want /start A1 from chat 7 with its bot_command entity", ups[1].Message)
	}
	if m := ups[2].Message; m == nil || m.Text != "/start@emulator_bot" || m.Chat.ID != -500 || m.From.ID != 9 {
		t.Errorf("group update = %+v, want /start@emulator_bot in -500 from 9", ups[2].Message)
	}
	if _, err := l.emu.BlockByUser(7); err != nil {
		t.Fatal(err)
	}
	if _, err := l.emu.UserMessage(7, 0, "hello"); err == nil {
		t.Error("a user who blocked the bot wrote to it")
	}
	if _, err := l.emu.SetMember(7, emulator.MemberLeft, 0); err == nil {
		t.Error("a private chat's bot status set to left")
	}
	if id, err := l.emu.SetMember(-500, emulator.MemberLeft, 0); err != nil || id == 0 {
		t.Fatalf("removing the bot from a group: %d, %v", id, err)
	}
	if code, body, _ := l.post(t.Context(), -500); code != 403 || !strings.Contains(body, "kicked") {
		t.Errorf("sending to a group the bot left: %d %s", code, body)
	}
}

// TestGetUpdatesConflict: Telegram serves one consumer of a bot's updates.
// A second getUpdates ends the one in progress with 409 "terminated by
// other getUpdates request", and getUpdates is refused with 409 while a
// webhook is set.
func TestGetUpdatesConflict(t *testing.T) {
	t.Parallel()
	l := startLive(t, emulator.Config{})
	first := make(chan answer, 1)
	go func() {
		_, a := l.getUpdates(t, 0, 10)
		first <- a
	}()
	waitUntil(t, 5*time.Second, func() bool { return l.emu.Updates().Polls == 1 }, "the first poll to start")
	if _, a := l.getUpdates(t, 0, 0); !a.OK {
		t.Fatalf("second poll: %d %s", a.status, a.Description)
	}
	select {
	case a := <-first:
		if a.status != 409 || !strings.Contains(a.Description, "terminated by other getUpdates request") {
			t.Fatalf("first poll = %d %q, want 409 terminated by other getUpdates request", a.status, a.Description)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first poll was not terminated")
	}
	if u := l.emu.Updates(); u.Conflicts != 1 || u.MaxConcurrentPolls != 2 {
		t.Fatalf("updates info = %+v, want one conflict, two polls at once", u)
	}

	if a := l.call(t.Context(), t, "setWebhook", map[string]any{"url": "http://127.0.0.1:1/hook"}); !a.OK {
		t.Fatalf("setWebhook: %s", a.Description)
	}
	if _, a := l.getUpdates(t, 0, 0); a.status != 409 || !strings.Contains(a.Description, "can't use getUpdates method while webhook is active") {
		t.Fatalf("getUpdates with a webhook = %d %q, want 409 webhook is active", a.status, a.Description)
	}
	if a := l.call(t.Context(), t, "deleteWebhook", nil); !a.OK {
		t.Fatalf("deleteWebhook: %s", a.Description)
	}
	if _, a := l.getUpdates(t, 0, 0); !a.OK {
		t.Fatalf("getUpdates after deleteWebhook: %d %s", a.status, a.Description)
	}
}

// hookReceiver records what the emulator posts to a webhook; it answers
// 500 to the first failFirst posts.
type hookReceiver struct {
	mu        sync.Mutex
	failFirst int
	posts     int
	secrets   []string
	bodies    []botUpdate
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.posts++
	if h.posts <= h.failFirst {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	var u botUpdate
	_ = json.NewDecoder(r.Body).Decode(&u)
	h.secrets = append(h.secrets, r.Header.Get(emulator.SecretTokenHeader))
	h.bodies = append(h.bodies, u)
}

func (h *hookReceiver) received() ([]botUpdate, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]botUpdate(nil), h.bodies...), append([]string(nil), h.secrets...)
}

// TestWebhookDeliversWithTheSecret: with a webhook set, updates are posted
// in order with the secret token header; one answered 500 is posted again.
func TestWebhookDeliversWithTheSecret(t *testing.T) {
	t.Parallel()
	l := startLive(t, emulator.Config{})
	recv := &hookReceiver{failFirst: 1}
	hook := httptest.NewServer(recv)
	t.Cleanup(hook.Close)
	if a := l.call(t.Context(), t, "setWebhook", map[string]any{"url": hook.URL + "/tg?k=v", "secret_token": "s3cr3t_-X",
		"allowed_updates": []string{"my_chat_member", "message"}, "max_connections": 1}); !a.OK || a.Description != "Webhook was set" {
		t.Fatalf("setWebhook: %d %s", a.status, a.Description)
	}
	if a := l.call(t.Context(), t, "setWebhook", map[string]any{"url": hook.URL, "secret_token": "has space"}); a.status != 400 {
		t.Fatalf("setWebhook with a bad secret: %d, want 400", a.status)
	}
	if _, err := l.emu.BlockByUser(5); err != nil {
		t.Fatal(err)
	}
	if _, err := l.emu.SendStart(5, 0, ""); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, func() bool {
		w := l.emu.Updates().Webhook
		return w != nil && w.Delivered == 3
	}, "three updates posted")
	got, secrets := recv.received()
	for i, u := range got {
		if u.UpdateID != int64(i+1) || secrets[i] != "s3cr3t_-X" {
			t.Errorf("post %d: update %d with secret %q, want update %d with the secret", i, u.UpdateID, secrets[i], i+1)
		}
	}
	if got[2].Message == nil || got[2].Message.Text != "/start" {
		t.Errorf("third post = %+v, want /start", got[2])
	}
	info := l.emu.Updates()
	if info.Webhook == nil || info.Webhook.Failed != 1 || info.Webhook.Delivered != 3 || info.Pending != 0 || !info.Webhook.HasSecret ||
		strings.Contains(info.Webhook.URL, "k=v") {
		t.Fatalf("updates info = %+v %+v, want 3 delivered after 1 failure, nothing pending, the query hidden", info, info.Webhook)
	}
	a := l.call(t.Context(), t, "getWebhookInfo", nil)
	var wi emulator.WebhookInfo
	if err := json.Unmarshal(a.Result, &wi); err != nil || !strings.HasPrefix(wi.URL, hook.URL) || wi.MaxConnections != 1 || wi.LastErrorMessage == "" {
		t.Fatalf("getWebhookInfo = %+v, %v", wi, err)
	}
}

// TestUpdateControlEndpoints drives the updates over the control API.
func TestUpdateControlEndpoints(t *testing.T) {
	t.Parallel()
	l := startLive(t, emulator.Config{})
	var ids struct {
		IDs []int64 `json:"update_ids"`
	}
	for _, c := range []struct {
		path, body string
		want       int
	}{
		{"/emulator/chats/8/user-block", "", 1},
		{"/emulator/chats/8/user-block", "", 0}, // already blocked: no update
		{"/emulator/chats/8/start", "", 2},
		{"/emulator/chats/8/message", `{"text":"hi"}`, 1},
		{"/emulator/chats/8/user-unblock", "", 0},
		{"/emulator/chats/-9/member", `{"status":"kicked","by":3}`, 1},
	} {
		if code := l.control(t, "POST", c.path, c.body, &ids); code != 200 || len(ids.IDs) != c.want {
			t.Fatalf("POST %s: %d %v, want %d update ids", c.path, code, ids.IDs, c.want)
		}
	}
	if code := l.control(t, "POST", "/emulator/chats/-9/member", `{"status":"boss"}`, nil); code != 400 {
		t.Fatalf("bad status: %d, want 400", code)
	}
	var info emulator.UpdatesInfo
	if code := l.control(t, "GET", "/emulator/updates", "", &info); code != 200 || info.Pending != 5 || info.NextUpdateID != 6 {
		t.Fatalf("GET /emulator/updates = %d %+v, want 5 pending", code, info)
	}
	l.emu.Reset()
	if info := l.emu.Updates(); info.Pending != 0 || info.NextUpdateID != 1 {
		t.Fatalf("after Reset: %+v", info)
	}
	if l.emu.ChatState(8) != emulator.ChatOK {
		t.Fatalf("chat 8 after Reset: %s", l.emu.ChatState(8))
	}
}
