// Package operator is what the operator's command, tgnotify, does beyond
// provisioning: the whole trail of one notification (its outbox row, its
// messages in NOTIFY, attempts, the delivery record, dead letters, events),
// the dead letters of NOTIFY_DEAD (listed with filters, shown, replayed,
// purged), and reviving a recipient a channel marked dead.
//
// Streams are read with ordered consumers, headers only wherever the body
// is not needed, filtered by subject as narrowly as the question allows and
// starting at the earliest time that can matter, never message by message
// with one request each. cmd/tgnotify is the wiring around it.
package operator
