// Package notify is the notification every part of tgnotify speaks: the
// application that enqueues it, the publisher that carries it, and the
// workers that deliver it. It holds the [Notification] type, its priority
// and parse mode, the versioned JSON payload ([Notification.MarshalPayload],
// [DecodePayload]) with its validation, and HTML escaping for user data.
//
// It imports nothing but the standard library, so that a worker does not
// link an SQL engine and an application does not link NATS: storage lives in
// pkg/outbox, transport in pkg/jetstream.
package notify
