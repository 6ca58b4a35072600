// Package delivery is the telegram worker: it pulls notifications from the
// NOTIFY stream and sends them with the Bot API, once and in order per chat,
// within Telegram's limits.
//
// The design, in one paragraph (docs/WORKER.md has the long form): one
// dispatcher goroutine owns a lane per chat. A lane holds that chat's
// messages in stream order and sends at most one at a time, so a chat's
// messages never overtake each other; lanes are independent, so a chat that
// must wait (its 1 msg/s limit, a retry backoff) never holds back the others.
// Proactive token buckets keep the bot under 30 msg/s, a private chat under
// 1 msg/s and a group under 20 msg/min, so 429s do not happen in steady
// state. When one does, the whole sender pauses for retry_after (Telegram
// does not say which limit was hit) and the message goes back to the stream
// with a NAK delay; so do transient failures, with exponential backoff and
// full jitter, behind a circuit breaker. A message that goes back to the
// stream "parks" its lane: later messages of that chat go back too, behind it,
// so order holds across retries and restarts. Blocked or missing chats are
// dead-lettered to NOTIFY_DEAD with their reason and remembered, so later
// messages to them cost no API call. Every success is recorded under its
// idempotency key before the ack, so a redelivery or a replay is never sent
// twice.
package delivery
