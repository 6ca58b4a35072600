package emufault

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// GatewayPage is the HTML page nginx serves for a 5xx status.
func GatewayPage(status int) string {
	title := fmt.Sprintf("%d %s", status, http.StatusText(status))
	return "<html>\r\n<head><title>" + title + "</title></head>\r\n<body>\r\n<center><h1>" + title +
		"</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
}

// DropConnection closes the client's connection without an answer.
func DropConnection(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	// HTTP/2 or a recorder: abort the response; net/http closes the stream
	// and does not log a stack trace for this value.
	panic(http.ErrAbortHandler)
}

// Sleep waits d unless ctx or stop ends first; it reports whether d
// passed.
func Sleep(ctx context.Context, stop <-chan struct{}, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-stop:
		return false
	}
}
