// Package notify is the notification every part of tgnotify speaks: the
// application that enqueues it, the publisher that carries it, and the
// workers that deliver it. It holds the [Notification] type, its priority
// and parse mode, the versioned JSON payload ([Notification.MarshalPayload],
// [DecodePayload]) with its validation, and HTML escaping for user data.
//
// It imports nothing but the standard library, so that a worker does not
// link an SQL engine and an application does not link NATS: storage lives in
// pkg/outbox, transport in pkg/jetstream.
//
// # The payload
//
// A payload is one JSON object with "v", its version, and the fields of
// [Notification] under their JSON names. [Notification.MarshalPayload]
// writes the lowest version that carries the notification; a reader refuses
// a version newer than [PayloadVersion] (a [*VersionError]) and a payload
// that carries a field of a later version than it says.
//
//   - Version 1: key, channel ("telegram"), chat_id, text, parse_mode
//     ("", "HTML", "MarkdownV2"), disable_notification, protect_content,
//     priority ("transactional", "bulk"), expires_at, created_at (RFC 3339).
//   - Version 2 adds max_user_id, max_chat_id, email, phone, route (an array
//     of "telegram", "max", "email", "sms"), fallback_after (a Go duration
//     such as "90s", or "never") and subject. It has no channel: the route
//     says it.
//   - Version 3 adds rich content: buttons, photo, message_thread_id,
//     link_preview and bodies, each optional and described below.
//   - Version 4 adds not_before (RFC 3339): the notification is not sent
//     before it. At most [MaxScheduleAhead] (48 hours) after created_at,
//     and before expires_at when that is set. A worker that knows only
//     version 3 refuses it rather than send it at once.
//
// Version 3's fields:
//
//   - buttons: an array of rows, each an array of 1..8 objects {"text":
//     1..64 characters on one line, "url": http, https or tg URL of at most
//     2048 bytes}; at most 100 buttons; with MAX on the route at most 3 a
//     row and 30 rows.
//   - photo: an http or https URL (at most 2048 bytes). With Telegram on
//     the route the text is the photo's caption: at most 1024 characters
//     after markup.
//   - message_thread_id: a positive Telegram forum topic id; needs chat_id.
//   - link_preview: {"disabled", "url" (http or https), "prefer_small_media",
//     "prefer_large_media", "show_above_text"}, all optional; disabled
//     excludes the others, small excludes large; not with a photo.
//   - bodies: {"max": {"text": 1..4000 characters as written, "format": "",
//     "html" or "markdown"}, "email": {"html", "text"}, "sms": {"text":
//     1..1600 characters}}, each optional; a body's text is non-blank UTF-8
//     of at most 64 KiB. With a MAX body, Telegram's text is no longer held
//     to MAX's 4000 characters.
//
// An encoded payload is at most [MaxPayloadBytes].
package notify
