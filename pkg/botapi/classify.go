package botapi

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Action is what a worker does with a message after an attempt.
type Action uint8

// Actions, from the outcome of one attempt. The zero Action is invalid, so a
// forgotten classification is not mistaken for a delivery.
const (
	// ActionDelivered: the attempt succeeded (nil error). Acknowledge.
	ActionDelivered Action = iota + 1
	// ActionRetryAfter: Telegram asked to wait Decision.RetryAfter before any
	// further request of the limited scope (429). Wait and retry; this never
	// counts as a failed attempt.
	ActionRetryAfter
	// ActionBackoff: a transient or unproven failure (5xx, network error,
	// timeout, proxy page, unrecognised 403 or 400). Retry with exponential
	// backoff and jitter; it counts as a failed attempt, so the worker's
	// attempt budget eventually dead-letters a message that never succeeds.
	ActionBackoff
	// ActionMigrate: the group became a supergroup. Resend to
	// Decision.MigrateTo and remember the mapping; not a failed attempt.
	ActionMigrate
	// ActionDead: a permanent failure with Decision.Reason. Dead-letter the
	// message; when Decision.ChatDead reports true, also mark the chat dead
	// so that later messages to it are not attempted.
	ActionDead
	// ActionHalt: the token is wrong or revoked (401), or the Bot API does not
	// know the method at this base URL (404). Stop sending everything and
	// alert; never dead-letter messages for it.
	ActionHalt
	// ActionCanceled: the caller's own context ended the attempt (shutdown or
	// the caller's deadline). Not a Telegram failure: do not count an
	// attempt; redeliver later. Decision.MaybeDelivered tells whether the
	// request had already been written.
	ActionCanceled
	// ActionNotSent: the request was not written because its admission
	// check refused it (WithAdmission). Telegram has not seen it: try again
	// when admission allows; not a failed attempt.
	ActionNotSent
)

var actionNames = [...]string{
	ActionDelivered:  "delivered",
	ActionRetryAfter: "retry_after",
	ActionBackoff:    "backoff",
	ActionMigrate:    "migrate",
	ActionDead:       "dead",
	ActionHalt:       "halt",
	ActionCanceled:   "canceled",
	ActionNotSent:    "not_sent",
}

// String returns the action's lower-case name, usable as a metric label.
func (a Action) String() string {
	if int(a) < len(actionNames) && actionNames[a] != "" {
		return actionNames[a]
	}
	return fmt.Sprintf("invalid(%d)", uint8(a))
}

// Reasons reported in Decision.Reason. Dead reasons are the ones a dead
// letter carries; the others label retries in logs and metrics.
const (
	// Dead, chat level.
	ReasonBlocked      = "blocked"        // bot was blocked by the user
	ReasonDeactivated  = "deactivated"    // user is deactivated
	ReasonKicked       = "kicked"         // bot was kicked from the group/supergroup/channel
	ReasonNotMember    = "not_member"     // bot is not a member of the chat
	ReasonCantInitiate = "cant_initiate"  // the user never started the bot
	ReasonBots         = "bots"           // the recipient is a bot
	ReasonChatNotFound = "chat_not_found" // wrong or deleted chat id
	ReasonNoRights     = "no_rights"      // no rights to write in the chat
	ReasonChatDeleted  = "chat_deleted"   // the group chat was deleted
	ReasonUserNotFound = "user_not_found" // no such user
	ReasonCantSend     = "cant_send"      // bot can't send messages to the user
	// ReasonForbiddenUnknown: a 403 whose description is not known. Dead,
	// chat level, counted apart so the table of known descriptions grows.
	ReasonForbiddenUnknown = "forbidden_unknown"

	// Dead, message level: the chat is fine, this message is not.
	ReasonContent        = "content"          // too long, empty, or markup that can't be parsed
	ReasonTopicClosed    = "topic_closed"     // the forum topic is closed
	ReasonThreadNotFound = "thread_not_found" // no such forum topic in the chat
	ReasonPhoto          = "photo"            // sendPhoto could not use the photo
	ReasonMarkup         = "markup"           // the inline keyboard was refused
	// ReasonBadRequest: a 400 whose description is not known. Dead,
	// message level, counted apart so the table of known descriptions
	// grows.
	ReasonBadRequest = "bad_request"

	// Non-dead outcomes.
	ReasonDelivered      = "delivered"
	ReasonRateLimited    = "rate_limited"
	ReasonMigrated       = "migrated"
	ReasonUnauthorized   = "unauthorized"
	ReasonMethodNotFound = "method_not_found"
	ReasonServer         = "server"
	ReasonNetwork        = "network"
	ReasonTimeout        = "timeout"
	ReasonBadResponse    = "bad_response"
	ReasonCanceled       = "canceled"
	ReasonNotSent        = "not_sent"
	ReasonUnknown        = "unknown"
)

// DefaultRetryAfter is the wait Classify reports for a 429 that says neither
// parameters.retry_after, "retry after N" nor a Retry-After header.
const DefaultRetryAfter = 5 * time.Second

// Decision is what a worker does after one attempt, with everything it needs
// to do it and to record why.
type Decision struct {
	// Action is what to do.
	Action Action
	// RetryAfter is how long to wait before any further request of the
	// limited scope (ActionRetryAfter only).
	RetryAfter time.Duration
	// MigrateTo is the supergroup's chat id (ActionMigrate only).
	MigrateTo int64
	// Reason is a stable, lower-case label: one of the Reason constants.
	Reason string
	// Code is the Bot API error code or HTTP status; 0 without an answer.
	Code int
	// Description is Telegram's description, or the error message when
	// there was none. It never contains the token.
	Description string
	// MaybeDelivered is true when Telegram may have delivered the message
	// despite the error (see ErrMaybeDelivered): retrying may duplicate it.
	MaybeDelivered bool
	// Unrecognised is true for a permanent answer whose description is not
	// known (an unrecognised 400 or 403): count these, so that the table of
	// known descriptions grows from what production sees.
	Unrecognised bool
}

// ChatDead reports whether the decision marks the whole chat unreachable:
// ActionDead with any reason except the message-level ones (content,
// topic_closed, thread_not_found, photo, markup, bad_request).
func (d Decision) ChatDead() bool {
	if d.Action != ActionDead {
		return false
	}
	switch d.Reason {
	case ReasonContent, ReasonTopicClosed, ReasonThreadNotFound, ReasonPhoto, ReasonMarkup, ReasonBadRequest:
		return false
	}
	return true
}

// String formats the decision for logs.
func (d Decision) String() string {
	s := fmt.Sprintf("%s (%s", d.Action, d.Reason)
	if d.Code != 0 {
		s += fmt.Sprintf(", code %d", d.Code)
	}
	switch d.Action {
	case ActionRetryAfter:
		s += fmt.Sprintf(", retry after %s", d.RetryAfter)
	case ActionMigrate:
		s += fmt.Sprintf(", migrate to %d", d.MigrateTo)
	}
	if d.MaybeDelivered {
		s += ", may have been delivered"
	}
	return s + ")"
}

// deadReason returns the dead-letter reason of a permanent kind.
func deadReason(k kind) (string, bool) {
	switch k {
	case kindBlocked:
		return ReasonBlocked, true
	case kindDeactivated:
		return ReasonDeactivated, true
	case kindKicked:
		return ReasonKicked, true
	case kindNotMember:
		return ReasonNotMember, true
	case kindCantInitiate:
		return ReasonCantInitiate, true
	case kindBots:
		return ReasonBots, true
	case kindChatNotFound:
		return ReasonChatNotFound, true
	case kindNoRights:
		return ReasonNoRights, true
	case kindTooLong, kindTextEmpty, kindCantParse, kindCaptionTooLong:
		return ReasonContent, true
	case kindChatDeleted:
		return ReasonChatDeleted, true
	case kindUserNotFound:
		return ReasonUserNotFound, true
	case kindCantSend:
		return ReasonCantSend, true
	case kindTopicClosed:
		return ReasonTopicClosed, true
	case kindThreadNotFound:
		return ReasonThreadNotFound, true
	case kindPhoto:
		return ReasonPhoto, true
	case kindMarkup:
		return ReasonMarkup, true
	}
	return "", false
}

// Classify maps the outcome of one Bot API call to what the worker does next.
// It is total: every error, including ones from outside this package, gets a
// decision. The branches, in order:
//
//   - nil: ActionDelivered.
//   - *NotSentError: ActionNotSent (admission refused; nothing written).
//   - *Error with parameters.migrate_to_chat_id: ActionMigrate to that id
//     (the parameter decides, not the description).
//   - *Error 429: ActionRetryAfter with its retry_after (DefaultRetryAfter
//     when absent).
//   - *Error 401: ActionHalt, reason unauthorized.
//   - *Error 404: ActionHalt, reason method_not_found (the base URL or
//     method is wrong; every request would fail the same way).
//   - *Error 400/403 with a known permanent description: ActionDead with
//     reason blocked, deactivated, kicked, not_member, cant_initiate, bots,
//     chat_not_found, no_rights, chat_deleted, user_not_found, cant_send
//     (the chat is dead), or content, topic_closed, thread_not_found,
//     photo, markup (this message is).
//   - *Error 403 with any other description: ActionDead, reason
//     forbidden_unknown, Unrecognised: the same request does not become
//     good by repeating it, so the chat is treated as dead (and a
//     notification with a fallback channel goes there).
//   - *Error 400 with any other description: ActionDead, reason
//     bad_request, Unrecognised: a permanent failure of this message.
//   - *Error 5xx: ActionBackoff, reason server.
//   - *Error with any other code (409, 420, …): ActionBackoff, reason unknown.
//   - *ResponseError 401: ActionHalt; 429: ActionRetryAfter (Retry-After
//     header or DefaultRetryAfter); 5xx: ActionBackoff, reason server;
//     anything else: ActionBackoff, reason bad_response. MaybeDelivered for
//     2xx, 502 and 504.
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
	d := Decision{Code: e.Code, Description: e.Description}
	k := e.kind()
	if reason, ok := deadReason(k); ok {
		d.Action, d.Reason = ActionDead, reason
		return d
	}
	switch k {
	case kindMigrated:
		d.Action, d.Reason, d.MigrateTo = ActionMigrate, ReasonMigrated, e.MigrateToChatID
	case kindRateLimited:
		d.Action, d.Reason, d.RetryAfter = ActionRetryAfter, ReasonRateLimited, e.RetryAfter
		if d.RetryAfter <= 0 {
			d.RetryAfter = DefaultRetryAfter
		}
	case kindUnauthorized:
		d.Action, d.Reason = ActionHalt, ReasonUnauthorized
	case kindNotFound:
		d.Action, d.Reason = ActionHalt, ReasonMethodNotFound
	case kindServer:
		d.Action, d.Reason, d.MaybeDelivered = ActionBackoff, ReasonServer, maybeDeliveredStatus(e.Code)
	case kindForbiddenUnknown:
		d.Action, d.Reason, d.Unrecognised = ActionDead, ReasonForbiddenUnknown, true
	case kindBadRequestUnknown:
		d.Action, d.Reason, d.Unrecognised = ActionDead, ReasonBadRequest, true
	default:
		d.Action, d.Reason = ActionBackoff, ReasonUnknown
	}
	return d
}

func classifyResponseError(e *ResponseError) Decision {
	d := Decision{
		Action:         ActionBackoff,
		Reason:         ReasonBadResponse,
		Code:           e.StatusCode,
		Description:    e.Error(),
		MaybeDelivered: e.MayHaveBeenDelivered,
	}
	switch {
	case e.StatusCode == 401:
		d.Action, d.Reason = ActionHalt, ReasonUnauthorized
	case e.StatusCode == 429:
		d.Action, d.Reason, d.RetryAfter = ActionRetryAfter, ReasonRateLimited, e.RetryAfter
		if d.RetryAfter <= 0 {
			d.RetryAfter = DefaultRetryAfter
		}
	case e.StatusCode >= 500:
		d.Reason = ReasonServer
	}
	return d
}
