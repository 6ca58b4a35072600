package emulator

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// Recipient is where a message goes: a user (POST /messages?user_id=) or a
// chat (?chat_id=). Exactly one of the two is set.
type Recipient struct {
	UserID int64 `json:"user_id,omitempty"`
	ChatID int64 `json:"chat_id,omitempty"`
}

// User returns the recipient for a user id.
func User(id int64) Recipient { return Recipient{UserID: id} }

// Chat returns the recipient for a chat id.
func Chat(id int64) Recipient { return Recipient{ChatID: id} }

// String returns the recipient as the delivery pipeline names it: u<user
// id> or c<chat id> (notify.Notification.Recipient).
func (r Recipient) String() string {
	if r.UserID != 0 {
		return "u" + strconv.FormatInt(r.UserID, 10)
	}
	return "c" + strconv.FormatInt(r.ChatID, 10)
}

// valid reports whether exactly one id is set, a user id being positive.
func (r Recipient) valid() bool {
	return (r.UserID > 0) != (r.ChatID != 0) && r.UserID >= 0
}

// ParseRecipient reads u<user id> or c<chat id>, such as u42 or c-7001.
func ParseRecipient(s string) (Recipient, error) {
	s = strings.TrimSpace(s)
	if len(s) < 2 {
		return Recipient{}, fmt.Errorf("recipient %q is not u<user id> or c<chat id>", s)
	}
	id, err := strconv.ParseInt(s[1:], 10, 64)
	var r Recipient
	switch s[0] {
	case 'u':
		r.UserID = id
	case 'c':
		r.ChatID = id
	default:
		err = fmt.Errorf("unknown prefix %q", s[0])
	}
	if err != nil || !r.valid() {
		return Recipient{}, fmt.Errorf("recipient %q is not u<user id> or c<chat id> (a positive user id, a non-zero chat id)", s)
	}
	return r, nil
}

// RecipientState is how the emulator answers messages to a recipient.
type RecipientState string

// Recipient states.
const (
	// StateOK delivers.
	StateOK RecipientState = "ok"
	// StateBlocked answers 403 {"code":"chat.denied","message":
	// "error.dialog.suspended"}: the user stopped or blocked the bot.
	StateBlocked RecipientState = "blocked"
	// StateDenied answers 403 {"code":"chat.denied","message":
	// "error.chat.denied"}: the bot has no access to the chat (removed
	// from it, or writing is not allowed).
	StateDenied RecipientState = "denied"
	// StateNotFound answers 404 {"code":"dialog.not.found"} for a user
	// (the user never started a dialog with the bot, or deleted it) and
	// {"code":"chat.not.found"} for a chat.
	StateNotFound RecipientState = "not_found"
	// StateForbidden answers 403 {"code":"access.denied","message":
	// "Access denied"}, a 403 whose code a client does not recognise.
	StateForbidden RecipientState = "forbidden"
)

// ParseRecipientState checks a state's name.
func ParseRecipientState(s string) (RecipientState, error) {
	switch st := RecipientState(strings.ToLower(strings.TrimSpace(s))); st {
	case StateOK, StateBlocked, StateDenied, StateNotFound, StateForbidden:
		return st, nil
	}
	return "", fmt.Errorf("unknown recipient state %q (want ok, blocked, denied, not_found or forbidden)", s)
}

// stateFailure is the answer for a recipient that does not accept messages.
func stateFailure(s RecipientState, r Recipient) (int, errorBody) {
	switch s {
	case StateBlocked:
		return http.StatusForbidden, errorBody{Code: "chat.denied", Message: "error.dialog.suspended"}
	case StateDenied:
		return http.StatusForbidden, errorBody{Code: "chat.denied", Message: "error.chat.denied"}
	case StateForbidden:
		return http.StatusForbidden, errorBody{Code: "access.denied", Message: "Access denied"}
	}
	if r.UserID != 0 {
		return http.StatusNotFound, errorBody{Code: "dialog.not.found", Message: "error.dialog.notfound"}
	}
	return http.StatusNotFound, errorBody{Code: "chat.not.found", Message: "error.chat.notfound"}
}
