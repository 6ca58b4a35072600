package delivery

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/time/rate"

	"github.com/tgnotify/tgnotify/pkg/notify"
)

// Channel is one way to reach a recipient: Telegram, MAX, email, SMS. The
// engine owns everything around a send — lanes, limits, admission, retries,
// the circuit breaker, delivery records, dead letters, events, metrics — and
// a Channel only declares its limits, sends one notification, and says what
// the answer means.
type Channel interface {
	// Name is the channel's name: the second token of its subjects
	// (notify.<name>.<recipient>), its consumer (<name>-worker) and its
	// metric label.
	Name() string
	// Limits are the rates the provider allows.
	Limits() Limits
	// Recipient returns the recipient token of n on this channel: the
	// last token of its subject and the key of its lane. It fails when n
	// has no address for the channel.
	Recipient(n notify.Notification) (string, error)
	// Send makes one attempt at delivering a.Notification to a.Recipient
	// and classifies the answer. It must call a.Admit immediately before
	// its request leaves the process and must not send when Admit fails
	// (then it returns [NotSent]).
	Send(ctx context.Context, a *Attempt) Outcome
	// Probe checks the channel's credentials and reachability (Telegram's
	// getMe). The engine calls it while sending is halted, until it
	// succeeds.
	Probe(ctx context.Context) error
}

// Limits are a channel's send rates.
type Limits struct {
	// Rate is the channel-wide rate, requests per second.
	Rate rate.Limit
	// RecipientRate returns one recipient's rate, requests per second.
	RecipientRate func(recipient string) rate.Limit
}

// Validate checks that both rates are set and positive.
func (l Limits) Validate() error {
	switch {
	case l.Rate <= 0:
		return fmt.Errorf("channel rate %v must be positive", l.Rate)
	case l.RecipientRate == nil:
		return fmt.Errorf("channel has no recipient rate")
	}
	return nil
}

// Attempt is one try at delivering a notification, handed to
// [Channel.Send].
type Attempt struct {
	// Notification is what to send.
	Notification notify.Notification
	// Recipient is where to send it: the lane's recipient, or where it
	// was redirected (a Telegram group that became a supergroup).
	Recipient string
	// Number is the attempt's number among the failed ones so far plus
	// one.
	Number int
	// Timeout bounds the request: the engine raises it while the provider
	// answers slowly (graceful degradation). A channel applies it to its
	// request (zero: its own timeout), and reports a request it ended as
	// Transient, not Canceled.
	Timeout time.Duration

	admit    func() error
	answered func()
}

// Admit asks the engine whether the request may leave now. A channel calls
// it as the last thing before its request is written (the Bot API client
// calls it when the HTTP transport starts reading the request body), so that
// no request starts after a 429 has been read, whatever the scheduling
// delays. It fails with a [*NotAdmittedError] when sending is paused,
// halted or the breaker is open; the channel must then not send. Calling it
// again after it succeeded returns nil.
func (a *Attempt) Admit() error {
	if a.admit == nil {
		return nil
	}
	return a.admit()
}

// Answered tells the engine that the first byte of the request's answer
// has been read. A channel calls it as early as it can, from the HTTP
// transport's reader (the Bot API client does, on the first response
// byte): until the channel returns this attempt's outcome, a request of
// another attempt that asks [Attempt.Admit] waits for it (a few
// microseconds normally, 50 ms at most), so that none is written between
// the arrival of a 429 and the pause it announces. Calling it before Admit
// succeeded, or more than once, does nothing.
func (a *Attempt) Answered() {
	if a.answered != nil {
		a.answered()
	}
}

// NewAttempt builds an attempt outside the engine, for testing a channel;
// admit may be nil (always admitted).
func NewAttempt(n notify.Notification, recipient string, admit func() error) *Attempt {
	return &Attempt{Notification: n, Recipient: recipient, Number: 1, admit: admit}
}

// OutcomeKind is what an attempt's answer means for delivery.
type OutcomeKind uint8

// Outcome kinds. The zero kind is invalid, so a forgotten classification is
// not mistaken for a delivery.
const (
	// Delivered: the provider accepted the message (Outcome.ProviderID
	// identifies it). The engine records the delivery and acks.
	Delivered OutcomeKind = iota + 1
	// RetryAfter: the provider limited us (HTTP 429). Nothing at all is
	// sent on this channel for Outcome.Delay; the message is tried again
	// after it. Not a failed attempt.
	RetryAfter
	// Transient: a failure that may pass (5xx, network, timeout). Retried
	// with exponential backoff and jitter; counts as a failed attempt and
	// toward the circuit breaker.
	Transient
	// Rejected: the provider will never accept this message (content, a bad
	// request). Dead-lettered with Outcome.Reason; the recipient stays
	// alive.
	Rejected
	// RecipientDead: the recipient cannot be reached on this channel
	// (blocked, deleted, invalid address, hard bounce). Dead-lettered, the
	// recipient remembered as dead so that later messages cost no request,
	// and an event published.
	RecipientDead
	// Redirect: the recipient moved to Outcome.RedirectTo (a Telegram
	// group became a supergroup). Remembered, and sent there at once. Not
	// a failed attempt.
	Redirect
	// Halt: the provider rejected our credentials (401). Nothing is sent
	// until [Channel.Probe] succeeds; nothing is dead-lettered for it.
	Halt
	// NotSent: no request was made (not admitted). The message is tried
	// again without spending an attempt.
	NotSent
	// Canceled: the worker is stopping; Outcome.MaybeDelivered tells
	// whether the request had been written.
	Canceled
)

var outcomeNames = [...]string{
	Delivered:     "delivered",
	RetryAfter:    "retry_after",
	Transient:     "transient",
	Rejected:      "rejected",
	RecipientDead: "recipient_dead",
	Redirect:      "redirect",
	Halt:          "halt",
	NotSent:       "not_sent",
	Canceled:      "canceled",
}

// String returns the kind's lower-case name, usable as a metric label.
func (k OutcomeKind) String() string {
	if int(k) < len(outcomeNames) && outcomeNames[k] != "" {
		return outcomeNames[k]
	}
	return fmt.Sprintf("invalid(%d)", uint8(k))
}

// Outcome is the meaning of one attempt's answer.
type Outcome struct {
	Kind OutcomeKind
	// Delay is how long to wait (RetryAfter).
	Delay time.Duration
	// Reason is a stable lower-case label: a dead-letter reason (blocked,
	// content, hard_bounce, ...) or the class of a failure (server,
	// network, ...).
	Reason string
	// Code is the provider's error code or HTTP status; 0 without an
	// answer.
	Code int
	// Description is the provider's description of the error, without
	// secrets.
	Description string
	// MaybeDelivered is true when the provider may have accepted the
	// message despite the error (a timeout after the request was written).
	MaybeDelivered bool
	// ProviderID identifies the delivered message at the provider
	// (Telegram's message_id, an SMTP Message-ID).
	ProviderID string
	// RedirectTo is the recipient to send to instead (Redirect).
	RedirectTo string
	// Unrecognised marks a permanent answer the channel does not know by
	// its description (an unrecognised 400 or 403): counted apart so that
	// the table of known answers grows from what production sees.
	Unrecognised bool
}

// healthy reports whether the outcome shows a provider that answers as it
// should: everything but a transient failure. Canceled and not-sent
// attempts say nothing either way (see breakerExcluded).
func (o Outcome) healthy() bool { return o.Kind != Transient }

// NotAdmittedError is returned by [Attempt.Admit] when a request may not
// start now.
type NotAdmittedError struct {
	// Until is when sending may resume, when known.
	Until time.Time
	// Reason says why: "paused", "halted", "breaker open", ...
	Reason string
}

func (e *NotAdmittedError) Error() string {
	if e.Until.IsZero() {
		return "request not admitted: " + e.Reason
	}
	return fmt.Sprintf("request not admitted: %s until %s", e.Reason, e.Until.Format(time.RFC3339Nano))
}

// RateLimitedError is what a channel's Probe returns when the provider
// answered with a rate limit (a 429): an announced pause the worker must keep
// before its first request ([Worker.PauseUntil]). Found by the long chaos
// run: a worker restarted during a MAX (and an SMS) pause probed, was told
// to wait, started anyway and sent inside the pause.
type RateLimitedError struct {
	// RetryAfter is how long the provider asked to send nothing, from At.
	RetryAfter time.Duration
	// At is when the answer was read.
	At  time.Time
	Err error
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("rate limited for %v: %v", e.RetryAfter, e.Err)
}

func (e *RateLimitedError) Unwrap() error { return e.Err }

// ProbeError returns err as a *RateLimitedError when o, the outcome a
// channel's classifier gives a failed probe, is a rate limit; otherwise err.
func ProbeError(err error, o Outcome, at time.Time) error {
	if err == nil || o.Kind != RetryAfter {
		return err
	}
	return &RateLimitedError{RetryAfter: o.Delay, At: at, Err: err}
}
