package emulator_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
)

const supergroup = -1001234567890

// The emulator records what Telegram would show: the buttons, the photo,
// the topic and the link preview, and answers with them in the Message.
func TestRichMessageRecorded(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{})
	a := e.call("sendMessage", map[string]any{
		"chat_id": supergroup, "message_thread_id": 7, "text": "Order A1 shipped",
		"link_preview_options": map[string]any{"url": "https://shop.example/A1", "prefer_large_media": true, "show_above_text": true},
		"reply_markup": map[string]any{"inline_keyboard": [][]map[string]string{
			{{"text": "Track", "url": "https://shop.example/A1"}, {"text": "Bot", "url": "tg://resolve?domain=shop_bot"}},
			{{"text": "Help", "url": "http://shop.example/help"}},
		}},
	})
	if !a.OK {
		t.Fatalf("sendMessage: %d %s", a.status, a.Description)
	}
	var res struct {
		MessageThreadID int64 `json:"message_thread_id"`
		IsTopicMessage  bool  `json:"is_topic_message"`
		ReplyMarkup     struct {
			InlineKeyboard [][]emulator.Button `json:"inline_keyboard"`
		} `json:"reply_markup"`
		LinkPreviewOptions emulator.LinkPreview `json:"link_preview_options"`
	}
	if err := json.Unmarshal(a.Result, &res); err != nil {
		t.Fatal(err)
	}
	if res.MessageThreadID != 7 || !res.IsTopicMessage || len(res.ReplyMarkup.InlineKeyboard) != 2 || !res.LinkPreviewOptions.ShowAboveText {
		t.Errorf("result %s does not carry the topic, the keyboard and the preview", a.Result)
	}
	m := e.emu.Messages()[0]
	want := [][]emulator.Button{
		{{Text: "Track", URL: "https://shop.example/A1"}, {Text: "Bot", URL: "tg://resolve?domain=shop_bot"}},
		{{Text: "Help", URL: "http://shop.example/help"}},
	}
	if fmt.Sprint(m.Buttons) != fmt.Sprint(want) || m.MessageThreadID != 7 || m.Method != "sendMessage" ||
		m.LinkPreview == nil || *m.LinkPreview != (emulator.LinkPreview{URL: "https://shop.example/A1", PreferLargeMedia: true, ShowAboveText: true}) {
		t.Errorf("recorded %+v", m)
	}

	a = e.call("sendPhoto", map[string]any{"chat_id": 5, "photo": "https://shop.example/A1.jpg", "caption": "<i>A1</i>", "parse_mode": "HTML"})
	if !a.OK {
		t.Fatalf("sendPhoto: %d %s", a.status, a.Description)
	}
	var photo struct {
		Caption string `json:"caption"`
		Text    string `json:"text"`
		Photo   []struct {
			FileID string `json:"file_id"`
			Width  int    `json:"width"`
		} `json:"photo"`
	}
	if err := json.Unmarshal(a.Result, &photo); err != nil || photo.Caption != "A1" || photo.Text != "" || len(photo.Photo) != 2 {
		t.Errorf("sendPhoto result %s (%v): want the caption's plain text and two sizes", a.Result, err)
	}
	if m := e.emu.ChatMessages(5)[0]; m.Method != "sendPhoto" || m.Photo != "https://shop.example/A1.jpg" || m.Text != "<i>A1</i>" {
		t.Errorf("recorded photo %+v", m)
	}
	if s := e.emu.Stats(); s.ByMethod["sendPhoto"] != 1 || s.Delivered != 2 {
		t.Errorf("stats %+v: want one sendPhoto of two delivered", s)
	}
}

// What Telegram refuses in a rich message, the emulator refuses with
// Telegram's wording.
func TestRichMessageRefused(t *testing.T) {
	t.Parallel()
	e := setup(t, emulator.Config{})
	row := func(n int) []map[string]string {
		r := make([]map[string]string, n)
		for i := range r {
			r[i] = map[string]string{"text": fmt.Sprint(i), "url": "https://a.example"}
		}
		return r
	}
	many := [][]map[string]string{}
	for range 13 {
		many = append(many, row(8))
	}
	keyboard := func(rows ...[]map[string]string) map[string]any { return map[string]any{"inline_keyboard": rows} }
	for _, tt := range []struct {
		name   string
		method string
		params map[string]any
		desc   string
	}{
		{"topic in a private chat", "sendMessage", map[string]any{"chat_id": 5, "message_thread_id": 3, "text": "x"}, "Bad Request: message thread not found"},
		{"topic in a basic group", "sendMessage", map[string]any{"chat_id": -5, "message_thread_id": 3, "text": "x"}, "Bad Request: message thread not found"},
		{"negative topic", "sendMessage", map[string]any{"chat_id": supergroup, "message_thread_id": -3, "text": "x"}, "Bad Request: message thread not found"},
		{"unsupported button scheme", "sendMessage", map[string]any{"chat_id": 5, "text": "x", "reply_markup": keyboard([]map[string]string{{"text": "a", "url": "ftp://a.example"}})},
			"Bad Request: inline keyboard button URL 'ftp://a.example' is invalid: Unsupported URL protocol"},
		{"bad button URL", "sendMessage", map[string]any{"chat_id": 5, "text": "x", "reply_markup": keyboard([]map[string]string{{"text": "a", "url": "not a url"}})},
			"Bad Request: inline keyboard button URL 'not a url' is invalid: Wrong HTTP URL"},
		{"nine in a row", "sendMessage", map[string]any{"chat_id": 5, "text": "x", "reply_markup": keyboard(row(9))}, "Bad Request: reply markup is too long"},
		{"over a hundred buttons", "sendMessage", map[string]any{"chat_id": 5, "text": "x", "reply_markup": keyboard(many...)}, "Bad Request: reply markup is too long"},
		{"bad link preview", "sendMessage", map[string]any{"chat_id": 5, "text": "x", "link_preview_options": "{"}, "Bad Request: can't parse link preview options JSON object"},
		{"no photo", "sendPhoto", map[string]any{"chat_id": 5, "caption": "x"}, "Bad Request: there is no photo in the request"},
		{"photo over ftp", "sendPhoto", map[string]any{"chat_id": 5, "photo": "ftp://a.example/p.jpg"}, "Bad Request: wrong file identifier/HTTP URL specified"},
		{"unknown file id", "sendPhoto", map[string]any{"chat_id": 5, "photo": "AgACxyz"}, "Bad Request: wrong file identifier/HTTP URL specified"},
		{"photo that cannot be fetched", "sendPhoto", map[string]any{"chat_id": 5, "photo": "https://cdn.shop.invalid/p.jpg"}, "Bad Request: failed to get HTTP URL content"},
		{"caption too long", "sendPhoto", map[string]any{"chat_id": 5, "photo": "https://a.example/p.jpg", "caption": strings.Repeat("я", 1025)}, "Bad Request: message caption is too long"},
		{"caption markup", "sendPhoto", map[string]any{"chat_id": 5, "photo": "https://a.example/p.jpg", "caption": "<b>x", "parse_mode": "HTML"},
			"Bad Request: can't parse entities: Can't find end tag corresponding to start tag \"b\""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := e.call(tt.method, tt.params)
			if a.status != http.StatusBadRequest || a.Description != tt.desc {
				t.Errorf("got %d %q, want 400 %q", a.status, a.Description, tt.desc)
			}
		})
	}
	if n := len(e.emu.Messages()); n != 0 {
		t.Fatalf("%d messages recorded, want none", n)
	}
	// A caption of exactly 1024 characters, a photo uploaded as a file and
	// a topic of a supergroup are fine.
	if a := e.call("sendPhoto", map[string]any{"chat_id": supergroup, "message_thread_id": 3, "photo": "https://a.example/p.jpg", "caption": strings.Repeat("я", 1024)}); !a.OK {
		t.Errorf("1024-character caption in a topic: %d %s", a.status, a.Description)
	}
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	_ = mw.WriteField("chat_id", "5")
	fw, _ := mw.CreateFormFile("photo", "a1.jpg")
	_, _ = fw.Write([]byte("\xff\xd8\xff"))
	mw.Close()
	r := httptest.NewRequest(http.MethodPost, "/bot"+token+"/sendPhoto", &body)
	r.Header.Set("Content-Type", mw.FormDataContentType())
	if a := e.serve(r); !a.OK {
		t.Errorf("uploaded photo: %d %s", a.status, a.Description)
	}
}

// sendPhoto counts against the same limits as sendMessage.
func TestPhotoIsRateLimited(t *testing.T) {
	t.Parallel()
	lim := emulator.DefaultLimits()
	e := setup(t, emulator.Config{Limits: lim})
	for i := range lim.ChatBurst {
		if a := e.call("sendPhoto", map[string]any{"chat_id": 9, "photo": "https://a.example/p.jpg"}); !a.OK {
			t.Fatalf("photo %d: %d %s", i, a.status, a.Description)
		}
	}
	if a := e.send(9, "x"); a.status != http.StatusTooManyRequests {
		t.Fatalf("after %d photos a message got %d, want 429", lim.ChatBurst, a.status)
	}
	e.at(time.Minute)
	if a := e.call("sendPhoto", map[string]any{"chat_id": 9, "photo": "https://a.example/p.jpg"}); !a.OK {
		t.Fatalf("after the pause: %d %s", a.status, a.Description)
	}
}
