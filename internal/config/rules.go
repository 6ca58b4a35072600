package config

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Number is what the ordering checks compare.
type Number interface {
	~int | ~int64 | ~uint32 | ~uint64 | ~float64
}

// text writes a value for a message, durations the short way.
func text[T any](v T) string {
	if d, ok := any(v).(time.Duration); ok {
		return FormatDuration(d)
	}
	return fmt.Sprint(v)
}

// Positive checks that a value is above zero.
func Positive[T Number](v T) error {
	if v <= 0 {
		return fmt.Errorf("must be positive")
	}
	return nil
}

// NotNegative checks that a value is zero or more.
func NotNegative[T Number](v T) error {
	if v < 0 {
		return fmt.Errorf("must not be negative")
	}
	return nil
}

// AtLeast checks that a value is min or more.
func AtLeast[T Number](min T) func(T) error {
	return func(v T) error {
		if v < min {
			return fmt.Errorf("must be at least %s", text(min))
		}
		return nil
	}
}

// Between checks that a value is in [lo, hi].
func Between[T Number](lo, hi T) func(T) error {
	return func(v T) error {
		if v < lo || v > hi {
			return fmt.Errorf("must be between %s and %s", text(lo), text(hi))
		}
		return nil
	}
}

// AtLeastFlag checks that a value is at least another flag's: the message
// names both, "must be at least -backoff-base 2s".
func AtLeastFlag[T Number](other *Binding[T]) func(T) error {
	return func(v T) error {
		if cmp.Less(v, other.Value()) {
			return fmt.Errorf("must be at least %s %s", other.Flag(), other.Text())
		}
		return nil
	}
}

// OneOf checks that a string is one of values, ignoring case.
func OneOf(values ...string) func(string) error {
	return func(v string) error {
		if !slices.ContainsFunc(values, func(w string) bool { return strings.EqualFold(v, w) }) {
			return fmt.Errorf("want %s", orList(values))
		}
		return nil
	}
}

// orList writes "a, b or c".
func orList(vs []string) string {
	if len(vs) < 2 {
		return strings.Join(vs, "")
	}
	return strings.Join(vs[:len(vs)-1], ", ") + " or " + vs[len(vs)-1]
}
