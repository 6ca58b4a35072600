package notify

import (
	"errors"
	"fmt"
)

// ErrInvalid is the sentinel every validation failure matches with errors.Is.
// The concrete error is a [*ValidationError] that names the field.
var ErrInvalid = errors.New("invalid notification")

// ErrUnsupportedPayloadVersion is matched by the error [DecodePayload]
// returns for a payload written by a newer producer than this program
// understands; the concrete error is a [*VersionError].
var ErrUnsupportedPayloadVersion = errors.New("unsupported payload version")

// VersionError reports a payload of a version this program does not read.
// It matches [ErrUnsupportedPayloadVersion] with errors.Is. A worker
// dead-letters such a payload as poison, with this error's message as the
// description: sending it without what the newer version added (buttons, a
// photo) would deliver a different message than the application wrote.
type VersionError struct {
	// Version is the payload's version.
	Version int
	// Newest is the newest version this program reads.
	Newest int
}

// Error names both versions.
func (e *VersionError) Error() string {
	return fmt.Sprintf("unsupported payload version %d: this program reads versions 1 to %d; upgrade it to deliver this notification", e.Version, e.Newest)
}

// Is reports whether target is [ErrUnsupportedPayloadVersion].
func (e *VersionError) Is(target error) bool { return target == ErrUnsupportedPayloadVersion }

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
