package procs

import "syscall"

// sysProcAttr puts the child in a process group of its own (a Ctrl-C at the
// terminal reaches only the supervisor, which stops the children in order)
// and has the kernel send it SIGKILL if the supervisor dies first.
//
// The parent-death signal is tied to the OS thread that started the child;
// the Go runtime keeps its threads for the life of the process unless a
// goroutine exits while locked to one, which this package never does.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup sends SIGKILL to the process group led by pid.
func killGroup(pid int) error { return syscall.Kill(-pid, syscall.SIGKILL) }
