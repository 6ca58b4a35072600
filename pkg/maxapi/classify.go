package maxapi

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Action is what a sender does with a message after an attempt.
type Action uint8

// Actions. The zero Action is invalid, so a forgotten classification is not
// mistaken for a delivery.
const (
	// ActionDelivered: MAX accepted the message. Record and acknowledge.
	ActionDelivered Action = iota + 1
	// ActionRetryAfter: MAX limited the bot (429). Send nothing at all for
	// Decision.RetryAfter, then try again; not a failed attempt.
	ActionRetryAfter
	// ActionBackoff: a failure that may pass (5xx, network error, timeout,
	// a proxy's page, an attachment still processing). Retry with
	// exponential backoff and jitter; it counts as a failed attempt.
	ActionBackoff
	// ActionRejected: MAX will never accept this message as it is (a 400,
	// or parameters it would refuse). Dead-letter the message; the
	// recipient stays alive.
	ActionRejected
	// ActionRecipientDead: the recipient cannot be reached (403: the user
	// stopped the bot, the bot may not write to the chat; 404: no dialog,
	// no chat). Dead-letter, and send nothing more to the recipient.
	ActionRecipientDead
	// ActionHalt: the token is wrong or revoked (401), or the base URL does
	// not serve MAX's API (405, or a 404 that is not MAX's error body).
	// Stop sending everything; never dead-letter messages for it.
	ActionHalt
	// ActionCanceled: the caller's own context ended the attempt. Not a
	// MAX failure: do not count an attempt; Decision.MaybeDelivered tells
	// whether the request had already been written.
	ActionCanceled
	// ActionNotSent: the request was not written because its admission
	// check refused it (WithAdmission). MAX has not seen it: try again
	// when admission allows; not a failed attempt.
	ActionNotSent
)

var actionNames = [...]string{
	ActionDelivered:     "delivered",
	ActionRetryAfter:    "retry_after",
	ActionBackoff:       "backoff",
	ActionRejected:      "rejected",
	ActionRecipientDead: "recipient_dead",
	ActionHalt:          "halt",
	ActionCanceled:      "canceled",
	ActionNotSent:       "not_sent",
}

// String returns the action's lower-case name, usable as a metric label.
func (a Action) String() string {
	if int(a) < len(actionNames) && actionNames[a] != "" {
		return actionNames[a]
	}
	return fmt.Sprintf("invalid(%d)", uint8(a))
}

// Reasons reported in Decision.Reason: stable, lower-case labels for dead
// letters, logs and metrics.
const (
	// Recipient dead.
	ReasonBlocked    = "blocked"     // 403 error.dialog.suspended: the user stopped or blocked the bot
	ReasonChatDenied = "chat_denied" // 403 chat.denied: the bot may not write to the chat
	ReasonForbidden  = "forbidden"   // 403 with an unrecognised code
	ReasonNotFound   = "not_found"   // 404: no dialog with the user, no such chat

	// Message rejected.
	ReasonContent        = "content"         // text empty or over 4000 characters (not sent)
	ReasonInvalidRequest = "invalid_request" // 400 proto.payload
	ReasonBadRequest     = "bad_request"     // 400 with an unrecognised code, or parameters that cannot be sent
	ReasonClientError    = "client_error"    // another 4xx (409, 413, 415, …)

	// Others.
	ReasonDelivered          = "delivered"
	ReasonRateLimited        = "rate_limited"
	ReasonUnauthorized       = "unauthorized"
	ReasonMethodNotAllowed   = "method_not_allowed"
	ReasonEndpointNotFound   = "endpoint_not_found"
	ReasonServer             = "server"
	ReasonNetwork            = "network"
	ReasonTimeout            = "timeout"
	ReasonBadResponse        = "bad_response"
	ReasonAttachmentNotReady = "attachment_not_ready"
	ReasonCanceled           = "canceled"
	ReasonNotSent            = "not_sent"
	ReasonUnknown            = "unknown"
)

// DefaultRetryAfter is the pause Classify reports for a 429 without a
// Retry-After header. MAX documents neither the header nor a pause; its
// limit is per second, so a second's pause is enough for the bucket, and a
// second more leaves room for a counting window that is not aligned with
// ours.
const DefaultRetryAfter = 2 * time.Second

// Decision is what a sender does after one attempt, with everything it
// needs to do it and to record why.
type Decision struct {
	// Action is what to do.
	Action Action
	// RetryAfter is how long to send nothing (ActionRetryAfter only):
	// MAX's Retry-After, or DefaultRetryAfter when it gave none
	// (RetryAfterGiven false).
	RetryAfter      time.Duration
	RetryAfterGiven bool
	// Reason is a stable, lower-case label: one of the Reason constants.
	Reason string
	// Status is the HTTP status; 0 without an answer.
	Status int
	// Code is MAX's error code, such as "chat.denied"; empty without one.
	Code string
	// Description is MAX's code and message ("chat.denied:
	// error.dialog.suspended"), or the error's text when MAX gave none. It
	// never contains the token.
	Description string
	// MaybeDelivered is true when MAX may have delivered the message
	// despite the error (see ErrMaybeDelivered): retrying may duplicate it.
	MaybeDelivered bool
	// Unrecognised marks a permanent answer whose code the package does
	// not know (a 400, 403 or 404 with another code, another 4xx): it is
	// acted upon like its status says, and counted apart so that the table
	// of known answers grows from what production sees.
	Unrecognised bool
}

// String formats the decision for logs.
func (d Decision) String() string {
	s := fmt.Sprintf("%s (%s", d.Action, d.Reason)
	if d.Status != 0 {
		s += fmt.Sprintf(", status %d", d.Status)
	}
	if d.Code != "" {
		s += ", code " + d.Code
	}
	if d.Action == ActionRetryAfter {
		s += fmt.Sprintf(", retry after %s", d.RetryAfter)
	}
	if d.MaybeDelivered {
		s += ", may have been delivered"
	}
	if d.Unrecognised {
		s += ", unrecognised"
	}
	return s + ")"
}

// Classify maps the outcome of one call to what the sender does next. It is
// total: every error, including ones from outside this package, gets a
// decision. Issue 13's rule: a Bad Request or a Forbidden does not become
// good by sending the same request again, so only 429, 5xx and network
// failures are retried. The branches, in order:
//
//   - nil: ActionDelivered.
//   - *NotSentError: ActionNotSent (admission refused; nothing written).
//   - *ParamsError: ActionRejected, reason content (text) or bad_request
//     (nothing was sent).
//   - *Error 429: ActionRetryAfter with its Retry-After (DefaultRetryAfter
//     when absent).
//   - *Error 401: ActionHalt, reason unauthorized.
//   - *Error 405: ActionHalt, reason method_not_allowed: every request
//     would fail the same way.
//   - *Error 5xx: ActionBackoff, reason server; MaybeDelivered for 502 and
//     504.
//   - *Error 403: ActionRecipientDead, reason blocked (message
//     error.dialog.suspended), chat_denied (code chat.denied) or, for any
//     other code, forbidden with Unrecognised set.
//   - *Error 404: ActionRecipientDead, reason not_found; Unrecognised
//     unless the code is dialog.not.found, chat.not.found or
//     user.not.found.
//   - *Error 400 attachment.not.ready: ActionBackoff (the schema says to
//     send again until the file is processed).
//   - *Error 400 proto.payload: ActionRejected, reason invalid_request.
//   - *Error 400 with another code: ActionRejected, reason bad_request,
//     Unrecognised.
//   - *Error with another 4xx: ActionRejected, reason client_error,
//     Unrecognised.
//   - *ResponseError 401: ActionHalt; 429: ActionRetryAfter (Retry-After
//     or DefaultRetryAfter); 404 or 405: ActionHalt, reason
//     endpoint_not_found (something other than MAX answers at the base
//     URL); anything else, a proxy's 403 page included: ActionBackoff,
//     reason server (5xx) or bad_response. MaybeDelivered for 2xx, 502
//     and 504.
//   - *NetworkError from the caller's context: ActionCanceled.
//   - *NetworkError otherwise: ActionBackoff, reason timeout or network,
//     MaybeDelivered when the request had been written.
//   - context.Canceled or context.DeadlineExceeded from elsewhere:
//     ActionCanceled.
//   - anything else: ActionBackoff, reason unknown.
func Classify(err error) Decision {
	if err == nil {
		return Decision{Action: ActionDelivered, Reason: ReasonDelivered}
	}
	if e, ok := errors.AsType[*NotSentError](err); ok {
		return Decision{Action: ActionNotSent, Reason: ReasonNotSent, Description: e.Error()}
	}
	if e, ok := errors.AsType[*ParamsError](err); ok {
		d := Decision{Action: ActionRejected, Reason: ReasonBadRequest, Description: e.Error()}
		if e.Field == "text" {
			d.Reason = ReasonContent
		}
		return d
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return classifyAPIError(e)
	}
	if e, ok := errors.AsType[*ResponseError](err); ok {
		return classifyResponseError(e)
	}
	if e, ok := errors.AsType[*NetworkError](err); ok {
		d := Decision{Action: ActionBackoff, Reason: ReasonNetwork, Description: e.Error(), MaybeDelivered: e.MayHaveBeenDelivered}
		switch {
		case e.Canceled:
			d.Action, d.Reason = ActionCanceled, ReasonCanceled
		case e.Timeout:
			d.Reason = ReasonTimeout
		}
		return d
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return Decision{Action: ActionCanceled, Reason: ReasonCanceled, Description: err.Error()}
	}
	return Decision{Action: ActionBackoff, Reason: ReasonUnknown, Description: err.Error()}
}

func classifyAPIError(e *Error) Decision {
	d := Decision{Status: e.Status, Code: e.Code, Description: e.Description()}
	switch e.kind() {
	case kindRateLimited:
		d.Action, d.Reason = ActionRetryAfter, ReasonRateLimited
		d.RetryAfter, d.RetryAfterGiven = e.RetryAfter, e.RetryAfter > 0
		if !d.RetryAfterGiven {
			d.RetryAfter = DefaultRetryAfter
		}
	case kindUnauthorized:
		d.Action, d.Reason = ActionHalt, ReasonUnauthorized
	case kindMethodNotAllowed:
		d.Action, d.Reason = ActionHalt, ReasonMethodNotAllowed
	case kindServer:
		d.Action, d.Reason, d.MaybeDelivered = ActionBackoff, ReasonServer, e.Status == 502 || e.Status == 504
	case kindBlocked:
		d.Action, d.Reason = ActionRecipientDead, ReasonBlocked
	case kindChatDenied:
		d.Action, d.Reason = ActionRecipientDead, ReasonChatDenied
	case kindForbiddenUnknown:
		d.Action, d.Reason, d.Unrecognised = ActionRecipientDead, ReasonForbidden, true
	case kindRecipientNotFound:
		d.Action, d.Reason = ActionRecipientDead, ReasonNotFound
	case kindNotFoundUnknown:
		d.Action, d.Reason, d.Unrecognised = ActionRecipientDead, ReasonNotFound, true
	case kindAttachmentNotReady:
		d.Action, d.Reason = ActionBackoff, ReasonAttachmentNotReady
	case kindInvalidRequest:
		d.Action, d.Reason = ActionRejected, ReasonInvalidRequest
	case kindBadRequestUnknown:
		d.Action, d.Reason, d.Unrecognised = ActionRejected, ReasonBadRequest, true
	case kindClientUnknown:
		d.Action, d.Reason, d.Unrecognised = ActionRejected, ReasonClientError, true
	default: // 1xx, 2xx or 3xx with an error body: not a verdict on the message
		d.Action, d.Reason, d.MaybeDelivered = ActionBackoff, ReasonUnknown, e.Status >= 200 && e.Status < 300
	}
	return d
}

func classifyResponseError(e *ResponseError) Decision {
	d := Decision{
		Action:         ActionBackoff,
		Reason:         ReasonBadResponse,
		Status:         e.StatusCode,
		Description:    e.Error(),
		MaybeDelivered: e.MayHaveBeenDelivered,
	}
	switch {
	case e.StatusCode == 401:
		d.Action, d.Reason = ActionHalt, ReasonUnauthorized
	case e.StatusCode == 429:
		d.Action, d.Reason = ActionRetryAfter, ReasonRateLimited
		d.RetryAfter, d.RetryAfterGiven = e.RetryAfter, e.RetryAfter > 0
		if !d.RetryAfterGiven {
			d.RetryAfter = DefaultRetryAfter
		}
	case e.StatusCode == 404 || e.StatusCode == 405:
		d.Action, d.Reason = ActionHalt, ReasonEndpointNotFound
	case e.StatusCode >= 500:
		d.Reason = ReasonServer
	}
	return d
}
