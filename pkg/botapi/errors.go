package botapi

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Sentinel errors. They are matched with [errors.Is] against the typed errors
// the client returns: an [*Error] matches by error code, description prefix
// (case-insensitive, after the "Forbidden: " or "Bad Request: " status
// phrase) and parameters; a [*ResponseError] and a [*NetworkError] match the
// sentinels their fields imply.
var (
	// ErrRateLimited matches a 429 "Too Many Requests: retry after N".
	ErrRateLimited error = newSentinel("rate limited", kindRateLimited)
	// ErrUnauthorized matches a 401: the token is wrong or revoked.
	ErrUnauthorized error = newSentinel("unauthorized", kindUnauthorized)
	// ErrMethodNotFound matches the Bot API's own 404 "Not Found": the method or
	// the /bot<token>/ route does not exist at the configured base URL.
	ErrMethodNotFound error = newSentinel("method not found", kindNotFound)
	// ErrMigrated matches any error carrying parameters.migrate_to_chat_id.
	ErrMigrated error = newSentinel("group migrated to a supergroup", kindMigrated)

	// ErrBlocked matches every permanent "this chat refuses the bot" answer:
	// blocked by the user, user deactivated, bot kicked, bot not a member,
	// can't initiate conversation, can't send messages to bots.
	ErrBlocked error = newSentinel("chat refuses the bot",
		kindBlocked, kindDeactivated, kindKicked, kindNotMember, kindCantInitiate, kindBots)
	// ErrBlockedByUser matches 403 "Forbidden: bot was blocked by the user".
	ErrBlockedByUser error = newSentinel("bot was blocked by the user", kindBlocked)
	// ErrUserDeactivated matches 403 "Forbidden: user is deactivated".
	ErrUserDeactivated error = newSentinel("user is deactivated", kindDeactivated)
	// ErrKicked matches 403 "Forbidden: bot was kicked from the … chat".
	ErrKicked error = newSentinel("bot was kicked", kindKicked)
	// ErrNotMember matches 403 "Forbidden: bot is not a member of the … chat".
	ErrNotMember error = newSentinel("bot is not a member", kindNotMember)
	// ErrCantInitiate matches 403 "Forbidden: bot can't initiate
	// conversation with a user" (the user never pressed Start).
	ErrCantInitiate error = newSentinel("bot can't initiate conversation", kindCantInitiate)
	// ErrRecipientIsBot matches 403 "Forbidden: bot can't send messages to bots".
	ErrRecipientIsBot error = newSentinel("bot can't send messages to bots", kindBots)

	// ErrChatNotFound matches 400 "Bad Request: chat not found".
	ErrChatNotFound error = newSentinel("chat not found", kindChatNotFound)
	// ErrNoRights matches "have no rights to send a message",
	// "CHAT_WRITE_FORBIDDEN", "not enough rights" and "need administrator
	// rights".
	ErrNoRights error = newSentinel("no rights to send", kindNoRights)

	// ErrContent matches every content error: too long (a text or a
	// caption), empty text, can't parse entities. Retrying the same text
	// gets the same answer.
	ErrContent error = newSentinel("content rejected", kindTooLong, kindTextEmpty, kindCantParse, kindCaptionTooLong)
	// ErrMessageTooLong matches 400 "Bad Request: message is too long".
	ErrMessageTooLong error = newSentinel("message is too long", kindTooLong)
	// ErrMessageEmpty matches 400 "Bad Request: message text is empty".
	ErrMessageEmpty error = newSentinel("message text is empty", kindTextEmpty)
	// ErrCantParseEntities matches 400 "Bad Request: can't parse entities: …".
	ErrCantParseEntities error = newSentinel("can't parse entities", kindCantParse)

	// ErrChatDeleted matches 403 "Forbidden: the group chat was deleted".
	ErrChatDeleted error = newSentinel("group chat was deleted", kindChatDeleted)
	// ErrUserNotFound matches 400 "Bad Request: user not found".
	ErrUserNotFound error = newSentinel("user not found", kindUserNotFound)
	// ErrCantSendToUser matches 403 "Forbidden: bot can't send messages to
	// the user".
	ErrCantSendToUser error = newSentinel("bot can't send messages to the user", kindCantSend)
	// ErrTopicClosed matches 400 "Bad Request: TOPIC_CLOSED".
	ErrTopicClosed error = newSentinel("topic closed", kindTopicClosed)
	// ErrThreadNotFound matches 400 "Bad Request: message thread not
	// found": the chat has no such forum topic (or no topics at all).
	ErrThreadNotFound error = newSentinel("message thread not found", kindThreadNotFound)
	// ErrCaptionTooLong matches 400 "Bad Request: message caption is too
	// long" (over 1024 characters after entity parsing).
	ErrCaptionTooLong error = newSentinel("message caption is too long", kindCaptionTooLong)
	// ErrPhoto matches sendPhoto's refusals of the photo: a URL or file id
	// it cannot use ("wrong file identifier/HTTP URL specified"), a URL it
	// could not fetch ("failed to get HTTP URL content"), content that is
	// not a picture or one it cannot process.
	ErrPhoto error = newSentinel("photo rejected", kindPhoto)
	// ErrMarkup matches refusals of the inline keyboard: "reply markup is
	// too long" (too many buttons), a button URL Telegram does not accept
	// ("inline keyboard button URL … is invalid", BUTTON_URL_INVALID), a
	// button it cannot parse.
	ErrMarkup error = newSentinel("reply markup rejected", kindMarkup)

	// ErrForbiddenUnknown matches a 403 whose description is not one of the
	// known ones.
	ErrForbiddenUnknown error = newSentinel("unrecognised forbidden", kindForbiddenUnknown)
	// ErrBadRequestUnknown matches a 400 whose description is not recognised.
	ErrBadRequestUnknown error = newSentinel("unrecognised bad request", kindBadRequestUnknown)
	// ErrServer matches a 5xx, whether a JSON envelope or a proxy's page.
	ErrServer error = newSentinel("server error", kindServer)

	// ErrBadResponse matches every [*ResponseError].
	ErrBadResponse error = newSentinel("unexpected response")
	// ErrNetwork matches every [*NetworkError].
	ErrNetwork error = newSentinel("network error")
	// ErrTimeout matches a [*NetworkError] caused by the per-request timeout
	// or by a network timeout.
	ErrTimeout error = newSentinel("timeout")
	// ErrMaybeDelivered matches failures after which Telegram may have
	// delivered the message: a [*NetworkError] whose request had been written,
	// and a 2xx, 502 or 504 answer that could not be read as a Bot API result.
	ErrMaybeDelivered error = newSentinel("request may have been delivered")
)

// sentinelError is the type of the package's sentinels. Typed errors match
// it by kind in their Is methods.
type sentinelError struct {
	msg   string
	kinds []kind
}

func newSentinel(msg string, kinds ...kind) *sentinelError {
	return &sentinelError{msg: "botapi: " + msg, kinds: kinds}
}

func (s *sentinelError) Error() string { return s.msg }

// Error is an error answer of the Bot API: {"ok":false,"error_code":…,
// "description":…,"parameters":{…}}.
type Error struct {
	// Method is the Bot API method that failed, such as "sendMessage".
	Method string
	// Code is error_code (or the HTTP status when error_code is absent).
	Code int
	// Description is Telegram's human-readable description.
	Description string
	// RetryAfter is parameters.retry_after (or the "retry after N" of the
	// description when the parameter is missing); zero when absent.
	RetryAfter time.Duration
	// MigrateToChatID is parameters.migrate_to_chat_id; zero when absent.
	MigrateToChatID int64
}

// Error returns "botapi: <method>: <code> <description>".
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "botapi: %s: %d %s", e.Method, e.Code, e.Description)
	if e.MigrateToChatID != 0 {
		fmt.Fprintf(&b, " (migrate to chat %d)", e.MigrateToChatID)
	}
	return b.String()
}

// Is reports whether target is one of the package's sentinels that this
// error's code, description and parameters match.
func (e *Error) Is(target error) bool {
	s, ok := target.(*sentinelError)
	if !ok {
		return false
	}
	if s == ErrMaybeDelivered {
		return e.kind() == kindServer && maybeDeliveredStatus(e.Code)
	}
	return slices.Contains(s.kinds, e.kind())
}

// kind derives what the error means. Migration keys on the parameter, never
// on the description.
func (e *Error) kind() kind {
	switch {
	case e.MigrateToChatID != 0:
		return kindMigrated
	case e.Code == 429:
		return kindRateLimited
	case e.Code == 401:
		return kindUnauthorized
	case e.Code == 404:
		return kindNotFound
	case e.Code >= 500:
		return kindServer
	case e.Code == 400 || e.Code == 403:
		if k := describe(e.Description); k != kindUnknown {
			return k
		}
		if e.Code == 403 {
			return kindForbiddenUnknown
		}
		return kindBadRequestUnknown
	default:
		return kindUnknown
	}
}

// ResponseError reports an answer that is not a Bot API envelope: an HTML
// page from a proxy, an empty or truncated body, invalid JSON, a body larger
// than the client reads, or an "ok" result that cannot be decoded.
type ResponseError struct {
	// Method is the Bot API method that was called.
	Method string
	// StatusCode is the HTTP status of the answer.
	StatusCode int
	// ContentType is the answer's Content-Type header.
	ContentType string
	// Problem says what is wrong, such as "empty body" or "not JSON".
	Problem string
	// Snippet is a short, token-free excerpt of the body (an HTML page's
	// title, or its first bytes) to help whoever reads the log.
	Snippet string
	// RetryAfter is the Retry-After header of a 429 or 503, if any.
	RetryAfter time.Duration
	// MayHaveBeenDelivered is true for 2xx answers (Telegram accepted the
	// request) and for 502 and 504 (a gateway forwarded it and lost the
	// answer).
	MayHaveBeenDelivered bool
	// Err is the underlying decoding error, if any.
	Err error
}

// Error describes the answer without quoting more than the snippet.
func (e *ResponseError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "botapi: %s: unexpected response (HTTP %d", e.Method, e.StatusCode)
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

// NetworkError reports a request that got no answer: the connection could not
// be made or broke, the per-request timeout passed, or the caller's context
// ended. It unwraps to the transport's inner error (never to the *url.Error,
// whose message contains the token), so errors.Is(err,
// context.DeadlineExceeded) and errors.As(err, &*net.OpError) work.
type NetworkError struct {
	// Method is the Bot API method that was called.
	Method string
	// MayHaveBeenDelivered is true when the request had been written to the
	// connection before the failure: Telegram may have acted on it. It is
	// false for dial, DNS, TLS handshake and proxy errors.
	MayHaveBeenDelivered bool
	// Timeout is true when the per-request timeout or a network timeout
	// ended the request.
	Timeout bool
	// Canceled is true when the caller's context ended the request (canceled
	// or past its deadline): not a Telegram failure.
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
	msg := fmt.Sprintf("botapi: %s: %s: %v", e.Method, what, e.Err)
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

// maybeDeliveredStatus reports whether an HTTP status that came without a
// readable Bot API error means the request may have been acted upon: a 2xx
// (Telegram accepted it) or a gateway's 502/504 (it forwarded the request and
// lost the answer).
func maybeDeliveredStatus(code int) bool {
	return (code >= 200 && code < 300) || code == 502 || code == 504
}
