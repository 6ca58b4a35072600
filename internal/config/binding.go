package config

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// Binding is one flag bound to the variable it sets, with the checks its
// value must pass. Create it with [Int], [Uint32], [Float], [Duration],
// [String] or [Bool].
type Binding[T any] struct {
	set    *Set
	value  *value[T]
	name   string
	checks []func(T) error
}

// Check adds checks of the value, run once every source has been read. A
// check returns what is wrong ("must be positive"); the error reported
// names the flag, the value and where it came from.
func (b *Binding[T]) Check(checks ...func(T) error) *Binding[T] {
	b.checks = append(b.checks, checks...)
	return b
}

// Value returns the current value.
func (b *Binding[T]) Value() T { return *b.value.p }

// Name returns the flag's name.
func (b *Binding[T]) Name() string { return b.name }

// Flag returns the flag as written on the command line: "-name".
func (b *Binding[T]) Flag() string { return "-" + b.name }

// Text returns the current value as the flag shows it (durations as 2h,
// not 2h0m0s).
func (b *Binding[T]) Text() string { return b.value.String() }

// Origin returns where the value came from.
func (b *Binding[T]) Origin() Origin { return b.set.Origin(b.name) }

// IsSet reports whether the value came from a flag, the environment or the
// file rather than the default.
func (b *Binding[T]) IsSet() bool { return b.Origin().Source != FromDefault }

// check runs the checks and returns their errors, each naming the flag.
func (b *Binding[T]) check() []error {
	var errs []error
	for _, c := range b.checks {
		err := c(b.Value())
		if err == nil {
			continue
		}
		shown := b.set.show(b.name, b.Text())
		if b.value.typ == "bool" {
			shown = "" // the flag alone says it
		}
		errs = append(errs, &Error{Flag: b.name, Value: shown, Origin: b.Origin(), Err: err})
	}
	return errs
}

// bind registers flag name on s, bound to p, with default def.
func bind[T any](s *Set, p *T, name string, def T, usage, typ string, parse func(string) (T, error), format func(T) string) *Binding[T] {
	*p = def
	v := &value[T]{p: p, typ: typ, parse: parse, format: format}
	s.fs.Var(v, name, usage)
	b := &Binding[T]{set: s, value: v, name: name}
	s.bindings = append(s.bindings, b)
	return b
}

// Int binds an int flag.
func Int(s *Set, p *int, name string, def int, usage string) *Binding[int] {
	return bind(s, p, name, def, usage, "int", func(v string) (int, error) {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 0, strconv.IntSize)
		return int(n), numErr(err, "an integer")
	}, strconv.Itoa)
}

// Uint32 binds a uint32 flag.
func Uint32(s *Set, p *uint32, name string, def uint32, usage string) *Binding[uint32] {
	return bind(s, p, name, def, usage, "uint", func(v string) (uint32, error) {
		n, err := strconv.ParseUint(strings.TrimSpace(v), 0, 32)
		return uint32(n), numErr(err, "a whole number from 0 to 4294967295")
	}, func(v uint32) string { return strconv.FormatUint(uint64(v), 10) })
}

// Uint64 binds a uint64 flag.
func Uint64(s *Set, p *uint64, name string, def uint64, usage string) *Binding[uint64] {
	return bind(s, p, name, def, usage, "uint", func(v string) (uint64, error) {
		n, err := strconv.ParseUint(strings.TrimSpace(v), 0, 64)
		return n, numErr(err, "a whole number")
	}, func(v uint64) string { return strconv.FormatUint(v, 10) })
}

// Float binds a float64 flag.
func Float(s *Set, p *float64, name string, def float64, usage string) *Binding[float64] {
	return bind(s, p, name, def, usage, "float", func(v string) (float64, error) {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		return f, numErr(err, "a number")
	}, func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) })
}

// Duration binds a time.Duration flag; values are Go durations (90s, 2h).
func Duration(s *Set, p *time.Duration, name string, def time.Duration, usage string) *Binding[time.Duration] {
	return bind(s, p, name, def, usage, "duration", func(v string) (time.Duration, error) {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			return 0, errors.New("not a duration (write it like 500ms, 30s, 2h)")
		}
		return d, nil
	}, FormatDuration)
}

// Never is the value a DurationOrNever flag takes for "never".
const Never time.Duration = -1

// DurationOrNever binds a time.Duration flag that also accepts "never",
// stored as [Never] (a positive duration otherwise).
func DurationOrNever(s *Set, p *time.Duration, name string, def time.Duration, usage string) *Binding[time.Duration] {
	return bind(s, p, name, def, usage, "duration", func(v string) (time.Duration, error) {
		v = strings.TrimSpace(v)
		if v == "never" {
			return Never, nil
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return 0, errors.New("not a positive duration (write it like 90s, 2m) or never")
		}
		return d, nil
	}, func(d time.Duration) string {
		if d == Never {
			return "never"
		}
		return FormatDuration(d)
	})
}

// String binds a string flag.
func String(s *Set, p *string, name, def, usage string) *Binding[string] {
	return bind(s, p, name, def, usage, "string", func(v string) (string, error) { return v, nil },
		func(v string) string { return v })
}

// Bool binds a boolean flag: -name alone means true.
func Bool(s *Set, p *bool, name string, def bool, usage string) *Binding[bool] {
	return bind(s, p, name, def, usage, "bool", func(v string) (bool, error) {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return false, errors.New("not a boolean (true or false)")
		}
		return b, nil
	}, strconv.FormatBool)
}

// numErr turns a strconv error into what was expected.
func numErr(err error, want string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, strconv.ErrRange):
		return errors.New("out of range")
	}
	return errors.New("not " + want)
}

// FormatDuration writes d the way people write durations: 72h, 1h30m, 2m,
// 500ms, instead of time.Duration's 72h0m0s.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// value is the flag.Value of a binding.
type value[T any] struct {
	p      *T
	typ    string
	parse  func(string) (T, error)
	format func(T) string
}

func (v *value[T]) Set(s string) error {
	x, err := v.parse(s)
	if err != nil {
		return err
	}
	*v.p = x
	return nil
}

func (v *value[T]) String() string {
	if v == nil || v.p == nil || v.format == nil {
		return ""
	}
	return v.format(*v.p)
}

// Get returns the value (flag.Getter).
func (v *value[T]) Get() any { return *v.p }

// IsBoolFlag lets -name stand for -name=true on boolean flags.
func (v *value[T]) IsBoolFlag() bool { return v.typ == "bool" }
