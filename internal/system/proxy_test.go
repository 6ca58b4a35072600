package system_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/system"
)

// echoServer answers every line with the same line, until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip writes a line on c and reads the echo, within d.
func roundTrip(c net.Conn, r *bufio.Reader, d time.Duration) (string, error) {
	if err := c.SetDeadline(time.Now().Add(d)); err != nil {
		return "", err
	}
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return "", err
	}
	return r.ReadString('\n')
}

func dialProxy(t *testing.T, p *system.Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// A proxy passes bytes both ways; cut as a black hole it passes nothing on
// old and new connections while keeping them open; healed, it closes what
// lived through the cut and passes again.
func TestProxyBlackholeAndHeal(t *testing.T) {
	p, err := system.NewProxy("127.0.0.1:0", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, r := dialProxy(t, p)
	if got, err := roundTrip(c, r, 5*time.Second); err != nil || got != "ping\n" {
		t.Fatalf("through the proxy: got %q, %v; want the echo", got, err)
	}

	p.Cut(system.Blackhole)
	if _, err := roundTrip(c, r, 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("an old connection through a black hole: got %v, want a timeout (nothing passes, nothing closes)", err)
	}
	fresh, fr := dialProxy(t, p)
	if _, err := roundTrip(fresh, fr, 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("a new connection into a black hole: got %v, want a timeout", err)
	}

	p.Heal()
	if err := waitClosed(c, 5*time.Second); err != nil {
		t.Fatalf("the old connection after the heal: %v", err)
	}
	if err := waitClosed(fresh, 5*time.Second); err != nil {
		t.Fatalf("the connection made during the cut, after the heal: %v", err)
	}
	again, ar := dialProxy(t, p)
	if got, err := roundTrip(again, ar, 5*time.Second); err != nil || got != "ping\n" {
		t.Fatalf("a new connection after the heal: got %q, %v; want the echo", got, err)
	}
}

// A proxy cut with Refuse closes its connections and every new one at once.
func TestProxyRefuse(t *testing.T) {
	p, err := system.NewProxy("127.0.0.1:0", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, r := dialProxy(t, p)
	if _, err := roundTrip(c, r, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Cut(system.Refuse)
	if err := waitClosed(c, 5*time.Second); err != nil {
		t.Fatalf("a connection when the proxy refuses: %v", err)
	}
	fresh, _ := dialProxy(t, p)
	if err := waitClosed(fresh, 5*time.Second); err != nil {
		t.Fatalf("a new connection when the proxy refuses: %v", err)
	}
	if got := p.IsCut(); got != system.Refuse {
		t.Errorf("IsCut = %v, want refuse", got)
	}
	p.Heal()
	if got := p.IsCut(); got != 0 {
		t.Errorf("IsCut after Heal = %v, want 0", got)
	}
}

// waitClosed reads from c until it reports the end of the connection,
// within d.
func waitClosed(c net.Conn, d time.Duration) error {
	if err := c.SetReadDeadline(time.Now().Add(d)); err != nil {
		return err
	}
	buf := make([]byte, 64)
	for {
		_, err := c.Read(buf)
		switch {
		case err == nil:
			continue
		case isTimeout(err):
			return errors.New("still open")
		}
		return nil
	}
}

func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }
