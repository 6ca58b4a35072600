package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"
)

// Source is where a setting's value came from.
type Source int

// The sources, lowest precedence first.
const (
	// FromDefault is the flag's registered default.
	FromDefault Source = iota
	// FromFile is the YAML file named by the configuration flag.
	FromFile
	// FromEnv is an environment variable.
	FromEnv
	// FromFlag is the command line.
	FromFlag
)

// String returns "default", "file", "env" or "flag".
func (s Source) String() string {
	switch s {
	case FromFile:
		return "file"
	case FromEnv:
		return "env"
	case FromFlag:
		return "flag"
	}
	return "default"
}

// Origin is where a setting's value came from, precisely.
type Origin struct {
	// Source is the kind of place.
	Source Source
	// Where names it: the environment variable, or the file and line
	// ("publisher.yaml:12"); "" for a flag or the default.
	Where string
}

// String returns "flag", "default", "env NATS_URL" or "file x.yaml:3".
func (o Origin) String() string {
	if o.Where == "" {
		return o.Source.String()
	}
	return o.Source.String() + " " + o.Where
}

// Options describe a command's configuration sources and its -h text.
type Options struct {
	// EnvPrefix makes every flag settable as <EnvPrefix>_<FLAG>. Empty: the
	// environment is read only for declared aliases.
	EnvPrefix string
	// Getenv reads the environment. Default os.Getenv.
	Getenv func(string) string
	// ConfigFlag is the name of the flag that names the YAML file, usually
	// "config". Empty: the command reads no file.
	ConfigFlag string
	// ConfigUsage is the -h text of the configuration flag.
	ConfigUsage string
	// Usage is printed by -h above the list of flags.
	Usage string
	// Output receives -h and the flag package's complaints. Default
	// os.Stderr.
	Output io.Writer
	// AllowArgs accepts arguments after the flags; otherwise they are an
	// error.
	AllowArgs bool
}

// Set is the configuration of one command: its flags, where each value came
// from, and the checks that run once every source has been read.
type Set struct {
	name     string
	opts     Options
	fs       *flag.FlagSet
	bindings []checker
	aliases  map[string][]string
	redact   map[string]func(string) string
	removed  map[string]string
	fileKeys map[string]bool
	fileHint string
	checks   []func() error
	origins  map[string]Origin
	config   string
}

// checker is a typed binding seen from the Set.
type checker interface {
	check() []error
}

// New returns the configuration of the command name.
func New(name string, o Options) *Set {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Output == nil {
		o.Output = os.Stderr
	}
	s := &Set{
		name:    name,
		opts:    o,
		fs:      flag.NewFlagSet(name, flag.ContinueOnError),
		aliases: map[string][]string{},
		redact:  map[string]func(string) string{},
		removed: map[string]string{},
		origins: map[string]Origin{},
	}
	s.fs.SetOutput(o.Output)
	s.fs.Usage = s.usage
	if o.ConfigFlag != "" {
		usage := o.ConfigUsage
		if usage == "" {
			usage = "YAML configuration `file`; keys are flag names; flags and the environment override it"
		}
		s.fs.StringVar(&s.config, o.ConfigFlag, "", usage)
	}
	return s
}

// FlagSet returns the underlying flag set, for packages that register their
// own flags (jetstream.Options.RegisterFlags). Those flags follow the same
// precedence; they have no checks of their own here.
func (s *Set) FlagSet() *flag.FlagSet { return s.fs }

// Name returns the command's name.
func (s *Set) Name() string { return s.name }

// Getenv reads the environment the set reads ([Options.Getenv]), for checks
// that look up more than their flags (a file the environment locates).
func (s *Set) Getenv(name string) string { return s.opts.Getenv(name) }

// EnvName returns the environment variable of flag name: <PREFIX>_<NAME>,
// upper case, dashes as underscores; "" without a prefix.
func (s *Set) EnvName(name string) string {
	if s.opts.EnvPrefix == "" {
		return ""
	}
	return s.opts.EnvPrefix + "_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// Alias makes the environment variables vars set flag name too, after
// <PREFIX>_<NAME>: Alias("nats", "NATS_URL"). Like any environment variable
// they beat the file.
func (s *Set) Alias(name string, vars ...string) {
	s.aliases[name] = append(s.aliases[name], vars...)
}

// Secret hides the values of the named flags in [Set.Explicit] and in
// errors.
func (s *Set) Secret(names ...string) {
	for _, n := range names {
		s.redact[n] = func(string) string { return "[redacted]" }
	}
}

// Redact shows the value of flag name through f in [Set.Explicit] and in
// errors (a URL without its password, say).
func (s *Set) Redact(name string, f func(string) string) { s.redact[name] = f }

// Removed declares a flag that no longer exists: naming it on the command
// line, in the environment or in the file fails with "removed: <hint>". -h
// does not list it.
func (s *Set) Removed(name, hint string) {
	s.removed[name] = hint
	s.fs.Var(removedValue{hint: hint}, name, "removed: "+hint)
}

// FileKeys restricts the keys the file may hold to names; hint says why
// another flag is refused there.
func (s *Set) FileKeys(hint string, names ...string) {
	s.fileKeys = map[string]bool{}
	for _, n := range names {
		s.fileKeys[n] = true
	}
	s.fileHint = hint
}

// Check adds a check that runs after every binding's own checks, for
// settings that contradict each other. Its error should be an [*Error]
// naming the flags at fault.
func (s *Set) Check(f func() error) { s.checks = append(s.checks, f) }

// Parse reads args, then the environment, then the file, and runs the
// checks. It returns flag.ErrHelp for -h, and otherwise nil or an error
// matching [ErrInvalid] that lists every problem found.
func (s *Set) Parse(args []string) error {
	if err := s.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &Error{Err: err}
	}
	if s.fs.NArg() > 0 && !s.opts.AllowArgs {
		return &Error{Err: fmt.Errorf("unexpected arguments %q", s.fs.Args())}
	}
	s.fs.Visit(func(f *flag.Flag) { s.origins[f.Name] = Origin{Source: FromFlag} })
	if err := s.applyEnv(); err != nil {
		return err
	}
	if s.config != "" {
		if err := s.applyFile(s.config); err != nil {
			return err
		}
	}
	return s.runChecks()
}

// LoadFile reads the YAML file at path as the only source besides the
// defaults, and runs the checks: for a file that is not a command's own
// configuration (a daemon reading the JetStream declaration).
func (s *Set) LoadFile(path string) error {
	if err := s.applyFile(path); err != nil {
		return err
	}
	return s.runChecks()
}

// applyEnv sets every flag not given on the command line from its
// environment variable or an alias, the first that is not empty.
func (s *Set) applyEnv() error {
	var errs []error
	s.fs.VisitAll(func(f *flag.Flag) {
		if _, set := s.origins[f.Name]; set {
			return
		}
		names := s.aliases[f.Name]
		if env := s.EnvName(f.Name); env != "" {
			names = append([]string{env}, names...)
		}
		for _, env := range names {
			v := s.opts.Getenv(env)
			if v == "" {
				continue
			}
			origin := Origin{Source: FromEnv, Where: env}
			if err := s.set(f.Name, v, origin); err != nil {
				errs = append(errs, err)
			}
			return
		}
	})
	return errors.Join(errs...)
}

// set sets flag name to v from origin, or reports why it cannot.
func (s *Set) set(name, v string, origin Origin) error {
	if hint, ok := s.removed[name]; ok {
		return &Error{Flag: name, Origin: origin, Err: errors.New("removed: " + hint)}
	}
	if err := s.fs.Set(name, v); err != nil {
		return &Error{Flag: name, Value: s.show(name, v), Origin: origin, Err: err}
	}
	s.origins[name] = origin
	return nil
}

// runChecks runs the bindings' checks in registration order, then the
// set's.
func (s *Set) runChecks() error {
	var errs []error
	for _, b := range s.bindings {
		errs = append(errs, b.check()...)
	}
	for _, c := range s.checks {
		if err := c(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Origin returns where flag name's value came from.
func (s *Set) Origin(name string) Origin { return s.origins[name] }

// show returns v as it may appear in a log or an error.
func (s *Set) show(name, v string) string {
	if f, ok := s.redact[name]; ok {
		return f(v)
	}
	return v
}

// Setting is one setting that is not at its default.
type Setting struct {
	// Name is the flag's name.
	Name string
	// Value is its value as text, redacted if it is secret.
	Value string
	// Origin is where it came from.
	Origin Origin
}

// Explicit returns the settings that were set by a flag, the environment or
// the file, in name order (the configuration flag itself excluded).
func (s *Set) Explicit() []Setting {
	var out []Setting
	s.fs.VisitAll(func(f *flag.Flag) {
		o, ok := s.origins[f.Name]
		if !ok || f.Name == s.opts.ConfigFlag {
			return
		}
		out = append(out, Setting{Name: f.Name, Value: s.show(f.Name, f.Value.String()), Origin: o})
	})
	return out
}

// LogAttr returns the explicit settings as one log attribute, "settings",
// each "value (origin)": a start-up line that says where every non-default
// setting came from.
func (s *Set) LogAttr() slog.Attr {
	var attrs []any
	for _, st := range s.Explicit() {
		attrs = append(attrs, slog.String(st.Name, st.Value+" ("+st.Origin.String()+")"))
	}
	if s.config != "" {
		attrs = append(attrs, slog.String(s.opts.ConfigFlag, s.config+" ("+s.origins[s.opts.ConfigFlag].String()+")"))
	}
	return slog.Group("settings", attrs...)
}

// usage prints the -h text: Options.Usage, then every flag but the removed
// ones, as flag.PrintDefaults does, with the environment aliases.
func (s *Set) usage() {
	w := s.fs.Output()
	fmt.Fprint(w, s.opts.Usage)
	var names []string
	s.fs.VisitAll(func(f *flag.Flag) {
		if _, gone := s.removed[f.Name]; !gone {
			names = append(names, f.Name)
		}
	})
	slices.Sort(names)
	for _, n := range names {
		f := s.fs.Lookup(n)
		var b strings.Builder
		fmt.Fprintf(&b, "  -%s", f.Name)
		typ, usage := flag.UnquoteUsage(f)
		if g, ok := f.Value.(flag.Getter); ok && !strings.Contains(f.Usage, "`") {
			if t := kindName(g.Get()); t != "" {
				typ = t
			}
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			typ = ""
		}
		if typ != "" {
			b.WriteString(" " + typ)
		}
		if b.Len() <= 4 {
			b.WriteString("\t")
		} else {
			b.WriteString("\n    \t")
		}
		b.WriteString(strings.ReplaceAll(usage, "\n", "\n    \t"))
		if !zeroDefault(f.DefValue) {
			if isString(f.Value) {
				fmt.Fprintf(&b, " (default %q)", f.DefValue)
			} else {
				fmt.Fprintf(&b, " (default %s)", f.DefValue)
			}
		}
		for _, v := range s.aliases[n] {
			if !strings.Contains(f.Usage, "$"+v) {
				fmt.Fprintf(&b, " (also $%s)", v)
			}
		}
		fmt.Fprintln(w, b.String())
	}
}

// zeroDefault reports whether a default is not worth showing.
func zeroDefault(v string) bool {
	switch v {
	case "", "0", "false", "0s", "[]":
		return true
	}
	return false
}

// isString reports whether v holds text, whose default -h quotes.
func isString(v flag.Value) bool {
	g, ok := v.(flag.Getter)
	if !ok {
		return false
	}
	_, ok = g.Get().(string)
	return ok
}

// kindName is how -h names the type of a flag whose value is v.
func kindName(v any) string {
	switch v.(type) {
	case time.Duration:
		return "duration"
	case int, int64:
		return "int"
	case uint, uint32, uint64:
		return "uint"
	case float64:
		return "float"
	case string:
		return "string"
	case []string:
		return "list"
	}
	return ""
}

// IsRemoved reports whether f was declared with [Set.Removed]: it no longer
// exists, and a file should not show it.
func IsRemoved(f *flag.Flag) bool {
	_, ok := f.Value.(removedValue)
	return ok
}

// removedValue is the flag.Value of a removed flag: setting it fails.
type removedValue struct{ hint string }

func (removedValue) String() string     { return "" }
func (r removedValue) Set(string) error { return errors.New("removed: " + r.hint) }
