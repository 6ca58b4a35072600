package email

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
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

// htmlDocument wraps the rendered fragment in a minimal document.
func htmlDocument(fragment string) string {
	return "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">" +
		"<meta name=\"viewport\" content=\"width=device-width\"></head>\n" +
		"<body><div style=\"font-family: sans-serif; line-height: 1.4\">" + fragment + "</div></body></html>\n"
}

// build makes the email for n to addr, and returns it with its Message-ID.
func (c *Channel) build(n notify.Notification, addr string, now time.Time) (*mail.Msg, string, error) {
	body := Render(n.Text, n.ParseMode)
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
	m.Subject(Subject(n, body))
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
