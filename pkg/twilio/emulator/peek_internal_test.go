package emulator

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// peekTo reads the recipient of a form and leaves the body as it came, for
// createMessage to parse: a request recorded inside a pause may still be
// admitted when the pause has ended by the time the limits decide it.
func TestPeekToLeavesTheBody(t *testing.T) {
	form := url.Values{"To": {"+15005550006"}, "Body": {strings.Repeat("x", 100)}}.Encode()
	big := "To=%2B15005550006&Body=" + strings.Repeat("y", maxFormBytes)
	for name, body := range map[string]string{"form": form, "larger than the limit": big} {
		r, err := http.NewRequest(http.MethodPost, "http://emulator/", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if got := peekTo(r); got != "+15005550006" && name == "form" {
			t.Errorf("%s: peekTo = %q, want +15005550006", name, got)
		}
		rest, err := io.ReadAll(r.Body)
		if err != nil || string(rest) != body {
			t.Errorf("%s: the body after peekTo is %d bytes (err %v), want the %d it came with", name, len(rest), err, len(body))
		}
	}
	r, _ := http.NewRequest(http.MethodGet, "http://emulator/", nil)
	if got := peekTo(r); got != "" {
		t.Errorf("peekTo without a body = %q", got)
	}
}
