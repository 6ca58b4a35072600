package notify_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/pkg/notify"
)

func TestPayloadRoundTrip(t *testing.T) {
	n := validNotification()
	n.ParseMode = notify.ParseModeHTML
	n.Text = "<b>Order</b> &amp; more"
	n.DisableNotification = true
	n.ProtectContent = true
	n.Priority = notify.PriorityBulk
	n.ExpiresAt = n.CreatedAt.Add(time.Hour)
	b, err := n.MarshalPayload()
	if err != nil {
		t.Fatalf("MarshalPayload: %v", err)
	}
	got, err := notify.DecodePayload(b)
	if err != nil {
		t.Fatalf("DecodePayload(%s): %v", b, err)
	}
	n.Channel = notify.ChannelTelegram
	if !got.CreatedAt.Equal(n.CreatedAt) || !got.ExpiresAt.Equal(n.ExpiresAt) {
		t.Fatalf("times: got %v/%v, want %v/%v", got.CreatedAt, got.ExpiresAt, n.CreatedAt, n.ExpiresAt)
	}
	got.CreatedAt, got.ExpiresAt = n.CreatedAt, n.ExpiresAt
	n.Route = []notify.Channel{notify.ChannelTelegram}
	if !reflect.DeepEqual(got, n) {
		t.Fatalf("round trip: got %+v, want %+v", got, n)
	}
}

func TestPayloadWireForm(t *testing.T) {
	b, err := validNotification().MarshalPayload()
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"v": 1.0, "key": "order:A1:accepted", "channel": "telegram", "chat_id": 100.0,
		"text": "Order A1 accepted", "priority": "transactional", "created_at": "2026-11-30T12:00:00Z",
	}
	if len(m) != len(want) {
		t.Errorf("payload %s has fields %v, want exactly %v", b, m, want)
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("payload field %q = %v, want %v", k, m[k], v)
		}
	}
}

func TestMarshalPayloadValidates(t *testing.T) {
	n := validNotification()
	n.ChatID = 0
	if _, err := n.MarshalPayload(); !errors.Is(err, notify.ErrInvalid) {
		t.Fatalf("MarshalPayload of an invalid notification = %v, want ErrInvalid", err)
	}
}

func TestDecodePayloadRejects(t *testing.T) {
	cases := []struct {
		name, payload string
		want          error
		field         string
	}{
		{"empty", ``, notify.ErrInvalid, "payload"},
		{"not json", `<html>`, notify.ErrInvalid, "payload"},
		{"array", `[1,2]`, notify.ErrInvalid, "payload"},
		{"trailing", `{"v":1,"key":"k","chat_id":1,"text":"t","created_at":"2026-01-01T00:00:00Z"} {}`, notify.ErrInvalid, "payload"},
		{"no version", `{"key":"k","chat_id":1,"text":"t","created_at":"2026-01-01T00:00:00Z"}`, notify.ErrInvalid, "v"},
		{"negative version", `{"v":-1,"key":"k","chat_id":1,"text":"t","created_at":"2026-01-01T00:00:00Z"}`, notify.ErrInvalid, "v"},
		{"future version", `{"v":5,"key":"k","chat_id":1,"text":"t","created_at":"2026-01-01T00:00:00Z"}`, notify.ErrUnsupportedPayloadVersion, ""},
		{"v1 with an email", `{"v":1,"key":"k","chat_id":1,"email":"a@b.co","text":"t","created_at":"2026-01-01T00:00:00Z"}`, notify.ErrInvalid, "v"},
		{"v2 without address", `{"v":2,"key":"k","text":"t","created_at":"2026-01-01T00:00:00Z"}`, notify.ErrInvalid, "chat_id"},
		{"v2 bad email", `{"v":2,"key":"k","email":"Ann <a@b.co>","text":"t","created_at":"2026-01-01T00:00:00Z"}`, notify.ErrInvalid, "email"},
		{"v2 bad phone", `{"v":2,"key":"k","phone":"89991234567","text":"t","created_at":"2026-01-01T00:00:00Z"}`, notify.ErrInvalid, "phone"},
		{"v2 route without its address", `{"v":2,"key":"k","chat_id":1,"route":["telegram","sms"],"text":"t","created_at":"2026-01-01T00:00:00Z"}`, notify.ErrInvalid, "phone"},
		{"v2 unknown channel", `{"v":2,"key":"k","chat_id":1,"route":["pigeon"],"text":"t","created_at":"2026-01-01T00:00:00Z"}`, notify.ErrInvalid, "route[0]"},
		{"v2 repeated channel", `{"v":2,"key":"k","chat_id":1,"route":["telegram","telegram"],"text":"t","created_at":"2026-01-01T00:00:00Z"}`, notify.ErrInvalid, "route[1]"},
		{"v2 bad fallback", `{"v":2,"key":"k","chat_id":1,"email":"a@b.co","fallback_after":"soon","text":"t","created_at":"2026-01-01T00:00:00Z"}`, notify.ErrInvalid, "fallback_after"},
		{"v3 with not_before", `{"v":3,"key":"k","chat_id":1,"not_before":"2026-01-01T08:00:00Z","text":"t","created_at":"2026-01-01T00:00:00Z"}`, notify.ErrInvalid, "v"},
		{"v4 not_before too far", `{"v":4,"key":"k","chat_id":1,"not_before":"2026-01-03T00:00:01Z","text":"t","created_at":"2026-01-01T00:00:00Z"}`, notify.ErrInvalid, "not_before"},
		{"no created_at", `{"v":1,"key":"k","chat_id":1,"text":"t"}`, notify.ErrInvalid, "created_at"},
		{"bad chat type", `{"v":1,"key":"k","chat_id":"1","text":"t","created_at":"2026-01-01T00:00:00Z"}`, notify.ErrInvalid, "payload"},
		{"zero chat", `{"v":1,"key":"k","chat_id":0,"text":"t","created_at":"2026-01-01T00:00:00Z"}`, notify.ErrInvalid, "chat_id"},
		{"no key", `{"v":1,"chat_id":5,"text":"t","created_at":"2026-01-01T00:00:00Z"}`, notify.ErrInvalid, "key"},
		{"oversized", `{"v":1,"text":"` + strings.Repeat("x", notify.MaxPayloadBytes) + `"}`, notify.ErrInvalid, "payload"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := notify.DecodePayload([]byte(tc.payload))
			if !errors.Is(err, tc.want) {
				t.Fatalf("DecodePayload = %v, want %v", err, tc.want)
			}
			var ve *notify.ValidationError
			if tc.field != "" && (!errors.As(err, &ve) || ve.Field != tc.field) {
				t.Fatalf("DecodePayload = %v, want a validation error on field %q", err, tc.field)
			}
		})
	}
}

// FuzzDecodePayload checks that decoding never panics, that whatever it
// accepts is valid, and that an accepted payload survives a round trip.
func FuzzDecodePayload(f *testing.F) {
	for _, n := range []notify.Notification{validNotification(), func() notify.Notification {
		n := validNotification()
		n.ParseMode, n.Text, n.ChatID = notify.ParseModeHTML, "<b>x</b> &amp;", -100123
		n.ExpiresAt = n.CreatedAt.Add(time.Minute)
		return n
	}(), richNotification()} {
		b, err := n.MarshalPayload()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"v":1}`))
	f.Add([]byte(`{"v":99,"key":"k"}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := notify.DecodePayload(b)
		if err != nil {
			if !errors.Is(err, notify.ErrInvalid) && !errors.Is(err, notify.ErrUnsupportedPayloadVersion) {
				t.Fatalf("DecodePayload error %v matches neither ErrInvalid nor ErrUnsupportedPayloadVersion", err)
			}
			return
		}
		if err := n.Validate(); err != nil {
			t.Fatalf("DecodePayload accepted an invalid notification: %v", err)
		}
		again, err := n.MarshalPayload()
		if err != nil {
			t.Fatalf("re-encoding an accepted payload: %v", err)
		}
		m, err := notify.DecodePayload(again)
		if err != nil {
			t.Fatalf("decoding a re-encoded payload: %v", err)
		}
		if m.Key != n.Key || m.ChatID != n.ChatID || m.Text != n.Text || !m.CreatedAt.Equal(n.CreatedAt) {
			t.Fatalf("round trip changed the notification: %+v != %+v", m, n)
		}
	})
}

// FuzzValidate checks that validation never panics and that what it accepts
// can be encoded and decoded.
func FuzzValidate(f *testing.F) {
	f.Add("order:A1:accepted", int64(100), "hello", "", "")
	f.Add("k", int64(-100123), "<b>x</b>", "HTML", "bulk")
	f.Add("k", int64(1), `*x* \.`, "MarkdownV2", "transactional")
	f.Add("", int64(0), "", "Markdown", "urgent")
	f.Fuzz(func(t *testing.T, key string, chat int64, text, mode, prio string) {
		n := notify.Notification{Key: key, ChatID: chat, Text: text, ParseMode: notify.ParseMode(mode),
			Priority: notify.Priority(prio), CreatedAt: time.Unix(1_700_000_000, 0).UTC()}
		if err := n.Validate(); err != nil {
			if !errors.Is(err, notify.ErrInvalid) {
				t.Fatalf("Validate error %v does not match ErrInvalid", err)
			}
			return
		}
		b, err := n.MarshalPayload()
		if err != nil {
			t.Fatalf("MarshalPayload of a valid notification: %v", err)
		}
		if _, err := notify.DecodePayload(b); err != nil {
			t.Fatalf("DecodePayload of a valid notification's payload: %v", err)
		}
	})
}

// A Telegram-only notification is written as version 1, byte for byte what
// a worker that knows only version 1 reads; anything else as version 2, which
// round-trips.
func TestPayloadVersions(t *testing.T) {
	b, err := validNotification().MarshalPayload()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), `{"v":1,`) || strings.Contains(string(b), "route") {
		t.Fatalf("a Telegram-only notification encoded as %s, want version 1 without a route", b)
	}
	n := validNotification()
	n.Email, n.Phone, n.MaxUserID = "ann@example.com", "+79991234567", 42
	n.Route = []notify.Channel{notify.ChannelEmail, notify.ChannelTelegram, notify.ChannelSMS}
	n.FallbackAfter, n.Subject = 90*time.Second, "Order A1"
	b, err = n.MarshalPayload()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), `{"v":2,`) || !strings.Contains(string(b), `"fallback_after":"1m30s"`) || strings.Contains(string(b), `"channel"`) {
		t.Fatalf("encoded as %s, want version 2 with fallback_after and no channel", b)
	}
	got, err := notify.DecodePayload(b)
	if err != nil {
		t.Fatalf("DecodePayload(%s): %v", b, err)
	}
	n.Priority = notify.PriorityTransactional
	if !reflect.DeepEqual(got, n) {
		t.Fatalf("round trip: got %+v, want %+v", got, n)
	}
	n.FallbackAfter = notify.FallbackNever
	b, _ = n.MarshalPayload()
	if got, err := notify.DecodePayload(b); err != nil || got.FallbackAfter != notify.FallbackNever || !strings.Contains(string(b), `"fallback_after":"never"`) {
		t.Fatalf("never: %s decoded as %v, %v", b, got.FallbackAfter, err)
	}
}

func TestDefaultRouteAndRecipients(t *testing.T) {
	n := notify.Notification{Key: "k", Text: "t", Phone: "+79991234567", Email: "Ann@Example.com", MaxChatID: -5, ChatID: 7}
	n.Normalize()
	want := []notify.Channel{notify.ChannelTelegram, notify.ChannelMax, notify.ChannelEmail, notify.ChannelSMS}
	if !reflect.DeepEqual(n.Route, want) {
		t.Fatalf("default route %v, want %v", n.Route, want)
	}
	if err := n.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		c    notify.Channel
		want string
	}{
		{notify.ChannelTelegram, "7"},
		{notify.ChannelMax, "c-5"},
		{notify.ChannelEmail, "e" + notify.HashAddress("ann@example.com")},
		{notify.ChannelSMS, "p" + notify.HashAddress("+79991234567")},
	} {
		got, err := n.Recipient(tc.c)
		if err != nil || got != tc.want {
			t.Errorf("Recipient(%s) = %q, %v; want %q", tc.c, got, err, tc.want)
		}
		if strings.ContainsAny(got, "@+. *>") {
			t.Errorf("Recipient(%s) = %q is not a clean subject token", tc.c, got)
		}
	}
	if next, ok := n.Next(notify.ChannelMax); !ok || next != notify.ChannelEmail {
		t.Fatalf("Next(max) = %v, %v; want email", next, ok)
	}
	if _, ok := n.Next(notify.ChannelSMS); ok {
		t.Fatal("Next(sms) found a channel after the last one")
	}
	if _, err := (&notify.Notification{Key: "k", Text: "t"}).Recipient(notify.ChannelEmail); err == nil {
		t.Fatal("Recipient without an address succeeded")
	}
}

func TestValidateAddresses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		n     notify.Notification
		field string
	}{
		{"no address", notify.Notification{Key: "k", Text: "t"}, "chat_id"},
		{"display name", notify.Notification{Key: "k", Text: "t", Email: "Ann <ann@example.com>"}, "email"},
		{"no domain dot", notify.Notification{Key: "k", Text: "t", Email: "ann@localhost"}, "email"},
		{"national phone", notify.Notification{Key: "k", Text: "t", Phone: "89991234567"}, "phone"},
		{"phone with spaces", notify.Notification{Key: "k", Text: "t", Phone: "+7 999 123 45 67"}, "phone"},
		{"both max ids", notify.Notification{Key: "k", Text: "t", MaxUserID: 1, MaxChatID: 2}, "max_user_id"},
		{"channel and route", notify.Notification{Key: "k", Text: "t", ChatID: 1, Email: "a@b.co", Channel: notify.ChannelTelegram, Route: []notify.Channel{notify.ChannelEmail}}, "channel"},
		{"too long for MAX", notify.Notification{Key: "k", Text: strings.Repeat("x", 4001), MaxUserID: 1}, "text"},
		{"two-line subject", notify.Notification{Key: "k", Text: "t", Email: "a@b.co", Subject: "a\nb"}, "subject"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.n.Validate()
			var ve *notify.ValidationError
			if !errors.As(err, &ve) || ve.Field != tc.field {
				t.Fatalf("Validate = %v, want an error on %q", err, tc.field)
			}
		})
	}
	ok := notify.Notification{Key: "k", Text: strings.Repeat("x", 4096), ChatID: 1, Email: "ann@example.com"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("4096 characters to Telegram and email: %v", err)
	}
}

// A scheduled notification is written as version 4, which a worker that
// knows only version 3 refuses instead of sending it at once; without
// not_before the version stays as low as before.
func TestPayloadVersionScheduled(t *testing.T) {
	n := validNotification()
	n.NotBefore = n.CreatedAt.Add(3 * time.Hour)
	b, err := n.MarshalPayload()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), `{"v":4,`) || !strings.Contains(string(b), `"not_before":"`) {
		t.Fatalf("a scheduled notification encoded as %s, want version 4 with not_before", b)
	}
	got, err := notify.DecodePayload(b)
	if err != nil {
		t.Fatalf("DecodePayload(%s): %v", b, err)
	}
	if !got.NotBefore.Equal(n.NotBefore) {
		t.Fatalf("not_before = %v, want %v", got.NotBefore, n.NotBefore)
	}
	if !got.Scheduled(n.CreatedAt) || got.Scheduled(n.NotBefore) {
		t.Fatalf("Scheduled: got %v before and %v at not_before, want true and false", got.Scheduled(n.CreatedAt), got.Scheduled(n.NotBefore))
	}
	n.NotBefore = time.Time{}
	if b, _ := n.MarshalPayload(); !strings.HasPrefix(string(b), `{"v":1,`) {
		t.Fatalf("without not_before encoded as %s, want version 1", b)
	}
}

// BenchmarkDecodePayload decodes the payload of a notification with
// buttons, as a worker does for every message it receives.
func BenchmarkDecodePayload(b *testing.B) {
	p, err := richNotification().MarshalPayload()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := notify.DecodePayload(p); err != nil {
			b.Fatal(err)
		}
	}
}
