package twilio

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
)

// Message is the part of Twilio's Message resource the client returns. It
// leaves out the resource's to, from and body: a phone number or a
// notification's text has no business in what a caller may log.
type Message struct {
	// SID identifies the message at Twilio (SM followed by 32 hex digits):
	// the proof that Twilio accepted it.
	SID string `json:"sid"`
	// Status is "queued" (sent from a number) or "accepted" (sent through
	// a Messaging Service) right after creation.
	Status string `json:"status"`
	// NumSegments is how many segments Twilio bills the message as; Twilio
	// reports 0 for a message sent through a Messaging Service until it
	// picks the sender.
	NumSegments int `json:"num_segments"`
	// ErrorCode and ErrorMessage are set when the message failed; a message
	// just created has none.
	ErrorCode    int    `json:"error_code,omitempty"`
	ErrorMessage string `json:"error_message,omitempty"`
	// DateCreated is when Twilio created the resource; zero when Twilio's
	// RFC 2822 date could not be read.
	DateCreated time.Time `json:"date_created"`
}

// messageResource is the Message resource as Twilio sends it.
type messageResource struct {
	SID          string  `json:"sid"`
	Status       string  `json:"status"`
	NumSegments  flexInt `json:"num_segments"`
	ErrorCode    flexInt `json:"error_code"`
	ErrorMessage *string `json:"error_message"`
	DateCreated  *string `json:"date_created"`
}

// Account is the part of Twilio's Account resource the client returns. It
// leaves out the SID and the auth token the resource carries.
type Account struct {
	// FriendlyName is the account's name.
	FriendlyName string `json:"friendly_name"`
	// Status is "active", "suspended" or "closed".
	Status string `json:"status"`
	// Type is "Trial" or "Full".
	Type string `json:"type"`
}

// Active reports whether the account can send.
func (a *Account) Active() bool { return a.Status == "active" }

// flexInt decodes a number that Twilio sends as a JSON string ("1"), a
// JSON number or null.
type flexInt int

func (f *flexInt) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) || len(b) == 0 {
		*f = 0
		return nil
	}
	if b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		if s == "" {
			*f = 0
			return nil
		}
		b = []byte(s)
	}
	n, err := strconv.Atoi(string(b))
	if err != nil {
		return err
	}
	*f = flexInt(n)
	return nil
}

// twilioTime parses Twilio's RFC 2822 dates ("Tue, 26 Jul 2016 12:50:07
// +0000").
func twilioTime(s *string) time.Time {
	if s == nil {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC1123Z, *s)
	if err != nil {
		return time.Time{}
	}
	return t
}
