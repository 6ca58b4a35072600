package notify

import (
	"errors"
	"fmt"
)

// ErrInvalid is the sentinel every validation failure matches with errors.Is.
// The concrete error is a [*ValidationError] that names the field.
var ErrInvalid = errors.New("invalid notification")

// ErrUnsupportedPayloadVersion is returned by [DecodePayload] for a payload
// written by a newer producer than this program understands.
var ErrUnsupportedPayloadVersion = errors.New("unsupported payload version")

// ValidationError reports which field of a notification is invalid and why.
// It matches [ErrInvalid] with errors.Is.
type ValidationError struct {
	// Field is the name of the invalid field as it appears in the payload
	// (for example "chat_id" or "text").
	Field string
	// Reason says what is wrong with it, in lower case.
	Reason string
}

// Error returns a message naming the field and the problem.
func (e *ValidationError) Error() string {
	return fmt.Sprintf("invalid notification: %s: %s", e.Field, e.Reason)
}

// Is reports whether target is [ErrInvalid].
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &ValidationError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
