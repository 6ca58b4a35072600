// Package sms is the SMS channel of the delivery engine: it turns a
// notification into an SMS of at most a few segments (pkg/smstext), sends
// it with Twilio's Messages API (pkg/twilio), says what Twilio's answer
// means for delivery, and declares the limits of the sender. Everything
// around a send — lanes, limits, pauses, retries, records, dead letters —
// is the engine's (pkg/delivery). docs/CHANNELS.md (SMS) describes the
// provider, the limits, the error classes and the segment rule.
//
// A phone number never leaves this package in clear: the lane, the subject
// and every log line name the recipient by its token ("p" and a hash of
// the number, notify.Notification.Recipient), and Twilio's descriptions
// reach outcomes with numbers masked to their last two digits.
package sms

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"golang.org/x/time/rate"

	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/smstext"
	"github.com/tgnotify/tgnotify/pkg/twilio"
)

// Name is the channel's name: subjects notify.sms.<token>, consumer
// sms-worker.
const Name = "sms"

// Defaults and bounds of [Config] (docs/CHANNELS.md (SMS), "Limits").
const (
	// DefaultSegmentsPerSecond is the sender's rate: Twilio releases one
	// message segment a second from a US or Canadian long code (3 from a
	// toll-free number, 10 from other international senders, 100 from a
	// short code) and queues what comes faster.
	DefaultSegmentsPerSecond = 1
	// DefaultRecipientPerMinute is one recipient's rate, messages per
	// minute: one every ten seconds. Twilio sets no per-recipient limit;
	// carriers filter bursts to one handset as spam, and a customer whose
	// orders come in a burst still gets each notification within a minute.
	DefaultRecipientPerMinute = 6
	// DefaultMaxSegments is how many segments a notification may take:
	// two, the 320 GSM-7 characters Twilio recommends not to exceed.
	DefaultMaxSegments = smstext.DefaultMaxSegments
	// MaxMaxSegments bounds MaxSegments: ten segments are at most 1530
	// GSM-7 or 670 UCS-2 characters, under Twilio's 1600-character limit
	// on a Body (21617).
	MaxMaxSegments = 10
)

// Config are the channel's settings. Zero values take the defaults.
type Config struct {
	// SegmentsPerSecond is the rate at which the sender (the From number,
	// or every number of a Messaging Service's pool together) releases
	// segments. The channel sends SegmentsPerSecond / MaxSegments
	// messages a second, so that even messages of MaxSegments segments
	// never queue at Twilio, where the engine's priorities (transactional
	// before bulk) would no longer hold. Default 1 (a long code).
	SegmentsPerSecond float64
	// RecipientPerMinute is one recipient's rate, messages per minute.
	// Default 6.
	RecipientPerMinute float64
	// MaxSegments is how many segments a notification may take after the
	// segment rule shortens it. Default 2, at most 10.
	MaxSegments int
}

func (c Config) withDefaults() Config {
	if c.SegmentsPerSecond == 0 {
		c.SegmentsPerSecond = DefaultSegmentsPerSecond
	}
	if c.RecipientPerMinute == 0 {
		c.RecipientPerMinute = DefaultRecipientPerMinute
	}
	if c.MaxSegments == 0 {
		c.MaxSegments = DefaultMaxSegments
	}
	return c
}

// Validate reports every invalid setting as a [*delivery.FieldError]
// naming its Config field.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	check := func(ok bool, field string, v any, problem string) {
		if !ok {
			errs = append(errs, &delivery.FieldError{Field: field, Value: v, Problem: problem})
		}
	}
	check(c.SegmentsPerSecond > 0, "SegmentsPerSecond", c.SegmentsPerSecond, "must be positive")
	check(c.RecipientPerMinute > 0, "RecipientPerMinute", c.RecipientPerMinute, "must be positive")
	check(c.MaxSegments >= 1 && c.MaxSegments <= MaxMaxSegments, "MaxSegments", c.MaxSegments,
		fmt.Sprintf("must be 1..%d: Twilio refuses a body over %d characters", MaxMaxSegments, twilio.MaxBodyLength))
	return errors.Join(errs...)
}

// Sender is the part of the Twilio client the channel uses.
type Sender interface {
	Send(ctx context.Context, to, body string) (*twilio.Message, error)
	FetchAccount(ctx context.Context) (*twilio.Account, error)
}

// Channel sends notifications by SMS.
type Channel struct {
	cfg Config
	api Sender
	log *slog.Logger
}

var _ delivery.Channel = (*Channel)(nil)

// New checks the configuration and returns the channel. logger may be nil
// (discard); the channel logs at debug level only, and never a phone
// number.
func New(cfg Config, api Sender, logger *slog.Logger) (*Channel, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if api == nil {
		return nil, errors.New("sms channel: a Twilio client is required")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Channel{cfg: cfg.withDefaults(), api: api, log: logger.With("component", "sms-channel")}, nil
}

// Name returns "sms".
func (c *Channel) Name() string { return Name }

// Config returns the settings in force, defaults filled in.
func (c *Channel) Config() Config { return c.cfg }

// Limits are SegmentsPerSecond / MaxSegments messages a second for the
// channel, and RecipientPerMinute a minute for each recipient.
func (c *Channel) Limits() delivery.Limits {
	perRecipient := rate.Limit(c.cfg.RecipientPerMinute / 60)
	return delivery.Limits{
		Rate:          rate.Limit(c.cfg.SegmentsPerSecond / float64(c.cfg.MaxSegments)),
		RecipientRate: func(string) rate.Limit { return perRecipient },
	}
}

// Recipient returns the notification's SMS recipient token: "p" and a hash
// of its phone number, never the number.
func (c *Channel) Recipient(n notify.Notification) (string, error) {
	return n.Recipient(notify.ChannelSMS)
}

// Text returns the SMS the channel sends for n: its SMS body when it has
// one (plain text), else its text with the markup of its parse mode
// removed (smstext.Plain); then, as the first link, the URL of its first
// http(s) button; shortened to MaxSegments segments (smstext.Shorten),
// which keeps the first link that fits.
func (c *Channel) Text(n notify.Notification) string {
	text, markup := n.Text, smstext.MarkupNone
	switch n.ParseMode {
	case notify.ParseModeHTML:
		markup = smstext.MarkupHTML
	case notify.ParseModeMarkdownV2:
		markup = smstext.MarkupMarkdownV2
	}
	if b := n.Bodies.SMS; b != nil {
		text, markup = b.Text, smstext.MarkupNone
	}
	body, links := smstext.Plain(text, markup)
	if u := firstWebButton(n.Buttons); u != "" {
		links = append([]string{u}, slices.DeleteFunc(links, func(l string) bool { return l == u })...)
	}
	return smstext.Shorten(body, links, c.cfg.MaxSegments)
}

// firstWebButton returns the URL of the first http or https button, or "".
func firstWebButton(rows [][]notify.Button) string {
	for _, row := range rows {
		for _, b := range row {
			if b.WebURL() {
				return b.URL
			}
		}
	}
	return ""
}

// Send sends the notification's text, made fit for an SMS, to its phone
// number and classifies Twilio's answer. The admission check runs as the
// request is written.
func (c *Channel) Send(ctx context.Context, a *delivery.Attempt) delivery.Outcome {
	n := a.Notification
	if n.Phone == "" {
		return delivery.Outcome{Kind: delivery.Rejected, Reason: "bad_recipient", Description: "the notification has no phone number"}
	}
	text := c.Text(n)
	if text == "" {
		return delivery.Outcome{Kind: delivery.Rejected, Reason: twilio.ReasonContent, Description: "nothing is left of the text once its markup is removed"}
	}
	ctx = twilio.WithAdmission(ctx, a.Admit)
	ctx = twilio.WithAnswerNotice(ctx, a.Answered)
	msg, err := c.api.Send(twilio.WithRequestTimeout(ctx, a.Timeout), n.Phone, text)
	o := Classify(msg, err)
	size := smstext.Measure(text)
	c.log.LogAttrs(ctx, slog.LevelDebug, "sms attempt",
		slog.String("key", n.Key), slog.String("recipient", a.Recipient),
		slog.Int("segments", size.Segments), slog.String("encoding", size.Encoding.String()),
		slog.String("outcome", o.Kind.String()), slog.String("reason", o.Reason), slog.Int("code", o.Code),
		slog.String("sid", o.ProviderID))
	return o
}

// Probe checks the credentials by fetching the account, and that the
// account is active.
func (c *Channel) Probe(ctx context.Context) error {
	a, err := c.api.FetchAccount(ctx)
	if err != nil {
		return delivery.ProbeError(err, Classify(nil, err), time.Now())
	}
	if !a.Active() {
		return fmt.Errorf("twilio account is %s", a.Status)
	}
	return nil
}

// Classify maps the result of one Send to the engine's outcome, through
// twilio.Classify (which documents every branch): created is Delivered
// with the message SID as provider id; 429 and a full sender queue are
// RetryAfter; a rejected credential or a wrong base URL is Halt; the
// permanent recipient codes (and an unrecognised 403) are RecipientDead;
// content, sender and unrecognised 400 answers are Rejected; 5xx, network
// failures and timeouts are Transient.
func Classify(msg *twilio.Message, err error) delivery.Outcome {
	d := twilio.Classify(err)
	o := delivery.Outcome{
		Reason:         d.Reason,
		Code:           d.Code,
		Description:    d.Description,
		MaybeDelivered: d.MaybeDelivered,
		Unrecognised:   d.Unrecognised,
	}
	switch d.Action {
	case twilio.ActionDelivered:
		o.Kind = delivery.Delivered
		if msg != nil {
			o.ProviderID = msg.SID
		}
	case twilio.ActionRetryAfter:
		o.Kind, o.Delay = delivery.RetryAfter, d.RetryAfter
	case twilio.ActionRecipientDead:
		o.Kind = delivery.RecipientDead
	case twilio.ActionRejected:
		o.Kind = delivery.Rejected
	case twilio.ActionHalt:
		o.Kind = delivery.Halt
	case twilio.ActionCanceled:
		o.Kind = delivery.Canceled
	case twilio.ActionNotSent:
		o.Kind = delivery.NotSent
	default: // ActionBackoff
		o.Kind = delivery.Transient
	}
	return o
}
