package botapi

import "strings"

// kind is the meaning of a Bot API error, derived from its code, description
// and parameters. Sentinels are sets of kinds.
type kind uint8

const (
	kindUnknown kind = iota
	kindRateLimited
	kindUnauthorized
	kindNotFound
	kindMigrated
	kindBlocked
	kindDeactivated
	kindKicked
	kindNotMember
	kindCantInitiate
	kindBots
	kindChatNotFound
	kindNoRights
	kindTooLong
	kindTextEmpty
	kindCantParse
	kindForbiddenUnknown
	kindBadRequestUnknown
	kindServer
	kindChatDeleted
	kindUserNotFound
	kindCantSend
	kindTopicClosed
	kindThreadNotFound
	kindCaptionTooLong
	kindPhoto
	kindMarkup
)

// knownDescriptions maps lower-case description prefixes, as they follow
// Telegram's "Forbidden: " or "Bad Request: " status phrase, to their kind.
// Telegram's wording varies between chat types ("kicked from the group chat",
// "kicked from the supergroup chat", "not a member of the channel chat"), so
// the prefixes stop before the variable part.
var knownDescriptions = [...]struct {
	prefix string
	kind   kind
}{
	{"bot was blocked by the user", kindBlocked},
	{"user is deactivated", kindDeactivated},
	{"bot was kicked", kindKicked},
	{"bot is not a member", kindNotMember},
	{"bot can't initiate conversation", kindCantInitiate},
	{"bot can't send messages to bots", kindBots},
	{"chat not found", kindChatNotFound},
	{"have no rights to send", kindNoRights},
	{"chat_write_forbidden", kindNoRights},
	{"not enough rights", kindNoRights},
	{"need administrator rights", kindNoRights},
	{"message is too long", kindTooLong},
	{"message text is empty", kindTextEmpty},
	{"can't parse entities", kindCantParse},
	{"the group chat was deleted", kindChatDeleted},
	{"group chat was deleted", kindChatDeleted},
	{"user not found", kindUserNotFound},
	// Reported to be temporary at times (a privacy setting, a restriction
	// that is lifted); it is a dead recipient all the same: the same
	// request does not become good by repeating it, and a notification
	// with a fallback channel reaches the customer there at once.
	{"bot can't send messages to the user", kindCantSend},
	{"topic_closed", kindTopicClosed},
	{"message thread not found", kindThreadNotFound},
	{"message caption is too long", kindCaptionTooLong},
	// sendPhoto by URL: Telegram could not use the address or what it
	// fetched from it.
	{"wrong file identifier/http url specified", kindPhoto},
	{"wrong remote file identifier specified", kindPhoto},
	{"failed to get http url content", kindPhoto},
	{"wrong type of the web page content", kindPhoto},
	{"photo_invalid_dimensions", kindPhoto},
	{"image_process_failed", kindPhoto},
	{"there is no photo in the request", kindPhoto},
	// The inline keyboard: too many buttons, a button URL Telegram does
	// not accept, a button it cannot parse.
	{"reply markup is too long", kindMarkup},
	{"reply_markup_too_long", kindMarkup},
	{"button_url_invalid", kindMarkup},
	{"inline keyboard button url", kindMarkup},
	{"can't parse inline keyboard button", kindMarkup},
	{"can't parse reply keyboard markup", kindMarkup},
}

// statusPhrases are the prefixes Telegram puts before the specific part of a
// 400 or 403 description.
var statusPhrases = [...]string{"bad request:", "forbidden:"}

// describe returns the kind of a 400 or 403 description, or kindUnknown.
func describe(description string) kind {
	d := strings.ToLower(strings.TrimSpace(description))
	for _, p := range statusPhrases {
		if rest, ok := strings.CutPrefix(d, p); ok {
			d = strings.TrimSpace(rest)
			break
		}
	}
	for _, kd := range knownDescriptions {
		if strings.HasPrefix(d, kd.prefix) {
			return kd.kind
		}
	}
	return kindUnknown
}
