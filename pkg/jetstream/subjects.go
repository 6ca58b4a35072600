package jetstream

import (
	"fmt"
	"strconv"
	"strings"
)

// Stream, consumer and bucket names shared by the daemons.
const (
	// StreamNotify is the work stream every notification is published to.
	StreamNotify = "NOTIFY"
	// StreamNotifySubjects is the subject filter of [StreamNotify].
	StreamNotifySubjects = "notify.>"
	// StreamDead is the dead-letter stream.
	StreamDead = "NOTIFY_DEAD"
	// StreamDeadSubjects is the subject filter of [StreamDead].
	StreamDeadSubjects = "dead.>"

	// ConsumerTelegram is the durable consumer the telegram worker pulls from.
	ConsumerTelegram = "telegram-worker"
	// TelegramFilter is the filter subject of [ConsumerTelegram].
	TelegramFilter = "notify.telegram.>"
	// PriorityGroupTelegram is the pinned priority group of
	// [ConsumerTelegram]: one worker pulls, the others wait as standbys.
	PriorityGroupTelegram = "telegram"

	// BucketDelivered maps an idempotency key to its delivery record.
	BucketDelivered = "notify_delivered"
	// BucketChats holds per-chat state: keys dead.<chat> and migrated.<chat>.
	BucketChats = "notify_chats"
	// BucketAttempts counts delivery attempts per idempotency key.
	BucketAttempts = "notify_attempts"

	// SubjectDelivered announces that a notification was delivered, on
	// which channel.
	SubjectDelivered = "notify.events.delivered"
	// SubjectFallback announces that a notification moved to the next
	// channel of its route, and why.
	SubjectFallback = "notify.events.fallback"
	// SubjectDead announces that every channel of a notification's route
	// gave up on it.
	SubjectDead = "notify.events.dead"
	// SubjectRecipientDead announces that a recipient can no longer be
	// reached on a channel (a chat blocked the bot or was deleted).
	SubjectRecipientDead = "notify.events.recipient_dead"
	// SubjectRecipientRedirected announces that a recipient moved (a
	// Telegram group became a supergroup).
	SubjectRecipientRedirected = "notify.events.recipient_redirected"
	// SubjectRecipientRevived announces that a recipient found dead can be
	// reached again (a Telegram user unblocked the bot or pressed Start, or
	// a retry after the worker's dead-retry-after was delivered).
	SubjectRecipientRevived = "notify.events.recipient_revived"
	// SubjectCancelled announces that a notification was cancelled before
	// any channel sent it.
	SubjectCancelled = "notify.events.cancelled"
	// SubjectCancelTooLate announces that a cancel came after a send had
	// begun or the notification was delivered.
	SubjectCancelTooLate = "notify.events.cancel_too_late"
)

// subjectRoot is the first token of every notification subject.
const subjectRoot = "notify"

// DeadPrefix is prepended to an original subject to form its dead-letter
// subject.
const DeadPrefix = "dead."

// Subject returns the subject of a notification for recipient on channel:
// notify.<channel>.<recipient>. The recipient is a single subject token.
func Subject(channel, recipient string) string {
	return subjectRoot + "." + channel + "." + recipient
}

// ValidToken reports whether s can be one token of a subject: non-empty,
// printable ASCII without spaces, dots or wildcards.
func ValidToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c > '~' || c == '.' || c == '*' || c == '>' {
			return false
		}
	}
	return true
}

// ParseSubject splits a notification subject into its channel and
// recipient.
func ParseSubject(subject string) (channel, recipient string, err error) {
	parts := strings.Split(subject, ".")
	if len(parts) != 3 || parts[0] != subjectRoot || parts[1] == "" || parts[2] == "" || parts[1] == "events" {
		return "", "", fmt.Errorf("subject %q is not a notification subject (notify.<channel>.<recipient>)", subject)
	}
	return parts[1], parts[2], nil
}

// DeadLetterSubject returns the subject of a dead letter:
// dead.notify.<channel>.<reason>.<recipient>, so that `nats stream subjects
// NOTIFY_DEAD` counts dead letters by channel and reason and `nats stream
// purge --subject` removes one reason, or one recipient's, at once.
func DeadLetterSubject(channel, reason, recipient string) string {
	return DeadPrefix + subjectRoot + "." + channel + "." + reason + "." + recipient
}

// ParseDeadLetterSubject splits a dead-letter subject into its channel,
// reason and recipient.
func ParseDeadLetterSubject(subject string) (channel, reason, recipient string, err error) {
	parts := strings.Split(strings.TrimPrefix(subject, DeadPrefix), ".")
	if !strings.HasPrefix(subject, DeadPrefix) || len(parts) != 4 || parts[0] != subjectRoot || parts[1] == "" || parts[2] == "" || parts[3] == "" {
		return "", "", "", fmt.Errorf("subject %q is not a dead-letter subject (dead.notify.<channel>.<reason>.<recipient>)", subject)
	}
	return parts[1], parts[2], parts[3], nil
}

// telegramPrefix is the subject prefix of Telegram notifications.
const telegramPrefix = "notify.telegram."

// TelegramSubject returns the subject of a Telegram notification for chatID:
// notify.telegram.<chat_id>. Negative ids (groups) keep their sign, which is
// a valid subject token.
func TelegramSubject(chatID int64) string {
	return telegramPrefix + strconv.FormatInt(chatID, 10)
}

// ParseTelegramSubject returns the chat id of a subject made by
// [TelegramSubject], or of a Telegram dead letter.
func ParseTelegramSubject(subject string) (int64, error) {
	rest, ok := strings.CutPrefix(subject, telegramPrefix)
	if !ok {
		if ch, _, r, err := ParseDeadLetterSubject(subject); err == nil && ch == "telegram" {
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

// ChatDeadKey returns the [BucketChats] key that marks chatID as dead.
func ChatDeadKey(chatID int64) string { return "dead." + strconv.FormatInt(chatID, 10) }

// ChatMigratedKey returns the [BucketChats] key that records where chatID
// migrated to.
func ChatMigratedKey(chatID int64) string { return "migrated." + strconv.FormatInt(chatID, 10) }
