package intake

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/tgnotify/tgnotify/pkg/botapi"
	"github.com/tgnotify/tgnotify/pkg/delivery"
)

// Recipients applies news of a chat: [delivery.Worker] is one.
type Recipients interface {
	ChangeRecipient(ctx context.Context, c delivery.RecipientChange) (bool, error)
}

// Kinds of updates, as the metrics label them.
const (
	KindMyChatMember = "my_chat_member"
	KindStart        = "start"
	KindOther        = "other"
)

// Reasons a chat is revived (notify.events.recipient_revived's reason).
const (
	// ReasonUnblocked: the user of a private chat unblocked the bot.
	ReasonUnblocked = "unblocked"
	// ReasonAdded: the bot was added to a group, or may write there again.
	ReasonAdded = "added"
	// ReasonStart: a user sent /start.
	ReasonStart = "start"
)

// Reasons a chat is found dead are the ones a send's answer would give
// (docs/CHANNELS.md), so that its later dead letters read the same.
const (
	reasonBlocked   = "blocked"
	reasonKicked    = "kicked"
	reasonNotMember = "not_member"
	reasonNoRights  = "no_rights"
)

// Change returns the news an update carries of its chat, and the update's
// kind; ok is false for an update that says nothing of whether the chat
// can be reached (any message but /start, another kind).
//
// my_chat_member: the bot kicked (a private chat's user blocked it: reason
// blocked; removed from a group: kicked), left (not_member), or restricted
// out of the chat (not_member) or from writing (no_rights) makes the chat
// dead; member, administrator or creator makes it alive (unblocked in a
// private chat, added in a group). A message whose command is /start (or
// /start@bot, with or without a payload) makes it alive (start).
func Change(u botapi.Update) (c delivery.RecipientChange, kind string, ok bool) {
	c.ID = "u" + strconv.FormatInt(u.UpdateID, 10)
	switch {
	case u.MyChatMember != nil:
		m := u.MyChatMember
		c.Recipient, c.At = strconv.FormatInt(m.Chat.ID, 10), m.Time()
		private := m.Chat.Type == "private"
		n := m.NewChatMember
		c.Description = fmt.Sprintf("my_chat_member update %d: the bot's status %s -> %s (by user %d)", u.UpdateID, m.OldChatMember.Status, n.Status, m.From.ID)
		switch n.Status {
		case botapi.StatusKicked:
			c.Dead, c.Code, c.Reason = true, 403, reasonKicked
			if private {
				c.Reason = reasonBlocked
			}
		case botapi.StatusLeft:
			c.Dead, c.Code, c.Reason = true, 403, reasonNotMember
		case botapi.StatusRestricted:
			switch {
			case !n.IsMember:
				c.Dead, c.Code, c.Reason = true, 403, reasonNotMember
			case n.CanSendMessages != nil && !*n.CanSendMessages:
				c.Dead, c.Code, c.Reason = true, 400, reasonNoRights
			default:
				c.Reason = ReasonAdded
			}
		case botapi.StatusMember, botapi.StatusAdministrator, botapi.StatusCreator:
			c.Reason = ReasonAdded
			if private {
				c.Reason = ReasonUnblocked
			}
		default:
			return delivery.RecipientChange{}, KindMyChatMember, false
		}
		return c, KindMyChatMember, m.Chat.ID != 0
	case u.Message != nil:
		m := u.Message
		cmd, _, _ := strings.Cut(strings.TrimSpace(m.Text), " ")
		if cmd != "/start" && !strings.HasPrefix(cmd, "/start@") {
			return delivery.RecipientChange{}, KindOther, false
		}
		c.Recipient, c.At, c.Reason = strconv.FormatInt(m.Chat.ID, 10), m.Time(), ReasonStart
		c.Description = fmt.Sprintf("update %d: %s", u.UpdateID, cmd)
		return c, KindStart, m.Chat.ID != 0
	}
	return delivery.RecipientChange{}, KindOther, false
}

// applier applies updates: the part the poller and the webhook share.
type applier struct {
	recipients Recipients
	log        *slog.Logger
	m          *metrics
}

// apply applies one update's news; an error means it must be applied
// again (its change or its event was not written).
func (a *applier) apply(ctx context.Context, u botapi.Update) error {
	c, kind, ok := Change(u)
	if !ok {
		a.m.updates.WithLabelValues(kind, "ignored").Inc()
		a.log.Debug("update ignored", "update_id", u.UpdateID, "kind", kind)
		return nil
	}
	start := time.Now()
	changed, err := a.recipients.ChangeRecipient(ctx, c)
	if err != nil {
		a.m.errors.WithLabelValues("apply").Inc()
		return fmt.Errorf("applying update %d to chat %s: %w", u.UpdateID, c.Recipient, err)
	}
	result := "unchanged"
	switch {
	case changed && c.Dead:
		result = "dead"
	case changed:
		result = "revived"
	}
	a.m.updates.WithLabelValues(kind, result).Inc()
	a.log.Info("update applied", "update_id", u.UpdateID, "kind", kind, "chat", c.Recipient, "reason", c.Reason,
		"result", result, "took", time.Since(start))
	return nil
}
