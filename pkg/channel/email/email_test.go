package email_test

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/mailpittest"
	"github.com/tgnotify/tgnotify/internal/testenv"
	"github.com/tgnotify/tgnotify/pkg/channel/email"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

const (
	from = "Shop <noreply@shop.test>"
	ann  = "ann@example.com"
	// wait bounds how long a test waits for Mailpit to show a message.
	wait = 20 * time.Second
)

// channel returns the email channel on Mailpit's SMTP port: plain SMTP,
// the sender above, a generous timeout for a loaded machine.
func channel(t *testing.T, mp *mailpittest.Server, change func(*email.Config)) *email.Channel {
	t.Helper()
	cfg := email.Config{Addr: mp.SMTPAddr, TLS: email.TLSNone, From: from, Timeout: 15 * time.Second}
	if change != nil {
		change(&cfg)
	}
	ch, err := email.New(cfg, email.Deps{Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatalf("email.New: %v", err)
	}
	return ch
}

// notification returns an order notification to addr in Telegram HTML.
func notification(key, addr string) notify.Notification {
	return notify.Notification{
		Key:       key,
		Email:     addr,
		Route:     []notify.Channel{notify.ChannelEmail},
		Text:      "<b>Order A1 accepted</b>\nTotal: 1 200 ₽",
		ParseMode: notify.ParseModeHTML,
		CreatedAt: time.Now().UTC(),
	}
}

// admission counts Attempt.Admit calls and answers err.
type admission struct {
	calls atomic.Int32
	err   error
}

func (a *admission) admit() error {
	a.calls.Add(1)
	return a.err
}

// send makes one attempt at n and returns its outcome and how often Admit
// was asked.
func send(t *testing.T, ch *email.Channel, n notify.Notification, adm *admission) delivery.Outcome {
	t.Helper()
	token, err := ch.Recipient(n)
	if err != nil {
		t.Fatal(err)
	}
	if adm == nil {
		adm = &admission{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return ch.Send(ctx, delivery.NewAttempt(n, token, adm.admit))
}

// noAddress fails t when s shows the recipient's address.
func noAddress(t *testing.T, what, s string) {
	t.Helper()
	if strings.Contains(strings.ToLower(s), "ann@") || strings.Contains(strings.ToLower(s), "bob@") {
		t.Errorf("%s shows the address: %q", what, s)
	}
}

func TestSendDeliversOneMessage(t *testing.T) {
	mp := mailpittest.Start(t, mailpittest.Options{})
	ch := channel(t, mp, nil)
	n := notification("order:A1:accepted", ann)
	customer := `<img src=x onerror=alert(1)> "Bob" & <script>steal()</script>`
	n.Text = "<b>Order A1 accepted</b>\nHello, " + notify.EscapeHTML(customer) + "!\n<a href=\"https://shop.test/o/A1\">Track it</a>"
	adm := &admission{}
	o := send(t, ch, n, adm)
	wantID := "<" + email.MessageID(n.Key, "shop.test") + ">"
	if o.Kind != delivery.Delivered || o.ProviderID != wantID {
		t.Fatalf("got %s %q (%s), want delivered with provider id %s", o.Kind, o.ProviderID, o.Description, wantID)
	}
	if got := adm.calls.Load(); got != 1 {
		t.Errorf("Admit was called %d times, want 1", got)
	}
	msgs := mp.WaitForMessages(1, wait)
	if len(msgs) != 1 {
		t.Fatalf("got %d messages, want 1", len(msgs))
	}
	m := mp.Message(msgs[0].ID)
	if m.From.Address != "noreply@shop.test" || m.From.Name != "Shop" || m.ReturnPath != "noreply@shop.test" {
		t.Errorf("got From %+v, return path %q; want Shop <noreply@shop.test> and noreply@shop.test", m.From, m.ReturnPath)
	}
	if len(m.To) != 1 || m.To[0].Address != ann {
		t.Errorf("got To %+v, want %s", m.To, ann)
	}
	if m.Subject != "Order A1 accepted" {
		t.Errorf("got subject %q, want the first line of the text without markup", m.Subject)
	}
	if "<"+m.MessageID+">" != wantID {
		t.Errorf("got Message-ID %q, want %s", m.MessageID, wantID)
	}
	if got := m.Headers["Auto-Submitted"]; len(got) != 1 || got[0] != "auto-generated" {
		t.Errorf("got Auto-Submitted %v, want auto-generated", got)
	}
	if !strings.Contains(m.HTML, "<b>Order A1 accepted</b>") || !strings.Contains(m.HTML, `<a href="https://shop.test/o/A1">Track it</a>`) {
		t.Errorf("HTML part lacks the formatting or the link:\n%s", m.HTML)
	}
	for _, bad := range []string{"<img", "<script", "onerror=alert(1)>"} {
		if strings.Contains(m.HTML, bad) {
			t.Errorf("HTML part contains %q from the customer's name:\n%s", bad, m.HTML)
		}
	}
	if !strings.Contains(m.HTML, "&lt;script&gt;") {
		t.Errorf("HTML part does not show the name escaped:\n%s", m.HTML)
	}
	if !strings.Contains(m.Text, "Order A1 accepted") || !strings.Contains(m.Text, "Hello, "+customer+"!") ||
		!strings.Contains(m.Text, "Track it (https://shop.test/o/A1)") || strings.Contains(m.Text, "<b>") {
		t.Errorf("text part is not the plain text:\n%s", m.Text)
	}
	if !strings.Contains(m.Raw, "multipart/alternative") {
		t.Errorf("the message is not multipart/alternative:\n%s", m.Raw)
	}
}

// The buttons and the photo of a notification reach the mailbox as links
// and an image in the HTML part and as lines in the text part.
func TestSendRich(t *testing.T) {
	mp := mailpittest.Start(t, mailpittest.Options{})
	ch := channel(t, mp, nil)
	n := notification("order:A3:shipped", ann)
	n.Text, n.ParseMode = "<b>Order A3 shipped</b>", notify.ParseModeHTML
	n.Photo = "https://cdn.shop.test/A3.jpg"
	n.Buttons = [][]notify.Button{{{Text: "Track order", URL: "https://shop.test/o/A3"}, {Text: "Bot", URL: "tg://resolve?domain=shop_bot"}}}
	if o := send(t, ch, n, nil); o.Kind != delivery.Delivered {
		t.Fatalf("got %s (%s), want delivered", o.Kind, o.Description)
	}
	m := mp.Message(mp.WaitForMessages(1, wait)[0].ID)
	if m.Subject != "Order A3 shipped" || !strings.Contains(m.HTML, `<img src="https://cdn.shop.test/A3.jpg"`) ||
		!strings.Contains(m.HTML, `<a href="https://shop.test/o/A3" style=`) || !strings.Contains(m.HTML, ">Track order</a>") || strings.Contains(m.HTML, "tg://") {
		t.Errorf("subject %q, HTML part:\n%s", m.Subject, m.HTML)
	}
	if !strings.Contains(m.Text, "Track order: https://shop.test/o/A3") || !strings.Contains(m.Text, "https://cdn.shop.test/A3.jpg") {
		t.Errorf("text part:\n%s", m.Text)
	}
}

func TestSendUsesTheNotificationSubject(t *testing.T) {
	mp := mailpittest.Start(t, mailpittest.Options{})
	ch := channel(t, mp, nil)
	n := notification("order:A2:shipped", ann)
	n.Subject = "Ваш заказ A2 отправлен"
	n.Text, n.ParseMode = "Plain <text> & more", notify.ParseModeNone
	if o := send(t, ch, n, nil); o.Kind != delivery.Delivered {
		t.Fatalf("got %s (%s), want delivered", o.Kind, o.Description)
	}
	m := mp.Message(mp.WaitForMessages(1, wait)[0].ID)
	if m.Subject != n.Subject {
		t.Errorf("got subject %q, want %q", m.Subject, n.Subject)
	}
	if !strings.Contains(m.HTML, "Plain &lt;text&gt; &amp; more") || !strings.Contains(m.Text, "Plain <text> & more") {
		t.Errorf("got HTML %q and text %q, want the plain text escaped and as is", m.HTML, m.Text)
	}
}

func TestRecipientOutsideAllowedHardBounces(t *testing.T) {
	mp := mailpittest.Start(t, mailpittest.Options{AllowedRecipients: `@example\.com$`})
	ch := channel(t, mp, nil)
	n := notification("order:A3:accepted", "bob@elsewhere.test")
	o := send(t, ch, n, nil)
	if o.Kind != delivery.RecipientDead || o.Reason != email.ReasonHardBounce || o.Code != 550 {
		t.Fatalf("got %s/%s %d (%s), want recipient_dead/hard_bounce 550", o.Kind, o.Reason, o.Code, o.Description)
	}
	noAddress(t, "the description", o.Description)
	if want := "smtp rcpt_to: 550 5.1.0 Requested action not taken: mailbox unavailable"; o.Description != want {
		t.Errorf("got description %q, want %q", o.Description, want)
	}
	if got := mp.Messages(); len(got) != 0 {
		t.Errorf("Mailpit received %d messages, want 0", len(got))
	}
}

func TestChaosRepliesAreClassified(t *testing.T) {
	mp := mailpittest.Start(t, mailpittest.Options{Chaos: true})
	ch := channel(t, mp, nil)
	tests := []struct {
		name   string
		chaos  mailpittest.Chaos
		kind   delivery.OutcomeKind
		reason string
		code   int
	}{
		{"451 to RCPT TO", mailpittest.Chaos{Recipient: mailpittest.Trigger{ErrorCode: 451, Probability: 100}}, delivery.Transient, email.ReasonTemporary, 451},
		{"452 to RCPT TO", mailpittest.Chaos{Recipient: mailpittest.Trigger{ErrorCode: 452, Probability: 100}}, delivery.Transient, email.ReasonTemporary, 452},
		{"421 to MAIL FROM", mailpittest.Chaos{Sender: mailpittest.Trigger{ErrorCode: 421, Probability: 100}}, delivery.Transient, email.ReasonTemporary, 421},
		{"550 to RCPT TO", mailpittest.Chaos{Recipient: mailpittest.Trigger{ErrorCode: 550, Probability: 100}}, delivery.RecipientDead, email.ReasonHardBounce, 550},
		{"553 to RCPT TO", mailpittest.Chaos{Recipient: mailpittest.Trigger{ErrorCode: 553, Probability: 100}}, delivery.RecipientDead, email.ReasonInvalidAddress, 553},
		{"554 to RCPT TO", mailpittest.Chaos{Recipient: mailpittest.Trigger{ErrorCode: 554, Probability: 100}}, delivery.Rejected, email.ReasonRejected, 554},
		{"550 to MAIL FROM", mailpittest.Chaos{Sender: mailpittest.Trigger{ErrorCode: 550, Probability: 100}}, delivery.Halt, email.ReasonSenderRefused, 550},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mp.SetChaos(tt.chaos)
			adm := &admission{}
			o := send(t, ch, notification("order:chaos:"+tt.name[:3], ann), adm)
			if o.Kind != tt.kind || o.Reason != tt.reason || o.Code != tt.code {
				t.Errorf("got %s/%s %d (%s), want %s/%s %d", o.Kind, o.Reason, o.Code, o.Description, tt.kind, tt.reason, tt.code)
			}
			if o.MaybeDelivered {
				t.Error("MaybeDelivered is set for a refusal before the data")
			}
			if adm.calls.Load() != 1 {
				t.Errorf("Admit was called %d times, want 1", adm.calls.Load())
			}
			noAddress(t, "the description", o.Description)
		})
	}
	mp.SetChaos(mailpittest.Chaos{})
	if got := mp.Messages(); len(got) != 0 {
		t.Errorf("Mailpit received %d messages, want 0", len(got))
	}
	if o := send(t, ch, notification("order:chaos:off", ann), nil); o.Kind != delivery.Delivered {
		t.Errorf("got %s (%s) with the triggers off, want delivered", o.Kind, o.Description)
	}
}

func TestServerGoneIsTransient(t *testing.T) {
	mp := mailpittest.Start(t, mailpittest.Options{})
	ch := channel(t, mp, nil)
	mp.Stop()
	adm := &admission{}
	o := send(t, ch, notification("order:A4:accepted", ann), adm)
	if o.Kind != delivery.Transient || o.Reason != email.ReasonNetwork || o.MaybeDelivered {
		t.Fatalf("got %s/%s maybe=%v (%s), want transient/network, not maybe delivered", o.Kind, o.Reason, o.MaybeDelivered, o.Description)
	}
	if adm.calls.Load() != 1 {
		t.Errorf("Admit was called %d times, want 1: the engine counts the failure toward the breaker only with a ticket", adm.calls.Load())
	}
	if err := ch.Probe(context.Background()); err == nil {
		t.Error("Probe succeeded with the server gone")
	}
}

func TestRefusedAdmissionSendsNothing(t *testing.T) {
	mp := mailpittest.Start(t, mailpittest.Options{})
	ch := channel(t, mp, nil)
	refusal := &delivery.NotAdmittedError{Reason: "breaker open"}
	adm := &admission{err: refusal}
	o := send(t, ch, notification("order:A5:accepted", ann), adm)
	if o.Kind != delivery.NotSent || !strings.Contains(o.Description, "breaker open") {
		t.Fatalf("got %s (%s), want not_sent with the refusal", o.Kind, o.Description)
	}
	if adm.calls.Load() != 1 {
		t.Errorf("Admit was called %d times, want 1", adm.calls.Load())
	}
	// A message sent after the refused one arrives alone: the refused one
	// never started a transaction.
	if o := send(t, ch, notification("order:A5:paid", ann), nil); o.Kind != delivery.Delivered {
		t.Fatalf("got %s (%s), want delivered", o.Kind, o.Description)
	}
	msgs := mp.WaitForMessages(1, wait)
	if len(msgs) != 1 || !strings.HasPrefix(msgs[0].MessageID, "order.A5.paid.") {
		t.Errorf("got %+v, want only order:A5:paid", msgs)
	}
}

func TestRefusedAdmissionAfterAFailedSessionIsNotSent(t *testing.T) {
	mp := mailpittest.Start(t, mailpittest.Options{})
	ch := channel(t, mp, nil)
	mp.Stop()
	o := send(t, ch, notification("order:A6:accepted", ann), &admission{err: &delivery.NotAdmittedError{Reason: "halted"}})
	if o.Kind != delivery.NotSent {
		t.Errorf("got %s (%s), want not_sent", o.Kind, o.Description)
	}
}

func TestCanceledSendIsCanceled(t *testing.T) {
	mp := mailpittest.Start(t, mailpittest.Options{})
	ch := channel(t, mp, nil)
	n := notification("order:A7:accepted", ann)
	token, _ := ch.Recipient(n)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	o := ch.Send(ctx, delivery.NewAttempt(n, token, nil))
	if o.Kind != delivery.Canceled || o.MaybeDelivered {
		t.Errorf("got %s maybe=%v (%s), want canceled, not maybe delivered", o.Kind, o.MaybeDelivered, o.Description)
	}
}

func TestWrongRecipientTokenIsRejected(t *testing.T) {
	mp := mailpittest.Start(t, mailpittest.Options{})
	ch := channel(t, mp, nil)
	o := ch.Send(context.Background(), delivery.NewAttempt(notification("k1", ann), "e0000", nil))
	if o.Kind != delivery.Rejected || o.Reason != email.ReasonBadRecipient {
		t.Errorf("got %s/%s, want rejected/bad_recipient", o.Kind, o.Reason)
	}
	noAddress(t, "the description", o.Description)
}

func TestTLSModes(t *testing.T) {
	creds := map[string]string{"shop": "s3cret-pass"}
	starttls := mailpittest.Start(t, mailpittest.Options{TLS: mailpittest.TLSStartTLS, Credentials: creds})
	implicit := mailpittest.Start(t, mailpittest.Options{TLS: mailpittest.TLSImplicit, Credentials: creds})
	plain := mailpittest.Start(t, mailpittest.Options{})
	trust := func(mp *mailpittest.Server) *tls.Config { return &tls.Config{RootCAs: mp.CertPool} }

	t.Run("starttls with credentials delivers", func(t *testing.T) {
		ch := channel(t, starttls, func(c *email.Config) {
			c.TLS, c.TLSConfig, c.Username, c.Password = email.TLSStartTLS, trust(starttls), "shop", "s3cret-pass"
		})
		if o := send(t, ch, notification("tls:1", ann), nil); o.Kind != delivery.Delivered {
			t.Fatalf("got %s (%s), want delivered", o.Kind, o.Description)
		}
		if err := ch.Probe(context.Background()); err != nil {
			t.Errorf("Probe: %v, want nil", err)
		}
		starttls.WaitForMessages(1, wait)
	})
	t.Run("implicit tls with credentials delivers", func(t *testing.T) {
		ch := channel(t, implicit, func(c *email.Config) {
			c.TLS, c.TLSConfig, c.Username, c.Password = email.TLSImplicit, trust(implicit), "shop", "s3cret-pass"
		})
		if o := send(t, ch, notification("tls:2", ann), nil); o.Kind != delivery.Delivered {
			t.Fatalf("got %s (%s), want delivered", o.Kind, o.Description)
		}
		implicit.WaitForMessages(1, wait)
	})
	t.Run("wrong password halts", func(t *testing.T) {
		ch := channel(t, starttls, func(c *email.Config) {
			c.TLS, c.TLSConfig, c.Username, c.Password = email.TLSStartTLS, trust(starttls), "shop", "wrong-pass"
		})
		o := send(t, ch, notification("tls:3", ann), nil)
		if o.Kind != delivery.Halt || o.Reason != email.ReasonAuth || o.Code != 535 {
			t.Errorf("got %s/%s %d (%s), want halt/auth 535", o.Kind, o.Reason, o.Code, o.Description)
		}
		err := ch.Probe(context.Background())
		if !errors.Is(err, email.ErrAuth) {
			t.Errorf("Probe: got %v, want ErrAuth", err)
		}
		if err != nil && strings.Contains(err.Error(), "wrong-pass") || strings.Contains(o.Description, "wrong-pass") {
			t.Errorf("the password shows in %q / %q", err, o.Description)
		}
	})
	t.Run("no credentials where required halts", func(t *testing.T) {
		ch := channel(t, starttls, func(c *email.Config) { c.TLS, c.TLSConfig = email.TLSStartTLS, trust(starttls) })
		o := send(t, ch, notification("tls:4", ann), nil)
		if o.Kind != delivery.Halt || o.Reason != email.ReasonAuth || o.Code != 530 {
			t.Errorf("got %s/%s %d (%s), want halt/auth 530", o.Kind, o.Reason, o.Code, o.Description)
		}
	})
	t.Run("untrusted certificate halts", func(t *testing.T) {
		ch := channel(t, starttls, func(c *email.Config) { c.TLS, c.Username, c.Password = email.TLSStartTLS, "shop", "s3cret-pass" })
		o := send(t, ch, notification("tls:5", ann), nil)
		if o.Kind != delivery.Halt || o.Reason != email.ReasonTLS || !strings.Contains(o.Description, "certificate") {
			t.Errorf("got %s/%s (%s), want halt/tls naming the certificate", o.Kind, o.Reason, o.Description)
		}
		if err := ch.Probe(context.Background()); !errors.Is(err, email.ErrTLS) {
			t.Errorf("Probe: got %v, want ErrTLS", err)
		}
	})
	t.Run("starttls to a server without it halts", func(t *testing.T) {
		ch := channel(t, plain, func(c *email.Config) { c.TLS = email.TLSStartTLS })
		o := send(t, ch, notification("tls:6", ann), nil)
		if o.Kind != delivery.Halt || o.Reason != email.ReasonTLS || !strings.Contains(o.Description, "does not offer STARTTLS") {
			t.Errorf("got %s/%s (%s), want halt/tls saying the server does not offer STARTTLS", o.Kind, o.Reason, o.Description)
		}
	})
	t.Run("implicit tls to a plain server halts", func(t *testing.T) {
		ch := channel(t, plain, func(c *email.Config) { c.TLS = email.TLSImplicit })
		o := send(t, ch, notification("tls:7", ann), nil)
		if o.Kind != delivery.Halt || o.Reason != email.ReasonTLS || !strings.Contains(o.Description, "does not speak TLS") {
			t.Errorf("got %s/%s (%s), want halt/tls saying the server does not speak TLS", o.Kind, o.Reason, o.Description)
		}
	})
	t.Run("plain to an implicit tls server times out with a hint", func(t *testing.T) {
		ch := channel(t, implicit, func(c *email.Config) { c.Timeout = time.Second })
		o := send(t, ch, notification("tls:8", ann), nil)
		if o.Kind != delivery.Transient || o.Reason != email.ReasonTimeout || !strings.Contains(o.Description, "TLS on connect") {
			t.Errorf("got %s/%s (%s), want transient/timeout hinting at TLS on connect", o.Kind, o.Reason, o.Description)
		}
	})
	if got := len(plain.Messages()); got != 0 {
		t.Errorf("the plain server received %d messages, want 0", got)
	}
}

func TestProbeSendsNothing(t *testing.T) {
	mp := mailpittest.Start(t, mailpittest.Options{Chaos: true})
	ch := channel(t, mp, nil)
	if err := ch.Probe(context.Background()); err != nil {
		t.Fatalf("Probe: %v", err)
	}
	mp.SetChaos(mailpittest.Chaos{Sender: mailpittest.Trigger{ErrorCode: 550, Probability: 100}})
	err := ch.Probe(context.Background())
	var e *email.Error
	if !errors.As(err, &e) || e.Stage != email.StageMailFrom || e.Code != 550 || !errors.Is(err, email.ErrPermanent) {
		t.Errorf("Probe: got %v, want a 550 at MAIL FROM", err)
	}
	if got := len(mp.Messages()); got != 0 {
		t.Errorf("Mailpit received %d messages from probes, want 0", got)
	}
}
