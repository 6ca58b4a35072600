//go:build !unix

package procs

import "syscall"

// sysProcAttr has nothing to add outside Unix.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// killGroup is a no-op outside Unix: the process itself is killed.
func killGroup(int) error { return nil }
