package notify

import (
	"slices"
	"strings"
	"time"
)

// Limits that [Notification.Validate] enforces.
const (
	// MaxKeyBytes is the longest idempotency key accepted, in bytes.
	MaxKeyBytes = 255
	// MaxTextLength is Telegram's limit for a message: 4096 characters
	// (UTF-16 code units) after entity parsing.
	MaxTextLength = 4096
	// MaxMaxTextLength is MAX's limit for a message: 4000 characters.
	MaxMaxTextLength = 4000
	// MaxSubjectLength bounds an email subject, in characters.
	MaxSubjectLength = 255
	// MaxTextBytes bounds the raw text including markup, so that a payload
	// stays small whatever the markup.
	MaxTextBytes = 64 << 10
	// MaxScheduleAhead bounds NotBefore: at most 48 hours after CreatedAt.
	// A scheduled message waits in the NOTIFY stream, which keeps a
	// message for 72 hours by default (-max-age); the rest is the margin
	// for a publisher or a worker that is down or behind.
	MaxScheduleAhead = 48 * time.Hour
	// maxChatID is the largest magnitude of a Telegram chat id: they have at
	// most 52 significant bits.
	maxChatID = 1 << 53
)

// ParseMode selects how Telegram interprets markup in the text.
type ParseMode string

// Parse modes Telegram accepts. The empty mode sends the text as is.
const (
	ParseModeNone       ParseMode = ""
	ParseModeHTML       ParseMode = "HTML"
	ParseModeMarkdownV2 ParseMode = "MarkdownV2"
)

// Priority tells the worker what to send first when it must choose.
type Priority string

// Priorities. Transactional notifications ("your order was accepted") go before
// bulk ones ("back in stock") whenever both wait for the same capacity. An
// empty priority means transactional.
const (
	PriorityTransactional Priority = "transactional"
	PriorityBulk          Priority = "bulk"
)

// Notification is one message to one recipient, who may be reachable on
// several channels. It is the single Go type that the application, the
// publisher and the workers share; [Notification.MarshalPayload] and
// [DecodePayload] are its only wire form.
type Notification struct {
	// Key is the idempotency key that names the event, for example
	// "order:A1:accepted". Required: 1..255 bytes of visible ASCII (no spaces
	// or control characters). The same key is delivered once, on one
	// channel.
	Key string `json:"key"`
	// Channel is the single channel of a notification without a Route;
	// empty means [ChannelTelegram] when ChatID is set. Kept for the version
	// 1 payload; new code sets Route.
	Channel Channel `json:"channel,omitempty"`
	// ChatID is the Telegram chat to send to: negative for groups.
	ChatID int64 `json:"chat_id,omitempty"`
	// MaxUserID or MaxChatID is the MAX user or chat to send to (at most
	// one of them).
	MaxUserID int64 `json:"max_user_id,omitempty"`
	MaxChatID int64 `json:"max_chat_id,omitempty"`
	// Email is the email address to send to (addr-spec, no display name).
	Email string `json:"email,omitempty"`
	// Phone is the phone number to send an SMS to, in E.164
	// (+79991234567).
	Phone string `json:"phone,omitempty"`
	// Route lists the channels to try, in order of preference. Each must
	// have its address above. The notification moves to the next channel
	// when the current one finds the recipient dead (blocked, not found,
	// invalid address, hard bounce), refuses the message, gives up after
	// its attempts, or has not delivered within FallbackAfter. Empty: the
	// channels whose address is given, in the order telegram, max, email,
	// sms ([DefaultRoute]).
	Route []Channel `json:"route,omitempty"`
	// FallbackAfter is how long a channel may try before the notification
	// moves to the next one. Zero: the workers' default for the priority
	// (2 minutes for transactional, never for bulk); [FallbackNever]: only
	// a dead recipient or a refusal moves it.
	FallbackAfter time.Duration `json:"-"`
	// Subject is the email subject (and nothing else uses it); empty: the
	// first line of the text.
	Subject string `json:"subject,omitempty"`
	// Text is the message: 1..4096 characters as Telegram counts them (after
	// markup is parsed; 4000 when MAX is on the route without a MAX body;
	// 1024 when it is the caption of a Photo sent to Telegram), at most 64
	// KiB raw. It is Telegram's text, and every other channel's unless
	// Bodies gives that channel its own.
	Text string `json:"text"`
	// ParseMode is how Telegram parses markup in Text.
	ParseMode ParseMode `json:"parse_mode,omitempty"`
	// DisableNotification sends the message silently.
	DisableNotification bool `json:"disable_notification,omitempty"`
	// ProtectContent forbids forwarding and saving the message.
	ProtectContent bool `json:"protect_content,omitempty"`
	// Priority is transactional (the default) or bulk.
	Priority Priority `json:"priority,omitempty"`
	// ExpiresAt, when set, is the time after which the notification must not
	// be sent any more; the worker dead-letters it as expired instead.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// NotBefore, when set, is the earliest time the notification may be
	// sent (payload version 4): a reminder for tomorrow morning. At most
	// [MaxScheduleAhead] after CreatedAt and before ExpiresAt. A
	// notification's fallback_after counts from NotBefore, not from its
	// creation. A scheduled notification does not hold back later ones of
	// the same recipient (docs/WORKER.md, "Scheduled notifications").
	NotBefore time.Time `json:"not_before,omitzero"`
	// CreatedAt is when the notification was enqueued. [Enqueue] sets it when
	// it is zero.
	CreatedAt time.Time `json:"created_at"`

	// The fields below are rich content (payload version 3; see
	// rich.go). A worker that does not know version 3 refuses such a
	// payload as poison rather than send it without them.

	// Buttons are link buttons under the message, in rows: Telegram's
	// inline keyboard, MAX's inline_keyboard attachment, links at the end
	// of an email, the first http(s) one in an SMS.
	Buttons [][]Button `json:"buttons,omitempty"`
	// Photo is the URL (http or https) of a picture sent with the message:
	// Telegram sends it with sendPhoto and Text as its caption, MAX as an
	// image attachment, email as an image at the top. SMS leaves it out.
	Photo string `json:"photo,omitempty"`
	// MessageThreadID sends the Telegram message into a forum topic of
	// the chat. Telegram only.
	MessageThreadID int64 `json:"message_thread_id,omitempty"`
	// LinkPreview controls the preview of a link in the text (Telegram's
	// link_preview_options; MAX takes only Disabled). The zero value lets
	// the messenger choose.
	LinkPreview LinkPreview `json:"link_preview,omitzero"`
	// Bodies are the message written for channels whose format differs
	// from Telegram's (MAX, email, SMS), for example rendered from a
	// template at enqueue (pkg/template). A channel without one converts
	// Text.
	Bodies Bodies `json:"bodies,omitzero"`
}

// FallbackNever is the FallbackAfter that never moves a notification on for
// taking long: only a dead recipient or a refusal does.
const FallbackNever time.Duration = -1

// Normalize fills the defaults of optional fields (route, priority) in
// place: a notification with only a Channel gets the route of that one
// channel; one with neither gets [DefaultRoute].
func (n *Notification) Normalize() {
	if n.Channel == "" && len(n.Route) == 0 && n.ChatID != 0 && n.MaxUserID == 0 && n.MaxChatID == 0 && n.Email == "" && n.Phone == "" {
		n.Channel = ChannelTelegram
	}
	if len(n.Route) == 0 {
		if n.Channel != "" {
			n.Route = []Channel{n.Channel}
		} else {
			n.Route = n.DefaultRoute()
		}
	}
	if n.Channel == "" && len(n.Route) == 1 && n.Route[0] == ChannelTelegram {
		n.Channel = ChannelTelegram
	}
	if n.Priority == "" {
		n.Priority = PriorityTransactional
	}
}

// Validate checks every field and returns a [*ValidationError] naming the
// first invalid one. It matches [ErrInvalid] with errors.Is. Optional fields
// left empty (route, priority) are accepted as their defaults.
func (n *Notification) Validate() error {
	if err := ValidateKey(n.Key); err != nil {
		return err
	}
	if err := n.validateAddresses(); err != nil {
		return err
	}
	route := n.Route
	if len(route) == 0 {
		c := *n
		c.Normalize()
		route = c.Route
	}
	if err := n.validateRoute(route); err != nil {
		return err
	}
	switch n.ParseMode {
	case ParseModeNone, ParseModeHTML, ParseModeMarkdownV2:
	default:
		return invalid("parse_mode", "unknown parse mode %q (want empty, %q or %q)", n.ParseMode, ParseModeHTML, ParseModeMarkdownV2)
	}
	limit, limitName := MaxTextLength, "Telegram's"
	if slices.Contains(route, ChannelMax) && n.Bodies.Max == nil {
		limit, limitName = MaxMaxTextLength, "MAX's"
	}
	if n.Photo != "" && slices.Contains(route, ChannelTelegram) {
		limit, limitName = MaxCaptionLength, "with a photo the text is Telegram's caption, whose"
	}
	if err := validateText(n.Text, n.ParseMode, limit, limitName); err != nil {
		return err
	}
	if err := n.validateRich(route); err != nil {
		return err
	}
	if len([]rune(n.Subject)) > MaxSubjectLength || strings.ContainsAny(n.Subject, "\r\n") {
		return invalid("subject", "must be at most %d characters on one line", MaxSubjectLength)
	}
	if n.FallbackAfter < 0 && n.FallbackAfter != FallbackNever {
		return invalid("fallback_after", "%v is negative", n.FallbackAfter)
	}
	switch n.Priority {
	case "", PriorityTransactional, PriorityBulk:
	default:
		return invalid("priority", "unknown priority %q (want %q or %q)", n.Priority, PriorityTransactional, PriorityBulk)
	}
	if !n.ExpiresAt.IsZero() && !n.CreatedAt.IsZero() && !n.ExpiresAt.After(n.CreatedAt) {
		return invalid("expires_at", "must be after created_at")
	}
	return n.validateNotBefore()
}

// validateNotBefore checks the schedule: within MaxScheduleAhead of
// created_at and before expires_at.
func (n *Notification) validateNotBefore() error {
	if n.NotBefore.IsZero() {
		return nil
	}
	if !n.CreatedAt.IsZero() && n.NotBefore.Sub(n.CreatedAt) > MaxScheduleAhead {
		return invalid("not_before", "%s is %v after created_at %s; the limit is %v",
			n.NotBefore.Format(time.RFC3339), n.NotBefore.Sub(n.CreatedAt).Round(time.Second), n.CreatedAt.Format(time.RFC3339), MaxScheduleAhead)
	}
	if !n.ExpiresAt.IsZero() && !n.NotBefore.Before(n.ExpiresAt) {
		return invalid("not_before", "%s is not before expires_at %s: the notification would expire before it may be sent",
			n.NotBefore.Format(time.RFC3339), n.ExpiresAt.Format(time.RFC3339))
	}
	return nil
}

// Scheduled reports whether the notification must not be sent yet at now.
func (n *Notification) Scheduled(now time.Time) bool {
	return !n.NotBefore.IsZero() && now.Before(n.NotBefore)
}

// Expired reports whether the notification must no longer be sent at now.
func (n *Notification) Expired(now time.Time) bool {
	return !n.ExpiresAt.IsZero() && !now.Before(n.ExpiresAt)
}

// ValidateKey checks an idempotency key: 1..255 bytes of visible ASCII.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return invalid("key", "required")
	case len(key) > MaxKeyBytes:
		return invalid("key", "is %d bytes long, the limit is %d", len(key), MaxKeyBytes)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x21 || c > 0x7e {
			return invalid("key", "byte %d (%q) is not visible ASCII", i, rune(c))
		}
	}
	return nil
}
