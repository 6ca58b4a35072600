package notify_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/pkg/notify"
)

func validNotification() notify.Notification {
	return notify.Notification{
		Key:       "order:A1:accepted",
		ChatID:    100,
		Text:      "Order A1 accepted",
		CreatedAt: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
	}
}

func TestValidateAcceptsValid(t *testing.T) {
	cases := map[string]func(*notify.Notification){
		"minimal":          func(*notify.Notification) {},
		"group chat":       func(n *notify.Notification) { n.ChatID = -1001234567890 },
		"html":             func(n *notify.Notification) { n.ParseMode = notify.ParseModeHTML; n.Text = "<b>ok</b> &amp; fine" },
		"markdown":         func(n *notify.Notification) { n.ParseMode = notify.ParseModeMarkdownV2; n.Text = `*ok* \. fine` },
		"bulk":             func(n *notify.Notification) { n.Priority = notify.PriorityBulk },
		"explicit channel": func(n *notify.Notification) { n.Channel = notify.ChannelTelegram },
		"expiry":           func(n *notify.Notification) { n.ExpiresAt = n.CreatedAt.Add(time.Hour) },
		"max key":          func(n *notify.Notification) { n.Key = strings.Repeat("k", notify.MaxKeyBytes) },
		"max text":         func(n *notify.Notification) { n.Text = strings.Repeat("я", notify.MaxTextLength) },
		"html tags do not count": func(n *notify.Notification) {
			n.ParseMode = notify.ParseModeHTML
			n.Text = strings.Repeat("<b>x</b>", notify.MaxTextLength)
		},
		"options": func(n *notify.Notification) { n.DisableNotification, n.ProtectContent = true, true },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			n := validNotification()
			mutate(&n)
			if err := n.Validate(); err != nil {
				t.Fatalf("Validate() = %v, want nil", err)
			}
		})
	}
}

func TestValidateRejects(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*notify.Notification)
		field  string
		reason string
	}{
		{"missing key", func(n *notify.Notification) { n.Key = "" }, "key", "required"},
		{"not_before too far", func(n *notify.Notification) { n.NotBefore = n.CreatedAt.Add(notify.MaxScheduleAhead + time.Second) }, "not_before", "the limit is 48h0m0s"},
		{"not_before at expires_at", func(n *notify.Notification) {
			n.NotBefore, n.ExpiresAt = n.CreatedAt.Add(time.Hour), n.CreatedAt.Add(time.Hour)
		}, "not_before", "not before expires_at"},
		{"long key", func(n *notify.Notification) { n.Key = strings.Repeat("k", 256) }, "key", "256 bytes"},
		{"key with space", func(n *notify.Notification) { n.Key = "order A1" }, "key", "not visible ASCII"},
		{"key with newline", func(n *notify.Notification) { n.Key = "order\nA1" }, "key", "not visible ASCII"},
		{"key with unicode", func(n *notify.Notification) { n.Key = "заказ:1" }, "key", "not visible ASCII"},
		{"unknown channel", func(n *notify.Notification) { n.Channel = "pigeon" }, "channel", "unknown channel"},
		{"channel without its address", func(n *notify.Notification) { n.Channel = "sms" }, "phone", "required"},
		{"zero chat", func(n *notify.Notification) { n.ChatID = 0 }, "chat_id", "no address"},
		{"huge chat", func(n *notify.Notification) { n.ChatID = 1 << 60 }, "chat_id", "out of range"},
		{"huge negative chat", func(n *notify.Notification) { n.ChatID = -(1 << 60) }, "chat_id", "out of range"},
		{"empty text", func(n *notify.Notification) { n.Text = "" }, "text", "empty"},
		{"blank text", func(n *notify.Notification) { n.Text = " \n\t " }, "text", "empty"},
		{"tags only", func(n *notify.Notification) { n.ParseMode = notify.ParseModeHTML; n.Text = "<b></b>" }, "text", "empty"},
		{"long text", func(n *notify.Notification) { n.Text = strings.Repeat("x", notify.MaxTextLength+1) }, "text", "4097 characters"},
		{"long text in UTF-16", func(n *notify.Notification) { n.Text = strings.Repeat("😀", notify.MaxTextLength/2+1) }, "text", "4098 characters"},
		{"huge raw text", func(n *notify.Notification) {
			n.ParseMode = notify.ParseModeHTML
			n.Text = strings.Repeat("<b></b>", notify.MaxTextBytes/7+1) + "x"
		}, "text", "bytes long"},
		{"invalid utf8", func(n *notify.Notification) { n.Text = "bad \xff" }, "text", "UTF-8"},
		{"legacy markdown", func(n *notify.Notification) { n.ParseMode = "Markdown" }, "parse_mode", "unknown parse mode"},
		{"unknown priority", func(n *notify.Notification) { n.Priority = "urgent" }, "priority", "unknown priority"},
		{"expiry before creation", func(n *notify.Notification) { n.ExpiresAt = n.CreatedAt.Add(-time.Second) }, "expires_at", "after created_at"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := validNotification()
			tc.mutate(&n)
			err := n.Validate()
			if !errors.Is(err, notify.ErrInvalid) {
				t.Fatalf("Validate() = %v, want an error matching ErrInvalid", err)
			}
			var ve *notify.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Validate() = %T, want *ValidationError", err)
			}
			if ve.Field != tc.field {
				t.Errorf("field = %q, want %q", ve.Field, tc.field)
			}
			if !strings.Contains(err.Error(), tc.reason) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q should name field %q and contain %q", err, tc.field, tc.reason)
			}
		})
	}
}

func TestTextLength(t *testing.T) {
	cases := []struct {
		text string
		mode notify.ParseMode
		want int
	}{
		{"hello", notify.ParseModeNone, 5},
		{"<b>hello</b>", notify.ParseModeNone, 12},
		{"<b>hello</b>", notify.ParseModeHTML, 5},
		{"a &lt; b &amp;&amp; c", notify.ParseModeHTML, 10},
		{`a \. b`, notify.ParseModeMarkdownV2, 5},
		{"😀", notify.ParseModeNone, 2},
		{"привет", notify.ParseModeNone, 6},
		{"   ", notify.ParseModeNone, 0},
	}
	for _, tc := range cases {
		if got := notify.TextLength(tc.text, tc.mode); got != tc.want {
			t.Errorf("TextLength(%q, %q) = %d, want %d", tc.text, tc.mode, got, tc.want)
		}
	}
}

func TestExpired(t *testing.T) {
	n := validNotification()
	now := n.CreatedAt.Add(time.Minute)
	if n.Expired(now) {
		t.Errorf("a notification without expiry reports expired")
	}
	n.ExpiresAt = now
	if !n.Expired(now) {
		t.Errorf("Expired at its expiry time = false, want true")
	}
	if n.Expired(now.Add(-time.Nanosecond)) {
		t.Errorf("Expired just before its expiry time = true, want false")
	}
}

func TestEscapeHTML(t *testing.T) {
	cases := map[string]string{
		"Ann":                        "Ann",
		`<script>"x" & 'y'</script>`: "&lt;script&gt;&quot;x&quot; &amp; 'y'&lt;/script&gt;",
		"&amp;":                      "&amp;amp;",
		"Чай <зелёный>":              "Чай &lt;зелёный&gt;",
	}
	for in, want := range cases {
		if got := notify.EscapeHTML(in); got != want {
			t.Errorf("EscapeHTML(%q) = %q, want %q", in, got, want)
		}
		n := validNotification()
		n.ParseMode = notify.ParseModeHTML
		n.Text = "<b>" + notify.EscapeHTML(in) + "</b>"
		if got := notify.TextLength(n.Text, n.ParseMode); got != len([]rune(in)) {
			t.Errorf("visible length of escaped %q = %d, want %d", in, got, len([]rune(in)))
		}
	}
}
