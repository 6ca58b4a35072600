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
//     (the last id read, not the last id marked). When caught up it says so
//     and waits for another connection's commit, noticed within
//     milliseconds by polling PRAGMA data_version, or for a slow fallback
//     tick.
//   - publish: each row is published to notify.<channel>.<recipient> with
//     Nats-Msg-Id set to its idempotency key, as a message of a JetStream
//     fast-ingest batch (ADR-50, nats-server 2.14+): a plain NATS publish
//     whose reply subject carries the batch id, the message's sequence in
//     the batch and the gap mode "fail". One batch is open at a time; it is
//     ended when the read stage catches up, and the next starts only after
//     the stream confirmed that it stored all of the previous one. Flow
//     control bounds the messages in flight. On a NOTIFY with one replica,
//     a read of 16 or more fresh rows (committed after the round first
//     caught up, so never offered to the stream before) goes instead as
//     atomic batches, which a server with sync_interval: always fsyncs
//     once, not once per message (atomicbatch.go).
//   - ack: a batch's rows are forwarded, in order, once its final PubAck
//     carries a stream sequence; flow acks only pace the batch, since a
//     leader flow-acks a message whose id it has only proposed as if
//     stored. A batch whose messages were all duplicates (sequence 0) is
//     not proof: the ack stage asks NOTIFY about its last row with a probe
//     that cannot be stored (prove.go), and the rows are forwarded when
//     the row is stored; otherwise the round fails, and rows NOTIFY lacks
//     go again one per batch, where a duplicate's PubAck names the stored
//     message. A batch ends after sixteen reads, so marking keeps up.
//   - mark: acknowledged rows are marked published, everything queued in one
//     transaction that records the published prefix in one row. The queue
//     before it holds 4 × MaxInFlight rows (ackedqueue.go), so a marking
//     that waits for the application's write lock does not stop publishing.
//
// # Failures
//
// On any failure (publish error, a batch that ended short, a missing
// acknowledgement, lost connection, database error) the round stops: no new
// row is published, the open batch is ended and settles, only the batches
// proven stored are marked, and the next round starts after a capped,
// jittered backoff from the first row that was not acknowledged. No row is
// skipped.
//
// # Order
//
// In gap mode "fail" the stream accepts a message of a batch only right
// after the previous one, and ends the batch at the first one missing, so
// what a batch stored is a prefix of it, in order, even when NOTIFY's leader
// changes in the middle of it. With one batch at a time and republishing from
// the first unacknowledged row, the stream holds a prefix of the outbox in id
// order: no chat is reordered (docs/PUBLISHER.md has the argument). A NOTIFY
// that refuses batches (allow_batched off, a server older than 2.14) is
// published to message by message, one PubAck each, where a leader election
// can reorder a chat: [Publisher] then logs a warning, counts such rows
// (tgnotify_publisher_reordered_total), reports the transport
// (tgnotify_publisher_fast_batches) and tries batches again every minute.
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
