// Package delivery is the channel-agnostic delivery engine: a Worker pulls
// notifications of one channel from the NOTIFY stream and hands each to the
// Channel (Telegram, MAX, email, SMS: pkg/channel/...), once and in order
// per recipient, within the channel's limits, falling back along the
// notification's route when the channel cannot reach the customer.
//
// The design, in one paragraph (docs/WORKER.md has the long form): one
// dispatcher goroutine owns a lane per recipient. A lane holds that
// recipient's messages in stream order and sends at most one at a time, so a
// recipient's messages never overtake each other; lanes are independent, so a
// recipient that must wait (its own limit, a retry backoff) never holds back
// the others. Proactive token buckets keep the channel under its limits, so
// 429s do not happen in steady state. When one does, the whole sender pauses
// for retry_after and the message goes back to the stream with a NAK delay;
// so do transient failures, with exponential backoff and full jitter, behind
// a circuit breaker. A message that goes back to the stream "parks" its lane:
// later messages of that recipient go back too, behind it, so order holds
// across retries and restarts. Blocked or missing recipients are
// dead-lettered to NOTIFY_DEAD with their reason and remembered, so later
// messages to them cost no request, or handed to the next channel of their
// route. Every success is recorded under its idempotency key before the ack,
// so a redelivery, a replay or a fallback is never sent twice.
//
// The parts, one file each:
//
//   - channel.go: the Channel interface, the Attempt and its Outcome.
//   - scheduler.go, lane.go: lanes, limits, parking, priority classes; a
//     plain data structure with time passed in, no NATS and no goroutines.
//   - admission.go: whether a request may start now (halt, settle after a
//     reconnect, the 429 pause, the circuit breaker).
//   - worker.go: the dispatcher loop that applies the scheduler's decisions;
//     consume.go: pulling and decoding; reply.go: what a job keeps of its
//     stream message, and its acks; attempt.go: one attempt and what its
//     outcome means (ack, retry, fallback, dead letter).
//   - store.go, state.go, persist.go: delivery records, attempts, recipient
//     state and dead letters in JetStream; events.go: events for the
//     application.
//   - recipients.go: dead recipients come back — news from the provider
//     (Worker.ChangeRecipient, an update intake's), the retry after
//     Config.DeadRetryAfter, notify.events.recipient_revived.
//   - cancel.go: cancellation. A cancel mark and the worker's send claim
//     are created with KV Create on the key's notify_delivered entry, so
//     exactly one of a cancel and a send wins ([Cancel]).
//   - consume.go also hands a notification whose not_before has not come
//     back to the stream with a delay, outside any lane.
//   - failover.go: a standby unpins a pinned worker that is gone;
//     takeover.go: per-recipient handover of what another worker may hold.
//   - degrade.go: slower sending when the provider slows down, shedding bulk
//     messages when a backlog builds.
//   - stats.go, metrics.go, backoff.go, config.go, job.go: the rest.
package delivery
