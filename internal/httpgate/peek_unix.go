//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package httpgate

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// bytesWaiting reports whether bytes wait to be read on conn's socket,
// peeking one without taking it. A connection without a descriptor (or one
// that fails) reports false: the wait it would cause is only an
// improvement, never a condition for correctness.
func bytesWaiting(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	waiting := false
	var b [1]byte
	_ = rc.Control(func(fd uintptr) {
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		waiting = err == nil && n > 0
	})
	return waiting
}
