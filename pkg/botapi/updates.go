package botapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// The bot's incoming side: updates taken with getUpdates (long polling) or
// pushed to a webhook (setWebhook). Telegram serves one consumer of a bot's
// updates: getUpdates fails with 409 while a webhook is set, and a
// getUpdates request ends the one in progress with 409. A program that
// takes the updates takes them from every other program using the bot.

// Update kinds, as allowed_updates names them.
const (
	UpdateMessage      = "message"
	UpdateMyChatMember = "my_chat_member"
)

// Statuses of a chat member (ChatMember.Status).
const (
	StatusCreator       = "creator"
	StatusAdministrator = "administrator"
	StatusMember        = "member"
	StatusRestricted    = "restricted"
	StatusLeft          = "left"
	StatusKicked        = "kicked"
)

// SecretTokenHeader is the header in which Telegram sends a webhook's
// secret_token with every update it posts.
const SecretTokenHeader = "X-Telegram-Bot-Api-Secret-Token"

// Update is the part of Telegram's Update object the pipeline reads: an
// incoming message, or a change of the bot's own membership in a chat.
// Exactly one of the optional fields is set for the kinds the pipeline asks
// for; an update of another kind has none of them.
type Update struct {
	// UpdateID increases with every update; getUpdates' offset confirms
	// those below it.
	UpdateID int64 `json:"update_id"`
	// Message is a new incoming message.
	Message *Message `json:"message,omitempty"`
	// MyChatMember is a change of the bot's status in a chat: in a private
	// chat, the user blocked (kicked) or unblocked (member) the bot.
	MyChatMember *ChatMemberUpdated `json:"my_chat_member,omitempty"`
}

// ChatMemberUpdated is a change of a chat member's status.
type ChatMemberUpdated struct {
	// Chat is the chat the change happened in.
	Chat Chat `json:"chat"`
	// From is who made the change.
	From User `json:"from"`
	// Date is when the change happened, in Unix seconds.
	Date int64 `json:"date"`
	// OldChatMember and NewChatMember are the member before and after.
	OldChatMember ChatMember `json:"old_chat_member"`
	NewChatMember ChatMember `json:"new_chat_member"`
}

// Time returns when the change happened (Telegram reports whole seconds).
func (c *ChatMemberUpdated) Time() time.Time { return time.Unix(c.Date, 0) }

// ChatMember is the part of Telegram's ChatMember object the pipeline
// reads: one member's status in a chat.
type ChatMember struct {
	// Status is creator, administrator, member, restricted, left or kicked.
	Status string `json:"status"`
	// User is the member.
	User User `json:"user"`
	// IsMember tells, for a restricted member, whether it is in the chat.
	IsMember bool `json:"is_member,omitempty"`
	// CanSendMessages tells, for a restricted member, whether it may write.
	CanSendMessages *bool `json:"can_send_messages,omitempty"`
	// UntilDate is when a kicked or restricted member's restriction ends
	// (Unix seconds; 0 for ever).
	UntilDate int64 `json:"until_date,omitempty"`
}

// GetUpdatesParams are getUpdates' parameters.
type GetUpdatesParams struct {
	// Offset is the first update to return: one more than the last
	// processed update's id, which confirms every earlier one.
	Offset int64 `json:"offset,omitempty"`
	// Limit bounds the updates returned, 1..100 (default 100).
	Limit int `json:"limit,omitempty"`
	// Timeout is the long poll in whole seconds: Telegram answers as soon
	// as an update arrives, or with none after Timeout.
	Timeout int `json:"timeout,omitempty"`
	// AllowedUpdates are the kinds to receive; Telegram remembers them for
	// later calls (and for a webhook).
	AllowedUpdates []string `json:"allowed_updates,omitempty"`
}

// GetUpdates takes the updates from p.Offset on, waiting up to p.Timeout
// seconds for one. The request's timeout is the client's plus the long
// poll. A webhook being set, or another getUpdates request ending this one,
// fails with a [*ConflictError] (409), matching [ErrConflict] and
// [ErrWebhookActive] or [ErrTerminatedByOther].
func (c *Client) GetUpdates(ctx context.Context, p GetUpdatesParams) ([]Update, error) {
	poll := time.Duration(max(p.Timeout, 0)) * time.Second
	ctx = WithRequestTimeout(ctx, timeoutFrom(ctx, c.timeout)+poll)
	var ups []Update
	if err := c.call(ctx, "getUpdates", p, &ups); err != nil {
		return nil, conflict(err)
	}
	return ups, nil
}

// SetWebhookParams are setWebhook's parameters. The secret token never
// appears in String or a log line.
type SetWebhookParams struct {
	// URL is the HTTPS URL Telegram posts updates to (ports 443, 80, 88 or
	// 8443).
	URL string `json:"url"`
	// SecretToken, 1..256 characters of A-Z a-z 0-9 _ -, is sent with every
	// post in the X-Telegram-Bot-Api-Secret-Token header.
	SecretToken string `json:"secret_token,omitempty"`
	// MaxConnections bounds the posts Telegram makes at once, 1..100
	// (default 40); with 1 the updates arrive one at a time, in order.
	MaxConnections int `json:"max_connections,omitempty"`
	// AllowedUpdates are the kinds to receive.
	AllowedUpdates []string `json:"allowed_updates,omitempty"`
	// DropPendingUpdates drops the updates not delivered yet.
	DropPendingUpdates bool `json:"drop_pending_updates,omitempty"`
}

// String describes the parameters without the secret token.
func (p SetWebhookParams) String() string {
	secret := ""
	if p.SecretToken != "" {
		secret = redacted
	}
	return fmt.Sprintf("setWebhook{url: %s, secret_token: %s, max_connections: %d, allowed_updates: %v}",
		p.URL, secret, p.MaxConnections, p.AllowedUpdates)
}

// LogValue describes the parameters without the secret token.
func (p SetWebhookParams) LogValue() slog.Value { return slog.StringValue(p.String()) }

// SetWebhook makes Telegram post the bot's updates to p.URL; getUpdates
// fails from then on.
func (c *Client) SetWebhook(ctx context.Context, p SetWebhookParams) error {
	var ok bool
	return c.call(ctx, "setWebhook", p, &ok)
}

// DeleteWebhook removes the webhook, so that getUpdates works again;
// dropPending drops the updates not delivered yet.
func (c *Client) DeleteWebhook(ctx context.Context, dropPending bool) error {
	var ok bool
	return c.call(ctx, "deleteWebhook", struct {
		DropPendingUpdates bool `json:"drop_pending_updates,omitempty"`
	}{dropPending}, &ok)
}

// WebhookInfo is getWebhookInfo's result; URL is empty when no webhook is
// set.
type WebhookInfo struct {
	URL                  string   `json:"url"`
	HasCustomCertificate bool     `json:"has_custom_certificate"`
	PendingUpdateCount   int      `json:"pending_update_count"`
	IPAddress            string   `json:"ip_address,omitempty"`
	LastErrorDate        int64    `json:"last_error_date,omitempty"`
	LastErrorMessage     string   `json:"last_error_message,omitempty"`
	MaxConnections       int      `json:"max_connections,omitempty"`
	AllowedUpdates       []string `json:"allowed_updates,omitempty"`
}

// GetWebhookInfo returns the webhook's state.
func (c *Client) GetWebhookInfo(ctx context.Context) (*WebhookInfo, error) {
	var info WebhookInfo
	if err := c.call(ctx, "getWebhookInfo", struct{}{}, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// BotID returns the bot's user id, the digits before the token's colon
// (zero when the token has none). It makes no request.
func (c *Client) BotID() int64 {
	digits, _, ok := strings.Cut(string(*c.token), ":")
	if !ok {
		return 0
	}
	id, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return 0
	}
	return id
}

// Sentinels of the 409 answers: Telegram serves one consumer of a bot's
// updates.
var (
	// ErrConflict matches every 409 Conflict.
	ErrConflict = errors.New("botapi: conflict: another consumer takes the bot's updates")
	// ErrWebhookActive matches 409 "Conflict: can't use getUpdates method
	// while webhook is active": a webhook receives the updates (the
	// application's, or another tgnotify's); deleteWebhook ends it.
	ErrWebhookActive = errors.New("botapi: conflict: a webhook is set")
	// ErrTerminatedByOther matches 409 "Conflict: terminated by other
	// getUpdates request": another program polls the same bot.
	ErrTerminatedByOther = errors.New("botapi: conflict: another getUpdates request")
)

// ConflictError is a 409 answer to getUpdates: another consumer takes the
// bot's updates. It matches [ErrConflict], and [ErrWebhookActive] or
// [ErrTerminatedByOther] by its description.
type ConflictError struct {
	// Err is Telegram's answer.
	Err *Error
}

func (e *ConflictError) Error() string { return e.Err.Error() }

// Unwrap returns Telegram's answer.
func (e *ConflictError) Unwrap() error { return e.Err }

// Is matches the conflict sentinels.
func (e *ConflictError) Is(target error) bool {
	d := strings.ToLower(e.Err.Description)
	switch target {
	case ErrConflict:
		return true
	case ErrWebhookActive:
		return strings.Contains(d, "webhook is active")
	case ErrTerminatedByOther:
		return strings.Contains(d, "terminated by other getupdates")
	}
	return false
}

// WebhookActive reports whether a webhook takes the updates.
func (e *ConflictError) WebhookActive() bool { return e.Is(ErrWebhookActive) }

// conflict turns a 409 into a *ConflictError.
func conflict(err error) error {
	var apiErr *Error
	if errors.As(err, &apiErr) && apiErr.Code == 409 {
		return &ConflictError{Err: apiErr}
	}
	return err
}
