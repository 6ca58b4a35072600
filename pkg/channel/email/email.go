package email

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/mail"
	"net/textproto"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	gomail "github.com/wneessen/go-mail"
	"github.com/wneessen/go-mail/smtp"
	"golang.org/x/time/rate"

	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

// Name is the channel's name: subjects notify.email.e<hash>, consumer
// email-worker.
const Name = "email"

// authPreference is the order SMTP AUTH mechanisms are chosen in, among
// those the server offers; go-mail falls back to SCRAM when it offers none
// of them.
var authPreference = []gomail.SMTPAuthType{gomail.SMTPAuthPlain, gomail.SMTPAuthLogin, gomail.SMTPAuthCramMD5}

// Channel sends notifications as email over SMTP.
//
// Each Send opens its own connection (connect, TLS, EHLO, AUTH), runs one
// mail transaction and says QUIT. A pool would save the handshakes, but a
// connection shared between sends carries one send's failure into the
// next (a broken connection, a server that stopped answering mid-way),
// and the limits keep the rate far below what the handshakes cost: at the
// default 5 messages a second the cost is a few TCP and TLS handshakes a
// second. Correctness first; a pool can come later behind the same
// interface.
type Channel struct {
	cfg      Config
	host     string
	port     int
	fromAddr string // the bare sender address, for MAIL FROM in Probe
	helo     string
	log      *slog.Logger
	now      func() time.Time
	dialer   net.Dialer
}

var _ delivery.Channel = (*Channel)(nil)

// Deps are the channel's dependencies; every field is optional.
type Deps struct {
	// Logger receives the channel's debug logs; default slog.Default().
	// Addresses never appear in them, only recipient tokens.
	Logger *slog.Logger
	// Now is the clock, for the Date header; default time.Now.
	Now func() time.Time
}

// New checks the configuration and returns the channel.
func New(cfg Config, d Deps) (*Channel, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	host, port, _ := net.SplitHostPort(cfg.Addr)
	p, _ := strconv.Atoi(port)
	from, _ := mail.ParseAddress(cfg.From)
	c := &Channel{cfg: cfg, host: host, port: p, fromAddr: from.Address, helo: cfg.HELO, log: d.Logger, now: d.Now}
	if c.helo == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			h = "localhost"
		}
		c.helo = h
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	c.log = c.log.With("component", "email")
	if c.now == nil {
		c.now = time.Now
	}
	return c, nil
}

// Name returns "email".
func (c *Channel) Name() string { return Name }

// Config returns the settings in force, defaults filled in.
func (c *Channel) Config() Config { return c.cfg }

// Limits are Rate messages a second for the channel and RecipientPerMinute
// a minute for one address.
func (c *Channel) Limits() delivery.Limits {
	per := rate.Limit(c.cfg.RecipientPerMinute / 60)
	return delivery.Limits{
		Rate:          rate.Limit(c.cfg.Rate),
		RecipientRate: func(string) rate.Limit { return per },
	}
}

// Recipient returns the notification's email token: e followed by the hash
// of the lower-cased address (notify.Notification.Recipient), never the
// address.
func (c *Channel) Recipient(n notify.Notification) (string, error) {
	return n.Recipient(notify.ChannelEmail)
}

// Send sends the notification to its email address and classifies the
// server's answer (see [Classify]).
//
// It connects, sets up TLS, greets (EHLO) and authenticates, then calls
// a.Admit immediately before the mail transaction's first command, MAIL
// FROM: nothing of the message has left the process before admission, and
// a refused attempt returns NotSent after a QUIT. A session that fails
// before that point (connection refused, TLS, AUTH) sent no message either,
// but its failure tells about the server: Send asks Admit then, so the
// engine counts the failure toward the circuit breaker and, for a halt,
// stops sending; if admission refuses at that point the outcome is NotSent.
//
// An accepted message is Delivered with its Message-ID (in angle brackets)
// as the provider id. A send cut short by ctx is Canceled, MaybeDelivered
// when it was waiting for the reply to the final dot.
func (c *Channel) Send(ctx context.Context, a *delivery.Attempt) delivery.Outcome {
	n := a.Notification
	token, err := c.Recipient(n)
	if err != nil || token != a.Recipient {
		return delivery.Outcome{Kind: delivery.Rejected, Reason: ReasonBadRecipient,
			Description: fmt.Sprintf("recipient %q is not the notification's email address (%s)", a.Recipient, token)}
	}
	msg, id, err := c.build(n, n.Email, c.now())
	if err != nil {
		if errors.Is(err, errBadAddress) {
			return delivery.Outcome{Kind: delivery.RecipientDead, Reason: ReasonInvalidAddress,
				Description: "the address of " + token + " is not one go-mail accepts"}
		}
		return Classify(errorf(StageMessage, nil, "building the message: %v", err))
	}
	r := redactor{addr: n.Email, token: token, keep: []string{c.fromAddr, id[1 : len(id)-1]}}

	// The engine raises the attempt's timeout while the server answers
	// slowly; the configured one is the floor.
	timeout := max(c.cfg.Timeout, a.Timeout)
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	s, err := c.connect(sctx)
	if err != nil {
		if ctx.Err() != nil {
			return delivery.Outcome{Kind: delivery.Canceled, Reason: ReasonCanceled, Description: "stopped while connecting"}
		}
		o := Classify(c.sessionError(err, sctx.Err() != nil, s.noGreeting()))
		o.Description = r.redact(o.Description)
		if aerr := a.Admit(); aerr != nil {
			return notAdmitted(aerr)
		}
		c.log.Debug("session failed", "recipient", token, "outcome", o.Kind.String(), "reason", o.Reason, "code", o.Code)
		return o
	}
	defer s.close()
	if err := a.Admit(); err != nil {
		s.quit()
		return notAdmitted(err)
	}
	err = s.client.SendWithSMTPClient(s.smtp, msg)
	if err == nil || msg.IsDelivered() {
		// IsDelivered: the server accepted the data; a failure after it
		// (there is no RSET here) does not undo that.
		s.quit()
		c.log.Debug("delivered", "recipient", token, "message_id", id)
		return delivery.Outcome{Kind: delivery.Delivered, ProviderID: id}
	}
	e := sendError(err, r, sctx.Err() != nil, timeout)
	if ctx.Err() != nil {
		return delivery.Outcome{Kind: delivery.Canceled, Reason: ReasonCanceled, Description: e.Error(),
			MaybeDelivered: e.Stage == StageDataEnd && e.Code == 0}
	}
	o := Classify(e)
	if o.Kind != delivery.Transient || e.Code != 0 {
		s.quit()
	}
	c.log.Debug("send failed", "recipient", token, "outcome", o.Kind.String(), "reason", o.Reason, "code", o.Code, "stage", e.Stage.String())
	return o
}

func notAdmitted(err error) delivery.Outcome {
	return delivery.Outcome{Kind: delivery.NotSent, Reason: ReasonNotAdmitted, Description: err.Error()}
}

// Probe connects, sets up TLS, greets and authenticates as Send does, then
// checks that the server accepts the sender with MAIL FROM and abandons the
// transaction with RSET: nothing is sent. The engine calls it while
// sending is halted. Its error is an [*Error] (errors.Is [ErrAuth], [ErrTLS],
// [ErrPermanent], ...).
func (c *Channel) Probe(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	s, err := c.connect(sctx)
	if err != nil {
		return c.sessionError(err, sctx.Err() != nil, s.noGreeting())
	}
	defer s.close()
	if err := s.smtp.Mail("<" + c.fromAddr + ">"); err != nil {
		return replyError(StageMailFrom, err, sctx.Err() != nil)
	}
	if err := s.smtp.Reset(); err != nil {
		return replyError(StageMailFrom, err, sctx.Err() != nil)
	}
	s.quit()
	return nil
}

// replyError turns a command's error into an *Error.
func replyError(stage Stage, err error, timedOut bool) *Error {
	var te *textproto.Error
	if errors.As(err, &te) {
		enh, text := splitReply(te.Msg)
		return &Error{Stage: stage, Code: te.Code, EnhancedCode: enh, Text: oneLine(text)}
	}
	var ne net.Error
	e := errorf(stage, err, "%v", err)
	e.Timeout = timedOut || errors.As(err, &ne) && ne.Timeout()
	return e
}

// session is one SMTP connection of one send or probe.
type session struct {
	client *gomail.Client
	smtp   *smtp.Client
	stop   func() bool // unregisters the close on context end

	mu     sync.Mutex
	raw    net.Conn // the TCP connection under any TLS
	closed bool
	read   atomic.Int64
}

// connect opens a session: TCP, TLS (implicit or STARTTLS), EHLO, AUTH.
// The connection is closed when ctx ends, which cuts short whatever the
// session is doing. On error the returned session is closed, and tells
// whether the server sent anything.
func (c *Channel) connect(ctx context.Context) (*session, error) {
	s := &session{}
	s.stop = context.AfterFunc(ctx, s.closeConn)
	opts := []gomail.Option{
		gomail.WithPort(c.port),
		gomail.WithTimeout(c.cfg.Timeout),
		gomail.WithHELO(c.helo),
		gomail.WithDialContextFunc(func(ctx context.Context, _, _ string) (net.Conn, error) { return c.dial(ctx, s) }),
		gomail.WithTLSConfig(c.tlsConfig()),
		gomail.WithoutNoop(), // a fresh connection: nothing to check
		gomail.WithoutRset(), // one message per connection
	}
	switch c.cfg.TLS {
	case TLSStartTLS:
		opts = append(opts, gomail.WithTLSPolicy(gomail.TLSMandatory))
	default: // implicit TLS is done by dial; none is none
		opts = append(opts, gomail.WithTLSPolicy(gomail.NoTLS))
	}
	if c.cfg.Username != "" {
		opts = append(opts, gomail.WithOpportunisticSMTPAuth(authPreference...),
			gomail.WithUsername(c.cfg.Username), gomail.WithPassword(c.cfg.Password))
	}
	client, err := gomail.NewClient(c.host, opts...)
	if err != nil {
		s.close()
		return s, err
	}
	s.client = client
	sc, err := client.DialToSMTPClientWithContext(ctx)
	if err != nil {
		s.close()
		return s, err
	}
	s.smtp = sc
	return s, nil
}

// tlsConfig is the TLS configuration of a connection.
func (c *Channel) tlsConfig() *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.cfg.TLSConfig != nil {
		cfg = c.cfg.TLSConfig.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName = c.host
	}
	return cfg
}

// dial connects to the server, with the TLS handshake first in implicit TLS
// mode, and keeps the TCP connection in s so that it can be closed from
// outside.
func (c *Channel) dial(ctx context.Context, s *session) (net.Conn, error) {
	raw, err := c.dialer.DialContext(ctx, "tcp", c.cfg.Addr)
	if err != nil {
		return nil, err
	}
	counted := &countingConn{Conn: raw, read: &s.read}
	if !s.setConn(raw) {
		return nil, ctx.Err()
	}
	if c.cfg.TLS != TLSImplicit {
		return counted, nil
	}
	tc := tls.Client(counted, c.tlsConfig())
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, err
	}
	return tc, nil
}

// setConn records the connection; it reports false (and closes it) when
// the session was closed meanwhile.
func (s *session) setConn(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return false
	}
	s.raw = c
	return true
}

// closeConn closes the TCP connection at once: any read or write in
// progress fails.
func (s *session) closeConn() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.raw != nil {
		s.raw.Close()
	}
}

// quitTimeout bounds the wait for the reply to QUIT: a delivered message
// is recorded only after it.
const quitTimeout = time.Second

// quit ends the session politely (QUIT); the connection is closed anyway.
func (s *session) quit() {
	if s.smtp != nil && s.smtp.UpdateDeadline(quitTimeout) == nil {
		_ = s.smtp.Quit()
	}
	s.close()
}

// close releases the session.
func (s *session) close() {
	s.stop()
	s.closeConn()
}

// noGreeting reports whether the server sent nothing at all.
func (s *session) noGreeting() bool { return s == nil || s.read.Load() == 0 }

// countingConn counts the bytes read from the server.
type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}
