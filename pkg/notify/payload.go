package notify

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// PayloadVersion is the newest version of the JSON payload this package
// writes; readers accept versions up to and including it.
//
// Version 1 carries a Telegram notification (chat_id). Version 2 adds the
// other addresses (max_user_id, max_chat_id, email, phone), the route, the
// fallback_after duration ("90s", "2m", or "never") and the email subject.
// Version 3 adds rich content: buttons, photo, message_thread_id,
// link_preview and the per-channel bodies (the package documentation
// describes each field). [Notification.MarshalPayload] writes the lowest
// version that carries the notification, so a notification without rich
// content stays readable by a worker that knows only version 2 (or 1),
// and one with rich content is refused by such a worker, as poison, rather
// than sent without it. Version 4 adds not_before: a worker that knows only
// version 3 would ignore the field and send a scheduled notification at
// once, so it must refuse it instead.
const PayloadVersion = 4

// MaxPayloadBytes bounds an encoded payload. A larger one cannot come from
// this package and is rejected as invalid without being parsed.
const MaxPayloadBytes = 128 << 10

// PayloadContentType is the MIME type of an encoded payload.
const PayloadContentType = "application/json"

// payload is the versioned wire form: the notification's fields plus "v".
type payload struct {
	V int `json:"v"`
	*Notification
	FallbackAfter string `json:"fallback_after,omitempty"`
}

// fallbackNever is the wire form of FallbackNever.
const fallbackNever = "never"

// version1 reports whether the notification fits payload version 1: a
// Telegram chat and nothing of version 2.
func (n *Notification) version1() bool {
	return len(n.Route) == 1 && n.Route[0] == ChannelTelegram && n.MaxUserID == 0 && n.MaxChatID == 0 &&
		n.Email == "" && n.Phone == "" && n.FallbackAfter == 0 && n.Subject == ""
}

// version returns the lowest payload version that carries the normalized
// notification.
func (n *Notification) version() int {
	switch {
	case !n.NotBefore.IsZero():
		return 4
	case n.rich():
		return 3
	case n.version1():
		return 1
	}
	return 2
}

// MarshalPayload validates the notification and encodes it as the versioned
// JSON payload that the outbox stores and the publisher and worker carry.
func (n Notification) MarshalPayload() ([]byte, error) {
	n.Normalize()
	if err := n.Validate(); err != nil {
		return nil, err
	}
	p := payload{V: n.version(), Notification: &n}
	if p.V == 1 {
		n.Route = nil // implied by channel
	} else {
		n.Channel = "" // the route says it
		switch {
		case n.FallbackAfter == FallbackNever:
			p.FallbackAfter = fallbackNever
		case n.FallbackAfter > 0:
			p.FallbackAfter = n.FallbackAfter.String()
		}
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encoding notification %q: %w", n.Key, err)
	}
	if len(b) > MaxPayloadBytes {
		// DecodePayload would refuse it: refuse it here, at enqueue.
		return nil, invalid("payload", "is %d bytes long encoded, the limit is %d: shorten the text or the bodies", len(b), MaxPayloadBytes)
	}
	return b, nil
}

// fastPayload is a payload as DecodePayloadWith hands it to its unmarshal
// function: its times shadow the notification's (a field of a shallower
// struct wins in both decoders) so that each is decoded by time.Time's own
// UnmarshalJSON, as encoding/json decodes it, whatever the decoder:
// segmentio/encoding parses them with an RFC 3339 parser of its own, which
// takes "00>00:00" for a time of day.
type fastPayload struct {
	payload
	CreatedAt jsonTime `json:"created_at"`
	ExpiresAt jsonTime `json:"expires_at"`
	NotBefore jsonTime `json:"not_before"`
}

// jsonTime is a time.Time decoded by its own UnmarshalJSON.
type jsonTime struct{ t time.Time }

// UnmarshalJSON decodes b as time.Time does.
func (j *jsonTime) UnmarshalJSON(b []byte) error { return j.t.UnmarshalJSON(b) }

// decodedWith decodes b into p, which holds a zero notification, with
// unmarshal, and reports whether it did. It leaves p as it found it when it
// did not.
func decodedWith(unmarshal func([]byte, any) error, b []byte, p *payload) (decoded bool) {
	if unmarshal == nil || len(b) > MaxFastPayloadBytes {
		return false
	}
	n := p.Notification
	fp := fastPayload{payload: payload{Notification: n}}
	defer func() {
		if recover() != nil {
			decoded = false
		}
		if !decoded {
			*n = Notification{}
			*p = payload{Notification: n}
		}
	}()
	if unmarshal(b, &fp) != nil || fp.Notification != n {
		return false
	}
	*p = fp.payload
	n.CreatedAt, n.ExpiresAt, n.NotBefore = fp.CreatedAt.t, fp.ExpiresAt.t, fp.NotBefore.t
	return true
}

// decodeStream decodes one JSON value of b into p with a Decoder, and
// refuses what follows it.
func decodeStream(b []byte, p *payload) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(p); err != nil {
		return invalid("payload", "malformed JSON: %v", err)
	}
	if dec.More() {
		return invalid("payload", "trailing data after the JSON object")
	}
	return nil
}

// DecodePayload parses and validates a payload written by MarshalPayload.
// Malformed, oversized or invalid payloads return an error matching
// [ErrInvalid]; a payload from a newer producer returns a [*VersionError]
// matching [ErrUnsupportedPayloadVersion], which names the version. A
// payload that carries a field of a later version than it says (buttons
// in a version 2 payload, say) is invalid: what this program would not
// send must not be sent without. It never panics, whatever the input.
func DecodePayload(b []byte) (Notification, error) {
	return DecodePayloadWith(b, nil)
}

// MaxFastPayloadBytes is the largest payload [DecodePayloadWith] hands to
// its unmarshal function: no deeper than encoding/json's 10,000 levels of
// nesting (each level takes a byte), which a decoder may not count. A
// notification with a short text and no email body is a kilobyte or less.
const MaxFastPayloadBytes = 10000

// DecodePayloadWith is [DecodePayload] with the JSON decoded by unmarshal
// when it can: a payload of at most [MaxFastPayloadBytes] is decoded with
// unmarshal first, and one it refuses (or panics on), or a larger one, the
// way DecodePayload does, with encoding/json, which also words the error.
// The payload's checks are the same either way.
//
// unmarshal must decode every input it accepts as encoding/json.Unmarshal
// does: a faster decoder of the same rules, such as the one the delivery
// worker passes. It exists so that the worker, which decodes a payload for
// every message it receives, need not pay encoding/json's price, while
// applications, which import this package, do not import a decoder they do
// not need. A nil unmarshal is DecodePayload.
func DecodePayloadWith(b []byte, unmarshal func(data []byte, v any) error) (Notification, error) {
	if len(b) > MaxPayloadBytes {
		return Notification{}, invalid("payload", "is %d bytes long, the limit is %d", len(b), MaxPayloadBytes)
	}
	var n Notification
	p := payload{Notification: &n}
	if !decodedWith(unmarshal, b, &p) && json.Unmarshal(b, &p) != nil {
		// Decoded again as a stream, for the error's words (trailing data
		// told from malformed JSON); a payload json.Unmarshal takes decodes
		// the same either way, without a Decoder and its buffer.
		n = Notification{}
		p = payload{Notification: &n}
		if err := decodeStream(b, &p); err != nil {
			return Notification{}, err
		}
	}
	switch {
	case p.V == 0:
		return Notification{}, invalid("v", "payload version is missing")
	case p.V < 0:
		return Notification{}, invalid("v", "payload version %d is negative", p.V)
	case p.V > PayloadVersion:
		return Notification{}, &VersionError{Version: p.V, Newest: PayloadVersion}
	}
	if n.CreatedAt.IsZero() {
		return Notification{}, invalid("created_at", "required")
	}
	switch {
	case p.V == 1 && (len(n.Route) > 0 || n.MaxUserID != 0 || n.MaxChatID != 0 || n.Email != "" || n.Phone != "" || n.Subject != "" || p.FallbackAfter != ""):
		return Notification{}, invalid("v", "version 1 carries a Telegram chat only; route, max_user_id, max_chat_id, email, phone, subject and fallback_after need version 2")
	case p.V == 1 && n.ChatID == 0:
		return Notification{}, invalid("chat_id", "required")
	case p.V < 4 && !n.NotBefore.IsZero():
		return Notification{}, invalid("v", "version %d carries no not_before; it needs version 4", p.V)
	case p.V < 3 && n.rich():
		return Notification{}, invalid("v", "version %d carries no buttons, photo, message_thread_id, link_preview or bodies; they need version 3", p.V)
	case p.FallbackAfter == fallbackNever:
		n.FallbackAfter = FallbackNever
	case p.FallbackAfter != "":
		d, err := time.ParseDuration(p.FallbackAfter)
		if err != nil || d <= 0 {
			return Notification{}, invalid("fallback_after", "%q is not a positive duration (90s, 2m) or %q", p.FallbackAfter, fallbackNever)
		}
		n.FallbackAfter = d
	}
	if err := n.Validate(); err != nil {
		return Notification{}, err
	}
	n.Normalize()
	return n, nil
}
