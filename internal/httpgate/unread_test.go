package httpgate_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/httpgate"
)

// heldConn is a connection whose reads wait until released: the transport's
// reader goroutine not yet scheduled, with the answer in the kernel.
type heldConn struct {
	*net.TCPConn
	release <-chan struct{}
}

func (c *heldConn) Read(p []byte) (int, error) {
	<-c.release
	return c.TCPConn.Read(p)
}

// unreadRig is a gated transport whose first connection's reads are held,
// and a server that answers every request at once with a 429.
type unreadRig struct {
	t        *testing.T
	srv      *httptest.Server
	client   *http.Client
	release  chan struct{}
	answered chan struct{}
	waits    chan struct{}

	mu     sync.Mutex
	events []string
}

func newUnreadRig(t *testing.T, waitMax time.Duration) *unreadRig {
	r := &unreadRig{t: t, release: make(chan struct{}), answered: make(chan struct{}, 8), waits: make(chan struct{}, 8)}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"ok":false,"error_code":429,"parameters":{"retry_after":3}}`)
		w.(http.Flusher).Flush()
		r.answered <- struct{}{}
	}))
	t.Cleanup(r.srv.Close)
	var dials sync.Mutex
	first := true
	r.client = &http.Client{Transport: httpgate.NewTransport(httpgate.Options{
		UnreadWaitMax: waitMax,
		OnUnreadWait:  func() { r.waits <- struct{}{} },
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			dials.Lock()
			defer dials.Unlock()
			if first {
				first = false
				return &heldConn{TCPConn: c.(*net.TCPConn), release: r.release}, nil
			}
			return c, nil
		},
	})}
	return r
}

func (r *unreadRig) log(e string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *unreadRig) logged() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// send sends one gated request named name and reports when it is done.
func (r *unreadRig) send(name string) <-chan error {
	done := make(chan error, 1)
	ctx := httpgate.WithAdmission(context.Background(), func() error { r.log("admit " + name); return nil })
	ctx = httpgate.WithAnswerNotice(ctx, func() { r.log("answer " + name) })
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.srv.URL, bytes.NewReader([]byte(`{"text":"hi"}`)))
	if err != nil {
		r.t.Fatal(err)
	}
	go func() {
		resp, err := httpgate.Do(r.client, true, req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			err = resp.Body.Close()
		}
		done <- err
	}()
	return done
}

func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("gave up waiting for %s", what)
		panic("unreachable")
	}
}

// A request about to be written waits while the answer to another request
// is on this machine but not yet read: its notice comes first, so a
// delivery engine sees a 429 before it admits the next request. Found by
// the long chaos run on the cluster: on a loaded machine the reader
// goroutine ran 13–21 ms after the 429 arrived, and a request admitted
// meanwhile reached Telegram inside the pause.
func TestRequestWaitsForAnAnswerAlreadyArrived(t *testing.T) {
	r := newUnreadRig(t, time.Minute)
	doneA := r.send("A")
	within(t, r.answered, "the 429 to A to be written")
	doneB := r.send("B")
	within(t, r.waits, "B to wait for the answer to A, already on this machine")
	if got := r.logged(); !slices.Equal(got, []string{"admit A"}) {
		t.Fatalf("events before A's answer was read: %q, want only A admitted", got)
	}
	close(r.release) // the reader goroutine runs
	if err := within(t, doneA, "A"); err != nil {
		t.Fatal(err)
	}
	if err := within(t, doneB, "B"); err != nil {
		t.Fatal(err)
	}
	got := r.logged()
	if i, j := slices.Index(got, "answer A"), slices.Index(got, "admit B"); i < 0 || j < 0 || i > j {
		t.Fatalf("events %q: want A's answer noticed before B is admitted", got)
	}
}

// The wait is bounded: a reader that never runs holds other requests back
// for UnreadWaitMax, not for ever.
func TestUnreadWaitIsBounded(t *testing.T) {
	r := newUnreadRig(t, 20*time.Millisecond)
	doneA := r.send("A")
	within(t, r.answered, "the 429 to A to be written")
	doneB := r.send("B")
	within(t, r.waits, "B to wait for the answer to A")
	if err := within(t, doneB, "B, after the bounded wait"); err != nil {
		t.Fatal(err)
	}
	if got := r.logged(); !slices.Contains(got, "admit B") || slices.Contains(got, "answer A") {
		t.Fatalf("events %q: want B admitted while A's answer is still unread", got)
	}
	close(r.release)
	if err := within(t, doneA, "A"); err != nil {
		t.Fatal(err)
	}
}

// Over TLS the bytes waiting on a socket may be a session ticket rather
// than an answer: concurrent gated requests still all complete, each
// admitted once, and every answer is noticed.
func TestGatedRequestsOverTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	defer srv.Close()
	tr := httpgate.NewTransport(httpgate.Options{MaxIdleConnsPerHost: 8})
	tr.TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig
	c := &http.Client{Transport: tr}
	var mu sync.Mutex
	admitted, noticed := 0, 0
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 20 {
				ctx := httpgate.WithAdmission(context.Background(), func() error { mu.Lock(); admitted++; mu.Unlock(); return nil })
				ctx = httpgate.WithAnswerNotice(ctx, func() { mu.Lock(); noticed++; mu.Unlock() })
				if err := post(ctx, c, srv.URL, []byte(`{"text":"hi"}`)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if admitted < 320 || noticed != 320 {
		t.Fatalf("320 requests: admitted %d times, %d answers noticed; want at least 320 and exactly 320", admitted, noticed)
	}
}
