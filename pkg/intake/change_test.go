package intake_test

import (
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/pkg/botapi"
	"github.com/tgnotify/tgnotify/pkg/intake"
)

func member(chatType string, chat int64, old, status string, tweak func(*botapi.ChatMember)) botapi.Update {
	n := botapi.ChatMember{Status: status, User: botapi.User{ID: 1, IsBot: true}}
	if tweak != nil {
		tweak(&n)
	}
	return botapi.Update{UpdateID: 7, MyChatMember: &botapi.ChatMemberUpdated{
		Chat: botapi.Chat{ID: chat, Type: chatType}, From: botapi.User{ID: 42}, Date: 1_700_000_000,
		OldChatMember: botapi.ChatMember{Status: old}, NewChatMember: n,
	}}
}

func message(chat int64, text string) botapi.Update {
	return botapi.Update{UpdateID: 8, Message: &botapi.Message{MessageID: 1, Chat: botapi.Chat{ID: chat, Type: "private"}, Date: 1_700_000_001, Text: text}}
}

func TestChange(t *testing.T) {
	no := false
	cases := []struct {
		name   string
		u      botapi.Update
		ok     bool
		kind   string
		dead   bool
		reason string
	}{
		{"private chat blocked", member("private", 42, "member", "kicked", nil), true, intake.KindMyChatMember, true, "blocked"},
		{"private chat unblocked", member("private", 42, "kicked", "member", nil), true, intake.KindMyChatMember, false, intake.ReasonUnblocked},
		{"removed from a group", member("group", -5, "member", "kicked", nil), true, intake.KindMyChatMember, true, "kicked"},
		{"left a supergroup", member("supergroup", -1001, "administrator", "left", nil), true, intake.KindMyChatMember, true, "not_member"},
		{"added to a group", member("group", -5, "left", "member", nil), true, intake.KindMyChatMember, false, intake.ReasonAdded},
		{"made administrator", member("supergroup", -1001, "member", "administrator", nil), true, intake.KindMyChatMember, false, intake.ReasonAdded},
		{"restricted out of the chat", member("supergroup", -1001, "member", "restricted", nil), true, intake.KindMyChatMember, true, "not_member"},
		{"restricted from writing", member("supergroup", -1001, "member", "restricted", func(m *botapi.ChatMember) {
			m.IsMember, m.CanSendMessages = true, &no
		}), true, intake.KindMyChatMember, true, "no_rights"},
		{"restricted, may write", member("supergroup", -1001, "member", "restricted", func(m *botapi.ChatMember) { m.IsMember = true }),
			true, intake.KindMyChatMember, false, intake.ReasonAdded},
		{"a status nobody knows", member("group", -5, "member", "ghost", nil), false, intake.KindMyChatMember, false, ""},
		{"/start", message(42, "/start"), true, intake.KindStart, false, intake.ReasonStart},
		{"/start with a payload", message(42, "/start order-A1"), true, intake.KindStart, false, intake.ReasonStart},
		{"/start@bot", message(42, " /start@shop_bot"), true, intake.KindStart, false, intake.ReasonStart},
		{"another command", message(42, "/stop"), false, intake.KindOther, false, ""},
		{"a word starting like it", message(42, "/startle"), false, intake.KindOther, false, ""},
		{"a text", message(42, "hello"), false, intake.KindOther, false, ""},
		{"another kind", botapi.Update{UpdateID: 9}, false, intake.KindOther, false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, kind, ok := intake.Change(tc.u)
			if ok != tc.ok || kind != tc.kind {
				t.Fatalf("Change = %+v, %q, %v; want kind %q, ok %v", c, kind, ok, tc.kind, tc.ok)
			}
			if !ok {
				return
			}
			if c.Dead != tc.dead || c.Reason != tc.reason || c.ID != "u"+itoa(tc.u.UpdateID) || c.At.IsZero() || c.Recipient == "" {
				t.Fatalf("Change = %+v; want dead %v, reason %q, id u%d", c, tc.dead, tc.reason, tc.u.UpdateID)
			}
			if tc.u.MyChatMember != nil && !c.At.Equal(time.Unix(tc.u.MyChatMember.Date, 0)) {
				t.Fatalf("At = %v, want the update's date", c.At)
			}
		})
	}
}
