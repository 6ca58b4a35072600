//go:build unix && !linux

package procs

import "syscall"

// sysProcAttr puts the child in a process group of its own, so a Ctrl-C at
// the terminal reaches only the supervisor, which stops the children in
// order. Outside Linux there is no parent-death signal: a supervisor killed
// with SIGKILL leaves its children running.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// killGroup sends SIGKILL to the process group led by pid.
func killGroup(pid int) error { return syscall.Kill(-pid, syscall.SIGKILL) }
