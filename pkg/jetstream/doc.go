// Package jetstream holds what both daemons (the publisher and the telegram
// worker) share about NATS JetStream: connection options and flags, the
// subject and header names of a notification, and idempotent provisioning
// of the streams, the worker's consumer and its key-value buckets.
//
// The names are the project's shared names (docs/DEVELOPING.md): stream
// NOTIFY on notify.>, stream NOTIFY_DEAD on dead.>, subject
// notify.telegram.<chat_id>, durable consumer telegram-worker, KV buckets
// notify_delivered, notify_chats and notify_attempts.
//
// Import the NATS client's own jetstream package under another name, for
// example natsjs "github.com/nats-io/nats.go/jetstream".
package jetstream
