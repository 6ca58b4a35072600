//go:build unix

package system

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

// The refuser's address refuses a connection at once, and no listener can
// take its port while it is held: so an implicit route to it fails on its
// first attempt, which nats-server does not retry.
func TestRefuserRefusesAndHoldsItsPort(t *testing.T) {
	r, err := newRefuser()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	conn, err := net.Dial("tcp", r.Addr())
	if err == nil {
		conn.Close()
		t.Fatalf("a connection to %s was accepted, want it refused", r.Addr())
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dialing %s: %v, want connection refused", r.Addr(), err)
	}
	ln, err := net.Listen("tcp", r.Addr())
	if err == nil {
		ln.Close()
		t.Fatalf("a listener took %s while the refuser held it", r.Addr())
	}
}
