// Package builtbin finds the binaries `make build` puts in ./bin for the
// tests that run them as processes. `make test` passes their directory in
// TGNOTIFY_BIN; without it those tests are skipped, so that a plain
// `go test ./...` still runs everything else.
package builtbin

import (
	"os"
	"path/filepath"
	"testing"
)

// EnvVar names the environment variable that holds the directory of the
// built binaries.
const EnvVar = "TGNOTIFY_BIN"

// Dir returns the absolute directory of the built binaries. It skips tb when
// TGNOTIFY_BIN is not set, and fails it when one of names is not in the
// directory (the build is incomplete or stale).
func Dir(tb testing.TB, names ...string) string {
	tb.Helper()
	dir := os.Getenv(EnvVar)
	if dir == "" {
		tb.Skip(EnvVar + " is not set: this test runs the built binaries; run `make test`, or `make build` and " + EnvVar + "=$PWD/bin go test ./...")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		tb.Fatal(err)
	}
	for _, name := range names {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			tb.Fatalf("%s=%s has no %s: run `make build`", EnvVar, dir, name)
		}
	}
	return dir
}
