package botapi

import (
	"context"
	"fmt"
	"net"
	"net/http/httptrace"
	"sync/atomic"
)

// admissionKey carries an admission check in a request's context.
type admissionKey struct{}

// WithAdmission returns a context that makes the client ask admit, as the
// last thing before a request made with it is written to the connection,
// whether it may be written at all. When admit returns an error nothing is
// sent: the call fails with a [*NotSentError] wrapping it. admit may be
// called more than once for one call (the transport retries a request on a
// new connection when a kept-alive one turned out closed before anything
// was written); it must answer the same each time.
//
// With the client's own transport the check runs on the connection's first
// write of the request, so a delivery engine can stop every request that has
// not reached the wire the moment it reads a 429. With a transport of the
// caller's ([WithHTTPClient]) it runs just before the request is handed to
// the transport.
func WithAdmission(ctx context.Context, admit func() error) context.Context {
	return context.WithValue(ctx, admissionKey{}, admit)
}

func admissionFrom(ctx context.Context) func() error {
	f, _ := ctx.Value(admissionKey{}).(func() error)
	return f
}

// NotSentError is returned when a request was not written because its
// admission check refused it: Telegram has certainly not seen it.
type NotSentError struct {
	// Method is the Bot API method that was not called.
	Method string
	// Err is the admission check's error.
	Err error
}

func (e *NotSentError) Error() string {
	return fmt.Sprintf("botapi: %s: not sent: %v", e.Method, e.Err)
}

// Unwrap returns the admission check's error.
func (e *NotSentError) Unwrap() error { return e.Err }

// gateConn is a connection of the client's own transport that runs the
// admission check of the request it carries on the request's first write.
// The transport speaks HTTP/1.1 only, so a connection carries one request
// at a time, and the check set by one request (in the GotConn trace hook,
// before the transport's writer starts) cannot fire for another.
type gateConn struct {
	net.Conn
	gate atomic.Pointer[func() error]
}

func (c *gateConn) Write(p []byte) (int, error) {
	if g := c.gate.Swap(nil); g != nil {
		if err := (*g)(); err != nil {
			return 0, err
		}
	}
	return c.Conn.Write(p)
}

// gateDialer wraps every connection it dials in a gateConn.
func gateDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &gateConn{Conn: c}, nil
	}
}

// armGate sets the request's admission check on the connection the
// transport picked for it (unwrapping TLS). Every request arms its
// connection, with nil when it has no check, so a check left by a request
// that never wrote cannot fire for the next one.
func armGate(info httptrace.GotConnInfo, admit *func() error) bool {
	conn := info.Conn
	if tc, ok := conn.(interface{ NetConn() net.Conn }); ok {
		conn = tc.NetConn()
	}
	gc, ok := conn.(*gateConn)
	if !ok {
		return false
	}
	gc.gate.Store(admit)
	return true
}
