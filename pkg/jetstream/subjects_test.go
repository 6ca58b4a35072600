package jetstream_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

func TestSubjects(t *testing.T) {
	for _, tc := range []struct {
		chat       int64
		subj, dead string
	}{
		{42, "notify.telegram.42", "dead.notify.telegram.blocked.42"},
		{-1001234567890, "notify.telegram.-1001234567890", "dead.notify.telegram.blocked.-1001234567890"},
	} {
		if got := jetstream.TelegramSubject(tc.chat); got != tc.subj {
			t.Errorf("TelegramSubject(%d) = %q, want %q", tc.chat, got, tc.subj)
		}
		if got := jetstream.DeadLetterSubject("telegram", "blocked", jetstream.TelegramSubject(tc.chat)[len("notify.telegram."):]); got != tc.dead {
			t.Errorf("DeadLetterSubject = %q, want %q", got, tc.dead)
		}
		if ch, reason, r, err := jetstream.ParseDeadLetterSubject(tc.dead); err != nil || ch != "telegram" || reason != "blocked" || r != tc.subj[len("notify.telegram."):] {
			t.Errorf("ParseDeadLetterSubject(%q) = %q %q %q %v", tc.dead, ch, reason, r, err)
		}
		for _, s := range []string{tc.subj, tc.dead} {
			if got, err := jetstream.ParseTelegramSubject(s); err != nil || got != tc.chat {
				t.Errorf("ParseTelegramSubject(%q) = %d, %v, want %d", s, got, err, tc.chat)
			}
		}
	}
	for _, bad := range []string{"notify.telegram.", "notify.telegram.x", "notify.email.1", "notify.telegram.0", "dead.notify.email.blocked.e1"} {
		if _, err := jetstream.ParseTelegramSubject(bad); err == nil {
			t.Errorf("ParseTelegramSubject(%q) succeeded", bad)
		}
	}
	for _, s := range []string{"notify.email.eab", "notify.events.delivered", "dead.notify.email.blocked.eab"} {
		ch, r, err := jetstream.ParseSubject(s)
		want := s == "notify.email.eab"
		if (err == nil) != want || want && (ch != "email" || r != "eab") {
			t.Errorf("ParseSubject(%q) = %q %q %v", s, ch, r, err)
		}
	}
	if got := jetstream.ChatDeadKey(-5); got != "dead.-5" {
		t.Errorf("ChatDeadKey = %q", got)
	}
	if got := jetstream.ChatMigratedKey(7); got != "migrated.7" {
		t.Errorf("ChatMigratedKey = %q", got)
	}
}

func TestNotificationHeadersRoundTrip(t *testing.T) {
	created := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.FixedZone("x", 3600))
	m := jetstream.NotificationMsg(9, "order:A1:accepted", created, "application/json", []byte(`{"v":1}`))
	if m.Subject != "notify.telegram.9" || string(m.Data) != `{"v":1}` {
		t.Fatalf("subject %q data %q", m.Subject, m.Data)
	}
	if got := m.Header.Get(nats.MsgIdHdr); got != "order:A1:accepted" {
		t.Errorf("Nats-Msg-Id = %q", got)
	}
	if got := m.Header.Get("Notify-Created-At"); got != "2026-03-01T11:00:00.123456789Z" {
		t.Errorf("Notify-Created-At = %q", got)
	}
	meta, err := jetstream.ParseNotificationHeaders(m.Header)
	if err != nil {
		t.Fatal(err)
	}
	if meta.Key != "order:A1:accepted" || !meta.CreatedAt.Equal(created) || meta.ContentType != "application/json" {
		t.Errorf("parsed %+v", meta)
	}
	if _, err := jetstream.ParseNotificationHeaders(nats.Header{}); err == nil {
		t.Error("headers without a key parsed")
	}
	if _, err := jetstream.ParseNotificationHeaders(nats.Header{"Notify-Key": {"k"}, "Notify-Created-At": {"yesterday"}}); err == nil {
		t.Error("a bad Notify-Created-At parsed")
	}
}
