package maxapi

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
)

// redacted replaces the token wherever it would otherwise appear.
const redacted = "<redacted>"

// secret holds the bot token. It prints, formats and logs as "<redacted>",
// so a Client dumped with %v, %+v or %#v, or passed to slog, does not leak
// it.
type secret string

// String returns "<redacted>".
func (secret) String() string { return redacted }

// GoString returns "<redacted>".
func (secret) GoString() string { return redacted }

// Format prints "<redacted>" for every verb.
func (secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// LogValue returns "<redacted>".
func (secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// redact removes the token from str.
func (s secret) redact(str string) string {
	if s == "" {
		return str
	}
	return strings.ReplaceAll(str, string(s), redacted)
}

// redactedError stands in for an error whose message contained the token.
// Its message is scrubbed, and it is opaque to errors.As so the original
// (and its message) cannot be reached, but errors.Is still sees through it
// so checks such as errors.Is(err, context.DeadlineExceeded) keep working.
type redactedError struct {
	msg   string
	cause error
}

func (e *redactedError) Error() string { return e.msg }

// Is reports whether the hidden cause matches target.
func (e *redactedError) Is(target error) bool { return errors.Is(e.cause, target) }

// scrub returns err with the token removed from its message: err itself
// when the message does not contain the token, a redactedError otherwise.
func (s secret) scrub(err error) error {
	if err == nil || s == "" {
		return err
	}
	msg := err.Error()
	if !strings.Contains(msg, string(s)) {
		return err
	}
	return &redactedError{msg: s.redact(msg), cause: err}
}
