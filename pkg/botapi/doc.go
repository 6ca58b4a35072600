// Package botapi is a small client for the parts of the Telegram Bot API that
// the delivery pipeline needs: sendMessage, sendPhoto (a photo by URL with a
// caption) and getMe.
//
// The package is about reading Telegram's answers right. Every failure comes
// back as one of three typed errors:
//
//   - [*Error]: the Bot API answered with its JSON error envelope
//     ({"ok":false,"error_code":...,"description":...,"parameters":...}). It
//     carries the code, the description, RetryAfter (429) and
//     MigrateToChatID (a group that became a supergroup) and matches the
//     package's sentinels with [errors.Is]: [ErrRateLimited], [ErrBlocked]
//     and its members, [ErrChatNotFound], [ErrMigrated], [ErrContent] and its
//     members, [ErrNoRights], [ErrThreadNotFound], [ErrPhoto], [ErrMarkup],
//     [ErrUnauthorized], [ErrServer], and the
//     "unknown" ones [ErrForbiddenUnknown] and [ErrBadRequestUnknown].
//   - [*ResponseError]: something answered that is not a Bot API envelope: an
//     HTML page from a proxy, an empty or truncated body, invalid JSON, a body
//     over 1 MiB.
//   - [*NetworkError]: no answer at all: connection refused, reset, timeout,
//     or the caller's context ended. MayHaveBeenDelivered tells whether the
//     request had been written when it failed, in which case Telegram may
//     have delivered the message.
//
// [Classify] maps any error to a [Decision]: what a worker does next (retry
// after N, back off, follow a migration, dead-letter with a reason, halt
// everything on 401). It is the single place where Telegram's error space is
// turned into delivery policy.
//
// The bot token is part of every request URL. No error string, log line or
// unwrap chain produced by this package contains it: net/http's *url.Error
// (whose message is the full URL) is replaced by its inner error, and every
// message is scrubbed of the token.
//
// The bot's incoming side (updates.go) — getUpdates, setWebhook,
// deleteWebhook, getWebhookInfo and the Update, ChatMemberUpdated and
// ChatMember objects — serves an update intake; a 409 comes back as a
// [*ConflictError] matching [ErrConflict].
//
// A Client is safe for concurrent use and reuses connections.
package botapi
