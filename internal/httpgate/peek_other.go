//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package httpgate

import "net"

// bytesWaiting reports false where the socket cannot be peeked at: a
// request then waits only for answers whose bytes were read.
func bytesWaiting(net.Conn) bool { return false }
