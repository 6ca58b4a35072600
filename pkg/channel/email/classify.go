package email

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/textproto"
	"strconv"
	"strings"
	"time"
	"unicode"

	mail "github.com/wneessen/go-mail"
	"github.com/wneessen/go-mail/smtp"

	"github.com/tgnotify/tgnotify/pkg/delivery"
)

// Outcome reasons of the email channel (delivery.Outcome.Reason).
const (
	// ReasonHardBounce: the recipient's mailbox does not exist or is
	// disabled (550, 551, 5.1.x, 5.2.1). The recipient is dead.
	ReasonHardBounce = "hard_bounce"
	// ReasonInvalidAddress: the server refuses the address itself (553,
	// 501 at RCPT TO, 5.1.3). The recipient is dead.
	ReasonInvalidAddress = "invalid_address"
	// ReasonRejected: the server refuses this message for good (554, an
	// unknown 5xx). Dead-lettered; the recipient stays alive.
	ReasonRejected = "rejected"
	// ReasonTooBig: the message is too big (552 after DATA, 5.3.4, 5.2.3).
	ReasonTooBig = "too_big"
	// ReasonMailboxFull: the mailbox is over its quota (5.2.2 in a 5xx, or
	// 552 to RCPT TO).
	ReasonMailboxFull = "mailbox_full"
	// ReasonPolicy: a policy refused the message (5.7.x: spam, relaying
	// denied, DMARC).
	ReasonPolicy = "policy"
	// ReasonBadMessage: the message could not be built (a bug or a
	// payload no check caught).
	ReasonBadMessage = "bad_message"
	// ReasonBadRecipient: the attempt's recipient is not the
	// notification's email address.
	ReasonBadRecipient = "bad_recipient"
	// ReasonTemporary: a 4xx reply; retried.
	ReasonTemporary = "temporary"
	// ReasonNetwork: the connection failed or broke; retried.
	ReasonNetwork = "network"
	// ReasonTimeout: no answer within the timeout; retried.
	ReasonTimeout = "timeout"
	// ReasonAuth: authentication failed; sending halts until Probe
	// succeeds.
	ReasonAuth = "auth"
	// ReasonTLS: TLS could not be set up; sending halts.
	ReasonTLS = "tls"
	// ReasonRefused: the server refused the session (5xx greeting or
	// EHLO); sending halts.
	ReasonRefused = "refused"
	// ReasonSenderRefused: the server refused the sender (5xx to MAIL
	// FROM): every message would fail alike, so sending halts.
	ReasonSenderRefused = "sender_refused"
	// ReasonNotAdmitted: the engine did not admit the request; nothing
	// was sent.
	ReasonNotAdmitted = "not_admitted"
	// ReasonCanceled: the worker is stopping.
	ReasonCanceled = "canceled"
)

// authCodes are the replies that mean authentication is the problem (RFC
// 4954 §6: 530 authentication required, 534 mechanism too weak, 535
// credentials invalid, 538 encryption required for the mechanism; RFC 4954
// §4: 504 unrecognised mechanism).
var authCodes = map[int]bool{504: true, 530: true, 534: true, 535: true, 538: true}

// Classify maps a failed send to the engine's outcome. The table, with its
// sources (RFC 5321 §4.2 reply codes, RFC 3463 enhanced codes), is in
// docs/CHANNELS.md (Email):
//
//   - no reply: a TLS failure or an authentication that could not even
//     start halts; anything else (connection refused, reset, timeout) is
//     transient, and MaybeDelivered when it happened while waiting for the
//     reply to the final dot.
//   - 4xx anywhere: transient; so is 552 5.5.3 (too many recipients) at
//     RCPT TO, which RFC 5321 §4.5.3.1.10 says to treat as 452.
//   - 5xx before the mail transaction: halt (auth, tls, refused).
//   - 5xx to MAIL FROM: halt (sender_refused; auth for 530), 552 rejected.
//   - 5xx to RCPT TO or after the data: by the enhanced code when there is
//     one — 5.1.x and 5.2.1 recipient dead, 5.2.2 mailbox full, 5.3.4 and
//     5.2.3 too big, 5.7.x policy — else by the reply code: 550/551
//     recipient dead (hard_bounce), 553/501 recipient dead
//     (invalid_address), 552 mailbox full at RCPT TO and too big after the
//     data; any other 5xx rejected.
//
// Classify does not know about cancellation: Send reports a send cut short
// by its context as Canceled.
func Classify(e *Error) delivery.Outcome {
	if e == nil {
		return delivery.Outcome{Kind: delivery.Delivered}
	}
	o := delivery.Outcome{Code: e.Code, Description: e.Error()}
	set := func(k delivery.OutcomeKind, reason string) delivery.Outcome {
		o.Kind, o.Reason = k, reason
		return o
	}
	switch {
	case e.Code == 0:
		switch e.Stage {
		case StageMessage:
			return set(delivery.Rejected, ReasonBadMessage)
		case StageTLS:
			return set(delivery.Halt, ReasonTLS)
		case StageAuth:
			return set(delivery.Halt, ReasonAuth)
		case StageDataEnd:
			o.MaybeDelivered = true
		}
		if e.Timeout {
			return set(delivery.Transient, ReasonTimeout)
		}
		return set(delivery.Transient, ReasonNetwork)
	case e.Code/100 == 4:
		return set(delivery.Transient, ReasonTemporary)
	case e.Code/100 != 5:
		// A 1xx–3xx where a completion was expected: the server is
		// confused; try again.
		return set(delivery.Transient, ReasonTemporary)
	}
	// 5xx.
	switch e.Stage {
	case StageConnect:
		if authCodes[e.Code] {
			return set(delivery.Halt, ReasonAuth)
		}
		return set(delivery.Halt, ReasonRefused)
	case StageTLS:
		return set(delivery.Halt, ReasonTLS)
	case StageAuth:
		return set(delivery.Halt, ReasonAuth)
	case StageMailFrom:
		switch {
		case e.Code == 530:
			return set(delivery.Halt, ReasonAuth)
		case e.Code == 552:
			return set(delivery.Rejected, ReasonTooBig)
		}
		return set(delivery.Halt, ReasonSenderRefused)
	case StageRcptTo, StageData, StageDataEnd, StageContent:
		if e.Code == 530 {
			return set(delivery.Halt, ReasonAuth)
		}
		if e.Stage == StageRcptTo && e.EnhancedCode == "5.5.3" {
			// "Too many recipients": RFC 5321 §4.5.3.1.10 says to take
			// it as a 452.
			return set(delivery.Transient, ReasonTemporary)
		}
		return classifyPermanent(e, o)
	}
	o.Unrecognised = true
	return set(delivery.Rejected, ReasonRejected)
}

// classifyPermanent classifies a 5xx reply about the recipient or the
// message.
func classifyPermanent(e *Error, o delivery.Outcome) delivery.Outcome {
	set := func(k delivery.OutcomeKind, reason string) delivery.Outcome {
		o.Kind, o.Reason = k, reason
		return o
	}
	class, subject, detail := enhancedParts(e.EnhancedCode)
	if class == 5 {
		switch {
		case subject == 1 && (detail == 7 || detail == 8):
			// Bad sender's mailbox or system: ours.
			return set(delivery.Halt, ReasonSenderRefused)
		case subject == 1 && detail == 3:
			return set(delivery.RecipientDead, ReasonInvalidAddress)
		case subject == 1:
			return set(delivery.RecipientDead, ReasonHardBounce)
		case subject == 2 && detail == 1:
			return set(delivery.RecipientDead, ReasonHardBounce)
		case subject == 2 && detail == 2:
			return set(delivery.Rejected, ReasonMailboxFull)
		case subject == 2 && detail == 3, subject == 3 && detail == 4:
			return set(delivery.Rejected, ReasonTooBig)
		case subject == 7:
			return set(delivery.Rejected, ReasonPolicy)
		}
		// X.0.X (other) and the rest: the reply code says more.
	}
	switch {
	case e.Code == 552 && e.Stage == StageRcptTo:
		// Exceeded storage allocation, for our single recipient.
		return set(delivery.Rejected, ReasonMailboxFull)
	case e.Code == 552:
		return set(delivery.Rejected, ReasonTooBig)
	case e.Stage == StageRcptTo && (e.Code == 550 || e.Code == 551):
		return set(delivery.RecipientDead, ReasonHardBounce)
	case e.Stage == StageRcptTo && (e.Code == 553 || e.Code == 501):
		return set(delivery.RecipientDead, ReasonInvalidAddress)
	case e.Code == 554 || e.Code == 550:
		// 554 "transaction failed", or a 550 after the data without an
		// enhanced code: the message, not the mailbox (a spam filter, say).
		return set(delivery.Rejected, ReasonRejected)
	}
	o.Unrecognised = true
	return set(delivery.Rejected, ReasonRejected)
}

// sessionError turns what go-mail's dial returned (connect, TLS, EHLO,
// AUTH) into an *Error. noGreeting is set when not a byte came from the
// server.
func (c *Channel) sessionError(err error, timedOut, noGreeting bool) *Error {
	var te *textproto.Error
	if errors.As(err, &te) {
		enh, text := splitReply(te.Msg)
		e := &Error{Stage: StageConnect, Code: te.Code, EnhancedCode: enh, Text: oneLine(text)}
		if strings.HasPrefix(err.Error(), "SMTP AUTH failed") || authCodes[te.Code] {
			e.Stage = StageAuth
		}
		return e
	}
	var (
		certErr   *tls.CertificateVerificationError
		unknownCA x509.UnknownAuthorityError
		hostErr   x509.HostnameError
		invalid   x509.CertificateInvalidError
		recordErr tls.RecordHeaderError
		alert     tls.AlertError
	)
	switch {
	case errors.As(err, &certErr), errors.As(err, &unknownCA), errors.As(err, &hostErr), errors.As(err, &invalid):
		return errorf(StageTLS, err, "the server's certificate does not verify: %v (a private CA goes in TLSConfig.RootCAs)", err)
	case errors.As(err, &recordErr):
		return errorf(StageTLS, err, "the server does not speak TLS on connect (%v): it may expect plain SMTP with STARTTLS; use TLS mode %s or %s", err, TLSStartTLS, TLSNone)
	case errors.As(err, &alert):
		return errorf(StageTLS, err, "the server refused the TLS handshake: %v", err)
	case strings.Contains(err.Error(), "does not support STARTTLS"):
		return errorf(StageTLS, nil, "the server does not offer STARTTLS: use TLS mode %s if it speaks TLS on connect (port 465), or %s", TLSImplicit, TLSNone)
	case errors.Is(err, smtp.ErrUnencrypted):
		return errorf(StageAuth, nil, "refusing to send the password over an unencrypted connection: use TLS mode %s or %s", TLSStartTLS, TLSImplicit)
	case errors.Is(err, mail.ErrNoSupportedAuthDiscovered), strings.Contains(err.Error(), "does not support SMTP AUTH"),
		strings.Contains(err.Error(), "AUTH") && strings.Contains(err.Error(), "not supported"):
		return errorf(StageAuth, nil, "the server offers no authentication mechanism the channel can use (%v)", err)
	}
	e := errorf(StageConnect, err, "%v", err)
	var ne net.Error
	e.Timeout = timedOut || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
	if e.Timeout {
		// Every deadline of a session is the Timeout; and when the context
		// ran out the connection was closed, so what the read said then is
		// noise.
		e.Text = fmt.Sprintf("no answer within %v", c.cfg.Timeout)
	}
	if e.Timeout && noGreeting && c.cfg.TLS != TLSImplicit {
		e.Text += "; the server sent no greeting: it may expect TLS on connect (TLS mode " + string(TLSImplicit) + ")"
	}
	return e
}

// sendError turns what go-mail's SendWithSMTPClient returned into an
// *Error, with the recipient's address replaced by its token.
func sendError(err error, r redactor, timedOut bool, timeout time.Duration) *Error {
	var se *mail.SendError
	if !errors.As(err, &se) {
		e := errorf(StageConnect, nil, "%s", r.redact(oneLine(err.Error())))
		e.Timeout = timedOut
		return e
	}
	stage := StageConnect
	switch se.Reason {
	case mail.ErrGetSender, mail.ErrGetRcpts, mail.ErrNoUnencoded:
		stage = StageMessage
	case mail.ErrSMTPMailFrom:
		stage = StageMailFrom
	case mail.ErrSMTPRcptTo:
		stage = StageRcptTo
	case mail.ErrSMTPData:
		stage = StageData
	case mail.ErrWriteContent:
		stage = StageContent
	case mail.ErrSMTPDataClose:
		stage = StageDataEnd
	}
	// SendError's text is "<reason>: <error>, affected recipient(s): ...,
	// affected message ID: ...": keep the server's part.
	text := se.Error()
	text = strings.TrimPrefix(text, se.Reason.String()+": ")
	if i := strings.Index(text, ", affected recipient(s): "); i >= 0 {
		text = text[:i]
	} else if i := strings.Index(text, ", affected message ID: "); i >= 0 {
		text = text[:i]
	}
	code := se.ErrorCode()
	if code != 0 {
		text = strings.TrimSpace(strings.TrimPrefix(text, itoa3(code)))
	}
	// Since Go 1.26 a textproto.Error quotes the server's text.
	if q, qerr := strconv.QuotedPrefix(text); qerr == nil {
		if u, uerr := strconv.Unquote(q); uerr == nil {
			text = u + text[len(q):]
		}
	}
	// go-mail reports the enhanced code only when the server announced
	// ENHANCEDSTATUSCODES (RFC 2034); otherwise the text stays as it is.
	enh := se.EnhancedStatusCode()
	if e2, rest := splitReply(text); enh != "" && e2 == enh {
		text = rest
	}
	e := &Error{Stage: stage, Code: code, EnhancedCode: enh, Text: r.redact(oneLine(text))}
	if code == 0 {
		e.Timeout = timedOut || strings.Contains(text, "i/o timeout")
		if e.Timeout {
			e.Text = fmt.Sprintf("no answer within %v", timeout)
		}
	}
	return e
}

// oneLine joins a multi-line reply into one line without control
// characters: it ends up in a log line and a NATS header.
func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	return strings.Join(strings.Fields(s), " ")
}

func itoa3(code int) string {
	return string([]byte{byte('0' + code/100), byte('0' + code/10%10), byte('0' + code%10)})
}
