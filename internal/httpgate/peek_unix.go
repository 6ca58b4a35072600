//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package httpgate

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// peeker looks at a connection's socket without reading from it. Its raw
// connection is taken once, when the connection is dialled: a wait peeks
// at every connection awaiting an answer, for every request written.
type peeker struct {
	raw syscall.RawConn
	// fd is the socket's descriptor, -1 if unknown: it names the
	// connection in a readySet's answers while the connection is open.
	fd int
}

// newPeeker returns conn's peeker. A connection without a descriptor gets
// one that reports nothing waiting: the wait it would cause is only an
// improvement, never a condition for correctness.
func newPeeker(conn net.Conn) peeker {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return peeker{fd: -1}
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return peeker{fd: -1}
	}
	p := peeker{raw: raw, fd: -1}
	_ = raw.Control(func(fd uintptr) { p.fd = int(fd) })
	return p
}

// bytesWaiting reports whether bytes wait to be read on the socket, peeking
// one without taking it. A closed connection reports false.
func (p peeker) bytesWaiting() bool {
	if p.raw == nil {
		return false
	}
	waiting := false
	_ = p.raw.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		waiting = err == nil && n > 0
	})
	return waiting
}
