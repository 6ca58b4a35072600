// Package outbox is the SQLite side of the transactional outbox: what an
// application imports to hand notifications to tgnotify reliably.
//
// The application writes a [notify.Notification] with [Enqueue] (or a
// [Writer]) inside the same SQLite transaction that saves its business data
// (an order, say). Enqueue takes the application's own transaction through
// the small [Execer] interface, so an application that opened its database
// itself only runs [Migrate] once; [Open] is a convenience that opens the
// file with the recommended settings and migrates it. The notification is
// keyed by an idempotency key that names the event ("order:A1:accepted"), so
// a repeated request writes nothing. Nothing else happens in the request: a
// separate publisher process reads pending rows with a [Reader] and moves
// them to NATS JetStream, and a worker delivers them.
//
// Every commit of a database opened with [Open] is fsynced, and SQLite
// takes one writer at a time. An application that takes many requests a
// second runs them through a [Committer], which commits the requests that
// arrive together in one transaction, each in a savepoint of its own.
//
// # Schema
//
// The tables are a contract for applications in other languages too (schema
// version 3, [SchemaVersion]):
//
//   - outbox: id INTEGER PRIMARY KEY (SQLite numbers rows max(id)+1), key
//     TEXT UNIQUE, channel, recipient (the Telegram chat id, 0 without one),
//     recipient_token, payload BLOB (the notification's JSON), created_at
//     (Unix nanoseconds). Applications insert with ON CONFLICT (key) DO
//     NOTHING and never update or delete rows.
//   - outbox_marks: one row (upto, at) per marking transaction of the
//     publisher: every outbox row with id <= upto was published by at. The
//     rows after MAX(upto) are pending.
//   - the trigger outbox_keep_newest refuses to delete the row with the
//     highest id, so max(id) never decreases and an id is never reused,
//     without AUTOINCREMENT (which rewrote sqlite_sequence in every commit).
//   - the view outbox_status lists every row with published_at, the time of
//     the marking that covers it (NULL while pending).
//
// docs/PUBLISHER.md ("The outbox table") has the SQL and the upgrade from
// version 2.
//
// The package depends on database/sql, the pure-Go SQLite driver and
// pkg/notify only; it never imports NATS or a channel's client, so
// applications stay small.
package outbox
