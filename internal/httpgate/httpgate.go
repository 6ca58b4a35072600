// Package httpgate runs a delivery engine's admission check at the last
// possible moment of an HTTP request: on the connection's first write of the
// request. A request refused there never reaches the provider, so an engine
// that has just read a 429 can stop every request not yet on the wire. It
// also tells the engine at the first possible moment that an answer has
// begun to arrive ([WithAnswerNotice]), and before the check runs it waits
// for answers already in this machine's sockets to be noticed (unread.go).
//
// It works with transports made by [NewTransport], which speak HTTP/1.1 only:
// a connection then carries one request at a time, and the check armed by
// one request (in the GotConn trace hook, before the transport's writer
// starts) cannot fire for another. With any other transport [Do] runs the
// check just before handing the request over.
package httpgate

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"
)

// admissionKey carries an admission check in a request's context.
type admissionKey struct{}

// WithAdmission returns a context whose requests ask admit, as the last
// thing before they are written, whether they may be written at all. admit
// may be called more than once for one request (the transport retries a
// request on a new connection when a kept-alive one turned out closed before
// anything was written); it must answer the same each time.
func WithAdmission(ctx context.Context, admit func() error) context.Context {
	return context.WithValue(ctx, admissionKey{}, admit)
}

// Admission returns the check carried by ctx, or nil.
func Admission(ctx context.Context) func() error {
	f, _ := ctx.Value(admissionKey{}).(func() error)
	return f
}

// answerKey carries an answer notice in a request's context.
type answerKey struct{}

// WithAnswerNotice returns a context whose requests call notice as soon as
// the first byte of their answer has been read: in the transport's reader
// goroutine, before the status line is parsed and before the caller's
// goroutine runs again. A delivery engine uses it to hold back its other
// requests until it knows whether the answer is a 429.
func WithAnswerNotice(ctx context.Context, notice func()) context.Context {
	return context.WithValue(ctx, answerKey{}, notice)
}

// AnswerNotice returns the notice carried by ctx, or nil.
func AnswerNotice(ctx context.Context) func() {
	f, _ := ctx.Value(answerKey{}).(func())
	return f
}

// NotSentError is returned when a request was not written because its
// admission check refused it: the provider has certainly not seen it.
type NotSentError struct {
	// Err is the admission check's error.
	Err error
}

func (e *NotSentError) Error() string { return fmt.Sprintf("not sent: %v", e.Err) }

// Unwrap returns the admission check's error.
func (e *NotSentError) Unwrap() error { return e.Err }

// DefaultMaxIdleConnsPerHost is the default bound of the pool kept per
// provider host: twice the most requests a worker derives to keep in
// flight (delivery.MaxDerivedInFlight, 512), so that a -max-in-flight set
// by hand above that keeps its connections too, up to 1024.
const DefaultMaxIdleConnsPerHost = 1024

// Options tune NewTransport.
type Options struct {
	// DialTimeout bounds a dial; default 10s.
	DialTimeout time.Duration
	// MaxIdleConnsPerHost is the most idle connections kept per provider
	// host; default DefaultMaxIdleConnsPerHost. A pool holds only the
	// connections its requests opened, so it never grows beyond the most
	// requests a worker had in flight at once; a bound below that would
	// close connections and open them again (TLS handshakes) at every
	// round of requests.
	MaxIdleConnsPerHost int
	// UnreadWaitMax bounds how long a gated request waits for answers that
	// have reached this machine on other connections to be reported
	// (unread.go); default 50ms.
	UnreadWaitMax time.Duration
	// OnUnreadWait, when set, is called each time a gated request begins
	// such a wait.
	OnUnreadWait func()
	// DialContext dials the provider; default a net.Dialer with
	// DialTimeout. Tests use it to hold a connection's reads back.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
}

// NewTransport returns an HTTP/1.1 transport whose connections run the
// admission check of the request they carry on its first write, with a pool
// sized for a worker sending in parallel to one host.
func NewTransport(o Options) *http.Transport {
	if o.DialTimeout <= 0 {
		o.DialTimeout = 10 * time.Second
	}
	if o.MaxIdleConnsPerHost <= 0 {
		o.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	}
	if o.UnreadWaitMax <= 0 {
		o.UnreadWaitMax = 50 * time.Millisecond
	}
	dial := o.DialContext
	if dial == nil {
		dial = (&net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}).DialContext
	}
	u := &unread{max: o.UnreadWaitMax, onWait: o.OnUnreadWait, ready: newReadySet()}
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &gateConn{Conn: c, unread: u, peek: newPeeker(c)}, nil
		},
		ForceAttemptHTTP2:     false,
		MaxIdleConns:          2 * o.MaxIdleConnsPerHost,
		MaxIdleConnsPerHost:   o.MaxIdleConnsPerHost,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// gateConn runs the armed check on the next write, and is kept among its
// transport's connections awaiting an answer from then until the answer's
// first byte is reported (unread.go).
type gateConn struct {
	net.Conn
	unread *unread
	peek   peeker
	gate   atomic.Pointer[func() error]
	// secure is set when the connection carries TLS: its bytes read are
	// records, perhaps a session ticket, not yet the answer.
	secure atomic.Bool
	// awaiting is set while the connection is among those awaiting an
	// answer; readAhead when, meanwhile, bytes of a plain connection were
	// read and the answer not reported yet.
	awaiting, readAhead atomic.Bool
	// watched is set while the transport's readySet watches the socket:
	// from the connection's first request until it closes;
	// reported counts the answers whose first byte was reported; taken
	// the reads of a TLS connection that took bytes while an answer was
	// awaited; noted is the last of unread's scans that found an answer
	// here. All are guarded by unread.mu.
	watched                bool
	reported, taken, noted uint64
}

func (c *gateConn) Write(p []byte) (int, error) {
	if g := c.gate.Swap(nil); g != nil {
		c.unread.wait(c)
		if err := (*g)(); err != nil {
			return 0, err
		}
		c.unread.add(c)
	}
	return c.Conn.Write(p)
}

func (c *gateConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.awaiting.Load() {
		if c.secure.Load() {
			c.unread.took(c)
		} else {
			c.readAhead.Store(true)
		}
	}
	return n, err
}

func (c *gateConn) Close() error {
	c.unread.forget(c)
	return c.Conn.Close()
}

// arm sets check on the connection the transport picked (unwrapping TLS)
// and returns it, nil when it is not a gateConn. Every request arms its
// connection, with nil when it has no check, so a check left by a request
// that never wrote cannot fire for the next one.
func arm(info httptrace.GotConnInfo, check *func() error) *gateConn {
	conn := info.Conn
	secure := false
	if tc, ok := conn.(interface{ NetConn() net.Conn }); ok {
		conn, secure = tc.NetConn(), true
	}
	gc, ok := conn.(*gateConn)
	if !ok {
		return nil
	}
	gc.secure.Store(secure)
	gc.gate.Store(check)
	return gc
}

// Do sends req with c, running the admission check its context carries:
// on the connection's first write when c's transport came from
// NewTransport (gated true), otherwise just before. When the check refuses,
// Do returns a *NotSentError wrapping its error and nothing was sent.
func Do(c *http.Client, gated bool, req *http.Request) (*http.Response, error) {
	admit := Admission(req.Context())
	var refused atomic.Pointer[error]
	var check func() error
	if admit != nil {
		check = func() error {
			err := admit()
			if err != nil {
				refused.Store(&err)
			}
			return err
		}
	}
	notice := AnswerNotice(req.Context())
	trace := &httptrace.ClientTrace{GotFirstResponseByte: notice}
	// conn is the connection the request was written on, while its answer
	// is awaited (unread.go).
	var conn atomic.Pointer[gateConn]
	if gated {
		trace.GotConn = func(info httptrace.GotConnInfo) {
			if check == nil {
				arm(info, nil)
				return
			}
			if gc := arm(info, &check); gc != nil {
				conn.Store(gc)
			}
		}
		if check != nil {
			answered := func() {
				if gc := conn.Load(); gc != nil {
					gc.unread.remove(gc)
				}
			}
			// The notice first, then the connection leaves the awaited:
			// a request waiting for it finds the answer begun.
			trace.GotFirstResponseByte = func() {
				if notice != nil {
					notice()
				}
				answered()
			}
			defer answered()
		}
	} else if check != nil {
		if err := check(); err != nil {
			return nil, &NotSentError{Err: err}
		}
	}
	if trace.GotConn != nil || trace.GotFirstResponseByte != nil {
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
	}
	resp, err := c.Do(req)
	if err != nil {
		if r := refused.Load(); r != nil {
			return nil, &NotSentError{Err: *r}
		}
		return nil, err
	}
	return resp, nil
}
