package twilio

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
	// ActionDelivered: Twilio created the message (nil error).
	ActionDelivered Action = iota + 1
	// ActionRetryAfter: Twilio limited us (429 / 20429), or this sender's
	// queue is full (21611). Wait Decision.RetryAfter before any further
	// request; not a failed attempt.
	ActionRetryAfter
	// ActionBackoff: a failure that may pass (5xx, network error, timeout,
	// an answer that is not Twilio's). Retry with backoff; a failed
	// attempt.
	ActionBackoff
	// ActionRecipientDead: the recipient cannot get an SMS from this
	// sender (invalid number, unsubscribed, not mobile, region not
	// permitted, not verified, or an unrecognised 403). Give up on the
	// recipient.
	ActionRecipientDead
	// ActionRejected: Twilio will never accept this message (its content,
	// the sender configuration, or an unrecognised 400). Give up on the
	// message; the recipient is fine.
	ActionRejected
	// ActionHalt: the credentials are wrong (401 / 20003) or the API is not
	// where the base URL says (404). Every request would fail the same
	// way: stop sending and alert.
	ActionHalt
	// ActionCanceled: the caller's own context ended the attempt.
	// Decision.MaybeDelivered tells whether the request had been written.
	ActionCanceled
	// ActionNotSent: the admission check refused the request; Twilio has
	// not seen it.
	ActionNotSent
)

var actionNames = [...]string{
	ActionDelivered:     "delivered",
	ActionRetryAfter:    "retry_after",
	ActionBackoff:       "backoff",
	ActionRecipientDead: "recipient_dead",
	ActionRejected:      "rejected",
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

// Reasons reported in Decision.Reason: stable, lower-case labels. The dead
// and rejected reasons are the ones a dead letter carries.
const (
	// Recipient dead.
	ReasonInvalidNumber      = "invalid_number"       // 21211
	ReasonUnsubscribed       = "unsubscribed"         // 21610: replied STOP
	ReasonNotMobile          = "not_mobile"           // 21614, 21635
	ReasonRegionNotPermitted = "region_not_permitted" // 21408
	ReasonUnverified         = "unverified"           // 21608: trial account
	ReasonForbidden          = "forbidden"            // an unrecognised 403

	// Message rejected.
	ReasonContent    = "content"     // 21602, 21617
	ReasonSender     = "sender"      // 21212, 21603, 21606
	ReasonBadRequest = "bad_request" // an unrecognised 400 (or other 4xx)

	// Neither.
	ReasonDelivered    = "delivered"
	ReasonRateLimited  = "rate_limited" // 429 / 20429
	ReasonQueueFull    = "queue_full"   // 21611
	ReasonUnauthorized = "unauthorized" // 401 / 20003
	ReasonNotFound     = "not_found"    // 404 / 20404
	ReasonServer       = "server"
	ReasonNetwork      = "network"
	ReasonTimeout      = "timeout"
	ReasonBadResponse  = "bad_response"
	ReasonCanceled     = "canceled"
	ReasonNotSent      = "not_sent"
	ReasonUnknown      = "unknown"
)

// DefaultRetryAfter is the wait Classify reports for a 429 without a
// Retry-After header. Twilio documents its 429 as the account's limit of
// concurrent requests, to be retried after backing off, without a wait;
// the emulator sends Retry-After.
const DefaultRetryAfter = 2 * time.Second

// QueueFullRetryAfter is the wait Classify reports for 21611: the sender's
// queue holds 10 hours of messages, and a minute lets 60 segments of a long
// code leave it.
const QueueFullRetryAfter = time.Minute

// Decision is what a sender does after one attempt, with what it needs to
// do it and to record why.
type Decision struct {
	// Action is what to do.
	Action Action
	// Reason is a stable, lower-case label: one of the Reason constants.
	Reason string
	// Status is the HTTP status; 0 without an answer.
	Status int
	// Code is Twilio's error code, or the HTTP status when the answer had
	// none; 0 without an answer.
	Code int
	// Description is Twilio's message, or the error's, without credentials
	// and with phone numbers masked.
	Description string
	// RetryAfter is how long to wait (ActionRetryAfter).
	RetryAfter time.Duration
	// MaybeDelivered is true when Twilio may have created the message
	// despite the error: retrying may send it twice.
	MaybeDelivered bool
	// Unrecognised marks a permanent answer the package does not know by
	// its code (a 400 or 403 with an unknown code).
	Unrecognised bool
}

// String formats the decision for logs.
func (d Decision) String() string {
	s := fmt.Sprintf("%s (%s", d.Action, d.Reason)
	if d.Code != 0 {
		s += fmt.Sprintf(", code %d", d.Code)
	}
	if d.Action == ActionRetryAfter {
		s += fmt.Sprintf(", retry after %s", d.RetryAfter)
	}
	if d.MaybeDelivered {
		s += ", may have been delivered"
	}
	return s + ")"
}

// Classify maps the outcome of one Send to what the sender does next. It is
// total: every error, including ones from outside the package, gets a
// decision. The branches, in order:
//
//   - nil: ActionDelivered.
//   - *NotSentError: ActionNotSent.
//   - *RequestError: ActionRejected, reason content (Body) or bad_request
//     (To).
//   - *Error, by Twilio code first:
//     20429 → ActionRetryAfter (rate_limited; Retry-After or
//     DefaultRetryAfter); 21611 → ActionRetryAfter (queue_full;
//     Retry-After or QueueFullRetryAfter); 20003 → ActionHalt
//     (unauthorized); 20404 → ActionHalt (not_found); 21211, 21610,
//     21614/21635, 21408, 21608 → ActionRecipientDead (invalid_number,
//     unsubscribed, not_mobile, region_not_permitted, unverified); 21602,
//     21617 → ActionRejected (content); 21212, 21603, 21606 →
//     ActionRejected (sender).
//   - *Error with another code, by HTTP status: 429 → ActionRetryAfter;
//     401 → ActionHalt; 404 → ActionHalt; 5xx → ActionBackoff (server;
//     MaybeDelivered for 502 and 504); 403 → ActionRecipientDead
//     (forbidden, Unrecognised); any other 4xx → ActionRejected
//     (bad_request, Unrecognised). A Bad Request or a Forbidden does not
//     become good by sending the same request again.
//   - *ResponseError (not Twilio's answer): 401 → ActionHalt; 404 →
//     ActionHalt; 429 → ActionRetryAfter; 5xx → ActionBackoff (server);
//     anything else → ActionBackoff (bad_response). MaybeDelivered for 2xx,
//     502 and 504.
//   - *NetworkError from the caller's context: ActionCanceled; otherwise
//     ActionBackoff (timeout or network), MaybeDelivered when the request
//     had been written.
//   - context.Canceled or context.DeadlineExceeded: ActionCanceled.
//   - anything else: ActionBackoff, reason unknown.
func Classify(err error) Decision {
	if err == nil {
		return Decision{Action: ActionDelivered, Reason: ReasonDelivered}
	}
	if e, ok := errors.AsType[*NotSentError](err); ok {
		return Decision{Action: ActionNotSent, Reason: ReasonNotSent, Description: e.Error()}
	}
	if e, ok := errors.AsType[*RequestError](err); ok {
		d := Decision{Action: ActionRejected, Reason: ReasonBadRequest, Description: e.Error()}
		if e.Param == "Body" {
			d.Reason = ReasonContent
		}
		return d
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return classifyError(e)
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

func classifyError(e *Error) Decision {
	d := Decision{Status: e.Status, Code: e.Code, Description: e.Message}
	if d.Code == 0 {
		d.Code = e.Status
	}
	if d.Description == "" {
		d.Description = e.Error()
	}
	set := func(a Action, reason string) { d.Action, d.Reason = a, reason }
	switch k := e.kind(); k {
	case kindRateLimited:
		set(ActionRetryAfter, ReasonRateLimited)
		d.RetryAfter = orDefault(e.RetryAfter, DefaultRetryAfter)
	case kindQueueFull:
		set(ActionRetryAfter, ReasonQueueFull)
		d.RetryAfter = orDefault(e.RetryAfter, QueueFullRetryAfter)
	case kindUnauthorized:
		set(ActionHalt, ReasonUnauthorized)
	case kindNotFound:
		set(ActionHalt, ReasonNotFound)
	case kindServer:
		set(ActionBackoff, ReasonServer)
		d.MaybeDelivered = maybeDeliveredStatus(e.Status)
	case kindInvalidNumber:
		set(ActionRecipientDead, ReasonInvalidNumber)
	case kindUnsubscribed:
		set(ActionRecipientDead, ReasonUnsubscribed)
	case kindNotMobile:
		set(ActionRecipientDead, ReasonNotMobile)
	case kindRegionNotPermitted:
		set(ActionRecipientDead, ReasonRegionNotPermitted)
	case kindUnverified:
		set(ActionRecipientDead, ReasonUnverified)
	case kindContent:
		set(ActionRejected, ReasonContent)
	case kindSender:
		set(ActionRejected, ReasonSender)
	case kindForbiddenUnknown:
		set(ActionRecipientDead, ReasonForbidden)
		d.Unrecognised = true
	case kindBadRequestUnknown:
		set(ActionRejected, ReasonBadRequest)
		d.Unrecognised = true
	default: // a 1xx or 3xx with a Twilio error body
		set(ActionBackoff, ReasonUnknown)
	}
	return d
}

func classifyResponseError(e *ResponseError) Decision {
	d := Decision{
		Action:         ActionBackoff,
		Reason:         ReasonBadResponse,
		Status:         e.StatusCode,
		Code:           e.StatusCode,
		Description:    e.Error(),
		MaybeDelivered: e.MayHaveBeenDelivered,
	}
	switch {
	case e.StatusCode == 401:
		d.Action, d.Reason = ActionHalt, ReasonUnauthorized
	case e.StatusCode == 404:
		d.Action, d.Reason = ActionHalt, ReasonNotFound
	case e.StatusCode == 429:
		d.Action, d.Reason, d.RetryAfter = ActionRetryAfter, ReasonRateLimited, orDefault(e.RetryAfter, DefaultRetryAfter)
	case e.StatusCode >= 500:
		d.Reason = ReasonServer
	}
	return d
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
