package publisher

import "errors"

// ErrStandby is returned by [Publisher.Ready] while another process holds
// the database's lock and this publisher waits as a hot standby.
var ErrStandby = errors.New("publisher is a standby: another publisher holds the outbox lock")

// ErrNATSUnavailable is returned by [Publisher.Ready] while the NATS
// connection is down.
var ErrNATSUnavailable = errors.New("NATS is unavailable")

// ErrRunning is returned by [Publisher.Run] when it is already running.
var ErrRunning = errors.New("publisher is already running")

// errConnectionLost stops a round when the NATS connection drops.
var errConnectionLost = errors.New("NATS connection lost")

// errShutdownTimeout fails the PubAcks still missing when the shutdown bound
// passes.
var errShutdownTimeout = errors.New("shutdown timeout passed before the PubAck arrived")

// errRetryBatches ends a round of the message-by-message transport, while
// it is idle, so that the next round tries fast-ingest batches again: the
// stream may accept them by now (tgnotify provision enables allow_batched).
var errRetryBatches = errors.New("trying fast-ingest batches again")

// errUnverifiedBatch is what a batch's final PubAck without a stream
// sequence (every message a duplicate) leaves unproven
// (fastBatch.verified). The ack stage then asks NOTIFY about the batch's
// last row (round.proveStored); when NOTIFY does not have it, the round
// ends with this error and the next round publishes those rows one per
// batch, where each answer is definite.
var errUnverifiedBatch = errors.New("a batch ended with every message a duplicate; publishing its rows one per batch to verify them")
