// Package shop is the example application: a small order service that writes
// each order and its "order accepted" Telegram notification in one SQLite
// transaction through the outbox, and an HTTP API over it.
//
// Follow a notification from here: [Service.PlaceOrder] (orders.go) calls
// outbox.Enqueue; cmd/publisher moves the row to JetStream; cmd/telegram-worker
// sends it to Telegram.
package shop
