package notify

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits of rich content that [Notification.Validate] enforces. Telegram
// publishes no limits for inline keyboards; the ones here are what its
// servers are reported to enforce (docs/CHANNELS.md, "Rich messages").
const (
	// MaxCaptionLength is Telegram's limit for a photo's caption: 1024
	// characters after markup is parsed (sendPhoto).
	MaxCaptionLength = 1024
	// MaxButtons bounds the buttons of one message: Telegram answers
	// "reply markup is too long" past about 100.
	MaxButtons = 100
	// MaxButtonsPerRow bounds one row of buttons on Telegram: its clients
	// show at most 8.
	MaxButtonsPerRow = 8
	// MaxMaxLinkButtonsPerRow bounds one row when MAX is on the route: MAX
	// allows at most 3 link buttons in a row (dev.max.ru, "Клавиатура в
	// сообщениях").
	MaxMaxLinkButtonsPerRow = 3
	// MaxMaxButtonRows bounds the rows when MAX is on the route: 30.
	MaxMaxButtonRows = 30
	// MaxButtonTextLength bounds a button's label, in characters. Telegram
	// publishes no limit and clips long labels; MAX allows 128. 64 keeps a
	// label readable on a phone on both.
	MaxButtonTextLength = 64
	// MaxURLBytes bounds a button's, a photo's or a link preview's URL:
	// MAX's LinkButton.url has maxLength 2048.
	MaxURLBytes = 2048
	// MaxSMSBodyLength bounds an SMS body, in characters: Twilio's limit
	// for Body. The SMS channel shortens it to its segment budget.
	MaxSMSBodyLength = 1600
)

// Button is a link button. Its URL is http, https or tg (Telegram's own
// links, such as tg://resolve?domain=shop_bot); channels other than
// Telegram leave tg buttons out.
type Button struct {
	// Text is the label: 1..64 characters on one line, plain text.
	Text string `json:"text"`
	// URL is opened when the button is pressed.
	URL string `json:"url"`
}

// WebURL reports whether the button's URL is http or https, which every
// channel can show.
func (b Button) WebURL() bool { return isWebURL(b.URL) }

// LinkPreview controls the preview Telegram shows of a link in the text
// (link_preview_options). The zero value lets Telegram choose.
type LinkPreview struct {
	// Disabled shows no preview at all (MAX: disable_link_preview).
	Disabled bool `json:"disabled,omitempty"`
	// URL is the link to preview (http or https); empty: the first link of
	// the text.
	URL string `json:"url,omitempty"`
	// PreferSmallMedia or PreferLargeMedia asks for a smaller or larger
	// picture in the preview (at most one of them).
	PreferSmallMedia bool `json:"prefer_small_media,omitempty"`
	PreferLargeMedia bool `json:"prefer_large_media,omitempty"`
	// ShowAboveText puts the preview above the text.
	ShowAboveText bool `json:"show_above_text,omitempty"`
}

// MaxFormat is how MAX parses markup in a [MaxBody].
type MaxFormat string

// MAX's formats (schema TextFormat). The empty format sends the text as
// is.
const (
	MaxFormatPlain    MaxFormat = ""
	MaxFormatHTML     MaxFormat = "html"
	MaxFormatMarkdown MaxFormat = "markdown"
)

// MaxBody is the message written for MAX.
type MaxBody struct {
	// Text is sent as is: 1..4000 characters including markup, as MAX
	// counts them.
	Text string `json:"text"`
	// Format is html, markdown or empty (plain text).
	Format MaxFormat `json:"format,omitempty"`
}

// EmailBody is the message written for email.
type EmailBody struct {
	// HTML is the HTML part's content, put inside <body> as written: it
	// must come from the application's own template with its data escaped
	// (html/template, as pkg/template does).
	HTML string `json:"html"`
	// Text is the plain-text part.
	Text string `json:"text"`
}

// SMSBody is the message written for SMS.
type SMSBody struct {
	// Text is plain text, at most 1600 characters; the SMS channel
	// shortens it to its segment budget.
	Text string `json:"text"`
}

// Bodies are the message written for the channels whose format differs
// from Telegram's. Each is optional: a channel without its body converts
// the notification's Text.
type Bodies struct {
	Max   *MaxBody   `json:"max,omitempty"`
	Email *EmailBody `json:"email,omitempty"`
	SMS   *SMSBody   `json:"sms,omitempty"`
}

// IsZero reports whether no body is given.
func (b Bodies) IsZero() bool { return b.Max == nil && b.Email == nil && b.SMS == nil }

// rich reports whether the notification carries any rich content, which
// needs payload version 3.
func (n *Notification) rich() bool {
	return len(n.Buttons) > 0 || n.Photo != "" || n.MessageThreadID != 0 || n.LinkPreview != (LinkPreview{}) || !n.Bodies.IsZero()
}

// validateRich checks buttons, photo, thread, link preview and bodies
// against the limits of the channels on route.
func (n *Notification) validateRich(route []Channel) error {
	if err := validateButtons(n.Buttons, slices.Contains(route, ChannelMax)); err != nil {
		return err
	}
	if n.Photo != "" {
		if err := validateURL("photo", n.Photo, false); err != nil {
			return err
		}
	}
	switch {
	case n.MessageThreadID < 0:
		return invalid("message_thread_id", "%d must be positive", n.MessageThreadID)
	case n.MessageThreadID != 0 && n.ChatID == 0:
		return invalid("message_thread_id", "is a Telegram forum topic: it needs chat_id")
	}
	if err := n.validateLinkPreview(); err != nil {
		return err
	}
	return n.Bodies.validate()
}

// validateButtons checks the rows of buttons; withMax applies MAX's limits
// too.
func validateButtons(rows [][]Button, withMax bool) error {
	total := 0
	if withMax && len(rows) > MaxMaxButtonRows {
		return invalid("buttons", "%d rows, MAX's limit is %d", len(rows), MaxMaxButtonRows)
	}
	for i, row := range rows {
		switch {
		case len(row) == 0:
			return invalid(fmt.Sprintf("buttons[%d]", i), "is an empty row")
		case len(row) > MaxButtonsPerRow:
			return invalid(fmt.Sprintf("buttons[%d]", i), "has %d buttons, Telegram's limit is %d a row", len(row), MaxButtonsPerRow)
		case withMax && len(row) > MaxMaxLinkButtonsPerRow:
			return invalid(fmt.Sprintf("buttons[%d]", i), "has %d buttons, MAX's limit is %d link buttons a row", len(row), MaxMaxLinkButtonsPerRow)
		}
		for j, b := range row {
			// The field's name only for an error: a payload's buttons are
			// checked at enqueue and again by the worker for every message.
			if validateLabel("", b.Text) == nil && validateURL("", b.URL, true) == nil {
				continue
			}
			field := fmt.Sprintf("buttons[%d][%d]", i, j)
			if err := validateLabel(field+".text", b.Text); err != nil {
				return err
			}
			return validateURL(field+".url", b.URL, true)
		}
		total += len(row)
	}
	if total > MaxButtons {
		return invalid("buttons", "%d buttons, Telegram's limit is %d", total, MaxButtons)
	}
	return nil
}

// validateLabel checks a button's label: 1..64 characters of one line.
func validateLabel(field, s string) error {
	switch n := utf8.RuneCountInString(s); {
	case !utf8.ValidString(s):
		return invalid(field, "is not valid UTF-8")
	case strings.TrimSpace(s) == "":
		return invalid(field, "is empty")
	case n > MaxButtonTextLength:
		return invalid(field, "is %d characters long, the limit is %d", n, MaxButtonTextLength)
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return invalid(field, "must be one line without control characters")
	}
	return nil
}

// validateURL checks an absolute http or https URL with a host, or, when
// tg is true, a tg:// link too.
func validateURL(field, raw string, tg bool) error {
	want := "an http or https URL"
	if tg {
		want = "an http, https or tg URL"
	}
	switch {
	case raw == "":
		return invalid(field, "is empty: want %s", want)
	case len(raw) > MaxURLBytes:
		return invalid(field, "is %d bytes long, the limit is %d", len(raw), MaxURLBytes)
	case strings.IndexFunc(raw, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0:
		return invalid(field, "%q has spaces or control characters: escape them", raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return invalid(field, "%q is not a URL: want %s", raw, want)
	}
	switch scheme := strings.ToLower(u.Scheme); {
	case scheme == "http" || scheme == "https" || tg && scheme == "tg":
	case scheme == "":
		return invalid(field, "%q is not absolute: want %s", raw, want)
	default:
		return invalid(field, "scheme %q is not allowed: want %s", u.Scheme, want)
	}
	if u.Host == "" || u.User != nil {
		return invalid(field, "%q needs a host and no user info: want %s", raw, want)
	}
	return nil
}

// isWebURL reports whether raw is an http or https URL.
func isWebURL(raw string) bool {
	scheme, _, ok := strings.Cut(raw, ":")
	return ok && (strings.EqualFold(scheme, "http") || strings.EqualFold(scheme, "https"))
}

// validateLinkPreview checks the link preview options.
func (n *Notification) validateLinkPreview() error {
	p := n.LinkPreview
	switch {
	case p == (LinkPreview{}):
		return nil
	case n.Photo != "":
		return invalid("link_preview", "a message with a photo has no link preview (Telegram's sendPhoto takes none)")
	case p.Disabled && p != (LinkPreview{Disabled: true}):
		return invalid("link_preview.disabled", "contradicts the other preview options: give either disabled or them")
	case p.PreferSmallMedia && p.PreferLargeMedia:
		return invalid("link_preview.prefer_small_media", "give prefer_small_media or prefer_large_media, not both")
	case p.URL != "":
		return validateURL("link_preview.url", p.URL, false)
	}
	return nil
}

// validate checks each body that is given.
func (b Bodies) validate() error {
	if m := b.Max; m != nil {
		switch m.Format {
		case MaxFormatPlain, MaxFormatHTML, MaxFormatMarkdown:
		default:
			return invalid("bodies.max.format", "unknown format %q (want empty, %q or %q)", m.Format, MaxFormatHTML, MaxFormatMarkdown)
		}
		if err := validateBody("bodies.max.text", m.Text, MaxMaxTextLength); err != nil {
			return err
		}
	}
	if e := b.Email; e != nil {
		if err := validateBody("bodies.email.html", e.HTML, 0); err != nil {
			return err
		}
		if err := validateBody("bodies.email.text", e.Text, 0); err != nil {
			return err
		}
	}
	if s := b.SMS; s != nil {
		if err := validateBody("bodies.sms.text", s.Text, MaxSMSBodyLength); err != nil {
			return err
		}
	}
	return nil
}

// validateBody checks a channel's body: valid UTF-8, not blank, at most
// MaxTextBytes, and at most limit characters as written (0: no limit).
func validateBody(field, s string, limit int) error {
	switch {
	case !utf8.ValidString(s):
		return invalid(field, "is not valid UTF-8")
	case strings.TrimSpace(s) == "":
		return invalid(field, "is empty")
	case len(s) > MaxTextBytes:
		return invalid(field, "is %d bytes long, the limit is %d", len(s), MaxTextBytes)
	}
	if n := utf8.RuneCountInString(s); limit > 0 && n > limit {
		return invalid(field, "is %d characters long, the limit is %d", n, limit)
	}
	return nil
}
