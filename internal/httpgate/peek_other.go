//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package httpgate

import "net"

// peeker cannot look at a socket here: a request then waits only for
// answers whose bytes were read.
type peeker struct{ fd int }

func newPeeker(net.Conn) peeker { return peeker{fd: -1} }

func (peeker) bytesWaiting() bool { return false }
