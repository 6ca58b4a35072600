package maxapi

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Sentinel errors. They are matched with [errors.Is] against the typed
// errors the client returns: an [*Error] matches by HTTP status and MAX's
// code (and, for a stopped bot, the message key MAX puts in the message);
// a [*ResponseError], a [*NetworkError] and a [*ParamsError] match the
// sentinels their fields imply.
var (
	// ErrRateLimited matches a 429: the bot made more than 30 requests per
	// second.
	ErrRateLimited error = newSentinel("rate limited", kindRateLimited)
	// ErrUnauthorized matches a 401 (code verify.token): the token is
	// wrong or revoked, or was not sent in the Authorization header.
	ErrUnauthorized error = newSentinel("unauthorized", kindUnauthorized)
	// ErrMethodNotAllowed matches a 405: the endpoint does not take this
	// HTTP method (a wrong base URL or a client bug).
	ErrMethodNotAllowed error = newSentinel("method not allowed", kindMethodNotAllowed)
	// ErrServer matches a 5xx, whether MAX's error body or a proxy's page.
	ErrServer error = newSentinel("server error", kindServer)

	// ErrForbidden matches every 403 with MAX's error body.
	ErrForbidden error = newSentinel("forbidden", kindBlocked, kindChatDenied, kindForbiddenUnknown)
	// ErrBlocked matches a 403 whose message is error.dialog.suspended:
	// the user stopped or blocked the bot.
	ErrBlocked error = newSentinel("the user stopped the bot", kindBlocked)
	// ErrChatDenied matches a 403 with code chat.denied: the bot may not
	// write to this dialog or chat (it includes ErrBlocked).
	ErrChatDenied error = newSentinel("chat denied", kindBlocked, kindChatDenied)
	// ErrForbiddenUnknown matches a 403 whose code the package does not
	// know.
	ErrForbiddenUnknown error = newSentinel("unrecognised forbidden", kindForbiddenUnknown)

	// ErrNotFound matches every 404 with MAX's error body.
	ErrNotFound error = newSentinel("not found", kindRecipientNotFound, kindNotFoundUnknown)
	// ErrRecipientNotFound matches a 404 with code dialog.not.found,
	// chat.not.found or user.not.found (or the message keys
	// error.dialog.notfound, error.chat.notfound, error.user.notfound):
	// the user has no dialog with the bot, or the chat does not exist.
	ErrRecipientNotFound error = newSentinel("recipient not found", kindRecipientNotFound)
	// ErrNotFoundUnknown matches a 404 whose code the package does not
	// know.
	ErrNotFoundUnknown error = newSentinel("unrecognised not found", kindNotFoundUnknown)

	// ErrBadRequest matches every 400 with MAX's error body.
	ErrBadRequest error = newSentinel("bad request", kindInvalidRequest, kindAttachmentNotReady, kindBadRequestUnknown)
	// ErrInvalidRequest matches a 400 with code proto.payload: MAX could
	// not use the request's parameters or body.
	ErrInvalidRequest error = newSentinel("invalid request", kindInvalidRequest)
	// ErrAttachmentNotReady matches a 400 with code attachment.not.ready:
	// an uploaded file is still being processed, and the schema says to
	// send again until it succeeds.
	ErrAttachmentNotReady error = newSentinel("attachment not ready", kindAttachmentNotReady)
	// ErrBadRequestUnknown matches a 400 whose code the package does not
	// know.
	ErrBadRequestUnknown error = newSentinel("unrecognised bad request", kindBadRequestUnknown)

	// ErrInvalidParams matches every [*ParamsError]: nothing was sent.
	ErrInvalidParams error = newSentinel("invalid parameters")
	// ErrBadResponse matches every [*ResponseError].
	ErrBadResponse error = newSentinel("unexpected response")
	// ErrNetwork matches every [*NetworkError].
	ErrNetwork error = newSentinel("network error")
	// ErrTimeout matches a [*NetworkError] caused by the per-request
	// timeout or by a network timeout.
	ErrTimeout error = newSentinel("timeout")
	// ErrMaybeDelivered matches failures after which MAX may have
	// delivered the message: a [*NetworkError] whose request had been
	// written, a 2xx that could not be read, and a 502 or 504 (a gateway
	// forwarded the request and lost the answer).
	ErrMaybeDelivered error = newSentinel("request may have been delivered")
)

// kind is the meaning of an answer, derived from its status and code.
// Sentinels are sets of kinds.
type kind uint8

const (
	kindUnknown kind = iota
	kindRateLimited
	kindUnauthorized
	kindMethodNotAllowed
	kindServer
	kindBlocked
	kindChatDenied
	kindForbiddenUnknown
	kindRecipientNotFound
	kindNotFoundUnknown
	kindInvalidRequest
	kindAttachmentNotReady
	kindBadRequestUnknown
	kindClientUnknown // another 4xx
)

// sentinelError is the type of the package's sentinels. Typed errors match
// it by kind in their Is methods.
type sentinelError struct {
	msg   string
	kinds []kind
}

func newSentinel(msg string, kinds ...kind) *sentinelError {
	return &sentinelError{msg: "maxapi: " + msg, kinds: kinds}
}

func (s *sentinelError) Error() string { return s.msg }

// Operation names in errors and logs: the schema's operationIds.
const (
	OpSendMessage = "sendMessage"
	OpGetMe       = "getMyInfo"
)

// Error is MAX's answer to a failed request: an HTTP status and the
// schema's Error body, {"code":"…","message":"…"}.
type Error struct {
	// Op is the operation that failed: sendMessage or getMyInfo.
	Op string
	// Status is the HTTP status.
	Status int
	// Code is MAX's error code, such as "chat.denied" or "verify.token".
	Code string
	// Message is MAX's description, such as "error.dialog.suspended".
	Message string
	// RetryAfter is the Retry-After header of a 429 or 503; zero when
	// absent.
	RetryAfter time.Duration
}

// Error returns "maxapi: <op>: <status> <code>: <message>".
func (e *Error) Error() string {
	return fmt.Sprintf("maxapi: %s: %d %s", e.Op, e.Status, e.Description())
}

// Description is MAX's code and message, "<code>: <message>", as a dead
// letter records it.
func (e *Error) Description() string {
	switch {
	case e.Code == "":
		return e.Message
	case e.Message == "":
		return e.Code
	}
	return e.Code + ": " + e.Message
}

// Is reports whether target is one of the package's sentinels that this
// error's status and code match.
func (e *Error) Is(target error) bool {
	s, ok := target.(*sentinelError)
	if !ok {
		return false
	}
	if s == ErrMaybeDelivered {
		return e.Status == 502 || e.Status == 504
	}
	return slices.Contains(s.kinds, e.kind())
}

// recipientNotFoundCodes are the 404 codes (and message keys) MAX gives for
// a user without a dialog with the bot or a chat that does not exist.
var (
	recipientNotFoundCodes = [...]string{"dialog.not.found", "chat.not.found", "user.not.found"}
	recipientNotFoundKeys  = [...]string{"error.dialog.notfound", "error.chat.notfound", "error.user.notfound"}
)

// kind derives what the error means, from the status first and MAX's code
// second. Codes and message keys are compared case-insensitively.
func (e *Error) kind() kind {
	code := strings.ToLower(strings.TrimSpace(e.Code))
	msg := strings.ToLower(e.Message)
	switch {
	case e.Status == 429:
		return kindRateLimited
	case e.Status == 401:
		return kindUnauthorized
	case e.Status == 405:
		return kindMethodNotAllowed
	case e.Status >= 500:
		return kindServer
	case e.Status == 403:
		switch {
		case strings.Contains(msg, "dialog.suspended") || code == "dialog.suspended":
			return kindBlocked
		case code == "chat.denied":
			return kindChatDenied
		}
		return kindForbiddenUnknown
	case e.Status == 404:
		if slices.Contains(recipientNotFoundCodes[:], code) || slices.ContainsFunc(recipientNotFoundKeys[:], func(k string) bool { return strings.Contains(msg, k) }) {
			return kindRecipientNotFound
		}
		return kindNotFoundUnknown
	case e.Status == 400:
		switch code {
		case "proto.payload":
			return kindInvalidRequest
		case "attachment.not.ready":
			return kindAttachmentNotReady
		}
		return kindBadRequestUnknown
	case e.Status >= 400:
		return kindClientUnknown
	}
	return kindUnknown
}

// ResponseError reports an answer that is neither MAX's result nor its
// error body: an HTML page from a proxy, an empty or truncated body, invalid
// JSON, a body larger than the client reads, or a success without a message
// id.
type ResponseError struct {
	// Op is the operation that was called.
	Op string
	// StatusCode is the HTTP status of the answer.
	StatusCode int
	// ContentType is the answer's Content-Type header.
	ContentType string
	// Problem says what is wrong, such as "empty body" or "not JSON".
	Problem string
	// Snippet is a short, token-free excerpt of the body (an HTML page's
	// title, or its first bytes).
	Snippet string
	// RetryAfter is the Retry-After header of a 429 or 503, if any.
	RetryAfter time.Duration
	// MayHaveBeenDelivered is true for 2xx answers (MAX accepted the
	// request) and for 502 and 504 (a gateway forwarded it and lost the
	// answer).
	MayHaveBeenDelivered bool
	// Err is the underlying decoding error, if any.
	Err error
}

// Error describes the answer without quoting more than the snippet.
func (e *ResponseError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "maxapi: %s: unexpected response (HTTP %d", e.Op, e.StatusCode)
	if e.ContentType != "" {
		fmt.Fprintf(&b, ", %s", e.ContentType)
	}
	fmt.Fprintf(&b, "): %s", e.Problem)
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	if e.Snippet != "" {
		fmt.Fprintf(&b, " [%q]", e.Snippet)
	}
	return b.String()
}

// Unwrap returns the decoding error.
func (e *ResponseError) Unwrap() error { return e.Err }

// Is matches ErrBadResponse always, ErrServer for 5xx, ErrUnauthorized for
// 401, ErrRateLimited for 429 and ErrMaybeDelivered when
// MayHaveBeenDelivered is set.
func (e *ResponseError) Is(target error) bool {
	switch target {
	case ErrBadResponse:
		return true
	case ErrServer:
		return e.StatusCode >= 500
	case ErrUnauthorized:
		return e.StatusCode == 401
	case ErrRateLimited:
		return e.StatusCode == 429
	case ErrMaybeDelivered:
		return e.MayHaveBeenDelivered
	}
	return false
}

// NetworkError reports a request that got no answer: the connection could
// not be made or broke, the per-request timeout passed, or the caller's
// context ended. It unwraps to the transport's inner error (never to a
// *url.Error), so errors.Is(err, context.DeadlineExceeded) and
// errors.As(err, &*net.OpError) work.
type NetworkError struct {
	// Op is the operation that was called.
	Op string
	// MayHaveBeenDelivered is true when the request had been written to
	// the connection before the failure: MAX may have acted on it. It is
	// false for dial, DNS, TLS handshake and proxy errors.
	MayHaveBeenDelivered bool
	// Timeout is true when the per-request timeout or a network timeout
	// ended the request.
	Timeout bool
	// Canceled is true when the caller's context ended the request
	// (canceled or past its deadline): not a MAX failure.
	Canceled bool
	// Err is the underlying error.
	Err error
}

// Error describes the failure; it never contains the token.
func (e *NetworkError) Error() string {
	var what string
	switch {
	case e.Canceled:
		what = "canceled"
	case e.Timeout:
		what = "timed out"
	default:
		what = "network error"
	}
	msg := fmt.Sprintf("maxapi: %s: %s: %v", e.Op, what, e.Err)
	if e.MayHaveBeenDelivered {
		msg += " (request may have been delivered)"
	}
	return msg
}

// Unwrap returns the underlying error.
func (e *NetworkError) Unwrap() error { return e.Err }

// Is matches ErrNetwork always, ErrTimeout when Timeout is set and
// ErrMaybeDelivered when MayHaveBeenDelivered is set.
func (e *NetworkError) Is(target error) bool {
	switch target {
	case ErrNetwork:
		return true
	case ErrTimeout:
		return e.Timeout
	case ErrMaybeDelivered:
		return e.MayHaveBeenDelivered
	}
	return false
}

// ParamsError reports parameters that cannot be sent (no recipient, two
// recipients, an empty or over-long text, an unknown format). Nothing was
// sent: MAX would refuse the request with a 400.
type ParamsError struct {
	// Op is the operation that was not called.
	Op string
	// Field names the parameter: "user_id", "chat_id", "text" or
	// "format".
	Field string
	// Problem says what is wrong.
	Problem string
}

func (e *ParamsError) Error() string {
	return fmt.Sprintf("maxapi: %s: not sent: %s %s", e.Op, e.Field, e.Problem)
}

// Is matches ErrInvalidParams.
func (e *ParamsError) Is(target error) bool { return target == ErrInvalidParams }
