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
// The package depends on database/sql, the pure-Go SQLite driver and
// pkg/notify only; it never imports NATS or a channel's client, so
// applications stay small.
package outbox
