// Package telegram is the Telegram channel of the delivery engine: it sends
// a notification with the Bot API (pkg/botapi), says what Telegram's answer
// means for delivery, and declares Telegram's limits. Everything around a
// send — lanes, limits, pauses, retries, records, dead letters — is the
// engine's (pkg/delivery).
package telegram

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"golang.org/x/time/rate"

	"github.com/tgnotify/tgnotify/pkg/botapi"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

// Name is the channel's name: subjects notify.telegram.<chat_id>, consumer
// telegram-worker.
const Name = "telegram"

// Telegram's limits (docs/WORKER.md, ../shared/reference/telegram-bot-api.md).
const (
	// DefaultBotRate is the bot-wide rate, messages per second: Telegram's
	// "about 30 messages per second" for bulk notifications.
	DefaultBotRate = 30
	// PaidBroadcastRate is the bot-wide rate with allow_paid_broadcast.
	PaidBroadcastRate = 1000
	// DefaultChatRate is one private chat's rate, messages per second.
	DefaultChatRate = 1
	// DefaultGroupPerMinute is one group's rate, messages per minute.
	DefaultGroupPerMinute = 20
)

// Config are the channel's settings. Zero values take the defaults.
type Config struct {
	// BotRate is the bot-wide send rate, messages per second. Default 30,
	// or 1000 with PaidBroadcast.
	BotRate float64
	// PaidBroadcast sends with allow_paid_broadcast, which raises Telegram's
	// bot-wide limit to 1000 msg/s for 0.1 Star per message. It requires a
	// BotRate above 30 (or none): paying for the broadcast and still sending
	// at the free rate is a mistake.
	PaidBroadcast bool
	// ChatRate is the per-private-chat rate, messages per second. Default 1.
	ChatRate float64
	// GroupPerMinute is the per-group rate (chat id < 0), messages per
	// minute. Default 20.
	GroupPerMinute float64
}

func (c Config) withDefaults() Config {
	if c.BotRate == 0 {
		c.BotRate = DefaultBotRate
		if c.PaidBroadcast {
			c.BotRate = PaidBroadcastRate
		}
	}
	if c.ChatRate == 0 {
		c.ChatRate = DefaultChatRate
	}
	if c.GroupPerMinute == 0 {
		c.GroupPerMinute = DefaultGroupPerMinute
	}
	return c
}

// Validate reports every invalid setting as a [*delivery.FieldError] naming
// its Config field; a contradiction names both fields.
func (c Config) Validate() error {
	explicitRate := c.BotRate
	c = c.withDefaults()
	var errs []error
	check := func(ok bool, field string, v any, problem string) {
		if !ok {
			errs = append(errs, &delivery.FieldError{Field: field, Value: v, Problem: problem})
		}
	}
	check(c.BotRate > 0, "BotRate", c.BotRate, "must be positive")
	check(c.ChatRate > 0, "ChatRate", c.ChatRate, "must be positive")
	check(c.GroupPerMinute > 0, "GroupPerMinute", c.GroupPerMinute, "must be positive")
	check(!c.PaidBroadcast || explicitRate == 0 || explicitRate > DefaultBotRate, "PaidBroadcast", c.PaidBroadcast,
		fmt.Sprintf("requires {BotRate} above %d (got %v): paid broadcast costs 0.1 Star a message and only pays off above the free rate", DefaultBotRate, explicitRate))
	return errors.Join(errs...)
}

// Sender is the part of the Bot API client the channel uses.
type Sender interface {
	SendMessage(ctx context.Context, p botapi.SendMessageParams) (*botapi.Message, error)
	SendPhoto(ctx context.Context, p botapi.SendPhotoParams) (*botapi.Message, error)
	GetMe(ctx context.Context) (*botapi.User, error)
}

var _ Sender = (*botapi.Client)(nil)

// Channel sends notifications to Telegram chats.
type Channel struct {
	cfg Config
	api Sender
}

var _ delivery.Channel = (*Channel)(nil)

// New checks the configuration and returns the channel.
func New(cfg Config, api Sender) (*Channel, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if api == nil {
		return nil, errors.New("telegram channel: a Bot API client is required")
	}
	return &Channel{cfg: cfg.withDefaults(), api: api}, nil
}

// Name returns "telegram".
func (c *Channel) Name() string { return Name }

// Config returns the settings in force, defaults filled in.
func (c *Channel) Config() Config { return c.cfg }

// Limits are the bot-wide rate, 1 msg/s per private chat and 20 msg/min per
// group (chat id < 0).
func (c *Channel) Limits() delivery.Limits {
	return delivery.Limits{
		Rate: rate.Limit(c.cfg.BotRate),
		RecipientRate: func(recipient string) rate.Limit {
			if len(recipient) > 0 && recipient[0] == '-' {
				return rate.Limit(c.cfg.GroupPerMinute / 60)
			}
			return rate.Limit(c.cfg.ChatRate)
		},
	}
}

// Recipient returns the notification's chat id as a subject token.
func (c *Channel) Recipient(n notify.Notification) (string, error) {
	return n.Recipient(notify.ChannelTelegram)
}

// Send sends the notification to a.Recipient (which may be a supergroup
// the chat migrated to) and classifies Telegram's answer: with sendPhoto
// and the text as its caption when it has a Photo, else with sendMessage.
// Its buttons become an inline keyboard of URL buttons, its
// MessageThreadID the forum topic, its LinkPreview the
// link_preview_options (sendMessage only: a photo has none).
func (c *Channel) Send(ctx context.Context, a *delivery.Attempt) delivery.Outcome {
	chat, err := strconv.ParseInt(a.Recipient, 10, 64)
	if err != nil || chat == 0 {
		return delivery.Outcome{Kind: delivery.Rejected, Reason: "bad_recipient", Description: fmt.Sprintf("recipient %q is not a chat id", a.Recipient)}
	}
	n := a.Notification
	ctx = botapi.WithAdmission(ctx, a.Admit)
	ctx = botapi.WithAnswerNotice(ctx, a.Answered)
	ctx = botapi.WithRequestTimeout(ctx, a.Timeout)
	if n.Photo != "" {
		msg, err := c.api.SendPhoto(ctx, botapi.SendPhotoParams{
			ChatID:              chat,
			MessageThreadID:     n.MessageThreadID,
			Photo:               n.Photo,
			Caption:             n.Text,
			ParseMode:           botapi.ParseMode(n.ParseMode),
			DisableNotification: n.DisableNotification,
			ProtectContent:      n.ProtectContent,
			AllowPaidBroadcast:  c.cfg.PaidBroadcast,
			ReplyMarkup:         Keyboard(n.Buttons),
		})
		return Classify(msg, err)
	}
	msg, err := c.api.SendMessage(ctx, botapi.SendMessageParams{
		ChatID:              chat,
		MessageThreadID:     n.MessageThreadID,
		Text:                n.Text,
		ParseMode:           botapi.ParseMode(n.ParseMode),
		LinkPreviewOptions:  LinkPreview(n.LinkPreview),
		DisableNotification: n.DisableNotification,
		ProtectContent:      n.ProtectContent,
		AllowPaidBroadcast:  c.cfg.PaidBroadcast,
		ReplyMarkup:         Keyboard(n.Buttons),
	})
	return Classify(msg, err)
}

// Keyboard returns the inline keyboard of a notification's buttons: one URL
// button each, in the same rows. It returns nil without buttons.
func Keyboard(rows [][]notify.Button) *botapi.InlineKeyboardMarkup {
	if len(rows) == 0 {
		return nil
	}
	k := &botapi.InlineKeyboardMarkup{InlineKeyboard: make([][]botapi.InlineKeyboardButton, len(rows))}
	for i, row := range rows {
		k.InlineKeyboard[i] = make([]botapi.InlineKeyboardButton, len(row))
		for j, b := range row {
			k.InlineKeyboard[i][j] = botapi.InlineKeyboardButton{Text: b.Text, URL: b.URL}
		}
	}
	return k
}

// LinkPreview returns Telegram's link_preview_options for the
// notification's preview settings, nil for the zero value (Telegram's
// default).
func LinkPreview(p notify.LinkPreview) *botapi.LinkPreviewOptions {
	if p == (notify.LinkPreview{}) {
		return nil
	}
	return &botapi.LinkPreviewOptions{
		IsDisabled:       p.Disabled,
		URL:              p.URL,
		PreferSmallMedia: p.PreferSmallMedia,
		PreferLargeMedia: p.PreferLargeMedia,
		ShowAboveText:    p.ShowAboveText,
	}
}

// Probe checks the bot token with getMe.
func (c *Channel) Probe(ctx context.Context) error {
	_, err := c.api.GetMe(ctx)
	return delivery.ProbeError(err, Classify(nil, err), time.Now())
}

// Classify maps the result of one sendMessage call to the engine's outcome,
// through botapi.Classify (which documents every branch).
func Classify(msg *botapi.Message, err error) delivery.Outcome {
	d := botapi.Classify(err)
	o := delivery.Outcome{Reason: d.Reason, Code: d.Code, Description: d.Description, MaybeDelivered: d.MaybeDelivered, Unrecognised: d.Unrecognised}
	switch d.Action {
	case botapi.ActionDelivered:
		o.Kind = delivery.Delivered
		if msg != nil {
			o.ProviderID = strconv.FormatInt(msg.MessageID, 10)
		}
	case botapi.ActionRetryAfter:
		o.Kind, o.Delay = delivery.RetryAfter, d.RetryAfter
	case botapi.ActionMigrate:
		o.Kind, o.RedirectTo = delivery.Redirect, strconv.FormatInt(d.MigrateTo, 10)
	case botapi.ActionDead:
		o.Kind = delivery.Rejected
		if d.ChatDead() {
			o.Kind = delivery.RecipientDead
		}
	case botapi.ActionHalt:
		o.Kind = delivery.Halt
	case botapi.ActionCanceled:
		o.Kind = delivery.Canceled
	case botapi.ActionNotSent:
		o.Kind = delivery.NotSent
	default: // ActionBackoff
		o.Kind = delivery.Transient
	}
	return o
}
