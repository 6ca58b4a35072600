//go:build unix

package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// terminalWidth returns the width of the terminal f in columns, or 0 when f
// is not a terminal.
func terminalWidth(f *os.File) int {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}
