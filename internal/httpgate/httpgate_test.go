package httpgate_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/httpgate"
)

// A refused request never reaches the server, on fresh and on kept-alive
// connections; an admitted one does; a request without a check is not
// affected by a check another request left armed.
func TestRefusedRequestsNeverReachTheServer(t *testing.T) {
	var handled atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handled.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer srv.Close()
	c := &http.Client{Transport: httpgate.NewTransport(httpgate.Options{MaxIdleConnsPerHost: 8})}
	send := func(admit func() error) error {
		ctx := context.Background()
		if admit != nil {
			ctx = httpgate.WithAdmission(ctx, admit)
		}
		return post(ctx, c, srv.URL, []byte(`{"text":"hi"}`))
	}
	var wg sync.WaitGroup
	for range 8 { // fill the pool with kept-alive connections
		wg.Go(func() {
			if err := send(nil); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	before := handled.Load()
	refuse := errors.New("paused")
	for range 40 {
		err := send(func() error { return refuse })
		var ns *httpgate.NotSentError
		if !errors.As(err, &ns) || !errors.Is(err, refuse) {
			t.Fatalf("refused request returned %v, want a NotSentError wrapping the refusal", err)
		}
	}
	if n := handled.Load() - before; n != 0 {
		t.Fatalf("the server handled %d refused requests, want 0", n)
	}
	var calls atomic.Int64
	for range 10 {
		if err := send(func() error { calls.Add(1); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		if err := send(nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := handled.Load() - before; n != 20 {
		t.Fatalf("the server handled %d admitted requests, want 20", n)
	}
	if calls.Load() < 10 {
		t.Fatalf("the check ran %d times for 10 admitted requests", calls.Load())
	}
}

// With a transport of the caller's the check runs before the request is
// handed over.
func TestUngatedTransportChecksBefore(t *testing.T) {
	var handled atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { handled.Add(1) }))
	defer srv.Close()
	req, _ := http.NewRequestWithContext(httpgate.WithAdmission(context.Background(), func() error { return errors.New("no") }),
		http.MethodPost, srv.URL, nil)
	if _, err := httpgate.Do(srv.Client(), false, req); err == nil {
		t.Fatal("refused request succeeded")
	}
	if handled.Load() != 0 {
		t.Fatal("the server saw a refused request")
	}
}

// The answer notice runs as soon as the answer's first byte is read, so
// before Do hands the answer to its caller, on both kinds of transport; a
// refused request, never written, has no answer to notice.
func TestAnswerNoticeRunsBeforeTheCallerSeesTheAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"ok":false,"error_code":429,"parameters":{"retry_after":3}}`)
	}))
	defer srv.Close()
	gated := &http.Client{Transport: httpgate.NewTransport(httpgate.Options{})}
	for _, tc := range []struct {
		name   string
		client *http.Client
		gated  bool
	}{{"gated", gated, true}, {"ungated", srv.Client(), false}} {
		t.Run(tc.name, func(t *testing.T) {
			send := func(admit func() error) (noticed int64, err error) {
				var n atomic.Int64
				ctx := httpgate.WithAnswerNotice(httpgate.WithAdmission(context.Background(), admit), func() { n.Add(1) })
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, bytes.NewReader([]byte(`{"text":"hi"}`)))
				if err != nil {
					t.Fatal(err)
				}
				resp, err := httpgate.Do(tc.client, tc.gated, req)
				noticed = n.Load() // read before the body: the notice came first
				if err != nil {
					return noticed, err
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				if resp.StatusCode != http.StatusTooManyRequests {
					t.Fatalf("status %d, want 429", resp.StatusCode)
				}
				return noticed, resp.Body.Close()
			}
			for range 5 {
				n, err := send(func() error { return nil })
				if err != nil {
					t.Fatal(err)
				}
				if n != 1 {
					t.Fatalf("the notice ran %d times before Do returned the answer, want once", n)
				}
			}
			n, err := send(func() error { return errors.New("paused") })
			var ns *httpgate.NotSentError
			if !errors.As(err, &ns) {
				t.Fatalf("refused request returned %v, want a NotSentError", err)
			}
			if n != 0 {
				t.Fatalf("the notice ran %d times for a request never written", n)
			}
		})
	}
}

// The pool keeps the connection of every request a worker had in flight,
// also above the 256 it derives at most (a -max-in-flight set by hand):
// when 300 requests were answered at once, each connection went back to
// the pool instead of being closed, to be dialled again (a TLS handshake
// to the provider) by the next round.
func TestPoolKeepsTheConnectionsOfEveryRequestInFlight(t *testing.T) {
	const inFlight = 300
	var arrived atomic.Int64
	all := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if arrived.Add(1) == inFlight {
			close(all)
		}
		select { // hold every answer until all the requests are in flight
		case <-all:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	var dials atomic.Int64
	dialer := &net.Dialer{}
	c := &http.Client{Transport: httpgate.NewTransport(httpgate.Options{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return dialer.DialContext(ctx, network, addr)
		},
	})}
	defer c.CloseIdleConnections()
	puts := make(chan error, inFlight)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	trace := &httptrace.ClientTrace{PutIdleConn: func(err error) { puts <- err }}
	var wg sync.WaitGroup
	for range inFlight {
		wg.Go(func() {
			if err := post(httptrace.WithClientTrace(ctx, trace), c, srv.URL, nil); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if n := dials.Load(); n != inFlight {
		t.Fatalf("%d requests in flight at once dialled %d connections, want one each", inFlight, n)
	}
	// Each connection is handed back to the pool (or closed) by its read
	// loop once its answer was read.
	closed := 0
	for range inFlight {
		select {
		case err := <-puts:
			if err != nil {
				closed++
			}
		case <-ctx.Done():
			t.Fatal("the connections were not handed back to the pool within a minute")
		}
	}
	if closed > 0 {
		t.Fatalf("%d of %d connections were closed instead of kept in the pool", closed, inFlight)
	}
}

// post sends body to url with c through httpgate.Do, as a gated request,
// and reads the answer to its end, which hands the connection back to the
// pool.
func post(ctx context.Context, c *http.Client, url string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := httpgate.Do(c, true, req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}
