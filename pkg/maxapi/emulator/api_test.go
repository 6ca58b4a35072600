package emulator_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/tgnotify/tgnotify/pkg/maxapi/emulator"
)

func TestSendMessageToAUser(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{})
	a := e.do(http.MethodPost, "/messages?user_id=42&disable_link_preview=true",
		`{"text":"<b>Order #17</b> shipped &amp; on its way","format":"html","notify":false}`, "")
	if a.status != http.StatusOK {
		t.Fatalf("status %d (%s), want 200", a.status, a.raw)
	}
	var res struct {
		Message struct {
			Sender struct {
				UserID int64 `json:"user_id"`
				IsBot  bool  `json:"is_bot"`
			} `json:"sender"`
			Recipient struct {
				ChatID   int64  `json:"chat_id"`
				ChatType string `json:"chat_type"`
				UserID   int64  `json:"user_id"`
			} `json:"recipient"`
			Timestamp int64 `json:"timestamp"`
			Body      struct {
				MID  string `json:"mid"`
				Seq  int64  `json:"seq"`
				Text string `json:"text"`
			} `json:"body"`
		} `json:"message"`
	}
	if err := json.Unmarshal([]byte(a.raw), &res); err != nil {
		t.Fatal(err)
	}
	m := res.Message
	if m.Body.MID == "" || m.Body.Seq != 1 || m.Recipient.UserID != 42 || m.Recipient.ChatType != "dialog" ||
		m.Timestamp != e.clock.Now().UnixMilli() || !m.Sender.IsBot || m.Sender.UserID != emulator.DefaultBotID {
		t.Errorf("got %+v, want message 1 to user 42 in a dialog, from the bot, stamped now", m)
	}
	if m.Body.Text != "Order #17 shipped & on its way" {
		t.Errorf("body text %q, want the visible text", m.Body.Text)
	}
	got := e.emu.Messages()
	if len(got) != 1 {
		t.Fatalf("recorded %d messages, want 1", len(got))
	}
	r := got[0]
	if r.MessageID != m.Body.MID || r.UserID != 42 || r.Format != "html" || r.Notify || !r.DisableLinkPreview ||
		r.Text != "<b>Order #17</b> shipped &amp; on its way" || !r.Time.Equal(e.clock.Now()) {
		t.Errorf("recorded %+v, want the request as sent", r)
	}
}

func TestSendMessageToAChat(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{})
	var mids []string
	for range 3 {
		a := e.do(http.MethodPost, "/messages?chat_id=-7001", `{"text":"plain"}`, "")
		if a.status != http.StatusOK {
			t.Fatalf("status %d (%s), want 200", a.status, a.raw)
		}
		msg := a.body["message"].(map[string]any)
		mids = append(mids, msg["body"].(map[string]any)["mid"].(string))
		if rc := msg["recipient"].(map[string]any); rc["chat_type"] != "chat" || rc["chat_id"] != float64(-7001) {
			t.Errorf("recipient %v, want chat -7001", rc)
		}
	}
	if mids[0] == mids[1] || mids[1] == mids[2] {
		t.Errorf("message ids %v, want distinct", mids)
	}
	ms := e.emu.RecipientMessages(emulator.Chat(-7001))
	if len(ms) != 3 || ms[2].Seq != 3 || !ms[0].Notify || ms[0].Format != "" {
		t.Errorf("recorded %+v, want three messages with seq 1..3, notify on, no format", ms)
	}
	if len(e.emu.RecipientMessages(emulator.User(7001))) != 0 {
		t.Error("user 7001 got the chat's messages")
	}
}

func TestGetMe(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{BotID: 777, BotName: "Shop", BotUsername: "shop_bot"})
	a := e.do(http.MethodGet, "/me", "", "")
	if a.status != http.StatusOK || a.body["user_id"] != float64(777) || a.body["name"] != "Shop" ||
		a.body["username"] != "shop_bot" || a.body["is_bot"] != true {
		t.Errorf("GET /me: %d %s, want the bot 777", a.status, a.raw)
	}
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{})
	for _, tt := range []struct {
		name, path, auth string
	}{
		{"no header", "/me", "-"},
		{"wrong token", "/me", "wrong-token"},
		{"Bearer prefix", "/me", "Bearer " + token},
		{"token in the query", "/me?access_token=" + token, "-"},
		{"token in the query and the header", "/messages?user_id=1&access_token=" + token, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := e.do(http.MethodGet, tt.path, "", tt.auth)
			if a.status != http.StatusUnauthorized || a.code() != "verify.token" {
				t.Errorf("got %d %s, want 401 verify.token", a.status, a.raw)
			}
			if strings.Contains(a.raw, token) {
				t.Errorf("the answer %s contains the token", a.raw)
			}
		})
	}
	if n := e.emu.Stats().ByCode[http.StatusUnauthorized]; n != 5 {
		t.Errorf("counted %d 401s, want 5", n)
	}
}

func TestRoutes(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{})
	for _, tt := range []struct {
		method, path string
		status       int
		code, allow  string
	}{
		{http.MethodGet, "/chats", http.StatusNotFound, "not.found", ""},
		{http.MethodPost, "/v1/messages?user_id=1", http.StatusNotFound, "not.found", ""},
		{http.MethodGet, "/messages?user_id=1", http.StatusMethodNotAllowed, "method.not.allowed", "POST"},
		{http.MethodPost, "/me", http.StatusMethodNotAllowed, "method.not.allowed", "GET"},
	} {
		a := e.do(tt.method, tt.path, "", "")
		if a.status != tt.status || a.code() != tt.code || a.header.Get("Allow") != tt.allow {
			t.Errorf("%s %s: %d %s (Allow %q), want %d %s (Allow %q)", tt.method, tt.path, a.status, a.raw, a.header.Get("Allow"), tt.status, tt.code, tt.allow)
		}
	}
	st := e.emu.Stats()
	if st.ByEndpoint[emulator.EndpointOther] != 4 || st.Requests != 4 {
		t.Errorf("stats %+v, want 4 requests to other endpoints", st)
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{})
	long := strings.Repeat("я", emulator.MaxTextLength+1)
	for _, tt := range []struct {
		name, query, body, want string
	}{
		{"both ids", "user_id=1&chat_id=2", `{"text":"x"}`, "not both"},
		{"no id", "", `{"text":"x"}`, "required"},
		{"zero user", "user_id=0", `{"text":"x"}`, "user_id"},
		{"negative user", "user_id=-5", `{"text":"x"}`, "user_id"},
		{"word chat", "chat_id=abc", `{"text":"x"}`, "chat_id"},
		{"bad preview flag", "user_id=1&disable_link_preview=maybe", `{"text":"x"}`, "disable_link_preview"},
		{"not JSON", "user_id=1", `text=x`, "NewMessageBody"},
		{"unknown format", "user_id=1", `{"text":"x","format":"MarkdownV2"}`, "format"},
		{"empty", "user_id=1", `{"text":""}`, "text or attachments"},
		{"too long", "user_id=1", `{"text":"` + long + `"}`, "4000"},
		{"unknown attachment", "user_id=1", `{"text":"x","attachments":[{"type":"gif","payload":{}}]}`, "not a known attachment type"},
		{"image by url and token", "user_id=1", `{"text":"x","attachments":[{"type":"image","payload":{"url":"https://a.example/p.jpg","token":"t"}}]}`, "exactly one of url, token and photos"},
		{"image without url", "user_id=1", `{"text":"x","attachments":[{"type":"image","payload":{"url":""}}]}`, "url: size must be at least 1"},
		{"keyboard without buttons", "user_id=1", `{"text":"x","attachments":[{"type":"inline_keyboard","payload":{"buttons":[]}}]}`, "buttons: size must be at least 1"},
		{"four links a row", "user_id=1", `{"text":"x","attachments":[{"type":"inline_keyboard","payload":{"buttons":[[` + links(4) + `]]}}]}`, "at most 3 buttons a row"},
		{"31 rows", "user_id=1", `{"text":"x","attachments":[{"type":"inline_keyboard","payload":{"buttons":[` + strings.TrimSuffix(strings.Repeat("["+links(1)+"],", 31), ",") + `]}}]}`, "at most 30 rows"},
		{"link without url", "user_id=1", `{"text":"x","attachments":[{"type":"inline_keyboard","payload":{"buttons":[[{"type":"link","text":"a"}]]}}]}`, "url: size must be between 1 and 2048"},
		{"long label", "user_id=1", `{"text":"x","attachments":[{"type":"inline_keyboard","payload":{"buttons":[[{"type":"link","text":"` + strings.Repeat("x", 129) + `","url":"https://a.example"}]]}}]}`, "text: size must be between 1 and 128"},
		{"unknown button", "user_id=1", `{"text":"x","attachments":[{"type":"inline_keyboard","payload":{"buttons":[[{"type":"pay","text":"a"}]]}}]}`, "not a known button type"},
		{"two keyboards", "user_id=1", `{"text":"x","attachments":[{"type":"inline_keyboard","payload":{"buttons":[[` + links(1) + `]]}},{"type":"inline_keyboard","payload":{"buttons":[[` + links(1) + `]]}}]}`, "only one inline_keyboard"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := e.do(http.MethodPost, "/messages?"+tt.query, tt.body, "")
			if a.status != http.StatusBadRequest || a.code() != "proto.payload" || !strings.Contains(a.message(), tt.want) {
				t.Errorf("got %d %s, want 400 proto.payload mentioning %q", a.status, a.raw, tt.want)
			}
		})
	}
	exact := e.do(http.MethodPost, "/messages?user_id=1", `{"text":"`+strings.Repeat("я", emulator.MaxTextLength)+`"}`, "")
	if exact.status != http.StatusOK {
		t.Errorf("a text of exactly %d characters: %d %s, want 200", emulator.MaxTextLength, exact.status, exact.raw)
	}
	if n := e.emu.Stats().Delivered; n != 1 {
		t.Errorf("delivered %d, want 1", n)
	}
}

// links returns n link buttons as JSON objects.
func links(n int) string {
	b := make([]string, n)
	for i := range b {
		b[i] = fmt.Sprintf(`{"type":"link","text":"b%d","url":"https://a.example/%d"}`, i, i)
	}
	return strings.Join(b, ",")
}

// The image and the keyboard of a message are recorded as sent.
func TestAttachmentsRecorded(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{})
	a := e.do(http.MethodPost, "/messages?user_id=7", `{"text":"Order A1 shipped","attachments":[`+
		`{"type":"image","payload":{"url":"https://cdn.shop.example/A1.jpg"}},`+
		`{"type":"inline_keyboard","payload":{"buttons":[[{"type":"link","text":"Track","url":"https://shop.example/A1"},{"type":"callback","text":"Thanks","payload":"thx"}]]}}]}`, "")
	if a.status != http.StatusOK {
		t.Fatalf("got %d %s", a.status, a.raw)
	}
	m := e.emu.Messages()[0]
	want := [][]emulator.Button{{{Type: "link", Text: "Track", URL: "https://shop.example/A1"}, {Type: "callback", Text: "Thanks", Payload: "thx"}}}
	if m.Attachments != 2 || len(m.Images) != 1 || m.Images[0] != "https://cdn.shop.example/A1.jpg" || fmt.Sprint(m.Buttons) != fmt.Sprint(want) {
		t.Errorf("recorded %+v", m)
	}
	// Seven callback buttons fit in a row; an image alone needs no text.
	seven := strings.TrimSuffix(strings.Repeat(`{"type":"callback","text":"c","payload":"p"},`, 7), ",")
	if a := e.do(http.MethodPost, "/messages?user_id=7", `{"attachments":[{"type":"inline_keyboard","payload":{"buttons":[[`+seven+`]]}},{"type":"image","payload":{"token":"tok"}}]}`, ""); a.status != http.StatusOK {
		t.Errorf("seven callback buttons and an image by token: %d %s", a.status, a.raw)
	}
}

func TestRecipientStates(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{States: map[emulator.Recipient]emulator.RecipientState{
		emulator.User(1):  emulator.StateBlocked,
		emulator.Chat(-2): emulator.StateDenied,
		emulator.User(3):  emulator.StateNotFound,
		emulator.Chat(-3): emulator.StateNotFound,
		emulator.User(4):  emulator.StateForbidden,
		emulator.User(5):  emulator.StateOK,
	}})
	for _, tt := range []struct {
		query         string
		status        int
		code, message string
	}{
		{"user_id=1", http.StatusForbidden, "chat.denied", "error.dialog.suspended"},
		{"chat_id=-2", http.StatusForbidden, "chat.denied", "error.chat.denied"},
		{"user_id=3", http.StatusNotFound, "dialog.not.found", "error.dialog.notfound"},
		{"chat_id=-3", http.StatusNotFound, "chat.not.found", "error.chat.notfound"},
		{"user_id=4", http.StatusForbidden, "access.denied", "Access denied"},
		{"user_id=5", http.StatusOK, "", ""},
		{"chat_id=1", http.StatusOK, "", ""}, // chat 1 is not user 1
	} {
		a := e.send(tt.query, "hi")
		if a.status != tt.status || a.code() != tt.code || (tt.code != "" && a.message() != tt.message) {
			t.Errorf("%s: got %d %s, want %d %s %s", tt.query, a.status, a.raw, tt.status, tt.code, tt.message)
		}
	}
	if err := e.emu.Unblock(emulator.User(1)); err != nil {
		t.Fatal(err)
	}
	if a := e.send("user_id=1", "again"); a.status != http.StatusOK {
		t.Errorf("after Unblock: %d %s, want 200", a.status, a.raw)
	}
	e.emu.Reset()
	if s := e.emu.State(emulator.User(1)); s != emulator.StateBlocked {
		t.Errorf("after Reset the state is %q, want the configured blocked", s)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		cfg  emulator.Config
	}{
		{"no token", emulator.Config{}},
		{"token with a space", emulator.Config{Token: "a b"}},
		{"negative bot id", emulator.Config{Token: token, BotID: -1}},
		{"negative rate", emulator.Config{Token: token, Limits: emulator.Limits{Enabled: true, Rate: -1}}},
		{"negative burst", emulator.Config{Token: token, Limits: emulator.Limits{Enabled: true, Burst: -1}}},
		{"negative latency", emulator.Config{Token: token, Latency: -1}},
		{"bad recipient", emulator.Config{Token: token, States: map[emulator.Recipient]emulator.RecipientState{{}: emulator.StateBlocked}}},
		{"bad state", emulator.Config{Token: token, States: map[emulator.Recipient]emulator.RecipientState{emulator.User(1): "gone"}}},
		{"bad outage", emulator.Config{Token: token, Outage: &emulator.Outage{Mode: "meteor"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := emulator.New(tt.cfg); err == nil {
				t.Error("New succeeded, want an error")
			} else if tt.cfg.Token != "" && strings.Contains(err.Error(), tt.cfg.Token) {
				t.Errorf("error %q contains the token", err)
			}
		})
	}
}

func TestParseRecipient(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]emulator.Recipient{"u42": emulator.User(42), "c-7001": emulator.Chat(-7001), " c9 ": emulator.Chat(9)} {
		got, err := emulator.ParseRecipient(in)
		if err != nil || got != want {
			t.Errorf("ParseRecipient(%q) = %v, %v; want %v", in, got, err, want)
		}
		if strings.TrimSpace(in) != got.String() {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), strings.TrimSpace(in))
		}
	}
	for _, in := range []string{"", "u", "42", "u0", "u-1", "c0", "x5", "uabc"} {
		if r, err := emulator.ParseRecipient(in); err == nil {
			t.Errorf("ParseRecipient(%q) = %v, want an error", in, r)
		}
	}
}

func TestMaxMessagesKeepsTheNewest(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{MaxMessages: 2})
	for _, text := range []string{"1", "2", "3"} {
		e.send("user_id=1", text)
	}
	ms := e.emu.Messages()
	if len(ms) != 2 || ms[0].Text != "2" || ms[1].Text != "3" {
		t.Errorf("kept %+v, want messages 2 and 3", ms)
	}
	if st := e.emu.Stats(); st.Delivered != 3 || st.MessagesKept != 2 {
		t.Errorf("stats delivered %d kept %d, want 3 and 2", st.Delivered, st.MessagesKept)
	}
}
