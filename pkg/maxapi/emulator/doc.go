// Package emulator is a stand-in for the MAX Bot API (platform-api2.max.ru),
// faithful enough to test a sender against and precise enough to measure
// one.
//
// An [Emulator] is a [net/http.Handler]. It serves the two methods the
// delivery pipeline uses, as the OpenAPI schema of max-messenger/api-schema
// documents them:
//
//   - POST /messages?user_id=<id> or ?chat_id=<id> with a NewMessageBody
//     ({"text":"…","format":"html","notify":true}), answered with a
//     SendMessageResult ({"message":{"recipient":…,"body":{"mid":…}}});
//   - GET /me, answered with the bot's BotInfo.
//
// Every request must carry the token in the Authorization header, raw (no
// "Bearer"); a token in the access_token query parameter is refused, as MAX
// refuses it since the move to platform-api2. Errors are MAX's error body,
// {"code":"…","message":"…"}, with the documented statuses: 400, 401, 403,
// 404, 405, 429, 5xx.
//
// It models:
//
//   - MAX's limit of 30 requests per second per bot as an exact token bucket
//     on an injectable clock ([Limits]). A refused request gets 429
//     {"code":"too.many.requests"} with a Retry-After header and opens an
//     announced pause; every request inside it is refused too, and counted.
//   - Recipients that cannot be reached ([RecipientState]): a user who
//     stopped or blocked the bot (403 chat.denied, error.dialog.suspended),
//     a chat the bot has no access to (403 chat.denied), an unknown user or
//     chat (404 dialog.not.found / chat.not.found), and a 403 that a client
//     does not know (access.denied).
//   - Faults: nginx-style 5xx pages, JSON 5xx, dropped connections, extra
//     latency, requests that are never answered, and messages delivered
//     whose answer is lost (see [FaultMode]).
//
// It records every delivered message ([Emulator.Messages]) and counts every
// request ([Emulator.Stats]), including those made inside an announced 429
// pause. Control methods ([Emulator.SetState], [Emulator.StartOutage],
// [Emulator.OpenPause], [Emulator.Reset]) change its behaviour at run time,
// in-process or over HTTP under /emulator/ (the same shape as the Bot API
// emulator's, pkg/botapi/emulator).
//
// Where MAX documents a status but not the exact code or wording of its
// body, the emulator uses the codes seen from the real service (see
// docs/CHANNELS.md (MAX)); a client must key its decisions on the status and
// the code, never on the message text alone.
//
// Use it in-process with httptest.NewServer(emu), or run it as the
// max-emulator binary (cmd/max-emulator).
package emulator
