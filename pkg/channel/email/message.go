package email

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"html"
	"strings"
	"time"

	mail "github.com/wneessen/go-mail"

	"github.com/tgnotify/tgnotify/pkg/notify"
)

// maxIDKey bounds the part of a Message-ID taken from the idempotency key,
// in bytes; the hash that follows keeps it unique.
const maxIDKey = 64

// maxDerivedSubject bounds a subject taken from the text's first line, in
// characters.
const maxDerivedSubject = 100

// MessageID returns the Message-ID of the notification with key, without
// angle brackets: the key with every character other than letters, digits,
// '-' and '_' turned into a dot (at most 64 of them), a dot, the first 16
// hex digits of the key's SHA-256, '@', domain. "order:A1:accepted" becomes
// order.A1.accepted.<hash>@domain. The same key always gives the same id,
// so a copy sent again after a crash is recognisable as the same message
// (and a mail client shows it once); the hash keeps keys that differ only
// in the replaced characters apart.
func MessageID(key, domain string) string {
	var b strings.Builder
	dot := true // no leading dot, no two in a row
	for i := 0; i < len(key) && b.Len() < maxIDKey; i++ {
		c := key[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			b.WriteByte(c)
			dot = false
		} else if !dot {
			b.WriteByte('.')
			dot = true
		}
	}
	left := strings.TrimSuffix(b.String(), ".")
	sum := sha256.Sum256([]byte(key))
	h := hex.EncodeToString(sum[:8])
	if left == "" {
		return h + "@" + domain
	}
	return left + "." + h + "@" + domain
}

// Subject returns the email subject of n: its Subject, else the first
// non-blank line of its text as plain text, at most 100 characters.
func Subject(n notify.Notification, body Body) string {
	s := n.Subject
	if strings.TrimSpace(s) == "" {
		s = firstLine(body.Text, maxDerivedSubject)
	}
	// A header is one line, whatever the payload says.
	return strings.Join(strings.Fields(s), " ")
}

// Compose returns the email subject and body of n: the notification's email
// body when it has one (used as written), else its text rendered from its
// parse mode ([Render]); then the photo at the top, as an image that links
// to itself, and the buttons at the end, as links styled as buttons in the
// HTML part and "label: URL" lines in the text part. Only http and https
// buttons are shown: a tg:// link opens nothing in a mail client. The
// subject is taken before the photo and buttons are added ([Subject]).
func Compose(n notify.Notification) (subject string, body Body) {
	body = Render(n.Text, n.ParseMode)
	if b := n.Bodies.Email; b != nil {
		body = Body{HTML: b.HTML, Text: b.Text}
	}
	subject = Subject(n, body)
	if n.Photo != "" {
		src := html.EscapeString(n.Photo)
		body.HTML = `<p><a href="` + src + `"><img src="` + src + `" alt="" style="max-width: 100%; height: auto"></a></p>` + "\n" + body.HTML
		body.Text = strings.TrimRight(body.Text, "\n") + "\n\n" + n.Photo
	}
	var links, lines []string
	for _, row := range n.Buttons {
		var cells []string
		for _, b := range row {
			if !b.WebURL() {
				continue
			}
			cells = append(cells, `<a href="`+html.EscapeString(b.URL)+`" style="`+buttonStyle+`">`+html.EscapeString(b.Text)+`</a>`)
			lines = append(lines, b.Text+": "+b.URL)
		}
		if len(cells) > 0 {
			links = append(links, strings.Join(cells, " "))
		}
	}
	if len(links) > 0 {
		body.HTML += "\n<p style=\"margin-top: 1.5em\">" + strings.Join(links, "<br>\n") + "</p>"
		body.Text = strings.TrimRight(body.Text, "\n") + "\n\n" + strings.Join(lines, "\n")
	}
	return subject, body
}

// buttonStyle makes a link look like a button in mail clients, which keep
// inline styles only.
const buttonStyle = "display: inline-block; margin: 4px 4px 0 0; padding: 8px 16px; border-radius: 4px; " +
	"background: #2a6fdb; color: #ffffff; text-decoration: none"

// htmlDocument wraps the rendered fragment in a minimal document.
func htmlDocument(fragment string) string {
	return "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">" +
		"<meta name=\"viewport\" content=\"width=device-width\"></head>\n" +
		"<body><div style=\"font-family: sans-serif; line-height: 1.4\">" + fragment + "</div></body></html>\n"
}

// build makes the email for n to addr, and returns it with its Message-ID.
func (c *Channel) build(n notify.Notification, addr string, now time.Time) (*mail.Msg, string, error) {
	subject, body := Compose(n)
	m := mail.NewMsg()
	if err := m.From(c.cfg.From); err != nil {
		return nil, "", fmt.Errorf("from: %w", err)
	}
	if err := m.To(addr); err != nil {
		return nil, "", errBadAddress
	}
	id := MessageID(n.Key, c.cfg.MessageIDDomain)
	m.SetMessageIDWithValue(id)
	m.SetDateWithValue(now)
	m.Subject(subject)
	// RFC 3834: a notification is generated automatically; vacation
	// responders must not answer it.
	m.SetGenHeader(mail.Header("Auto-Submitted"), "auto-generated")
	m.SetGenHeader(mail.HeaderXAutoResponseSuppress, "All")
	if n.Priority == notify.PriorityBulk {
		m.SetGenHeader(mail.HeaderPrecedence, "bulk")
	}
	m.SetBodyString(mail.TypeTextPlain, body.Text)
	m.AddAlternativeString(mail.TypeTextHTML, htmlDocument(body.HTML))
	return m, "<" + id + ">", nil
}
