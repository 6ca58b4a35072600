package maxapi

import "time"

// Format selects how MAX formats a message's text (schema TextFormat).
type Format string

// Formats. The zero value sends plain text.
const (
	FormatPlain    Format = ""
	FormatHTML     Format = "html"
	FormatMarkdown Format = "markdown"
)

// MaxTextLength is the longest text MAX accepts: NewMessageBody.text has
// maxLength 4000 in the schema, which counts the characters (Unicode code
// points) of the string as sent, markup included.
const MaxTextLength = 4000

// SendMessageParams are the parameters of POST /messages that the pipeline
// uses. Exactly one of UserID and ChatID must be set.
type SendMessageParams struct {
	// UserID sends to the bot's dialog with a user (?user_id=).
	UserID int64
	// ChatID sends to a chat or channel (?chat_id=).
	ChatID int64
	// Text is the message, 1..4000 characters as sent.
	Text string
	// Format is how MAX parses markup in Text: html, markdown or none.
	Format Format
	// Silent sends without notifying the chat's participants
	// (NewMessageBody.notify = false).
	Silent bool
	// DisableLinkPreview stops MAX from building a preview of links in the
	// text (?disable_link_preview=true).
	DisableLinkPreview bool
	// ImageURL attaches a picture MAX fetches from this URL (an image
	// attachment, PhotoAttachmentRequestPayload.url).
	ImageURL string
	// Buttons attach an inline keyboard of link buttons, in rows (an
	// inline_keyboard attachment): at most 3 a row and 30 rows.
	Buttons [][]LinkButton
}

// Limits of an inline keyboard of link buttons: the schema's Button.text
// (1..128) and LinkButton.url (at most 2048), and dev.max.ru's "up to 210
// buttons in 30 rows, up to 7 a row (3 for link buttons)".
const (
	MaxButtonTextLength  = 128
	MaxButtonURLLength   = 2048
	MaxLinkButtonsPerRow = 3
	MaxButtonRows        = 30
)

// LinkButton is a button that opens a URL (schema LinkButton).
type LinkButton struct {
	// Text is the label, 1..128 characters.
	Text string
	// URL is opened when the button is pressed, at most 2048 characters.
	URL string
}

// newMessageBody is the schema's NewMessageBody, as far as it is used.
type newMessageBody struct {
	Text        string              `json:"text"`
	Format      Format              `json:"format,omitempty"`
	Attachments []attachmentRequest `json:"attachments,omitempty"`
	// Notify is sent only when false: MAX's default is true.
	Notify *bool `json:"notify,omitempty"`
}

// attachmentRequest is the schema's AttachmentRequest: an image
// (PhotoAttachmentRequest) or an inline keyboard
// (InlineKeyboardAttachmentRequest).
type attachmentRequest struct {
	Type    string `json:"type"`
	Payload any    `json:"payload"`
}

// imagePayload is the schema's PhotoAttachmentRequestPayload by URL.
type imagePayload struct {
	URL string `json:"url"`
}

// keyboardPayload is the schema's InlineKeyboardAttachmentRequestPayload.
type keyboardPayload struct {
	Buttons [][]linkButton `json:"buttons"`
}

// linkButton is the schema's LinkButton.
type linkButton struct {
	Type string `json:"type"`
	Text string `json:"text"`
	URL  string `json:"url"`
}

// attachments returns the request's attachments: the image first, then the
// keyboard.
func (p SendMessageParams) attachments() []attachmentRequest {
	var a []attachmentRequest
	if p.ImageURL != "" {
		a = append(a, attachmentRequest{Type: "image", Payload: imagePayload{URL: p.ImageURL}})
	}
	if len(p.Buttons) > 0 {
		k := keyboardPayload{Buttons: make([][]linkButton, len(p.Buttons))}
		for i, row := range p.Buttons {
			k.Buttons[i] = make([]linkButton, len(row))
			for j, b := range row {
				k.Buttons[i][j] = linkButton{Type: "link", Text: b.Text, URL: b.URL}
			}
		}
		a = append(a, attachmentRequest{Type: "inline_keyboard", Payload: k})
	}
	return a
}

// Message is the part of MAX's Message object the pipeline keeps. Its
// MessageID (the body's mid) is the proof of delivery.
type Message struct {
	// MessageID is the message's mid, such as "mid.0000…".
	MessageID string
	// Seq is the message's sequence number in its chat.
	Seq int64
	// ChatID is the chat (or the dialog with the user) it was posted in.
	ChatID int64
	// ChatType is "dialog", "chat" or "channel".
	ChatType string
	// UserID is the user of a dialog.
	UserID int64
	// Time is when MAX created the message (millisecond precision).
	Time time.Time
	// Text is the message's text as MAX stores it (without markup).
	Text string
}

// sendMessageResult is the schema's SendMessageResult.
type sendMessageResult struct {
	Message *struct {
		Recipient struct {
			ChatID   int64  `json:"chat_id"`
			ChatType string `json:"chat_type"`
			UserID   int64  `json:"user_id"`
		} `json:"recipient"`
		Timestamp int64 `json:"timestamp"`
		Body      struct {
			MID  string `json:"mid"`
			Seq  int64  `json:"seq"`
			Text string `json:"text"`
		} `json:"body"`
	} `json:"message"`
}

// Bot is the part of MAX's BotInfo that GET /me returns.
type Bot struct {
	UserID    int64  `json:"user_id"`
	Name      string `json:"name"`
	FirstName string `json:"first_name"`
	Username  string `json:"username"`
	IsBot     bool   `json:"is_bot"`
}
