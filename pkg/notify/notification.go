package notify

import (
	"html"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// Limits that [Notification.Validate] enforces.
const (
	// MaxKeyBytes is the longest idempotency key accepted, in bytes.
	MaxKeyBytes = 255
	// MaxTextLength is Telegram's limit for a message: 4096 characters
	// (UTF-16 code units) after entity parsing.
	MaxTextLength = 4096
	// MaxTextBytes bounds the raw text including markup, so that a payload
	// stays small whatever the markup.
	MaxTextBytes = 64 << 10
	// maxChatID is the largest magnitude of a Telegram chat id: they have at
	// most 52 significant bits.
	maxChatID = 1 << 53
)

// Channel names the delivery channel of a notification.
type Channel string

// ChannelTelegram is the only channel so far. An empty channel means Telegram.
const ChannelTelegram Channel = "telegram"

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

// Notification is one message to one recipient. It is the single Go type that
// the application, the publisher and the worker share; [Notification.MarshalPayload]
// and [DecodePayload] are its only wire form.
type Notification struct {
	// Key is the idempotency key that names the event, for example
	// "order:A1:accepted". Required: 1..255 bytes of visible ASCII (no spaces
	// or control characters). The same key is never sent twice.
	Key string `json:"key"`
	// Channel is the delivery channel; empty means [ChannelTelegram].
	Channel Channel `json:"channel"`
	// ChatID is the Telegram chat to send to: non-zero; negative for groups.
	ChatID int64 `json:"chat_id"`
	// Text is the message: 1..4096 characters as Telegram counts them (after
	// markup is parsed), at most 64 KiB raw.
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
	// CreatedAt is when the notification was enqueued. [Enqueue] sets it when
	// it is zero.
	CreatedAt time.Time `json:"created_at"`
}

// Normalize fills the defaults of optional enumerations (channel, priority)
// in place.
func (n *Notification) Normalize() {
	if n.Channel == "" {
		n.Channel = ChannelTelegram
	}
	if n.Priority == "" {
		n.Priority = PriorityTransactional
	}
}

// Validate checks every field and returns a [*ValidationError] naming the
// first invalid one. It matches [ErrInvalid] with errors.Is. Optional fields
// left empty (channel, priority) are accepted as their defaults.
func (n *Notification) Validate() error {
	if err := ValidateKey(n.Key); err != nil {
		return err
	}
	switch n.Channel {
	case "", ChannelTelegram:
	default:
		return invalid("channel", "unknown channel %q (want %q)", n.Channel, ChannelTelegram)
	}
	switch {
	case n.ChatID == 0:
		return invalid("chat_id", "must be non-zero")
	case n.ChatID >= maxChatID || n.ChatID <= -maxChatID:
		return invalid("chat_id", "%d is out of range for a Telegram chat id", n.ChatID)
	}
	switch n.ParseMode {
	case ParseModeNone, ParseModeHTML, ParseModeMarkdownV2:
	default:
		return invalid("parse_mode", "unknown parse mode %q (want empty, %q or %q)", n.ParseMode, ParseModeHTML, ParseModeMarkdownV2)
	}
	if err := validateText(n.Text, n.ParseMode); err != nil {
		return err
	}
	switch n.Priority {
	case "", PriorityTransactional, PriorityBulk:
	default:
		return invalid("priority", "unknown priority %q (want %q or %q)", n.Priority, PriorityTransactional, PriorityBulk)
	}
	if !n.ExpiresAt.IsZero() && !n.CreatedAt.IsZero() && !n.ExpiresAt.After(n.CreatedAt) {
		return invalid("expires_at", "must be after created_at")
	}
	return nil
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

func validateText(text string, mode ParseMode) error {
	switch {
	case !utf8.ValidString(text):
		return invalid("text", "is not valid UTF-8")
	case len(text) > MaxTextBytes:
		return invalid("text", "is %d bytes long, the limit is %d", len(text), MaxTextBytes)
	}
	n := TextLength(text, mode)
	switch {
	case n == 0:
		return invalid("text", "is empty")
	case n > MaxTextLength:
		return invalid("text", "is %d characters long after markup, Telegram's limit is %d", n, MaxTextLength)
	}
	return nil
}

// TextLength returns the length of text as Telegram counts it: UTF-16 code
// units of the visible text after markup is parsed. For HTML the tags are
// removed and entities decoded; for MarkdownV2 escaping backslashes are not
// counted (formatting characters are, so the count errs on the long side).
// Whitespace-only text counts as empty, as Telegram trims it.
func TextLength(text string, mode ParseMode) int {
	visible := text
	switch mode {
	case ParseModeHTML:
		visible = html.UnescapeString(stripTags(text))
	case ParseModeMarkdownV2:
		visible = stripEscapes(text)
	}
	if strings.TrimSpace(visible) == "" {
		return 0
	}
	n := 0
	for _, r := range visible {
		n += utf16.RuneLen(r)
	}
	return n
}

func stripTags(s string) string {
	if !strings.Contains(s, "<") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	in := false
	for _, r := range s {
		switch {
		case r == '<':
			in = true
		case r == '>' && in:
			in = false
		case !in:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func stripEscapes(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	escaped := false
	for _, r := range s {
		if r == '\\' && !escaped {
			escaped = true
			continue
		}
		escaped = false
		b.WriteRune(r)
	}
	return b.String()
}
