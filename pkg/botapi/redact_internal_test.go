package botapi

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

// TestScrub covers the defence in depth behind the client's redaction: an
// inner error that quotes the token is replaced by an opaque one that still
// answers errors.Is.
func TestScrub(t *testing.T) {
	t.Parallel()
	tok := secret("777:SCRUB_me")
	inner := &url.Error{Op: "Post", URL: "https://api.telegram.org/bot777:SCRUB_me/sendMessage", Err: context.DeadlineExceeded}
	wrapped := fmt.Errorf("proxy said: %w", inner)

	err := tok.scrub(wrapped)
	if strings.Contains(err.Error(), string(tok)) || !strings.Contains(err.Error(), "bot<redacted>/sendMessage") {
		t.Errorf("scrubbed message %q", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("errors.Is(%v, context.DeadlineExceeded) = false, want true", err)
	}
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		t.Errorf("errors.As reaches the *url.Error with the token")
	}
	if s := fmt.Sprintf("%+v %#v", err, err); strings.Contains(s, string(tok)) {
		t.Errorf("formatted error contains the token: %s", s)
	}
	clean := errors.New("connection refused")
	if got := tok.scrub(clean); got != clean {
		t.Errorf("scrub changed an error without the token: %v", got)
	}
	if got := fmt.Sprintf("%v|%s|%q|%#v|%x", tok, tok, tok, tok, tok); strings.Contains(got, "SCRUB") {
		t.Errorf("secret formatted as %s", got)
	}
}
