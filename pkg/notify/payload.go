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
// [Notification.MarshalPayload] writes the lowest version that carries the
// notification, so a Telegram-only notification stays readable by a worker
// that knows only version 1.
const PayloadVersion = 2

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

// MarshalPayload validates the notification and encodes it as the versioned
// JSON payload that the outbox stores and the publisher and worker carry.
func (n Notification) MarshalPayload() ([]byte, error) {
	n.Normalize()
	if err := n.Validate(); err != nil {
		return nil, err
	}
	p := payload{V: 1, Notification: &n}
	if n.version1() {
		n.Route = nil // implied by channel
	} else {
		p.V = 2
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
	return b, nil
}

// DecodePayload parses and validates a payload written by MarshalPayload.
// Malformed, oversized or invalid payloads return an error matching
// [ErrInvalid]; a payload from a newer producer returns
// [ErrUnsupportedPayloadVersion]. It never panics, whatever the input.
func DecodePayload(b []byte) (Notification, error) {
	if len(b) > MaxPayloadBytes {
		return Notification{}, invalid("payload", "is %d bytes long, the limit is %d", len(b), MaxPayloadBytes)
	}
	var n Notification
	p := payload{Notification: &n}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&p); err != nil {
		return Notification{}, invalid("payload", "malformed JSON: %v", err)
	}
	if dec.More() {
		return Notification{}, invalid("payload", "trailing data after the JSON object")
	}
	switch {
	case p.V == 0:
		return Notification{}, invalid("v", "payload version is missing")
	case p.V < 0:
		return Notification{}, invalid("v", "payload version %d is negative", p.V)
	case p.V > PayloadVersion:
		return Notification{}, fmt.Errorf("%w: %d (this program reads up to %d)", ErrUnsupportedPayloadVersion, p.V, PayloadVersion)
	}
	if n.CreatedAt.IsZero() {
		return Notification{}, invalid("created_at", "required")
	}
	switch {
	case p.V == 1 && (len(n.Route) > 0 || n.MaxUserID != 0 || n.MaxChatID != 0 || n.Email != "" || n.Phone != "" || n.Subject != "" || p.FallbackAfter != ""):
		return Notification{}, invalid("v", "version 1 carries a Telegram chat only; route, max_user_id, max_chat_id, email, phone, subject and fallback_after need version 2")
	case p.V == 1 && n.ChatID == 0:
		return Notification{}, invalid("chat_id", "required")
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
