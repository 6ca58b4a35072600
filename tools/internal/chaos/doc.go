// Package chaos is the fault-injection suite behind `make chaos`: it runs
// the real binaries of the system (nats-server, the Bot API emulator, the
// example shop, the publisher and one or two telegram workers) as processes,
// places thousands of orders through the shop's HTTP API, and meanwhile
// injects a seeded schedule of faults:
//
//   - SIGKILL of the publisher and of the workers at random moments, each
//     restarted after a random delay; part of the time a second worker runs
//     as a hot standby;
//   - restarts of nats-server on the same store and port, gracefully or with
//     SIGKILL;
//   - Telegram outages (5xx pages, JSON 5xx, dropped connections, slow
//     answers, black holes, and "deliver-drop": delivered, answer lost),
//     429 storms and chats blocked while the run goes on.
//
// Afterwards it lets the system drain and checks, from the emulator's record
// of every delivered message, the outbox, the NOTIFY and NOTIFY_DEAD streams
// and the consumer, that every accepted order was delivered exactly once or
// dead-lettered with a reason (a duplicate at Telegram is tolerated only when
// explained by a dropped answer or a worker killed between the copies, and
// each is counted by cause); that no chat received its messages out of
// order; that no request was sent inside an announced 429 pause; that each
// outage cost at most as many calls as the circuit breaker allows; and that
// nothing is left pending. It prints the figures of the run and fails on any
// violation. docs/RELIABILITY.md describes the design and records results.
//
// The schedule and the orders derive from one seed ([Config.Seed]); the
// timing of real processes does not, so two runs with a seed inject the same
// faults at the same offsets but interleave differently with the system.
//
// The package is split by concern: config.go (settings and presets),
// plan.go (the seeded schedule), sut.go (the processes under test),
// orders.go (placing orders), faults.go (carrying out the schedule),
// collect.go (reading the final state), check.go (the invariants, pure
// functions over what was collected), report.go (printing) and run.go (the
// phases of a run).
package chaos
