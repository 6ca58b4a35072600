package jetstream

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// Header names carried by notification and dead-letter messages.
const (
	// HeaderMsgID is JetStream's de-duplication header; its value is the
	// notification's idempotency key.
	HeaderMsgID = nats.MsgIdHdr
	// HeaderKey repeats the idempotency key. Unlike Nats-Msg-Id it survives
	// a replay under a new message id, so the worker de-duplicates on it.
	HeaderKey = "Notify-Key"
	// HeaderCreatedAt is when the notification was enqueued, RFC 3339 with
	// nanoseconds, UTC.
	HeaderCreatedAt = "Notify-Created-At"
	// HeaderContentType is the MIME type of the body.
	HeaderContentType = "Content-Type"

	// Fallback headers, on a notification handed to the next channel of its
	// route: the channel it comes from, why, and since when this channel
	// has it (RFC 3339, UTC; its fallback_after counts from here).
	HeaderFallbackFrom   = "Notify-Fallback-From"
	HeaderFallbackReason = "Notify-Fallback-Reason"
	HeaderChannelSince   = "Notify-Channel-Since"

	// Dead-letter headers, added to a copy of the original message.
	HeaderReason           = "Notify-Reason"
	HeaderErrorCode        = "Notify-Error-Code"
	HeaderErrorDescription = "Notify-Error-Description"
	HeaderAttempts         = "Notify-Attempts"
	HeaderOriginalSubject  = "Notify-Original-Subject"
	HeaderOriginalSeq      = "Notify-Original-Seq"
	HeaderDeadAt           = "Notify-Dead-At"
)

// NotificationMsg builds the message that carries a Telegram notification
// to chatID under [DefaultPrefix]: [Msg] on notify.telegram.<chatID>. Under
// another prefix use [Msg] with [Names.TelegramSubject].
func NotificationMsg(chatID int64, key string, createdAt time.Time, contentType string, payload []byte) *nats.Msg {
	return Msg(TelegramSubject(chatID), key, createdAt, contentType, payload)
}

// Msg builds the message that carries one notification: the subject
// (notify.<channel>.<recipient>), the payload as body, unchanged, and the
// headers Nats-Msg-Id and Notify-Key (both the idempotency key),
// Notify-Created-At and Content-Type.
func Msg(subject, key string, createdAt time.Time, contentType string, payload []byte) *nats.Msg {
	// One backing array for the four values: a message is built for every
	// notification, so allocations count.
	v := [4]string{key, key, createdAt.UTC().Format(time.RFC3339Nano), contentType}
	vals := v[:]
	h := make(nats.Header, 4)
	h[HeaderMsgID] = vals[0:1:1]
	h[HeaderKey] = vals[1:2:2]
	h[HeaderCreatedAt] = vals[2:3:3]
	h[HeaderContentType] = vals[3:4:4]
	return &nats.Msg{Subject: subject, Header: h, Data: payload}
}

// NotificationMeta is what the headers of a notification message say.
type NotificationMeta struct {
	// Key is the idempotency key (Notify-Key, else Nats-Msg-Id).
	Key string
	// CreatedAt is when the notification was enqueued.
	CreatedAt time.Time
	// ContentType is the MIME type of the body.
	ContentType string
}

// ParseNotificationHeaders reads the headers [NotificationMsg] sets. A
// missing key or an unparsable creation time is an error naming the header.
func ParseNotificationHeaders(h nats.Header) (NotificationMeta, error) {
	m := NotificationMeta{Key: h.Get(HeaderKey), ContentType: h.Get(HeaderContentType)}
	if m.Key == "" {
		m.Key = h.Get(HeaderMsgID)
	}
	if m.Key == "" {
		return NotificationMeta{}, fmt.Errorf("notification headers: %s is missing", HeaderKey)
	}
	if v := h.Get(HeaderCreatedAt); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return NotificationMeta{}, fmt.Errorf("notification headers: %s %q is not RFC 3339", HeaderCreatedAt, v)
		}
		m.CreatedAt = t
	}
	return m, nil
}
