package mailpittest_test

import (
	"crypto/tls"
	"errors"
	"net/smtp"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/mailpittest"
)

const msg = "From: shop@shop.test\r\nTo: ann@example.com\r\nSubject: hello\r\nMessage-ID: <k1@shop.test>\r\n\r\nhi there\r\n"

func TestReceivesAndDeletes(t *testing.T) {
	s := mailpittest.Start(t, mailpittest.Options{})
	if err := smtp.SendMail(s.SMTPAddr, nil, "shop@shop.test", []string{"ann@example.com"}, []byte(msg)); err != nil {
		t.Fatalf("sending: %v", err)
	}
	got := s.WaitForMessages(1, 10*time.Second)
	if len(got) != 1 || got[0].MessageID != "k1@shop.test" || got[0].Subject != "hello" {
		t.Fatalf("got %+v, want one message k1@shop.test with subject hello", got)
	}
	m := s.Message(got[0].ID)
	if m.ReturnPath != "shop@shop.test" || !strings.Contains(m.Text, "hi there") || m.Headers["Subject"][0] != "hello" {
		t.Errorf("got return path %q, text %q, headers %v; want shop@shop.test, hi there, Subject hello", m.ReturnPath, m.Text, m.Headers)
	}
	if !strings.Contains(m.Raw, "Message-ID: <k1@shop.test>") {
		t.Errorf("raw source lacks the Message-ID:\n%s", m.Raw)
	}
	s.DeleteAll()
	if got := s.Messages(); len(got) != 0 {
		t.Errorf("got %d messages after DeleteAll, want 0", len(got))
	}
}

func TestAllowedRecipientsAndChaos(t *testing.T) {
	s := mailpittest.Start(t, mailpittest.Options{AllowedRecipients: `@example\.com$`, Chaos: true})
	err := smtp.SendMail(s.SMTPAddr, nil, "shop@shop.test", []string{"bob@other.test"}, []byte(msg))
	var te *textproto.Error
	if !errors.As(err, &te) || te.Code != 550 {
		t.Errorf("got %v, want a 550 for a recipient outside the allowed pattern", err)
	}
	s.SetChaos(mailpittest.Chaos{Sender: mailpittest.Trigger{ErrorCode: 451, Probability: 100}})
	err = smtp.SendMail(s.SMTPAddr, nil, "shop@shop.test", []string{"ann@example.com"}, []byte(msg))
	if !errors.As(err, &te) || te.Code != 451 {
		t.Errorf("got %v, want the 451 of the chaos trigger", err)
	}
	s.SetChaos(mailpittest.Chaos{})
	if err := smtp.SendMail(s.SMTPAddr, nil, "shop@shop.test", []string{"ann@example.com"}, []byte(msg)); err != nil {
		t.Errorf("got %v after the triggers were turned off, want nil", err)
	}
}

func TestImplicitTLSWithCredentials(t *testing.T) {
	s := mailpittest.Start(t, mailpittest.Options{TLS: mailpittest.TLSImplicit, Credentials: map[string]string{"shop": "s3cret"}})
	conn, err := tls.Dial("tcp", s.SMTPAddr, &tls.Config{RootCAs: s.CertPool, ServerName: s.Host()})
	if err != nil {
		t.Fatalf("TLS dial with the server's pool: %v", err)
	}
	c, err := smtp.NewClient(conn, s.Host())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Auth(smtp.PlainAuth("", "shop", "wrong", s.Host())); err == nil {
		t.Error("got nil for wrong credentials, want an error")
	}
}
