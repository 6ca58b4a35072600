package twilio

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
)

// redacted replaces a credential wherever it would otherwise appear.
const redacted = "<redacted>"

// secret holds a credential. It prints, formats and logs as "<redacted>",
// so a Client dumped with %v, %+v or %#v, or passed to slog, leaks nothing.
type secret string

// String returns "<redacted>".
func (secret) String() string { return redacted }

// GoString returns "<redacted>".
func (secret) GoString() string { return redacted }

// Format prints "<redacted>" for every verb.
func (secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// LogValue returns "<redacted>".
func (secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// credentials are the Account SID and the auth token.
type credentials struct {
	accountSID secret
	authToken  secret
}

// redact removes both credentials from s and masks the phone numbers in it.
func (c *credentials) redact(s string) string {
	for _, v := range []secret{c.accountSID, c.authToken} {
		if v != "" {
			s = strings.ReplaceAll(s, string(v), redacted)
		}
	}
	return maskPhones(s)
}

// scrub returns err with the credentials removed from its message and its
// phone numbers masked: err itself when there is nothing to remove, a
// redactedError otherwise.
func (c *credentials) scrub(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if clean := c.redact(msg); clean != msg {
		return &redactedError{msg: clean, cause: err}
	}
	return err
}

// redactedError stands in for an error whose message contained a
// credential or a phone number. It is opaque to errors.As, so the original
// (and its message) cannot be reached, but errors.Is sees through it, so
// checks such as errors.Is(err, context.DeadlineExceeded) keep working.
type redactedError struct {
	msg   string
	cause error
}

func (e *redactedError) Error() string { return e.msg }

// Is reports whether the hidden cause matches target.
func (e *redactedError) Is(target error) bool { return errors.Is(e.cause, target) }

// MaskPhone shows a phone number as its last two digits only: "+***67".
func MaskPhone(phone string) string {
	digits := 0
	for i := len(phone) - 1; i >= 0; i-- {
		if phone[i] >= '0' && phone[i] <= '9' {
			digits++
			if digits == 2 {
				return "+***" + phone[i:]
			}
		}
	}
	return "+***"
}

// maskPhones masks every run of 7 to 15 digits (with an optional leading +)
// that is not part of a longer word, such as an Account or Message SID:
// the phone numbers Twilio quotes in its error messages.
func maskPhones(s string) string {
	if !strings.ContainsAny(s, "0123456789") {
		return s
	}
	var b strings.Builder
	alnum := func(c byte) bool {
		return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
	}
	for i := 0; i < len(s); {
		start := i
		if s[i] == '+' || s[i] >= '0' && s[i] <= '9' {
			j := i
			if s[j] == '+' {
				j++
			}
			k := j
			for k < len(s) && s[k] >= '0' && s[k] <= '9' {
				k++
			}
			n := k - j
			before := start == 0 || !alnum(s[start-1])
			after := k == len(s) || !alnum(s[k])
			if n >= 7 && n <= 15 && before && after {
				b.WriteString(MaskPhone(s[j:k]))
				i = k
				continue
			}
			if k > i {
				b.WriteString(s[i:k])
				i = k
				continue
			}
		}
		b.WriteByte(s[i])
		i++
	}
	return b.String()
}
