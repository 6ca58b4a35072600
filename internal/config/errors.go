package config

import (
	"errors"
	"strings"
)

// ErrInvalid matches every error of this package's parsing and checks: the
// command was given a configuration it cannot use (exit status 2).
var ErrInvalid = errors.New("invalid configuration")

// Error is a setting that cannot be used: a value that does not parse, a
// failed check, an unknown key in a file, a removed flag.
type Error struct {
	// Flag is the flag's name without the dash, or "" when the error is
	// about a file or the command line as a whole.
	Flag string
	// Value is the value as text, or "" to leave it out (booleans, secrets
	// are redacted before they get here).
	Value string
	// Origin is where the value came from.
	Origin Origin
	// Err says what is wrong.
	Err error
}

// Error reads "-flag value (from ORIGIN): what is wrong"; the origin is
// shown for values from the environment or a file.
func (e *Error) Error() string {
	var b strings.Builder
	if e.Flag != "" {
		b.WriteString("-" + e.Flag)
		if e.Value != "" {
			b.WriteString(" " + e.Value)
		}
	}
	switch {
	case e.Origin.Where == "":
	case b.Len() > 0:
		b.WriteString(" (from " + e.Origin.Where + ")")
	default:
		b.WriteString(e.Origin.Where)
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

// Unwrap returns what is wrong.
func (e *Error) Unwrap() error { return e.Err }

// Is matches [ErrInvalid].
func (e *Error) Is(target error) bool { return target == ErrInvalid }
