package jetstream

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// DefaultPrefix is the subject prefix of a deployment that sets none. Its
// names are the ones tgnotify always had (stream NOTIFY on notify.>,
// NOTIFY_DEAD on dead.>, bucket notify_delivered, ...), so an existing
// deployment keeps its objects.
const DefaultPrefix = "notify"

// FlagPrefix is the flag (and YAML key of the declaration) that sets the
// subject prefix.
const FlagPrefix = "subject-prefix"

// maxPrefix bounds a prefix so that every name made from it stays short.
const maxPrefix = 32

// prefixRE is what a prefix may look like: one lower-case subject token.
var prefixRE = regexp.MustCompile(`^[a-z][a-z0-9_-]*$`)

// Names are the names of every stream, subject and bucket of one
// deployment, all made from its subject prefix, so that two deployments
// with different prefixes share a NATS account without seeing each other's
// messages. Build them with [NewNames] (or [DefaultNames]); a zero Names is
// no deployment's.
//
// With the default prefix notify the names are the historical ones:
//
//	streams   NOTIFY (notify.>), NOTIFY_DEAD (dead.>)
//	subjects  notify.<channel>.<recipient>, dead.notify.<channel>.<reason>.<recipient>
//	events    notify.events.delivered, notify.events.dead, ...
//	buckets   notify_delivered, notify_chats, notify_attempts
//	failover  tgnotify.worker.<channel>.pinned, .live.<id>, .live.pause
//
// With another prefix, staging:
//
//	streams   STAGING (staging.>), STAGING_DEAD (dead_staging.>)
//	subjects  staging.<channel>.<recipient>, dead_staging.staging.<channel>.<reason>.<recipient>
//	events    staging.events.delivered, staging.events.dead, ...
//	buckets   staging_delivered, staging_chats, staging_attempts
//	failover  tgnotify.staging.worker.<channel>.pinned, .live.<id>, .live.pause
//
// The dead letters of another prefix cannot live under dead.<prefix>.>: a
// stream's subjects may not overlap another stream's on one account, and
// NOTIFY_DEAD takes all of dead.>. Consumer names (<channel>-worker) and
// priority groups (<channel>) are the same under every prefix: they are
// scoped by their stream.
type Names struct {
	// Prefix is the first token of every notification and event subject.
	Prefix string
	// Stream is the work stream every notification is published to.
	Stream string
	// StreamSubjects is the subject filter of Stream: <prefix>.>.
	StreamSubjects string
	// DeadStream is the dead-letter stream.
	DeadStream string
	// DeadSubjects is the subject filter of DeadStream.
	DeadSubjects string
	// DeadPrefix is prepended to a notification subject to form its
	// dead-letter subject: "dead." under the default prefix.
	DeadPrefix string

	// BucketDelivered maps an idempotency key to its delivery record.
	BucketDelivered string
	// BucketChats holds per-recipient state: dead.<chat>, migrated.<chat>.
	BucketChats string
	// BucketAttempts counts delivery attempts per idempotency key.
	BucketAttempts string

	// SubjectDelivered announces that a notification was delivered.
	SubjectDelivered string
	// SubjectFallback announces that a notification moved to the next
	// channel of its route.
	SubjectFallback string
	// SubjectDead announces that every channel of a route gave up.
	SubjectDead string
	// SubjectRecipientDead announces that a recipient can no longer be
	// reached on a channel.
	SubjectRecipientDead string
	// SubjectRecipientRedirected announces that a recipient moved.
	SubjectRecipientRedirected string
	// SubjectRecipientRevived announces that a dead recipient can be
	// reached again.
	SubjectRecipientRevived string
	// SubjectCancelled announces that a notification was cancelled before
	// it was sent.
	SubjectCancelled string
	// SubjectCancelTooLate announces that a cancel came after the send had
	// begun or the notification was delivered.
	SubjectCancelTooLate string
	// SubjectEvents is the filter of every event subject: <prefix>.events.>.
	SubjectEvents string

	// pinRoot is the start of the failover subjects.
	pinRoot string
}

// NewNames returns the names made from prefix, or an error saying why
// prefix cannot be one: it must be a single lower-case subject token
// (letters, digits, _ and -, starting with a letter, at most 32 long), and
// not one that would collide with another deployment's names (dead,
// dead_*, kv_*, tgnotify). An empty prefix is [DefaultPrefix].
func NewNames(prefix string) (Names, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if err := ValidatePrefix(prefix); err != nil {
		return Names{}, fmt.Errorf("-%s %q: %w", FlagPrefix, prefix, err)
	}
	return names(prefix), nil
}

// DefaultNames returns the names of [DefaultPrefix].
func DefaultNames() Names { return names(DefaultPrefix) }

// ValidatePrefix says what is wrong with prefix as a subject prefix, or
// returns nil ([NewNames] names the flag in its error; this does not).
func ValidatePrefix(prefix string) error {
	switch {
	case len(prefix) > maxPrefix:
		return fmt.Errorf("must be at most %d characters", maxPrefix)
	case !prefixRE.MatchString(prefix):
		return fmt.Errorf("must be one subject token of lower-case letters, digits, _ and -, starting with a letter (like staging)")
	case prefix == "dead" || strings.HasPrefix(prefix, "dead_"):
		return fmt.Errorf("dead and dead_* are the dead-letter subjects of other prefixes")
	case strings.HasPrefix(prefix, "kv_"):
		return fmt.Errorf("KV_* are the streams of key-value buckets")
	case prefix == "tgnotify":
		return fmt.Errorf("tgnotify.> holds the workers' failover subjects")
	}
	return nil
}

// names computes the names of a valid prefix.
func names(prefix string) Names {
	n := Names{
		Prefix:                     prefix,
		Stream:                     strings.ToUpper(prefix),
		StreamSubjects:             prefix + ".>",
		BucketDelivered:            prefix + "_delivered",
		BucketChats:                prefix + "_chats",
		BucketAttempts:             prefix + "_attempts",
		SubjectDelivered:           prefix + ".events.delivered",
		SubjectFallback:            prefix + ".events.fallback",
		SubjectDead:                prefix + ".events.dead",
		SubjectRecipientDead:       prefix + ".events.recipient_dead",
		SubjectRecipientRedirected: prefix + ".events.recipient_redirected",
		SubjectRecipientRevived:    prefix + ".events.recipient_revived",
		SubjectCancelled:           prefix + ".events.cancelled",
		SubjectCancelTooLate:       prefix + ".events.cancel_too_late",
		SubjectEvents:              prefix + ".events.>",
	}
	n.DeadStream = n.Stream + "_DEAD"
	if prefix == DefaultPrefix {
		n.DeadPrefix, n.DeadSubjects, n.pinRoot = "dead.", "dead.>", "tgnotify.worker."
	} else {
		n.DeadPrefix, n.DeadSubjects, n.pinRoot = "dead_"+prefix+".", "dead_"+prefix+".>", "tgnotify."+prefix+".worker."
	}
	return n
}

// IsZero reports whether n is the zero Names, which callers that accept
// Names in a configuration read as [DefaultNames].
func (n Names) IsZero() bool { return n.Prefix == "" }

// OrDefault returns n, or [DefaultNames] when n is zero.
func (n Names) OrDefault() Names {
	if n.IsZero() {
		return DefaultNames()
	}
	return n
}

// Subject returns the subject of a notification for recipient on channel:
// <prefix>.<channel>.<recipient>. The recipient is a single subject token.
func (n Names) Subject(channel, recipient string) string {
	return n.Prefix + "." + channel + "." + recipient
}

// ParseSubject splits a notification subject into its channel and
// recipient.
func (n Names) ParseSubject(subject string) (channel, recipient string, err error) {
	parts := strings.Split(subject, ".")
	if len(parts) != 3 || parts[0] != n.Prefix || parts[1] == "" || parts[2] == "" || parts[1] == "events" {
		return "", "", fmt.Errorf("subject %q is not a notification subject (%s.<channel>.<recipient>)", subject, n.Prefix)
	}
	return parts[1], parts[2], nil
}

// ChannelFilter returns the filter subject of a channel's consumer:
// <prefix>.<channel>.> (notify.telegram.>).
func (n Names) ChannelFilter(channel string) string { return n.Prefix + "." + channel + ".>" }

// DeadLetterSubject returns the subject of a dead letter:
// dead.notify.<channel>.<reason>.<recipient> under the default prefix, so
// that `nats stream subjects NOTIFY_DEAD` counts dead letters by channel
// and reason and `nats stream purge --subject` removes one reason, or one
// recipient's, at once.
func (n Names) DeadLetterSubject(channel, reason, recipient string) string {
	return n.DeadPrefix + n.Prefix + "." + channel + "." + reason + "." + recipient
}

// ParseDeadLetterSubject splits a dead-letter subject into its channel,
// reason and recipient.
func (n Names) ParseDeadLetterSubject(subject string) (channel, reason, recipient string, err error) {
	rest, ok := strings.CutPrefix(subject, n.DeadPrefix)
	parts := strings.Split(rest, ".")
	if !ok || len(parts) != 4 || parts[0] != n.Prefix || parts[1] == "" || parts[2] == "" || parts[3] == "" {
		return "", "", "", fmt.Errorf("subject %q is not a dead-letter subject (%s%s.<channel>.<reason>.<recipient>)", subject, n.DeadPrefix, n.Prefix)
	}
	return parts[1], parts[2], parts[3], nil
}

// TelegramSubject returns the subject of a Telegram notification for
// chatID: <prefix>.telegram.<chat_id>. Negative ids (groups) keep their
// sign, which is a valid subject token.
func (n Names) TelegramSubject(chatID int64) string {
	return n.Subject(DefaultChannel, strconv.FormatInt(chatID, 10))
}

// ParseTelegramSubject returns the chat id of a subject made by
// [Names.TelegramSubject], or of a Telegram dead letter.
func (n Names) ParseTelegramSubject(subject string) (int64, error) {
	rest, ok := strings.CutPrefix(subject, n.Prefix+"."+DefaultChannel+".")
	if !ok {
		if ch, _, r, err := n.ParseDeadLetterSubject(subject); err == nil && ch == DefaultChannel {
			rest, ok = r, true
		}
	}
	if !ok {
		return 0, fmt.Errorf("subject %q is not a telegram notification subject", subject)
	}
	id, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("subject %q does not end in a chat id", subject)
	}
	return id, nil
}

// PinSubject returns the core NATS subject on which the pinned worker of a
// channel answers its standbys: tgnotify.worker.<channel>.pinned under the
// default prefix, tgnotify.<prefix>.worker.<channel>.pinned under another.
func (n Names) PinSubject(channel string) string { return n.pinRoot + channel + ".pinned" }

// LiveSubject returns the core NATS subject on which the worker of a channel
// with the given id answers for as long as it lives (its send claims name
// it): tgnotify.worker.<channel>.live.<id> under the default prefix.
func (n Names) LiveSubject(channel, id string) string { return n.pinRoot + channel + ".live." + id }

// PauseSubject returns the core NATS subject on which the workers of a
// channel tell each other of a 429 pause the moment they read it:
// tgnotify.worker.<channel>.live.pause under the default prefix. It lies
// under live.*, which a worker's permissions already allow (no worker id
// is "pause": ids are 16 hexadecimal digits).
func (n Names) PauseSubject(channel string) string { return n.pinRoot + channel + ".live.pause" }
