package system

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/tgnotify/tgnotify/internal/shop"
	botemu "github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	maxemu "github.com/tgnotify/tgnotify/pkg/maxapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/notify"
	smsemu "github.com/tgnotify/tgnotify/pkg/twilio/emulator"
)

// Delivery is one copy of a notification as the provider that accepted it
// recorded it: the Bot API emulator, the MAX emulator, the SMS emulator or
// Mailpit. The demo and the chaos suite count them per idempotency key to
// check that every order was delivered by exactly one channel.
type Delivery struct {
	// Channel is telegram, max, email or sms.
	Channel string
	// Recipient names the recipient as the pipeline does (the subject
	// token): the chat id, u<user id>, e<hash> of the address or p<hash> of
	// the number.
	Recipient string
	// Address is the email address or phone number in clear (test data:
	// the providers' records hold them, the pipeline's logs never do).
	Address string
	// OrderID is the order the text names ("Order <id> accepted"); empty
	// when the copy is no order's notification.
	OrderID string
	// Key is the notification key of OrderID.
	Key string
	// At is when the provider accepted the copy, on its clock.
	At time.Time
	// AnswerLost is set when the provider dropped its answer (fault mode
	// deliver-drop): the sender could not know it was delivered.
	AnswerLost bool
	// Ref is the provider's id of the copy: the Telegram message id, the
	// MAX mid, the Twilio sid or the email's Message-ID.
	Ref string
	// Subject is the email's subject (email only).
	Subject string
	// Text is the start of the text as delivered, for reports.
	Text string
}

// Patterns that find the order in a delivered "order accepted" message:
// Telegram and MAX keep the HTML, an SMS is plain text, an email carries
// the notification's subject.
var (
	orderInHTML    = regexp.MustCompile(`^<b>Order (\S+) accepted</b>`)
	orderInText    = regexp.MustCompile(`^Order (\S+) accepted(\s|$)`)
	orderInSubject = regexp.MustCompile(`^Order (\S+) accepted$`)
)

// snippet bounds the text kept in a Delivery.
func snippet(s string) string {
	if r := []rune(s); len(r) > 60 {
		return string(r[:60]) + "…"
	}
	return s
}

func (d *Delivery) setOrder(re *regexp.Regexp, s string) {
	if m := re.FindStringSubmatch(s); m != nil {
		d.OrderID, d.Key = m[1], shop.NotificationKey(m[1])
	}
}

// TelegramDeliveries turns the Bot API emulator's record into deliveries.
func TelegramDeliveries(msgs []botemu.Message) []Delivery {
	out := make([]Delivery, 0, len(msgs))
	for _, m := range msgs {
		d := Delivery{Channel: string(notify.ChannelTelegram), Recipient: strconv.FormatInt(m.ChatID, 10), At: m.Time,
			AnswerLost: m.ResponseDropped, Ref: strconv.FormatInt(m.MessageID, 10), Text: snippet(m.Text)}
		d.setOrder(orderInHTML, m.Text)
		out = append(out, d)
	}
	return out
}

// MaxDeliveries turns the MAX emulator's record into deliveries.
func MaxDeliveries(msgs []maxemu.Message) []Delivery {
	out := make([]Delivery, 0, len(msgs))
	for _, m := range msgs {
		d := Delivery{Channel: string(notify.ChannelMax), Recipient: m.Recipient.String(), At: m.Time,
			AnswerLost: m.ResponseDropped, Ref: m.MessageID, Text: snippet(m.Text)}
		d.setOrder(orderInHTML, m.Text)
		out = append(out, d)
	}
	return out
}

// SMSDeliveries turns the SMS emulator's record into deliveries.
func SMSDeliveries(msgs []smsemu.Message) []Delivery {
	out := make([]Delivery, 0, len(msgs))
	for _, m := range msgs {
		d := Delivery{Channel: string(notify.ChannelSMS), Recipient: "p" + notify.HashAddress(m.To), Address: m.To, At: m.Time,
			AnswerLost: m.ResponseDropped, Ref: m.SID, Text: snippet(m.Body)}
		d.setOrder(orderInText, m.Body)
		out = append(out, d)
	}
	return out
}

// EmailDeliveries turns the messages Mailpit received into deliveries. The
// recipient is the first To address, else the first Bcc (the envelope's).
func EmailDeliveries(msgs []Mail) []Delivery {
	out := make([]Delivery, 0, len(msgs))
	for _, m := range msgs {
		addr := ""
		switch {
		case len(m.To) > 0:
			addr = m.To[0].Address
		case len(m.Bcc) > 0:
			addr = m.Bcc[0].Address
		}
		d := Delivery{Channel: string(notify.ChannelEmail), Recipient: "e" + notify.HashAddress(strings.ToLower(addr)), Address: addr,
			At: m.Created, Ref: m.MessageID, Subject: m.Subject, Text: snippet(m.Subject)}
		d.setOrder(orderInSubject, m.Subject)
		out = append(out, d)
	}
	return out
}

// Destinations are where the providers of the four channels listen: the
// emulators' base URLs and Mailpit's API. An empty URL is skipped (the real
// Telegram has no record to read).
type Destinations struct {
	Telegram, Max, SMS, Mailpit string
}

// ProviderRecords is what the providers recorded: every copy they accepted
// and their counters.
type ProviderRecords struct {
	Deliveries    []Delivery
	TelegramStats *botemu.Stats
	MaxStats      *maxemu.Stats
	SMSStats      *smsemu.Stats
}

// ReadProviders reads every delivered copy and the counters from the
// destinations that are set. It returns what it could read and the first
// error.
func ReadProviders(ctx context.Context, c *http.Client, d Destinations) (ProviderRecords, error) {
	var rec ProviderRecords
	var firstErr error
	keep := func(err error) {
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if d.Telegram != "" {
		var msgs struct {
			Messages []botemu.Message `json:"messages"`
		}
		var st botemu.Stats
		keep(GetJSON(ctx, c, d.Telegram+"/emulator/messages", &msgs))
		if err := GetJSON(ctx, c, d.Telegram+"/emulator/stats", &st); err == nil {
			rec.TelegramStats = &st
		} else {
			keep(err)
		}
		rec.Deliveries = append(rec.Deliveries, TelegramDeliveries(msgs.Messages)...)
	}
	if d.Max != "" {
		var msgs struct {
			Messages []maxemu.Message `json:"messages"`
		}
		var st maxemu.Stats
		keep(GetJSON(ctx, c, d.Max+"/emulator/messages", &msgs))
		if err := GetJSON(ctx, c, d.Max+"/emulator/stats", &st); err == nil {
			rec.MaxStats = &st
		} else {
			keep(err)
		}
		rec.Deliveries = append(rec.Deliveries, MaxDeliveries(msgs.Messages)...)
	}
	if d.SMS != "" {
		var msgs struct {
			Messages []smsemu.Message `json:"messages"`
		}
		var st smsemu.Stats
		keep(GetJSON(ctx, c, d.SMS+"/emulator/messages", &msgs))
		if err := GetJSON(ctx, c, d.SMS+"/emulator/stats", &st); err == nil {
			rec.SMSStats = &st
		} else {
			keep(err)
		}
		rec.Deliveries = append(rec.Deliveries, SMSDeliveries(msgs.Messages)...)
	}
	if d.Mailpit != "" {
		mails, err := MailpitMessages(ctx, c, d.Mailpit)
		keep(err)
		rec.Deliveries = append(rec.Deliveries, EmailDeliveries(mails)...)
	}
	return rec, firstErr
}
