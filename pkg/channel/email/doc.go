// Package email is the email channel of the delivery engine: it sends a
// notification over SMTP with github.com/wneessen/go-mail, says what the
// server's reply means for delivery, and declares the channel's limits.
// Everything around a send — lanes, limits, retries, records, dead letters —
// is the engine's (pkg/delivery).
//
// A notification becomes one message to its Email address: From is the
// configured sender, the Message-ID is derived from the idempotency key
// ([MessageID]), the Subject is the notification's subject or the first line
// of its text ([Subject]), and the body has an HTML part and a plain-text
// part: the notification's email body when it has one, else rendered from
// the text's Telegram HTML ([Render]), with its photo at the top and its
// buttons as links at the end ([Compose]). The address never
// appears in a subject, a log line, an error or a dead letter's description:
// there the recipient is its token, e followed by a hash of the address
// (notify.HashAddress).
//
// The server's reply is classified by [Classify]: accepted is delivered;
// 4xx replies and connection failures are retried; a 5xx about the
// recipient (550, 553, 5.1.x) makes the recipient dead (hard_bounce or
// invalid_address); other 5xx replies reject the message; a failed
// authentication, TLS set-up or a refused sender halts the channel until
// [Channel.Probe] succeeds. docs/CHANNELS.md (Email) has the table and its
// sources.
package email
