// Package max is the MAX channel of the delivery engine: it sends a
// notification with the MAX Bot API (pkg/maxapi), says what MAX's answer
// means for delivery, and declares MAX's limits. Everything around a send —
// lanes, limits, pauses, retries, records, dead letters — is the engine's
// (pkg/delivery).
//
// The package is named after the channel; a file that imports it shadows
// the built-in max function, so importers that need both name it, for
// example maxchannel.
package max

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/maxapi"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

// Name is the channel's name: subjects notify.max.<recipient>, consumer
// max-worker, priority group max.
const Name = "max"

// Defaults of [Config], declared once: a daemon's flags take them from
// here. docs/CHANNELS.md (MAX) gives their sources.
const (
	// DefaultRate is the bot-wide rate, requests per second: MAX allows 30
	// requests per second per bot on platform-api (dev.max.ru; the MAX Bot
	// API FAQ of GREEN-API, a MAX partner).
	DefaultRate = 30
	// DefaultUserRate is one user's rate, messages per second. MAX
	// publishes no per-recipient limit; one message a second per dialog is
	// Telegram's rule, keeps one busy customer from taking the whole bot's
	// 30 rps, and is more than any order's notifications need.
	DefaultUserRate = 1
	// DefaultChatPerMinute is one chat's rate, messages per minute: again
	// Telegram's rule for groups (20 a minute), as nothing is published
	// for MAX and a group notified faster than that is spammed.
	DefaultChatPerMinute = 20
	// DefaultRetryAfter is the pause after a 429 without a Retry-After
	// header (MAX does not document one).
	DefaultRetryAfter = maxapi.DefaultRetryAfter
)

// Config are the channel's settings. Zero values take the defaults.
type Config struct {
	// Rate is the bot-wide rate, requests per second. Default 30, MAX's
	// limit.
	Rate float64
	// UserRate is the rate of one user (recipient u<id>), messages per
	// second. Default 1.
	UserRate float64
	// ChatPerMinute is the rate of one chat (recipient c<id>), messages
	// per minute. Default 20.
	ChatPerMinute float64
	// RetryAfter is how long everything pauses after a 429 that carries no
	// Retry-After header. Default 2s.
	RetryAfter time.Duration
	// DisableLinkPreview stops MAX from building previews of the links in
	// a notification.
	DisableLinkPreview bool
}

func (c Config) withDefaults() Config {
	if c.Rate == 0 {
		c.Rate = DefaultRate
	}
	if c.UserRate == 0 {
		c.UserRate = DefaultUserRate
	}
	if c.ChatPerMinute == 0 {
		c.ChatPerMinute = DefaultChatPerMinute
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = DefaultRetryAfter
	}
	return c
}

// Validate reports every invalid setting as a [*delivery.FieldError] naming
// its Config field.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	check := func(ok bool, field string, v any, problem string) {
		if !ok {
			errs = append(errs, &delivery.FieldError{Field: field, Value: v, Problem: problem})
		}
	}
	check(c.Rate > 0, "Rate", c.Rate, "must be positive")
	check(c.UserRate > 0, "UserRate", c.UserRate, "must be positive")
	check(c.ChatPerMinute > 0, "ChatPerMinute", c.ChatPerMinute, "must be positive")
	check(c.RetryAfter > 0, "RetryAfter", c.RetryAfter, "must be positive")
	return errors.Join(errs...)
}

// Sender is the part of the MAX client the channel uses.
type Sender interface {
	SendMessage(ctx context.Context, p maxapi.SendMessageParams) (*maxapi.Message, error)
	GetMe(ctx context.Context) (*maxapi.Bot, error)
}

var _ Sender = (*maxapi.Client)(nil)

// Channel sends notifications to MAX users and chats.
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
		return nil, errors.New("max channel: a MAX API client is required")
	}
	return &Channel{cfg: cfg.withDefaults(), api: api}, nil
}

// Name returns "max".
func (c *Channel) Name() string { return Name }

// Config returns the settings in force, defaults filled in.
func (c *Channel) Config() Config { return c.cfg }

// Limits are the bot-wide rate, UserRate per user and ChatPerMinute per
// chat.
func (c *Channel) Limits() delivery.Limits {
	return delivery.Limits{
		Rate: rate.Limit(c.cfg.Rate),
		RecipientRate: func(recipient string) rate.Limit {
			if strings.HasPrefix(recipient, "c") {
				return rate.Limit(c.cfg.ChatPerMinute / 60)
			}
			return rate.Limit(c.cfg.UserRate)
		},
	}
}

// Recipient returns the notification's MAX recipient: u<user id> or
// c<chat id>.
func (c *Channel) Recipient(n notify.Notification) (string, error) {
	return n.Recipient(notify.ChannelMax)
}

// parseRecipient reads u<user id> or c<chat id>.
func parseRecipient(r string) (user, chat int64, ok bool) {
	if len(r) < 2 {
		return 0, 0, false
	}
	id, err := strconv.ParseInt(r[1:], 10, 64)
	switch {
	case err != nil:
		return 0, 0, false
	case r[0] == 'u' && id > 0:
		return id, 0, true
	case r[0] == 'c' && id != 0:
		return 0, id, true
	}
	return 0, 0, false
}

// Send sends the notification with POST /messages to a.Recipient and
// classifies MAX's answer. The text is the notification's MAX body when it
// has one, else its Telegram text converted for MAX (see [Text]); a Photo
// becomes an image attachment and the buttons an inline keyboard of link
// buttons (see [Buttons]); LinkPreview.Disabled (or the channel's
// DisableLinkPreview) turns link previews off. DisableNotification sends it
// silently (notify=false); ProtectContent, the forum topic and the other
// preview options have no MAX counterpart and are ignored.
func (c *Channel) Send(ctx context.Context, a *delivery.Attempt) delivery.Outcome {
	user, chat, ok := parseRecipient(a.Recipient)
	if !ok {
		return delivery.Outcome{Kind: delivery.Rejected, Reason: "bad_recipient",
			Description: fmt.Sprintf("recipient %q is not u<user id> or c<chat id>", a.Recipient)}
	}
	n := a.Notification
	text, format := Text(n.Text, n.ParseMode)
	if b := n.Bodies.Max; b != nil {
		text, format = b.Text, maxapi.Format(b.Format)
	}
	ctx = maxapi.WithAdmission(ctx, a.Admit)
	ctx = maxapi.WithAnswerNotice(ctx, a.Answered)
	ctx = maxapi.WithRequestTimeout(ctx, a.Timeout)
	msg, err := c.api.SendMessage(ctx, maxapi.SendMessageParams{
		UserID:             user,
		ChatID:             chat,
		Text:               text,
		Format:             format,
		Silent:             n.DisableNotification,
		DisableLinkPreview: c.cfg.DisableLinkPreview || n.LinkPreview.Disabled,
		ImageURL:           n.Photo,
		Buttons:            Buttons(n.Buttons),
	})
	return c.Classify(msg, err)
}

// Buttons returns a notification's buttons as MAX link buttons, in the same
// rows. A button whose URL is not http or https (a tg:// link, which only
// Telegram opens) is left out, and so is a row left empty. It returns nil
// without buttons.
func Buttons(rows [][]notify.Button) [][]maxapi.LinkButton {
	var out [][]maxapi.LinkButton
	for _, row := range rows {
		var r []maxapi.LinkButton
		for _, b := range row {
			if b.WebURL() {
				r = append(r, maxapi.LinkButton{Text: b.Text, URL: b.URL})
			}
		}
		if len(r) > 0 {
			out = append(out, r)
		}
	}
	return out
}

// Probe checks the token (and that the base URL serves MAX's API) with GET
// /me.
func (c *Channel) Probe(ctx context.Context) error {
	_, err := c.api.GetMe(ctx)
	return delivery.ProbeError(err, c.Classify(nil, err), time.Now())
}

// Classify maps the result of one POST /messages to the engine's outcome,
// through maxapi.Classify (which documents every branch):
//
//	delivered            → Delivered, ProviderID = the message's mid
//	retry_after (429)    → RetryAfter, Delay = Retry-After, or Config.RetryAfter
//	backoff (5xx, network, timeout, attachment.not.ready)
//	                     → Transient (MaybeDelivered when the request was written)
//	rejected (400, other 4xx, text MAX would refuse)
//	                     → Rejected
//	recipient_dead (403, 404)
//	                     → RecipientDead, Reason blocked, chat_denied, forbidden or not_found
//	halt (401, 405, a 404 that is not MAX's) → Halt
//	canceled, not_sent   → Canceled, NotSent
//
// Outcome.Code is the HTTP status; Outcome.Description is MAX's code and
// message; Outcome.Unrecognised marks an answer whose code is not known.
func (c *Channel) Classify(msg *maxapi.Message, err error) delivery.Outcome {
	d := maxapi.Classify(err)
	o := delivery.Outcome{
		Reason:         d.Reason,
		Code:           d.Status,
		Description:    d.Description,
		MaybeDelivered: d.MaybeDelivered,
		Unrecognised:   d.Unrecognised,
	}
	switch d.Action {
	case maxapi.ActionDelivered:
		o.Kind = delivery.Delivered
		if msg != nil {
			o.ProviderID = msg.MessageID
		}
	case maxapi.ActionRetryAfter:
		o.Kind, o.Delay = delivery.RetryAfter, d.RetryAfter
		if !d.RetryAfterGiven {
			o.Delay = c.cfg.RetryAfter
		}
	case maxapi.ActionRejected:
		o.Kind = delivery.Rejected
	case maxapi.ActionRecipientDead:
		o.Kind = delivery.RecipientDead
	case maxapi.ActionHalt:
		o.Kind = delivery.Halt
	case maxapi.ActionCanceled:
		o.Kind = delivery.Canceled
	case maxapi.ActionNotSent:
		o.Kind = delivery.NotSent
	default: // ActionBackoff
		o.Kind = delivery.Transient
	}
	return o
}
