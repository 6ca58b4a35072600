//go:build !unix

package main

import "testing"

// benchScriptList needs a POSIX shell: the script is one.
func benchScriptList(b *testing.B, _ string) {
	b.Skip("scripts/dead-letters.sh needs a POSIX shell")
}
