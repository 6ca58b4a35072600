package twilio

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Twilio error codes the package knows (https://www.twilio.com/docs/api/errors).
const (
	CodeAuthenticate       = 20003 // 401: wrong Account SID or auth token, account suspended or closed
	CodeNotFound           = 20404 // 404: the requested resource was not found
	CodeTooManyRequests    = 20429 // 429: too many concurrent requests
	CodeInternal           = 20500 // 500: internal server error
	CodeUnavailable        = 20503 // 503: service unavailable
	CodeInvalidTo          = 21211 // 400: the To number is not a valid phone number
	CodeInvalidFrom        = 21212 // 400: the From number is not valid
	CodeRegionNotPermitted = 21408 // 400: messaging to the To number's region is not enabled
	CodeBodyRequired       = 21602 // 400: the message body is required
	CodeFromRequired       = 21603 // 400: a From or MessagingServiceSid is required
	CodeFromNotCapable     = 21606 // 400: the From number cannot send SMS
	CodeUnverifiedTo       = 21608 // 400: a trial account can only send to verified numbers
	CodeUnsubscribed       = 21610 // 400: the recipient replied STOP to this sender
	CodeQueueFull          = 21611 // 400: this sender's queue holds more than 10 hours of messages
	CodeNotMobile          = 21614 // 400: the To number is not a mobile number
	CodeBodyTooLong        = 21617 // 400: the body exceeds 1600 characters
	CodeLandline           = 21635 // 400: the To number is a landline
)

// kind is what an error means, derived from Twilio's code and the HTTP
// status.
type kind uint8

const (
	kindUnknown kind = iota
	kindRateLimited
	kindUnauthorized
	kindNotFound
	kindServer
	kindInvalidNumber
	kindUnsubscribed
	kindNotMobile
	kindRegionNotPermitted
	kindUnverified
	kindQueueFull
	kindContent
	kindSender
	kindForbiddenUnknown
	kindBadRequestUnknown
)

// codeKinds are the Twilio codes whose meaning does not depend on the HTTP
// status.
var codeKinds = map[int]kind{
	CodeTooManyRequests:    kindRateLimited,
	CodeAuthenticate:       kindUnauthorized,
	CodeNotFound:           kindNotFound,
	CodeInvalidTo:          kindInvalidNumber,
	CodeUnsubscribed:       kindUnsubscribed,
	CodeNotMobile:          kindNotMobile,
	CodeLandline:           kindNotMobile,
	CodeRegionNotPermitted: kindRegionNotPermitted,
	CodeUnverifiedTo:       kindUnverified,
	CodeQueueFull:          kindQueueFull,
	CodeBodyRequired:       kindContent,
	CodeBodyTooLong:        kindContent,
	CodeInvalidFrom:        kindSender,
	CodeFromRequired:       kindSender,
	CodeFromNotCapable:     kindSender,
}

// Sentinel errors, matched with errors.Is against the typed errors the
// client returns: an [*Error] matches by Twilio code (and, for codes the
// package does not know, by HTTP status); a [*ResponseError] and a
// [*NetworkError] match the sentinels their fields imply.
var (
	// ErrRateLimited matches 429 / 20429 "Too Many Requests".
	ErrRateLimited error = newSentinel("rate limited", kindRateLimited)
	// ErrUnauthorized matches 401 / 20003: the Account SID or auth token
	// is wrong, or the account is suspended or closed.
	ErrUnauthorized error = newSentinel("authentication failed", kindUnauthorized)
	// ErrNotFound matches 404 / 20404: the base URL or the Account SID in
	// the path is wrong.
	ErrNotFound error = newSentinel("resource not found", kindNotFound)
	// ErrServer matches a 5xx, whether Twilio's JSON or a proxy's page.
	ErrServer error = newSentinel("server error", kindServer)

	// ErrRecipient matches every answer that says the recipient cannot get
	// an SMS from this sender: invalid number, unsubscribed, not a mobile
	// number, region not permitted, not verified.
	ErrRecipient error = newSentinel("recipient cannot be reached",
		kindInvalidNumber, kindUnsubscribed, kindNotMobile, kindRegionNotPermitted, kindUnverified)
	// ErrInvalidNumber matches 21211: the To number is not a valid phone
	// number.
	ErrInvalidNumber error = newSentinel("invalid 'To' number", kindInvalidNumber)
	// ErrUnsubscribed matches 21610: the recipient replied STOP (or
	// UNSUBSCRIBE, CANCEL, END, QUIT) to this sender.
	ErrUnsubscribed error = newSentinel("recipient unsubscribed", kindUnsubscribed)
	// ErrNotMobile matches 21614 and 21635: the To number is not a mobile
	// number (a landline).
	ErrNotMobile error = newSentinel("'To' number is not a mobile number", kindNotMobile)
	// ErrRegionNotPermitted matches 21408: the account's Messaging Geo
	// Permissions do not include the To number's country.
	ErrRegionNotPermitted error = newSentinel("region not permitted", kindRegionNotPermitted)
	// ErrUnverified matches 21608: a trial account sends only to verified
	// numbers.
	ErrUnverified error = newSentinel("'To' number not verified", kindUnverified)

	// ErrQueueFull matches 21611: the sender's queue holds more than its
	// 10 hours of messages.
	ErrQueueFull error = newSentinel("sender queue full", kindQueueFull)
	// ErrContent matches 21602 (no body) and 21617 (body over 1600
	// characters).
	ErrContent error = newSentinel("message content rejected", kindContent)
	// ErrSender matches 21212, 21603 and 21606: the From number or the
	// Messaging Service is missing, invalid or cannot send SMS.
	ErrSender error = newSentinel("sender rejected", kindSender)
	// ErrForbiddenUnknown matches a 403 with a code the package does not
	// know.
	ErrForbiddenUnknown error = newSentinel("unrecognised forbidden", kindForbiddenUnknown)
	// ErrBadRequestUnknown matches a 400 (or another 4xx) with a code the
	// package does not know.
	ErrBadRequestUnknown error = newSentinel("unrecognised bad request", kindBadRequestUnknown)

	// ErrBadResponse matches every [*ResponseError].
	ErrBadResponse error = newSentinel("unexpected response")
	// ErrNetwork matches every [*NetworkError].
	ErrNetwork error = newSentinel("network error")
	// ErrTimeout matches a [*NetworkError] caused by the per-request
	// timeout or a network timeout.
	ErrTimeout error = newSentinel("timeout")
	// ErrMaybeDelivered matches failures after which Twilio may have
	// accepted the message: a [*NetworkError] whose request had been
	// written, a 2xx answer that could not be read, and a 502 or 504.
	ErrMaybeDelivered error = newSentinel("request may have been delivered")
	// ErrNotSent matches every [*NotSentError].
	ErrNotSent error = newSentinel("not sent")
)

// sentinelError is the type of the package's sentinels.
type sentinelError struct {
	msg   string
	kinds []kind
}

func newSentinel(msg string, kinds ...kind) *sentinelError {
	return &sentinelError{msg: "twilio: " + msg, kinds: kinds}
}

func (s *sentinelError) Error() string { return s.msg }

// Error is Twilio's JSON error answer: {"code": 21211, "message": "...",
// "more_info": "https://www.twilio.com/docs/errors/21211", "status": 400}.
type Error struct {
	// Op is what the client was doing: "send" or "fetch account".
	Op string
	// Status is the HTTP status.
	Status int
	// Code is Twilio's error code; 0 when the answer had none.
	Code int
	// Message is Twilio's message, with phone numbers masked to their last
	// two digits.
	Message string
	// MoreInfo is the documentation link Twilio gives.
	MoreInfo string
	// RetryAfter is the Retry-After header of a 429 or 503, if any.
	RetryAfter time.Duration
}

// Error returns "twilio: <op>: <status> code <code>: <message>".
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "twilio: %s: %d", e.Op, e.Status)
	if e.Code != 0 {
		fmt.Fprintf(&b, " code %d", e.Code)
	}
	if e.Message != "" {
		fmt.Fprintf(&b, ": %s", e.Message)
	}
	return b.String()
}

// Is reports whether target is a sentinel that this error's code (or
// status) matches.
func (e *Error) Is(target error) bool {
	s, ok := target.(*sentinelError)
	if !ok {
		return false
	}
	if s == ErrMaybeDelivered {
		return e.kind() == kindServer && maybeDeliveredStatus(e.Status)
	}
	return slices.Contains(s.kinds, e.kind())
}

// Known reports whether the package knows the error's Twilio code or, for
// a code it does not know, its status means the same whatever the code
// (429, 401, 404, 5xx). An unknown 400 or 403 is not known.
func (e *Error) Known() bool {
	k := e.kind()
	return k != kindForbiddenUnknown && k != kindBadRequestUnknown && k != kindUnknown
}

// kind derives the error's meaning: a known code decides; otherwise the
// HTTP status.
func (e *Error) kind() kind {
	if k, ok := codeKinds[e.Code]; ok {
		return k
	}
	switch {
	case e.Status == 429:
		return kindRateLimited
	case e.Status == 401:
		return kindUnauthorized
	case e.Status == 404:
		return kindNotFound
	case e.Status >= 500:
		return kindServer
	case e.Status == 403:
		return kindForbiddenUnknown
	case e.Status >= 400:
		return kindBadRequestUnknown
	}
	return kindUnknown
}

// ResponseError reports an answer that is not Twilio's: an HTML page from a
// proxy, an empty or truncated body, invalid JSON, a body larger than the
// client reads, or a 2xx whose resource cannot be decoded.
type ResponseError struct {
	// Op is what the client was doing.
	Op string
	// StatusCode is the HTTP status.
	StatusCode int
	// ContentType is the answer's Content-Type header.
	ContentType string
	// Problem says what is wrong, such as "empty body" or "not JSON".
	Problem string
	// Snippet is a short excerpt of the body, credentials removed and
	// phone numbers masked.
	Snippet string
	// RetryAfter is the Retry-After header of a 429 or 503, if any.
	RetryAfter time.Duration
	// MayHaveBeenDelivered is true for 2xx answers (Twilio created the
	// message) and for 502 and 504 (a gateway forwarded the request and
	// lost the answer).
	MayHaveBeenDelivered bool
	// Err is the underlying decoding error, if any.
	Err error
}

// Error describes the answer without quoting more than the snippet.
func (e *ResponseError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "twilio: %s: unexpected response (HTTP %d", e.Op, e.StatusCode)
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
// 401, ErrNotFound for 404, ErrRateLimited for 429 and ErrMaybeDelivered
// when MayHaveBeenDelivered is set.
func (e *ResponseError) Is(target error) bool {
	switch target {
	case ErrBadResponse:
		return true
	case ErrServer:
		return e.StatusCode >= 500
	case ErrUnauthorized:
		return e.StatusCode == 401
	case ErrNotFound:
		return e.StatusCode == 404
	case ErrRateLimited:
		return e.StatusCode == 429
	case ErrMaybeDelivered:
		return e.MayHaveBeenDelivered
	}
	return false
}

// NetworkError reports a request that got no answer: the connection could
// not be made or broke, the per-request timeout passed, or the caller's
// context ended. It unwraps to the transport's inner error (never to the
// *url.Error, whose message is the URL with the Account SID), so
// errors.Is(err, context.DeadlineExceeded) works.
type NetworkError struct {
	// Op is what the client was doing.
	Op string
	// MayHaveBeenDelivered is true when the request had been written to
	// the connection before the failure: Twilio may have created the
	// message. It is false for dial, DNS and TLS handshake errors.
	MayHaveBeenDelivered bool
	// Timeout is true when the per-request timeout or a network timeout
	// ended the request.
	Timeout bool
	// Canceled is true when the caller's context ended the request: not a
	// Twilio failure.
	Canceled bool
	// Err is the underlying error.
	Err error
}

// Error describes the failure; it never contains a credential.
func (e *NetworkError) Error() string {
	what := "network error"
	switch {
	case e.Canceled:
		what = "canceled"
	case e.Timeout:
		what = "timed out"
	}
	msg := fmt.Sprintf("twilio: %s: %s: %v", e.Op, what, e.Err)
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

// NotSentError is returned when a request was not written because its
// admission check refused it: Twilio has certainly not seen it.
type NotSentError struct {
	// Op is what the client was about to do.
	Op string
	// Err is the admission check's error.
	Err error
}

func (e *NotSentError) Error() string { return fmt.Sprintf("twilio: %s: not sent: %v", e.Op, e.Err) }

// Unwrap returns the admission check's error.
func (e *NotSentError) Unwrap() error { return e.Err }

// Is matches ErrNotSent.
func (e *NotSentError) Is(target error) bool { return target == ErrNotSent }

// RequestError reports a request the client refused to make: a parameter
// Twilio would reject anyway (an empty To or Body, a Body over 1600
// characters). Nothing was sent.
type RequestError struct {
	// Op is what the client was asked to do.
	Op string
	// Param is Twilio's name of the parameter: "To" or "Body".
	Param string
	// Problem says what is wrong with it.
	Problem string
}

func (e *RequestError) Error() string {
	return fmt.Sprintf("twilio: %s: parameter %s %s", e.Op, e.Param, e.Problem)
}

// Is matches ErrContent for a bad Body.
func (e *RequestError) Is(target error) bool { return target == ErrContent && e.Param == "Body" }

// maybeDeliveredStatus reports whether an HTTP status that came without a
// usable answer means the request may have been acted upon: a 2xx (Twilio
// created the message) or a gateway's 502/504 (it forwarded the request
// and lost the answer).
func maybeDeliveredStatus(code int) bool {
	return (code >= 200 && code < 300) || code == 502 || code == 504
}
