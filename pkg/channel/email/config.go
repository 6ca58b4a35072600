package email

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"strconv"
	"strings"
	"time"

	"github.com/tgnotify/tgnotify/pkg/delivery"
)

// TLSMode is how the connection to the SMTP server is encrypted.
type TLSMode string

// The TLS modes. Names are what a configuration file or flag says.
const (
	// TLSStartTLS connects in plain text and upgrades with STARTTLS
	// before anything else is sent (RFC 3207); a server that does not
	// offer STARTTLS is refused. The submission port, 587.
	TLSStartTLS TLSMode = "starttls"
	// TLSImplicit speaks TLS from the first byte (RFC 8314 "implicit
	// TLS"), the submissions port, 465.
	TLSImplicit TLSMode = "tls"
	// TLSNone sends everything in clear. Only for a relay on the same
	// host or a test server; credentials are refused with it unless the
	// server is on the loopback interface.
	TLSNone TLSMode = "none"
)

// Defaults of [Config].
const (
	// DefaultTLS is the TLS mode when none is set.
	DefaultTLS = TLSStartTLS
	// DefaultTimeout bounds one send: connect, TLS, EHLO, AUTH, the mail
	// transaction and QUIT.
	DefaultTimeout = 30 * time.Second
	// DefaultRate is the channel-wide rate, messages per second. It is
	// deliberately low: submission services start new senders at a few
	// messages per second (Amazon SES's sandbox allows 1/s, a new
	// production account 14/s; Gmail and Microsoft 365 mailboxes allow a
	// few thousand a day), and exceeding them earns 421/451 deferrals or a
	// blocked account. Raise it to what your provider grants.
	DefaultRate = 5
	// DefaultRecipientPerMinute is one recipient's rate, messages per
	// minute: one every 5 seconds. Receiving servers defer bursts to one
	// mailbox (Gmail's 421 4.7.28 "unusual rate"), and order notifications
	// to one customer are a few a day.
	DefaultRecipientPerMinute = 12
)

// Config are the email channel's settings. Zero values take the defaults
// above; Addr and From are required.
type Config struct {
	// Addr is the SMTP server, host:port: usually port 587 with starttls,
	// 465 with tls, 25 for a local relay.
	Addr string
	// TLS is starttls (default), tls or none.
	TLS TLSMode
	// TLSConfig, when set, is cloned for the connection: RootCAs for a
	// private CA, a client certificate. ServerName defaults to Addr's host.
	TLSConfig *tls.Config
	// Username and Password authenticate with SMTP AUTH (PLAIN, LOGIN or
	// CRAM-MD5, whichever the server offers first in that order, else
	// SCRAM). Both or neither.
	Username, Password string
	// From is the sender, as in "Shop <noreply@shop.example>" or a bare
	// address. It is also the envelope sender (MAIL FROM), where bounces
	// go.
	From string
	// MessageIDDomain is the right-hand side of every Message-ID. Default:
	// From's domain.
	MessageIDDomain string
	// HELO is the name the channel gives itself in EHLO. Default: the
	// machine's host name.
	HELO string
	// Timeout bounds one send, from connect to QUIT. Default 30s.
	Timeout time.Duration
	// Rate is the channel-wide rate, messages per second. Default 5.
	Rate float64
	// RecipientPerMinute is one recipient's rate, messages per minute.
	// Default 12.
	RecipientPerMinute float64
}

func (c Config) withDefaults() Config {
	if c.TLS == "" {
		c.TLS = DefaultTLS
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Rate == 0 {
		c.Rate = DefaultRate
	}
	if c.RecipientPerMinute == 0 {
		c.RecipientPerMinute = DefaultRecipientPerMinute
	}
	if c.MessageIDDomain == "" {
		if a, err := mail.ParseAddress(c.From); err == nil {
			_, c.MessageIDDomain, _ = strings.Cut(a.Address, "@")
		}
	}
	return c
}

// Validate reports every invalid setting as a [*delivery.FieldError] naming
// its Config field. The password is never part of an error.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	check := func(ok bool, field string, v any, problem string) {
		if !ok {
			errs = append(errs, &delivery.FieldError{Field: field, Value: v, Problem: problem})
		}
	}
	host, port, err := net.SplitHostPort(c.Addr)
	p, perr := strconv.Atoi(port)
	check(c.Addr != "", "Addr", `""`, "required: the SMTP server as host:port")
	check(c.Addr == "" || err == nil && host != "" && perr == nil && p > 0 && p < 65536, "Addr", strconv.Quote(c.Addr),
		"must be host:port, such as smtp.example.com:587")
	switch c.TLS {
	case TLSStartTLS, TLSImplicit, TLSNone:
	default:
		check(false, "TLS", strconv.Quote(string(c.TLS)), fmt.Sprintf("unknown mode (want %s, %s or %s)", TLSStartTLS, TLSImplicit, TLSNone))
	}
	check((c.Username == "") == (c.Password == ""), "Password", redacted(c.Password), "{Username} and {Password} go together: set both or neither")
	check(c.Username == "" || c.TLS != TLSNone || loopback(host), "TLS", string(c.TLS),
		fmt.Sprintf("would send {Password} in clear to %s: use starttls or tls (none allows credentials only to localhost, 127.0.0.1 or ::1)", host))
	from, ferr := mail.ParseAddress(c.From)
	check(c.From != "", "From", `""`, "required: the sender, such as Shop <noreply@shop.example>")
	check(c.From == "" || ferr == nil, "From", strconv.Quote(c.From), "is not an address such as Shop <noreply@shop.example>")
	if ferr == nil {
		_, fromDomain, _ := strings.Cut(from.Address, "@")
		check(validDomain(fromDomain), "From", strconv.Quote(c.From), "must have a domain such as shop.example")
	}
	check(c.MessageIDDomain == "" || validDomain(c.MessageIDDomain), "MessageIDDomain", strconv.Quote(c.MessageIDDomain),
		"must be a domain name such as shop.example")
	check(!strings.ContainsAny(c.HELO, " \t\r\n<>"), "HELO", strconv.Quote(c.HELO), "must be a host name")
	check(c.Timeout > 0, "Timeout", c.Timeout, "must be positive")
	check(c.Rate > 0, "Rate", c.Rate, "must be positive")
	check(c.RecipientPerMinute > 0, "RecipientPerMinute", c.RecipientPerMinute, "must be positive")
	return errors.Join(errs...)
}

// redacted stands for a secret in an error.
func redacted(secret string) string {
	if secret == "" {
		return `""`
	}
	return "[redacted]"
}

// loopback reports whether host is one of the names go-mail (like net/smtp)
// allows plain-text authentication to.
func loopback(host string) bool {
	return host == "localhost" || host == "127.0.0.1" || host == "::1"
}

// validDomain reports whether d is a host name of letters, digits and
// hyphens in dot-separated labels: what a Message-ID's right-hand side and
// a sender's domain must be here.
func validDomain(d string) bool {
	if d == "" || len(d) > 253 {
		return false
	}
	for _, label := range strings.Split(d, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}
