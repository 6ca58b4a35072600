package notify_test

import (
	"testing"

	"github.com/tgnotify/tgnotify/pkg/notify"
)

// The recipient tokens of docs/INTEGRATING.md, computed independently
// (Python's hashlib): an application in another language writes the same
// recipient_token into the outbox.
func TestRecipientTokenVectors(t *testing.T) {
	for _, tc := range []struct {
		channel notify.Channel
		n       notify.Notification
		want    string
	}{
		{notify.ChannelTelegram, notify.Notification{ChatID: 100}, "100"},
		{notify.ChannelTelegram, notify.Notification{ChatID: -1001234567890}, "-1001234567890"},
		{notify.ChannelMax, notify.Notification{MaxUserID: 42}, "u42"},
		{notify.ChannelMax, notify.Notification{MaxChatID: -5}, "c-5"},
		{notify.ChannelEmail, notify.Notification{Email: "ann@example.com"}, "e71d4f55f72fa128dfb468a1a3901507c"},
		{notify.ChannelEmail, notify.Notification{Email: "Ann.Lee+shop@Mail.Example.org"}, "ea179d704180488902bdbccb009a96bf5"},
		{notify.ChannelEmail, notify.Notification{Email: "Анна@Example.com"}, "e28daf066aa51ebb2cf1f10bb4827d63d"},
		{notify.ChannelSMS, notify.Notification{Phone: "+79991234567"}, "paaa3a8d51bbd45911d65744e547c0b70"},
		{notify.ChannelSMS, notify.Notification{Phone: "+12025550123"}, "pd5ab8b77e69a81dfc634c3556c620d5d"},
	} {
		got, err := tc.n.Recipient(tc.channel)
		if err != nil || got != tc.want {
			t.Errorf("Recipient(%s) of %+v = %q, %v; want %q", tc.channel, tc.n, got, err, tc.want)
		}
	}
	if got, want := notify.HashAddress("ann@example.com"), "71d4f55f72fa128dfb468a1a3901507c"; got != want {
		t.Errorf("HashAddress = %q, want %q", got, want)
	}
}
