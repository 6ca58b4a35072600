//go:build unix

package system

import (
	"fmt"
	"net"
	"strconv"
	"syscall"
)

// boundPort holds a loopback TCP port bound but not listening: the kernel
// answers a connection to it with a reset (connection refused), and the
// port stays taken until Close.
type boundPort struct {
	fd   int
	addr string
}

// newRefuser binds a loopback TCP socket to a free port without listening
// on it.
func newRefuser() (refuser, error) {
	syscall.ForkLock.RLock()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("creating the socket that refuses implicit routes: %w", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("binding the socket that refuses implicit routes: %w", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("reading the port that refuses implicit routes: %w", err)
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		syscall.Close(fd)
		return nil, fmt.Errorf("the socket that refuses implicit routes has address %T, want IPv4", sa)
	}
	return &boundPort{fd: fd, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(in4.Port))}, nil
}

func (b *boundPort) Addr() string { return b.addr }

func (b *boundPort) Close() error { return syscall.Close(b.fd) }
