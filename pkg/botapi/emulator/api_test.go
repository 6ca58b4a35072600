package emulator_test

import (
	"bytes"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
)

func TestEnvelope(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{})
	for _, tt := range []struct {
		name string
		path string
		code int
		desc string
	}{
		{"wrong token", "/bot1:wrong/sendMessage", 401, "Unauthorized"},
		{"wrong token, unknown method", "/bot1:wrong/frobnicate", 401, "Unauthorized"},
		{"unknown method", "/bot" + token + "/frobnicate", 404, "Not Found"},
		{"no method", "/bot" + token + "/", 404, "Not Found"},
		{"not a bot path", "/favicon.ico", 404, "Not Found"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			e.emu.ServeHTTP(w, httptest.NewRequest(http.MethodPost, tt.path, nil))
			want := `{"ok":false,"error_code":` + itoa(int64(tt.code)) + `,"description":"` + tt.desc + `"}`
			if w.Code != tt.code || w.Body.String() != want {
				t.Errorf("got %d %s, want %d %s", w.Code, w.Body.String(), tt.code, want)
			}
			if ct := w.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", ct)
			}
		})
	}
	if s := e.emu.Stats(); s.Requests != 5 || s.ByCode[401] != 2 || s.ByCode[404] != 3 || s.ByMethod["unknown"] != 4 {
		t.Errorf("stats %+v, want 5 requests: 2×401, 3×404", s)
	}
}

func TestGetMe(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{BotUsername: "shop_bot"})
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		a := e.serve(httptest.NewRequest(method, "/bot"+token+"/getme", nil))
		var u struct {
			ID       int64  `json:"id"`
			IsBot    bool   `json:"is_bot"`
			Username string `json:"username"`
		}
		if err := json.Unmarshal(a.Result, &u); err != nil || !a.OK {
			t.Fatalf("%s getMe: %d %s", method, a.status, a.Description)
		}
		if u.ID != 123456789 || !u.IsBot || u.Username != "shop_bot" {
			t.Errorf("getMe = %+v, want bot 123456789 shop_bot", u)
		}
	}
}

// TestParameterEncodings sends the same message in every encoding Telegram
// accepts.
func TestParameterEncodings(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{})
	path := "/bot" + token + "/sendMessage"
	form := url.Values{"chat_id": {"5"}, "text": {"<b>hi</b>"}, "parse_mode": {"HTML"}, "allow_paid_broadcast": {"true"},
		"reply_markup": {`{"inline_keyboard":[[{"text":"Open","url":"https://t.me/x"}]]}`}}
	multipartBody := func() (*bytes.Buffer, string) {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		for k, v := range form {
			_ = mw.WriteField(k, v[0])
		}
		mw.Close()
		return &b, mw.FormDataContentType()
	}
	requests := map[string]func() *http.Request{
		"json": func() *http.Request {
			r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(
				`{"chat_id":5,"text":"<b>hi</b>","parse_mode":"HTML","allow_paid_broadcast":true,"reply_markup":{"inline_keyboard":[[{"text":"Open","url":"https://t.me/x"}]]}}`))
			r.Header.Set("Content-Type", "application/json; charset=utf-8")
			return r
		},
		"json with string chat_id": func() *http.Request {
			r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(
				`{"chat_id":"5","text":"<b>hi</b>","parse_mode":"HTML","allow_paid_broadcast":"true","reply_markup":"{\"inline_keyboard\":[[{\"text\":\"Open\",\"url\":\"https://t.me/x\"}]]}"}`))
			r.Header.Set("Content-Type", "application/json")
			return r
		},
		"form": func() *http.Request {
			r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(form.Encode()))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			return r
		},
		"multipart": func() *http.Request {
			b, ct := multipartBody()
			r := httptest.NewRequest(http.MethodPost, path, b)
			r.Header.Set("Content-Type", ct)
			return r
		},
		"query": func() *http.Request {
			return httptest.NewRequest(http.MethodGet, path+"?"+form.Encode(), nil)
		},
	}
	for name, req := range requests {
		t.Run(name, func(t *testing.T) {
			e.emu.Reset()
			a := e.serve(req())
			if !a.OK {
				t.Fatalf("got %d %q, want 200", a.status, a.Description)
			}
			msgs := e.emu.Messages()
			if len(msgs) != 1 {
				t.Fatalf("recorded %d messages, want 1", len(msgs))
			}
			m := msgs[0]
			if m.ChatID != 5 || m.Text != "<b>hi</b>" || m.ParseMode != "HTML" || !m.AllowPaidBroadcast || !m.HasReplyMarkup || m.MessageID != 1 {
				t.Errorf("recorded %+v", m)
			}
		})
	}
}

func TestParameterErrors(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{})
	post := func(contentType, body string) answer {
		r := httptest.NewRequest(http.MethodPost, "/bot"+token+"/sendMessage", strings.NewReader(body))
		r.Header.Set("Content-Type", contentType)
		return e.serve(r)
	}
	for _, tt := range []struct {
		name, contentType, body string
		code                    int
		desc                    string
	}{
		{"no chat_id", "application/json", `{"text":"x"}`, 400, "Bad Request: chat_id is empty"},
		{"username chat_id", "application/json", `{"chat_id":"@channel","text":"x"}`, 400, "Bad Request: chat not found"},
		{"no text", "application/json", `{"chat_id":1}`, 400, "Bad Request: message text is empty"},
		{"invalid JSON", "application/json", `{"chat_id":1,`, 400, "Bad Request: can't parse JSON object"},
		{"invalid UTF-8", "application/x-www-form-urlencoded", "chat_id=1&text=%FF", 400, "Bad Request: text must be encoded in UTF-8"},
		{"bad parse mode", "application/json", `{"chat_id":1,"text":"x","parse_mode":"bbcode"}`, 400, "Bad Request: unsupported parse_mode"},
		{"bad reply markup", "application/json", `{"chat_id":1,"text":"x","reply_markup":"{"}`, 400, "Bad Request: can't parse reply keyboard markup JSON object"},
		{"text-only button", "application/json", `{"chat_id":1,"text":"x","reply_markup":{"inline_keyboard":[[{"text":"a"}]]}}`, 400,
			"Bad Request: can't parse inline keyboard button: Text buttons are unallowed in the inline keyboard"},
		{"too large", "application/json", `{"chat_id":1,"text":"` + strings.Repeat("x", 2<<20) + `"}`, 413, "Request Entity Too Large"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := post(tt.contentType, tt.body)
			if a.status != tt.code || a.Description != tt.desc {
				t.Errorf("got %d %q, want %d %q", a.status, a.Description, tt.code, tt.desc)
			}
		})
	}
}

func TestChatStates(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{
		Blocked:     []int64{1},
		Deactivated: []int64{2},
		NotFound:    []int64{3},
		Migrate:     map[int64]int64{-4: -1004000000004},
	})
	for id, s := range map[int64]emulator.ChatState{5: emulator.ChatKicked, -1005000000005: emulator.ChatKicked, 6: emulator.ChatForbidden} {
		if err := e.emu.SetChatState(id, s); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		chat    int64
		code    int
		desc    string
		migrate int64
	}{
		{1, 403, "Forbidden: bot was blocked by the user", 0},
		{2, 403, "Forbidden: user is deactivated", 0},
		{3, 400, "Bad Request: chat not found", 0},
		{-4, 400, "Bad Request: group chat was upgraded to a supergroup chat", -1004000000004},
		{5, 403, "Forbidden: bot was kicked from the group chat", 0},
		{-1005000000005, 403, "Forbidden: bot was kicked from the supergroup chat", 0},
		{6, 403, "Forbidden: bot can't send messages to the user", 0},
	} {
		a := e.send(tt.chat, "x")
		if a.status != tt.code || a.Description != tt.desc {
			t.Errorf("chat %d: got %d %q, want %d %q", tt.chat, a.status, a.Description, tt.code, tt.desc)
		}
		if got := int64(0); a.Parameters != nil {
			got = a.Parameters.MigrateToChatID
			if got != tt.migrate {
				t.Errorf("chat %d: migrate_to_chat_id %d, want %d", tt.chat, got, tt.migrate)
			}
		} else if tt.migrate != 0 {
			t.Errorf("chat %d: no parameters, want migrate_to_chat_id", tt.chat)
		}
	}
	// The supergroup accepts, and reports its type.
	a := e.send(-1004000000004, "x")
	var m struct {
		Chat struct {
			ID   int64  `json:"id"`
			Type string `json:"type"`
		} `json:"chat"`
	}
	if err := json.Unmarshal(a.Result, &m); err != nil || m.Chat.Type != "supergroup" {
		t.Errorf("sending to the supergroup: %d %s, chat %+v", a.status, a.Description, m.Chat)
	}
	e.emu.Unblock(1)
	if a := e.send(1, "x"); !a.OK {
		t.Errorf("after Unblock: %d %s", a.status, a.Description)
	}
	if err := e.emu.SetChatState(1, "asleep"); err == nil {
		t.Error("SetChatState with an unknown state succeeded")
	}
}

func TestMessageIDsPerChat(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{})
	for _, tt := range []struct {
		chat int64
		id   int64
	}{{1, 1}, {1, 2}, {2, 1}, {1, 3}, {-3, 1}} {
		a := e.send(tt.chat, "x")
		var m struct {
			MessageID int64 `json:"message_id"`
		}
		if err := json.Unmarshal(a.Result, &m); err != nil || m.MessageID != tt.id {
			t.Errorf("chat %d: message_id %d, want %d", tt.chat, m.MessageID, tt.id)
		}
	}
}
