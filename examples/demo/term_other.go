//go:build !unix

package main

import "os"

// terminalWidth is unknown outside Unix: lines are not cut.
func terminalWidth(*os.File) int { return 0 }
