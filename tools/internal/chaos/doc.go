// Package chaos is the fault-injection suite behind `make chaos`: it runs
// the real binaries of the system (nats-server, the Bot API, MAX and SMS
// emulators, Mailpit as the SMTP server, the example shop, the publisher,
// one or two telegram workers and the max, email and sms workers) as
// processes, places thousands of orders through the shop's HTTP API — a
// share of their customers have an email, a phone or a MAX user besides the
// chat, so that their notifications fall back along telegram → max → email
// → sms — and meanwhile injects a seeded schedule of faults:
//
//   - SIGKILL of the publisher, of the telegram workers and of the max,
//     email and sms workers at random moments, each restarted after a random
//     delay; part of the time a second telegram worker runs as a hot
//     standby;
//   - restarts of nats-server on the same store and port, and of Mailpit on
//     the same ports and database, gracefully or with SIGKILL;
//   - Telegram outages (5xx pages, JSON 5xx, dropped connections, slow
//     answers, black holes, and "deliver-drop": delivered, answer lost),
//     some longer than the workers' fallback_after, 429 storms and chats
//     blocked while the run goes on; outages and 429 pauses of the MAX and
//     SMS emulators.
//
// Afterwards it lets the system drain and checks, from the providers' own
// records (every message the emulators delivered, every email Mailpit
// received), the outbox, the NOTIFY and NOTIFY_DEAD streams, the events
// and the consumers, that every accepted order was delivered by exactly
// one channel of its route after each earlier one gave up with a reason,
// or dead-lettered on every channel of its route with one dead event (an
// extra copy is tolerated only when explained by a dropped answer, a
// worker of its channel killed between the copies, or Mailpit stopped
// before it answered, and each is counted by cause); that no recipient
// received its notifications out of order on any channel; that no request
// was sent inside an announced 429 pause; that each Telegram outage cost at
// most as many calls as the circuit breaker allows; and that nothing is
// left pending. It prints the figures of the run and fails on any
// violation. docs/RELIABILITY.md describes the design and records results.
//
// The schedule and the orders derive from one seed ([Config.Seed]); the
// timing of real processes does not, so two runs with a seed inject the same
// faults at the same offsets but interleave differently with the system.
//
// The package is split by concern: config.go (settings and presets),
// plan.go (the seeded schedule and customers), sut.go (the processes under
// test), orders.go (placing orders), faults.go (carrying out the schedule),
// collect.go (reading the final state), check.go (the invariants, pure
// functions over what was collected), report.go (printing) and run.go (the
// phases of a run).
package chaos
