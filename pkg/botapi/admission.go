package botapi

import (
	"context"
	"fmt"

	"github.com/tgnotify/tgnotify/internal/httpgate"
)

// WithAdmission returns a context that makes the client ask admit, as the
// last thing before a request made with it is written to the connection,
// whether it may be written at all. When admit returns an error nothing is
// sent: the call fails with a [*NotSentError] wrapping it. admit may be
// called more than once for one call (the transport retries a request on a
// new connection when a kept-alive one turned out closed before anything
// was written); it must answer the same each time.
//
// With the client's own transport (HTTP/1.1, one request per connection)
// the check runs on the connection's first write of the request, so a
// delivery engine can stop every request that has not reached the wire the
// moment it reads a 429. With a transport of the caller's
// ([WithHTTPClient]) it runs just before the request is handed to the
// transport.
func WithAdmission(ctx context.Context, admit func() error) context.Context {
	return httpgate.WithAdmission(ctx, admit)
}

// WithAnswerNotice returns a context that makes the client call notice as
// soon as the first byte of the answer to a request made with it has been
// read, in the HTTP transport's reader goroutine, before the answer is
// parsed. A delivery engine holds its other requests back until it knows
// whether that answer is a 429 (pkg/delivery, Attempt.Answered).
func WithAnswerNotice(ctx context.Context, notice func()) context.Context {
	return httpgate.WithAnswerNotice(ctx, notice)
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
