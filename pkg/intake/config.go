package intake

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Mode says whether and how the bot's updates are taken.
type Mode string

// Modes.
const (
	// ModeOff takes no updates: the application (or nobody) owns them.
	ModeOff Mode = "off"
	// ModePoll long-polls getUpdates.
	ModePoll Mode = "poll"
	// ModeWebhook serves an endpoint Telegram posts updates to.
	ModeWebhook Mode = "webhook"
)

// ParseMode checks a mode's name.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.ToLower(strings.TrimSpace(s))); m {
	case ModeOff, ModePoll, ModeWebhook:
		return m, nil
	}
	return "", fmt.Errorf("unknown intake mode %q (want off, poll or webhook)", s)
}

// Defaults of [Config], declared once: the daemon's flags take them from
// here.
const (
	DefaultMode = ModeOff
	// DefaultPollTimeout is getUpdates' long poll: Telegram answers at once
	// when an update arrives, so it only bounds how often an idle bot asks.
	DefaultPollTimeout = 25 * time.Second
	// DefaultLeaseTTL is how long the poller's lease lasts without a
	// renewal: a standby takes over that long after the poller died. The
	// holder renews it every third of it and stops polling when it could
	// not for half of it.
	DefaultLeaseTTL = 15 * time.Second
	// DefaultConflictRetry is PollConfig.ConflictRetry's default.
	DefaultConflictRetry = time.Minute
	// DefaultWebhookPath is the webhook endpoint's path.
	DefaultWebhookPath = "/telegram/webhook"
)

// LeaseKey is the key of the notify_chats bucket holding the poller's lease
// and offset.
const LeaseKey = "intake.bot"

// allowedUpdates are the update kinds the intake asks Telegram for.
var allowedUpdates = []string{"my_chat_member", "message"}

// secretPattern is what Telegram accepts as a webhook's secret_token.
var secretPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,256}$`)

// ErrBadSecret reports a webhook secret Telegram would refuse.
var ErrBadSecret = errors.New("the webhook secret must be 1 to 256 characters of A-Z, a-z, 0-9, _ and -")

// CheckSecret checks a webhook secret without printing it.
func CheckSecret(s string) error {
	if !secretPattern.MatchString(s) {
		return ErrBadSecret
	}
	return nil
}

// PollConfig tunes a [Poller]. Zero values take the defaults.
type PollConfig struct {
	// Timeout is the long poll, in whole seconds (default 25s).
	Timeout time.Duration
	// LeaseTTL is how long the lease lasts without a renewal (default 15s).
	LeaseTTL time.Duration
	// Owner names this poller in the lease (default host/pid and a random
	// suffix).
	Owner string
	// ConflictRetry is how long the poller waits after Telegram answered
	// that a webhook takes the updates, or rejected the token, before it
	// asks again: someone must act, so it asks seldom (default 1m).
	ConflictRetry time.Duration
}

func (c PollConfig) withDefaults() PollConfig {
	if c.Timeout == 0 {
		c.Timeout = DefaultPollTimeout
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.ConflictRetry == 0 {
		c.ConflictRetry = DefaultConflictRetry
	}
	return c
}

// Validate names every invalid setting.
func (c PollConfig) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.Timeout < 0 || c.Timeout > 50*time.Second {
		errs = append(errs, fmt.Errorf("poll timeout %v: must be between 0 and 50s (Telegram's longest)", c.Timeout))
	}
	if c.ConflictRetry < 0 {
		errs = append(errs, fmt.Errorf("conflict retry %v: must not be negative", c.ConflictRetry))
	}
	if c.LeaseTTL < 300*time.Millisecond {
		errs = append(errs, fmt.Errorf("lease TTL %v: must be at least 300ms", c.LeaseTTL))
	}
	return errors.Join(errs...)
}

// WebhookConfig configures a [Webhook].
type WebhookConfig struct {
	// Secret is the secret token Telegram sends in
	// X-Telegram-Bot-Api-Secret-Token (required; see CheckSecret). It
	// never appears in a log line, an error or a metric.
	Secret string
	// Path is the endpoint's path (default /telegram/webhook).
	Path string
	// URL, when set, is the public HTTPS URL Telegram posts to: the
	// webhook registers it at start (setWebhook, with the secret, the
	// update kinds and one connection, so that updates arrive in order).
	// Empty: an operator registers it.
	URL string
}

// String describes the configuration without the secret.
func (c WebhookConfig) String() string {
	return fmt.Sprintf("webhook{path: %s, url: %s, secret: <redacted>}", c.Path, c.URL)
}

func (c WebhookConfig) withDefaults() WebhookConfig {
	if c.Path == "" {
		c.Path = DefaultWebhookPath
	}
	return c
}

// Validate checks the secret and the path.
func (c WebhookConfig) Validate() error {
	c = c.withDefaults()
	var errs []error
	if err := CheckSecret(c.Secret); err != nil {
		errs = append(errs, err)
	}
	if !strings.HasPrefix(c.Path, "/") {
		errs = append(errs, fmt.Errorf("webhook path %q: must start with /", c.Path))
	}
	return errors.Join(errs...)
}
