package botapi_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/pkg/botapi"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
)

// secretToken is distinctive so that any leak is found by a substring search.
const secretToken = "424242:SECRET_leak-canary_token"

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// garbageServer accepts connections and answers each with bytes that are not
// HTTP.
func garbageServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_, _ = bufio.NewReader(conn).ReadString('\n')
				_, _ = conn.Write([]byte("\x16\x03\x01 garbage, not HTTP " + secretToken + "\r\n\r\n"))
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// TestTokenNeverLeaks drives the client into every kind of failure and checks
// that the token appears in no error text, no error in the unwrap chain, no
// decision and no log line.
func TestTokenNeverLeaks(t *testing.T) {
	t.Parallel()
	emu, err := emulator.New(emulator.Config{Token: "1:other-token"})
	if err != nil {
		t.Fatal(err)
	}
	emuSrv := httptest.NewServer(emu) // a different token: every call gets 401
	t.Cleanup(emuSrv.Close)

	page := func(status int, contentType, body string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", contentType)
			w.WriteHeader(status)
			// Some proxies quote the requested path in their error pages.
			fmt.Fprintf(w, body, r.URL.Path)
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	hold := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-hold }))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(hold) }) // runs first: frees the held handlers
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Path+"/elsewhere", http.StatusFound)
	}))
	t.Cleanup(redirect.Close)
	tlsSrv := httptest.NewUnstartedServer(http.NotFoundHandler())
	tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0) // handshake failures are the point
	tlsSrv.StartTLS()
	t.Cleanup(tlsSrv.Close)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + closed.Addr().String()
	closed.Close()

	tests := []struct {
		name    string
		baseURL string
		timeout time.Duration
		client  *http.Client
	}{
		{name: "connection refused", baseURL: refused},
		{name: "timeout", baseURL: slow.URL, timeout: 50 * time.Millisecond},
		{name: "401 from the emulator", baseURL: emuSrv.URL},
		{name: "5xx JSON echoing the path", baseURL: page(500, "application/json", `{"ok":false,"error_code":500,"description":"Internal error at %s"}`)},
		{name: "HTML page quoting the path", baseURL: page(502, "text/html", `<html><head><title>502 Bad Gateway for %s</title></head></html>`)},
		{name: "plain text quoting the path", baseURL: page(404, "text/plain", `no route for %s`)},
		{name: "invalid JSON quoting the path", baseURL: page(200, "application/json", `{"ok":true,"result":%s`)},
		{name: "redirect to a URL with the token", baseURL: redirect.URL},
		{name: "garbage instead of HTTP", baseURL: garbageServer(t)},
		{name: "plain HTTP to a TLS server", baseURL: strings.Replace(tlsSrv.URL, "https://", "http://", 1)},
		{name: "TLS to an untrusted certificate", baseURL: tlsSrv.URL},
		{name: "TLS to a plain HTTP server", baseURL: strings.Replace(emuSrv.URL, "http://", "https://", 1)},
		{
			name:    "redirect followed by a custom client",
			baseURL: redirect.URL,
			client:  &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var logs syncBuffer
			logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			opts := []botapi.Option{botapi.WithBaseURL(tt.baseURL), botapi.WithLogger(logger)}
			if tt.timeout > 0 {
				opts = append(opts, botapi.WithTimeout(tt.timeout))
			}
			if tt.client != nil {
				opts = append(opts, botapi.WithHTTPClient(tt.client))
			}
			c, err := botapi.New(secretToken, opts...)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.SendMessage(context.Background(), botapi.SendMessageParams{ChatID: 1, Text: "x"})
			if err == nil {
				t.Fatal("SendMessage succeeded, want an error")
			}
			assertNoToken(t, err, logs.String())
			if _, err := c.GetMe(context.Background()); err == nil {
				t.Fatal("GetMe succeeded, want an error")
			} else {
				assertNoToken(t, err, logs.String())
			}
			if !strings.Contains(logs.String(), "bot api request failed") {
				t.Errorf("no failure was logged: %s", logs.String())
			}
		})
	}
}

func assertNoToken(t *testing.T, err error, logs string) {
	t.Helper()
	d := botapi.Classify(err)
	texts := map[string]string{
		"Error()":              err.Error(),
		"%v":                   fmt.Sprintf("%v", err),
		"%+v":                  fmt.Sprintf("%+v", err),
		"%#v":                  fmt.Sprintf("%#v", err),
		"%s":                   fmt.Sprintf("%s", err),
		"Decision":             d.String(),
		"Decision.Description": d.Description,
		"logs":                 logs,
	}
	for e := range walk(err) {
		texts[fmt.Sprintf("chain %T Error()", e)] = e.Error()
		texts[fmt.Sprintf("chain %T %%+v", e)] = fmt.Sprintf("%+v", e)
	}
	for where, text := range texts {
		if strings.Contains(text, secretToken) || strings.Contains(text, strings.Split(secretToken, ":")[1]) {
			t.Errorf("token in %s: %s", where, text)
		}
	}
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		t.Errorf("errors.As reaches a *url.Error: %v", urlErr.URL)
	}
	if d.Action == botapi.Action(0) {
		t.Errorf("Classify(%v) = invalid decision", err)
	}
}

// walk yields every error in err's tree.
func walk(err error) func(func(error) bool) {
	return func(yield func(error) bool) {
		var visit func(error) bool
		visit = func(e error) bool {
			if e == nil {
				return true
			}
			if !yield(e) {
				return false
			}
			switch u := e.(type) {
			case interface{ Unwrap() error }:
				return visit(u.Unwrap())
			case interface{ Unwrap() []error }:
				for _, inner := range u.Unwrap() {
					if !visit(inner) {
						return false
					}
				}
			}
			return true
		}
		visit(err)
	}
}

func TestClientDoesNotPrintToken(t *testing.T) {
	t.Parallel()
	c, err := botapi.New(secretToken)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	slog.New(slog.NewTextHandler(&logs, nil)).Info("client", "client", c)
	for _, s := range []string{fmt.Sprintf("%v", c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c), fmt.Sprint(*c), logs.String()} {
		if strings.Contains(s, secretToken) {
			t.Errorf("token printed: %s", s)
		}
	}
}

// TestTimeoutErrorsStillMatch checks that redaction keeps errors.Is working.
func TestTimeoutErrorsStillMatch(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-hold }))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(hold) }) // runs first: frees the held handlers
	c, err := botapi.New(secretToken, botapi.WithBaseURL(srv.URL), botapi.WithTimeout(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.SendMessage(context.Background(), botapi.SendMessageParams{ChatID: 1, Text: "x"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("errors.Is(%v, context.DeadlineExceeded) = false, want true", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	c2, err := botapi.New(secretToken, botapi.WithBaseURL(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c2.SendMessage(ctx, botapi.SendMessageParams{ChatID: 1, Text: "x"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("errors.Is(%v, context.DeadlineExceeded) = false, want true", err)
	}
	if d := botapi.Classify(err); d.Action != botapi.ActionCanceled {
		t.Errorf("the caller's deadline classified as %v, want canceled", d)
	}
}
