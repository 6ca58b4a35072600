package botapi_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/pkg/botapi"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
)

var allowed = []string{botapi.UpdateMyChatMember, botapi.UpdateMessage}

// TestGetUpdatesReadsMembershipAndMessages: a user blocks the bot, then
// presses Start; the client reads both my_chat_member changes and the
// /start message, and the offset confirms what was read.
func TestGetUpdatesReadsMembershipAndMessages(t *testing.T) {
	b := setup(t, emulator.Config{}, botapi.WithTimeout(2*time.Second))
	if _, err := b.emu.BlockByUser(42); err != nil {
		t.Fatal(err)
	}
	if _, err := b.emu.SendStart(42, 0, "A1"); err != nil {
		t.Fatal(err)
	}
	ups, err := b.client.GetUpdates(t.Context(), botapi.GetUpdatesParams{AllowedUpdates: allowed})
	if err != nil || len(ups) != 3 {
		t.Fatalf("GetUpdates = %+v, %v; want 3 updates", ups, err)
	}
	blocked, unblocked, start := ups[0].MyChatMember, ups[1].MyChatMember, ups[2].Message
	if blocked == nil || blocked.Chat.ID != 42 || blocked.OldChatMember.Status != botapi.StatusMember || blocked.NewChatMember.Status != botapi.StatusKicked ||
		blocked.NewChatMember.User.ID != b.client.BotID() || blocked.Time().IsZero() {
		t.Errorf("first update = %+v, want chat 42: the bot member -> kicked", blocked)
	}
	if unblocked == nil || unblocked.NewChatMember.Status != botapi.StatusMember {
		t.Errorf("second update = %+v, want kicked -> member", unblocked)
	}
	if start == nil || start.Text != "/start A1" || start.Chat.ID != 42 || start.From == nil || start.From.ID != 42 {
		t.Errorf("third update = %+v, want /start A1 from 42", start)
	}
	rest, err := b.client.GetUpdates(t.Context(), botapi.GetUpdatesParams{Offset: ups[2].UpdateID + 1, Timeout: 1})
	if err != nil || len(rest) != 0 {
		t.Fatalf("after the offset: %+v, %v; want none (a 1s long poll that found nothing)", rest, err)
	}
	if b.emu.Updates().Pending != 0 {
		t.Fatalf("the offset did not confirm the updates: %+v", b.emu.Updates())
	}
}

// TestGetUpdatesLongPollOutlastsTheClientTimeout: a long poll longer than
// the client's request timeout is not cut by it.
func TestGetUpdatesLongPollOutlastsTheClientTimeout(t *testing.T) {
	b := setup(t, emulator.Config{}, botapi.WithTimeout(500*time.Millisecond))
	done := make(chan error, 1)
	go func() {
		_, err := b.client.GetUpdates(t.Context(), botapi.GetUpdatesParams{Timeout: 1})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("a 1s long poll with a 500ms client timeout: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the long poll did not return")
	}
}

// TestConflictErrors: getUpdates while a webhook is set, and a getUpdates
// ended by another one, are 409s that say which.
func TestConflictErrors(t *testing.T) {
	b := setup(t, emulator.Config{}, botapi.WithTimeout(2*time.Second))
	hook := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(hook.Close)
	p := botapi.SetWebhookParams{URL: hook.URL, SecretToken: "top-secret_1", MaxConnections: 1, AllowedUpdates: allowed}
	if err := b.client.SetWebhook(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	if s := fmt.Sprintf("%v %+v %s", p, p, p); strings.Contains(s, "top-secret_1") {
		t.Fatalf("the secret token printed: %s", s)
	}
	info, err := b.client.GetWebhookInfo(t.Context())
	if err != nil || info.URL != hook.URL || info.MaxConnections != 1 {
		t.Fatalf("GetWebhookInfo = %+v, %v", info, err)
	}
	_, err = b.client.GetUpdates(t.Context(), botapi.GetUpdatesParams{})
	var ce *botapi.ConflictError
	if !errors.As(err, &ce) || !ce.WebhookActive() || !errors.Is(err, botapi.ErrConflict) || !errors.Is(err, botapi.ErrWebhookActive) ||
		errors.Is(err, botapi.ErrTerminatedByOther) || ce.Err.Code != 409 {
		t.Fatalf("GetUpdates with a webhook: %v, want a ConflictError matching ErrWebhookActive", err)
	}
	if err := b.client.DeleteWebhook(t.Context(), false); err != nil {
		t.Fatal(err)
	}
	if info, err := b.client.GetWebhookInfo(t.Context()); err != nil || info.URL != "" {
		t.Fatalf("after DeleteWebhook: %+v, %v", info, err)
	}

	first := make(chan error, 1)
	go func() {
		_, err := b.client.GetUpdates(t.Context(), botapi.GetUpdatesParams{Timeout: 10})
		first <- err
	}()
	tick, deadline := time.NewTicker(5*time.Millisecond), time.After(5*time.Second)
	defer tick.Stop()
	for b.emu.Updates().Polls < 1 {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("the first poll did not start")
		}
	}
	if _, err := b.client.GetUpdates(t.Context(), botapi.GetUpdatesParams{}); err != nil {
		t.Fatalf("second poll: %v", err)
	}
	select {
	case err := <-first:
		if !errors.Is(err, botapi.ErrTerminatedByOther) || errors.Is(err, botapi.ErrWebhookActive) {
			t.Fatalf("the first poll: %v, want ErrTerminatedByOther", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first poll was not ended")
	}
}

func TestBotID(t *testing.T) {
	c, err := botapi.New("987654:abc-DEF")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.BotID(); got != 987654 {
		t.Fatalf("BotID = %d, want 987654", got)
	}
	c, err = botapi.New("no-colon")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.BotID(); got != 0 {
		t.Fatalf("BotID of a token without a colon = %d, want 0", got)
	}
}
