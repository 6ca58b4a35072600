package botapi

import "time"

// ParseMode selects how Telegram parses entities in a message text.
type ParseMode string

// Parse modes supported by sendMessage. The zero value sends plain text.
const (
	ParseModeNone       ParseMode = ""
	ParseModeHTML       ParseMode = "HTML"
	ParseModeMarkdownV2 ParseMode = "MarkdownV2"
	ParseModeMarkdown   ParseMode = "Markdown"
)

// SendMessageParams are the parameters of sendMessage that the pipeline uses.
// Zero values are omitted from the request.
type SendMessageParams struct {
	// ChatID is the target chat: positive for users, negative for groups,
	// -100… for supergroups and channels.
	ChatID int64 `json:"chat_id"`
	// MessageThreadID targets a forum topic of a supergroup.
	MessageThreadID int64 `json:"message_thread_id,omitempty"`
	// Text is the message text, 1..4096 characters after entity parsing.
	Text string `json:"text"`
	// ParseMode selects HTML, MarkdownV2 or legacy Markdown entity parsing.
	ParseMode ParseMode `json:"parse_mode,omitempty"`
	// LinkPreviewOptions controls the link preview.
	LinkPreviewOptions *LinkPreviewOptions `json:"link_preview_options,omitempty"`
	// DisableNotification sends the message silently.
	DisableNotification bool `json:"disable_notification,omitempty"`
	// ProtectContent forbids forwarding and saving the message.
	ProtectContent bool `json:"protect_content,omitempty"`
	// AllowPaidBroadcast raises the bot's limit to 1000 messages per second
	// for a fee of 0.1 Telegram Star per message, paid from the bot's balance.
	AllowPaidBroadcast bool `json:"allow_paid_broadcast,omitempty"`
	// ReplyMarkup attaches an inline keyboard.
	ReplyMarkup *InlineKeyboardMarkup `json:"reply_markup,omitempty"`
}

// SendPhotoParams are the parameters of sendPhoto that the pipeline uses:
// a photo by URL (or file id) with a caption. Zero values are omitted from
// the request.
type SendPhotoParams struct {
	// ChatID is the target chat, as for sendMessage.
	ChatID int64 `json:"chat_id"`
	// MessageThreadID targets a forum topic of a supergroup.
	MessageThreadID int64 `json:"message_thread_id,omitempty"`
	// Photo is an HTTP URL Telegram fetches the picture from (at most 5 MB
	// by URL), or the file_id of a photo already on Telegram's servers.
	Photo string `json:"photo"`
	// Caption is the photo's caption, 0..1024 characters after entity
	// parsing.
	Caption string `json:"caption,omitempty"`
	// ParseMode selects how the caption's entities are parsed.
	ParseMode ParseMode `json:"parse_mode,omitempty"`
	// ShowCaptionAboveMedia puts the caption above the photo.
	ShowCaptionAboveMedia bool `json:"show_caption_above_media,omitempty"`
	// DisableNotification sends the message silently.
	DisableNotification bool `json:"disable_notification,omitempty"`
	// ProtectContent forbids forwarding and saving the message.
	ProtectContent bool `json:"protect_content,omitempty"`
	// AllowPaidBroadcast: see SendMessageParams.
	AllowPaidBroadcast bool `json:"allow_paid_broadcast,omitempty"`
	// ReplyMarkup attaches an inline keyboard.
	ReplyMarkup *InlineKeyboardMarkup `json:"reply_markup,omitempty"`
}

// LinkPreviewOptions describes how a link preview is generated.
type LinkPreviewOptions struct {
	IsDisabled       bool   `json:"is_disabled,omitempty"`
	URL              string `json:"url,omitempty"`
	PreferSmallMedia bool   `json:"prefer_small_media,omitempty"`
	PreferLargeMedia bool   `json:"prefer_large_media,omitempty"`
	ShowAboveText    bool   `json:"show_above_text,omitempty"`
}

// InlineKeyboardMarkup is an inline keyboard shown under a message.
type InlineKeyboardMarkup struct {
	InlineKeyboard [][]InlineKeyboardButton `json:"inline_keyboard"`
}

// InlineKeyboardButton is one button of an inline keyboard. Exactly one of
// URL and CallbackData should be set.
type InlineKeyboardButton struct {
	Text         string `json:"text"`
	URL          string `json:"url,omitempty"`
	CallbackData string `json:"callback_data,omitempty"`
}

// Message is the part of Telegram's Message object the pipeline keeps. Its
// MessageID is the proof of delivery.
type Message struct {
	MessageID       int64  `json:"message_id"`
	MessageThreadID int64  `json:"message_thread_id,omitempty"`
	From            *User  `json:"from,omitempty"`
	Chat            Chat   `json:"chat"`
	Date            int64  `json:"date"`
	Text            string `json:"text,omitempty"`
	// Caption and Photo (the sizes Telegram made of it) are set for a
	// message sent with sendPhoto.
	Caption string      `json:"caption,omitempty"`
	Photo   []PhotoSize `json:"photo,omitempty"`
}

// PhotoSize is one size of a photo Telegram stores.
type PhotoSize struct {
	FileID       string `json:"file_id"`
	FileUniqueID string `json:"file_unique_id"`
	Width        int    `json:"width"`
	Height       int    `json:"height"`
	FileSize     int64  `json:"file_size,omitempty"`
}

// Time returns the message's send time (Telegram reports whole seconds).
func (m *Message) Time() time.Time { return time.Unix(m.Date, 0) }

// Chat is the part of Telegram's Chat object the pipeline uses.
type Chat struct {
	ID        int64  `json:"id"`
	Type      string `json:"type"` // "private", "group", "supergroup" or "channel"
	Title     string `json:"title,omitempty"`
	Username  string `json:"username,omitempty"`
	FirstName string `json:"first_name,omitempty"`
	LastName  string `json:"last_name,omitempty"`
}

// User is a Telegram user or bot, as returned by getMe.
type User struct {
	ID        int64  `json:"id"`
	IsBot     bool   `json:"is_bot"`
	FirstName string `json:"first_name"`
	LastName  string `json:"last_name,omitempty"`
	Username  string `json:"username,omitempty"`
}
