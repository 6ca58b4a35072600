// Package shop is the example application: a small order service that writes
// each order and its "order accepted" notification in one SQLite
// transaction through the outbox, then "shipped" and "delivered" as the
// order moves on, and an HTTP API over it. The notifications are rendered
// from templates (pkg/template) in the customer's language, English or
// Russian, for every channel of their route ([Templates]).
//
// examples/shop is the binary (bin/shop) that wires it: flags, the SQLite
// database, the HTTP server. The package lives under internal/ rather than
// next to that binary because the tooling that runs the whole system speaks
// its language too: the demo (examples/demo), internal/system, the chaos
// suite and the benchmarks build and check orders with [Order],
// [PlacedOrder] and [NotificationKey]; the benchmarks and test/e2e run
// [Service] in their own process. Nothing outside examples/ imports
// examples/.
//
// Orders placed, shipped or delivered at the same time share a transaction
// (outbox.Committer), each in a savepoint of its own, so that a burst of
// requests costs one fsync, not one each.
//
// Follow a notification from here: [Service.PlaceOrder] (service.go) calls
// outbox.Enqueue; cmd/publisher moves the row to JetStream; cmd/telegram-worker
// sends it to Telegram.
package shop
