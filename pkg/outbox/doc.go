// Package outbox is the transactional outbox an application imports to send
// Telegram notifications reliably.
//
// The application writes a [Notification] with [Enqueue] inside the same SQLite
// transaction that saves its business data (an order, say). The notification is
// keyed by an idempotency key that names the event ("order:A1:accepted"), so a
// repeated request writes nothing. Nothing else happens in the request: a
// separate publisher process reads pending rows with a [Reader] and moves them
// to NATS JetStream, and a worker calls Telegram.
//
// The package depends on database/sql and the pure-Go SQLite driver only; it
// never imports NATS or the Bot API client, so applications stay small.
//
// [Open] creates or opens the database with the settings an outbox needs and
// applies the versioned schema; see its documentation for each setting.
package outbox
