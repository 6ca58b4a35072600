// Package maxapi is a small client for the parts of the MAX Bot API that the
// delivery pipeline needs: sending a text message (POST /messages) and
// checking the token (GET /me).
//
// It follows the OpenAPI schema of github.com/max-messenger/api-schema
// (schema.yaml, version 0.0.33) and its README: the base URL is
// https://platform-api2.max.ru, the token goes raw in the Authorization
// header (no "Bearer"; the access_token query parameter is no longer
// accepted), a message is POST /messages?user_id=<id> or ?chat_id=<id> with
// a NewMessageBody ({"text":…,"format":"html"}, text up to 4000
// characters), and errors are {"code":"…","message":"…"} with the HTTP
// statuses 400, 401, 403, 404, 405, 429 and 5xx. The official Go client,
// github.com/max-messenger/max-bot-api-client-go, agrees on all of this.
//
// The new host's certificate is issued by the Russian Ministry of Digital
// Development's root CA, which many systems do not trust: [WithCAFile] adds
// a PEM bundle to the client's roots.
//
// Every failure comes back as one of four typed errors:
//
//   - [*Error]: MAX answered with its error body. It carries the HTTP
//     status, MAX's code and message, and the Retry-After of a 429, and
//     matches the package's sentinels with [errors.Is] by status and code:
//     [ErrRateLimited], [ErrUnauthorized], [ErrForbidden] and its members
//     ([ErrBlocked], [ErrChatDenied], [ErrForbiddenUnknown]), [ErrNotFound]
//     and its members ([ErrRecipientNotFound], [ErrNotFoundUnknown]),
//     [ErrBadRequest] and its members, [ErrMethodNotAllowed], [ErrServer].
//   - [*ResponseError]: something answered that is not MAX's error body or
//     result: an HTML page from a proxy, an empty or truncated body, a
//     success without a message id.
//   - [*NetworkError]: no answer at all. MayHaveBeenDelivered tells whether
//     the request had been written when it failed, in which case MAX may
//     have delivered the message.
//   - [*NotSentError] and [*ParamsError]: no request was made, because the
//     caller's admission check refused it ([WithAdmission]) or the
//     parameters cannot be sent.
//
// [Classify] maps any error to a [Decision]: deliver, retry after N, back
// off, reject the message, give up on the recipient, or halt everything on
// 401. It is the single place where MAX's error space becomes delivery
// policy.
//
// The token is never printed, logged or returned in an error: it only
// travels in a request header, and any text that could echo it is
// scrubbed.
//
// A Client is safe for concurrent use and reuses connections.
package maxapi
