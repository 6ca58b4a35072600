package notify

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// PayloadVersion is the version of the JSON payload this package writes.
// Readers accept versions up to and including it.
const PayloadVersion = 1

// MaxPayloadBytes bounds an encoded payload. A larger one cannot come from
// this package and is rejected as invalid without being parsed.
const MaxPayloadBytes = 128 << 10

// PayloadContentType is the MIME type of an encoded payload.
const PayloadContentType = "application/json"

// payload is the versioned wire form: the notification's fields plus "v".
type payload struct {
	V int `json:"v"`
	*Notification
}

// MarshalPayload validates the notification and encodes it as the versioned
// JSON payload that the outbox stores and the publisher and worker carry.
func (n Notification) MarshalPayload() ([]byte, error) {
	n.Normalize()
	if err := n.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(payload{V: PayloadVersion, Notification: &n})
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
	if err := n.Validate(); err != nil {
		return Notification{}, err
	}
	n.Normalize()
	return n, nil
}
