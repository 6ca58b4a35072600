package email

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Sentinels an [*Error] matches with errors.Is, by the step that failed and
// the reply code.
var (
	// ErrAuth: SMTP AUTH failed — the credentials were rejected, or no
	// mechanism both sides accept could carry them.
	ErrAuth = errors.New("smtp authentication failed")
	// ErrTLS: TLS could not be set up — the certificate does not verify,
	// the server does not offer STARTTLS, or it does not speak TLS on
	// connect.
	ErrTLS = errors.New("smtp tls failed")
	// ErrTemporary: the server answered with a 4xx reply.
	ErrTemporary = errors.New("smtp temporary failure")
	// ErrPermanent: the server answered with a 5xx reply.
	ErrPermanent = errors.New("smtp permanent failure")
)

// errBadAddress: go-mail refused the recipient's address while building the
// message.
var errBadAddress = errors.New("the recipient's address is not valid")

// Stage is the step of an SMTP session at which a send or a probe failed.
type Stage uint8

// The stages, in the order a session goes through them.
const (
	// StageMessage: building the message, before any connection.
	StageMessage Stage = iota + 1
	// StageConnect: the TCP connection, the server's greeting, EHLO.
	StageConnect
	// StageTLS: the TLS handshake (implicit TLS) or STARTTLS.
	StageTLS
	// StageAuth: SMTP AUTH.
	StageAuth
	// StageMailFrom: the MAIL FROM command; the mail transaction starts
	// here.
	StageMailFrom
	// StageRcptTo: the RCPT TO command.
	StageRcptTo
	// StageData: the DATA command.
	StageData
	// StageContent: writing the message.
	StageContent
	// StageDataEnd: the reply to the message's final dot. The server may
	// have accepted the message when this step fails without a reply.
	StageDataEnd
)

var stageNames = [...]string{
	StageMessage:  "message",
	StageConnect:  "connect",
	StageTLS:      "tls",
	StageAuth:     "auth",
	StageMailFrom: "mail_from",
	StageRcptTo:   "rcpt_to",
	StageData:     "data",
	StageContent:  "content",
	StageDataEnd:  "data_end",
}

// String returns the stage's lower-case name.
func (s Stage) String() string {
	if int(s) < len(stageNames) && stageNames[s] != "" {
		return stageNames[s]
	}
	return "stage(" + strconv.Itoa(int(s)) + ")"
}

// Error is a failed send or probe: where it failed and what the server (or
// the connection) said. It never holds the recipient's address (it is
// replaced by its token, e<hash>) nor a password.
type Error struct {
	// Stage is the step that failed.
	Stage Stage
	// Code is the SMTP reply code (RFC 5321 §4.2), 0 without a reply.
	Code int
	// EnhancedCode is the enhanced status code (RFC 3463), such as
	// "5.1.1", when the server gave one.
	EnhancedCode string
	// Text is the server's reply text after the codes, or what went wrong
	// without a reply.
	Text string
	// Timeout is set when no answer came within the timeout.
	Timeout bool

	// err is the cause when it can hold no address (network, context,
	// TLS), for errors.Is and errors.As.
	err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("smtp ")
	b.WriteString(e.Stage.String())
	b.WriteString(": ")
	if e.Code != 0 {
		b.WriteString(strconv.Itoa(e.Code))
		b.WriteByte(' ')
	}
	if e.EnhancedCode != "" {
		b.WriteString(e.EnhancedCode)
		b.WriteByte(' ')
	}
	b.WriteString(e.Text)
	return strings.TrimSpace(b.String())
}

// Unwrap returns the network, context or TLS error behind e, if any.
func (e *Error) Unwrap() error { return e.err }

// Is matches [ErrAuth], [ErrTLS], [ErrTemporary] and [ErrPermanent].
func (e *Error) Is(target error) bool {
	switch target {
	case ErrAuth:
		return e.Stage == StageAuth
	case ErrTLS:
		return e.Stage == StageTLS
	case ErrTemporary:
		return e.Code/100 == 4
	case ErrPermanent:
		return e.Code/100 == 5
	}
	return false
}

// enhancedRE finds an enhanced status code at the start of a reply text.
var enhancedRE = regexp.MustCompile(`^([245])\.(\d{1,3})\.(\d{1,3})\b`)

// splitReply splits a reply text into its enhanced code and the rest.
func splitReply(text string) (enhanced, rest string) {
	text = strings.TrimSpace(text)
	if m := enhancedRE.FindString(text); m != "" {
		return m, strings.TrimSpace(text[len(m):])
	}
	return "", text
}

// enhancedParts returns the class, subject and detail of an enhanced code
// ("5.1.1" → 5, 1, 1), or zeros.
func enhancedParts(code string) (class, subject, detail int) {
	m := enhancedRE.FindStringSubmatch(code)
	if m == nil {
		return 0, 0, 0
	}
	class, _ = strconv.Atoi(m[1])
	subject, _ = strconv.Atoi(m[2])
	detail, _ = strconv.Atoi(m[3])
	return class, subject, detail
}

// addressRE matches anything that looks like an email address in a reply.
var addressRE = regexp.MustCompile(`[^\s<>"'(),;:\[\]]+@[^\s<>"'(),;:\[\]]+`)

// redactor replaces the recipient's address in text with its token, and
// any other address but the sender's and the Message-ID with "[address]":
// servers echo addresses in their replies, and a description ends up in
// logs, dead letters and events.
type redactor struct {
	addr, token string
	keep        []string
}

func (r redactor) redact(s string) string {
	if r.addr != "" {
		s = replaceFold(s, r.addr, r.token)
	}
	return addressRE.ReplaceAllStringFunc(s, func(m string) string {
		for _, k := range r.keep {
			if strings.EqualFold(m, k) {
				return m
			}
		}
		return "[address]"
	})
}

// replaceFold replaces every case-insensitive occurrence of old in s
// (old is ASCII-lowered for the search, as addresses compare).
func replaceFold(s, old, repl string) string {
	lower, lold := strings.ToLower(s), strings.ToLower(old)
	if len(lower) != len(s) || !strings.Contains(lower, lold) {
		if len(lower) != len(s) {
			return strings.ReplaceAll(s, old, repl)
		}
		return s
	}
	var b strings.Builder
	for {
		i := strings.Index(lower, lold)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		b.WriteString(repl)
		s, lower = s[i+len(old):], lower[i+len(lold):]
	}
}

// errorf builds an *Error without a reply.
func errorf(stage Stage, cause error, format string, args ...any) *Error {
	return &Error{Stage: stage, Text: fmt.Sprintf(format, args...), err: cause}
}
