package httpgate_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

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
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, bytes.NewReader([]byte(`{"text":"hi"}`)))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := httpgate.Do(c, true, req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
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
