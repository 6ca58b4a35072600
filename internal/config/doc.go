// Package config is the one configuration scheme every tgnotify command
// uses: a flag.FlagSet whose flags are the settings, filled from four places
// with a fixed precedence.
//
//  1. An explicit flag on the command line.
//  2. The environment: <PREFIX>_<FLAG> (upper case, dashes as underscores),
//     then the aliases a flag declares (NATS_URL for -nats). Any environment
//     variable beats the file.
//  3. The YAML file named by the configuration flag (-config): its keys are
//     flag names; an unknown key is an error naming it.
//  4. The default the flag was registered with, which comes from the
//     library's exported defaults, never from a literal repeated here.
//
// Settings are bound to the fields they set with typed constructors ([Int],
// [Duration], [Bool], ...) that take their checks along ([Binding.Check]):
// an invalid value is reported as an [*Error] naming the flag, its value and
// where the value came from, e.g.
//
//	-backoff-cap 1s: must be at least -backoff-base 2s
//
// Flags registered on [Set.FlagSet] by other packages (the NATS connection
// flags of pkg/jetstream, say) take part in the same precedence. A setting
// that moved elsewhere is declared with [Set.Removed]: naming it anywhere
// fails with a message saying where it went. [Set.Explicit] lists every
// setting that is not at its default and where it came from, for a start-up
// log line.
package config
