// Package bench is the benchmark suite behind `make bench` (tools/cmd/bench): every
// performance claim of the project measured as a ratio against the reference
// it approaches, side by side in the same run, on the machine at hand.
//
// Absolute figures drift on a shared machine; a ratio of two figures
// measured in the same run, alternating or interleaving the two variants,
// holds. Every scenario therefore measures our figure and its reference
// together, repeats that several times, and reports the median with the
// minimum and maximum:
//
//  1. Enqueue overhead: shop PlaceOrder with the outbox write against the
//     same orders without it.
//  2. Drain: pkg/publisher draining outbox rows into NOTIFY against a raw
//     JetStream async publish of the same messages to an identical fresh
//     stream on the same server, and against the pinned nats CLI's own
//     `nats bench js pub async` and `... fast` with the same message size
//     and count.
//  3. Latency: commit → PubAck while idle, and commit → sendMessage at the
//     Bot API through the running publisher and worker.
//  4. Telegram's limit: the worker's achieved rate against the 30 msg/s
//     Telegram allows, the 429s it provokes, a hot chat, and a 429 storm.
//  5. Worker ceiling: msg/s and CPU per message with the limits off, against
//     the 1000 msg/s paid-broadcast limit.
//  6. Memory: the worker's peak RSS holding a large backlog, against 64 MiB.
//  7. Failover: the longest silence (no delivery while orders wait) after
//     a SIGKILL of the active worker with a hot standby, a SIGKILL of
//     NOTIFY's leader node in a three-node cluster and a step-down of that
//     leader, against the same measured without the fault earlier in the
//     run; and the commit → delivery p99 during each.
//  8. End to end: the whole pipeline at Telegram's paid-broadcast rate on
//     an fsync-always server, the rate it keeps and commit → delivery.
//  9. Dead letters listed per second: `tgnotify dlq list` over 20,000
//     dead letters in NOTIFY_DEAD against `scripts/dead-letters.sh list`
//     (one nats CLI call per letter) on the same stream, stopped after its
//     first few hundred lines; the goal is on our absolute rate.
//
// The system runs as it is deployed: nats-server, the publisher, the
// telegram worker and the tgnotify CLI are the binaries `make build` puts
// into ./bin, started and stopped through internal/procs. The Bot API
// emulator runs inside the benchmark process (pkg/botapi/emulator): it is
// the measuring instrument, recording every delivered message with a
// nanosecond timestamp. Scenarios
// that measure a library (the shop's PlaceOrder, pkg/publisher against raw
// publishing, the publisher's PubAck hook) run it in-process against the
// nats-server process.
//
// [Run] runs the suite and returns a [Report]; [Report.Markdown] renders
// BENCHMARKS.md and [WritePlots] the PNG figures. [Smoke] sizes every
// scenario down so that a test can run the whole suite in seconds.
package bench
