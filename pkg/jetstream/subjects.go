package jetstream

import "strconv"

// Stream, consumer and bucket names under [DefaultPrefix]: the names of a
// deployment that sets no prefix. Code that may run under another prefix
// takes a [Names] instead.
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

// DeadPrefix is prepended to an original subject to form its dead-letter
// subject under [DefaultPrefix] ([Names.DeadPrefix]).
const DeadPrefix = "dead."

// Subject returns the subject of a notification for recipient on channel
// under [DefaultPrefix]: notify.<channel>.<recipient> ([Names.Subject]).
func Subject(channel, recipient string) string { return DefaultNames().Subject(channel, recipient) }

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

// ParseSubject splits a notification subject under [DefaultPrefix] into
// its channel and recipient ([Names.ParseSubject]).
func ParseSubject(subject string) (channel, recipient string, err error) {
	return DefaultNames().ParseSubject(subject)
}

// DeadLetterSubject returns the subject of a dead letter under
// [DefaultPrefix]: dead.notify.<channel>.<reason>.<recipient>
// ([Names.DeadLetterSubject]).
func DeadLetterSubject(channel, reason, recipient string) string {
	return DefaultNames().DeadLetterSubject(channel, reason, recipient)
}

// ParseDeadLetterSubject splits a dead-letter subject under
// [DefaultPrefix] into its channel, reason and recipient
// ([Names.ParseDeadLetterSubject]).
func ParseDeadLetterSubject(subject string) (channel, reason, recipient string, err error) {
	return DefaultNames().ParseDeadLetterSubject(subject)
}

// TelegramSubject returns the subject of a Telegram notification for chatID
// under [DefaultPrefix]: notify.telegram.<chat_id> ([Names.TelegramSubject]).
func TelegramSubject(chatID int64) string { return DefaultNames().TelegramSubject(chatID) }

// ParseTelegramSubject returns the chat id of a subject made by
// [TelegramSubject], or of a Telegram dead letter
// ([Names.ParseTelegramSubject]).
func ParseTelegramSubject(subject string) (int64, error) {
	return DefaultNames().ParseTelegramSubject(subject)
}

// ChatDeadKey returns the [BucketChats] key that marks chatID as dead.
func ChatDeadKey(chatID int64) string { return "dead." + strconv.FormatInt(chatID, 10) }

// ChatMigratedKey returns the [BucketChats] key that records where chatID
// migrated to.
func ChatMigratedKey(chatID int64) string { return "migrated." + strconv.FormatInt(chatID, 10) }
