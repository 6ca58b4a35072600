// Package jetstream holds what both daemons (the publisher and the telegram
// worker) share about NATS JetStream: connection options and flags, the
// subject and header names of a notification, and the declaration of every
// JetStream object they use.
//
// The objects are declared in one place: [Settings] (one flag and YAML key
// per setting) and [Declare], which lists the streams, one durable consumer
// per delivery channel and the key-value buckets. [Provision] (what
// `tgnotify provision` runs) creates what is missing and updates what
// differs; [Ensure] (what the daemons run at start) only creates what is
// missing and reports the rest as drift, so an operator's `nats stream edit`
// survives a restart. A field that cannot change in place is a
// [*ConflictError].
//
// The names are the project's shared names (docs/DEVELOPING.md): stream
// NOTIFY on notify.>, stream NOTIFY_DEAD on dead.>, subject
// notify.telegram.<chat_id>, durable consumer telegram-worker, KV buckets
// notify_delivered, notify_chats and notify_attempts. They are the names of
// the default subject prefix, notify: [Names] (built by [NewNames] from the
// declaration's -subject-prefix, [Settings.Names]) makes every one of them
// from another prefix, so that two deployments share a NATS account, and
// the daemons take the names through their constructors. The package-level
// constants and functions are the default prefix's.
//
// Import the NATS client's own jetstream package under another name, for
// example natsjs "github.com/nats-io/nats.go/jetstream".
package jetstream
