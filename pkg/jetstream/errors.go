package jetstream

import (
	"errors"
	"fmt"
)

// ErrStreamConflict matches a [*ConflictError] about a stream: a stream with
// the expected name exists with a configuration provisioning must not change.
var ErrStreamConflict = errors.New("existing stream conflicts with the required configuration")

// ErrConsumerConflict matches a [*ConflictError] about the worker's consumer.
var ErrConsumerConflict = errors.New("existing consumer conflicts with the required configuration")

// ErrBucketConflict matches a [*ConflictError] about a key-value bucket.
var ErrBucketConflict = errors.New("existing key-value bucket conflicts with the required configuration")

// ConflictError reports an existing stream, consumer or bucket whose
// configuration differs from the required one in a field that provisioning
// refuses to rewrite (changing it could lose or misroute messages). An
// operator must change or remove the object by hand.
type ConflictError struct {
	// Kind is "stream", "consumer" or "bucket".
	Kind string
	// Name is the name of the stream, consumer or bucket.
	Name string
	// Field is the configuration field that conflicts, e.g. "subjects".
	Field string
	// Have is the existing value, Want the required one, as text.
	Have, Want string
}

// Error names the object, the field and both values.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("%s %s exists with %s %s, want %s: refusing to change it; edit or remove it by hand (nats %s edit/rm)",
		e.Kind, e.Name, e.Field, e.Have, e.Want, cliNoun(e.Kind))
}

// Is matches the sentinel of the error's kind.
func (e *ConflictError) Is(target error) bool {
	switch e.Kind {
	case "stream":
		return target == ErrStreamConflict
	case "consumer":
		return target == ErrConsumerConflict
	case "bucket":
		return target == ErrBucketConflict
	}
	return false
}

func cliNoun(kind string) string {
	if kind == "bucket" {
		return "kv"
	}
	return kind
}
