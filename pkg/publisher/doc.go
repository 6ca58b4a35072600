// Package publisher is the drain loop of the outbox: it moves pending rows
// from an application's SQLite outbox into the JetStream stream NOTIFY, each
// exactly once as far as the stream can tell, and per chat in outbox order.
//
// # Pipeline
//
// A leader runs rounds of a four-stage pipeline connected by bounded
// channels, so reading, publishing and marking overlap:
//
//   - read: a batch of pending rows in id order after an in-memory cursor
//     (the last id read, not the last id marked). When caught up it waits for
//     another connection's commit, noticed within milliseconds by polling
//     PRAGMA data_version, or for a slow fallback tick.
//   - publish: each row is published asynchronously to
//     notify.telegram.<chat_id> with Nats-Msg-Id set to its idempotency key,
//     as a plain NATS publish whose reply subject routes the PubAck back to
//     its batch; at most MaxInFlight rows wait for their PubAck.
//   - ack: PubAcks are awaited in publish order; a duplicate PubAck (the
//     stream already had the id) counts as published.
//   - mark: acknowledged rows are marked published, everything queued in one
//     transaction.
//
// # Failures
//
// On any failure (publish error, missing PubAck, lost connection, database
// error) the round stops: no new row is published, in-flight PubAcks settle,
// only the acknowledged prefix is marked, and the next round starts after a
// capped, jittered backoff from the first row that was not acknowledged. No
// row is skipped. What the stream stored of a round is a prefix of it (one
// connection delivers publishes in order, and the reconnect buffer is off, so
// nothing published after a loss reaches the server before the round stops);
// republishing from the first failure is de-duplicated by message id. See
// docs/PUBLISHER.md for the ordering argument and its one residual risk,
// which [Publisher] detects and counts (tgnotify_publisher_reordered_total).
//
// # One publisher per database
//
// Run first takes an exclusive file lock next to the database (<db>.lock).
// A second instance polls the lock as a hot standby and takes over when the
// first exits or dies: the kernel releases the lock with the process.
//
// # Maintenance
//
// The leader also purges published rows older than a retention, in chunks;
// checkpoints the WAL from its own connection (PASSIVE every
// CheckpointInterval, TRUNCATE every TruncateInterval) so the -wal file stays
// bounded without the mark stage ever checkpointing inside its commits; and
// refreshes the backlog metrics.
package publisher
