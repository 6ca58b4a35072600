// Package emulator is a stand-in for the Telegram Bot API, faithful enough to
// test a sender against and precise enough to measure one.
//
// An [Emulator] is a [net/http.Handler]. It serves the Bot API at
// /bot<token>/<method> (sendMessage, sendPhoto and getMe, with parameters
// from JSON, form, multipart or query, and Telegram's exact envelope) and
// control endpoints under /emulator/. It models:
//
//   - Telegram's rate limits as exact token buckets on an injectable clock:
//     30/s for the bot, 1000/s with allow_paid_broadcast, 1/s per private
//     chat, 20/min per group (see [Limits]). A refused request gets 429 with
//     an honest retry_after and opens an announced pause; a request inside
//     it is punished with a longer pause and counted.
//   - Telegram's error answers: blocked, deactivated, kicked and unknown
//     chats, the "temporary" 403, migrated groups, over-long and empty texts,
//     and HTML, MarkdownV2 and Markdown that Telegram's parsers reject, with
//     their wording.
//   - Faults: nginx-style 5xx pages, JSON 5xx, dropped connections, extra
//     latency, requests that are never answered, and messages delivered
//     whose answer is lost (see [FaultMode]).
//
// It also serves the bot's incoming side (updates.go): getUpdates with long
// polling and offsets, setWebhook, deleteWebhook and getWebhookInfo, posting
// updates to a webhook with its secret token, and Telegram's 409 conflicts
// between two consumers of the updates. [Emulator.BlockByUser],
// [Emulator.UnblockByUser], [Emulator.SetMember] and [Emulator.SendStart]
// make a chat's user act, producing the my_chat_member and message updates
// Telegram would.
//
// It records every delivered message ([Emulator.Messages]) and counts every
// request ([Emulator.Stats]), including those made inside a 429 pause of
// their own scope or of any scope. Control methods ([Emulator.Block],
// [Emulator.SetChatState], [Emulator.Migrate], [Emulator.StartOutage],
// [Emulator.OpenPause], [Emulator.Reset]) change its behaviour at run time,
// in-process or over HTTP.
//
// Use it in-process with httptest.NewServer(emu), or run it as the
// botapi-emulator binary. docs/EMULATOR.md describes the model, the
// punishment rule, the flags and the control endpoints, with a curl session.
package emulator
