// Package intake takes in the Telegram bot's updates for the delivery
// engine: it sees a chat's my_chat_member changes (the user blocked or
// unblocked the bot, the bot was removed from or added to a group) and
// /start, and marks the chat dead or alive through
// [delivery.Worker.ChangeRecipient], which publishes
// notify.events.recipient_dead or notify.events.recipient_revived for the
// application.
//
// It is off by default: Telegram gives a bot's updates to one consumer
// only, and the application may be that consumer. Two ways to take them:
//
//   - [Poller]: long polling with getUpdates. The next update's id (the
//     offset) is kept in the notify_chats bucket, key [LeaseKey], and
//     written after each update, so that a restart neither loses an update
//     (Telegram keeps it until an offset above it confirms it) nor applies
//     one twice. The same key is a lease: of the workers of a bot, only the
//     one holding it polls (two pollers end each other's requests with 409
//     Conflict). A webhook set on the bot makes getUpdates fail with 409;
//     the poller says so and tries again slowly, and never deletes a
//     webhook it did not set.
//   - [Webhook]: an HTTP endpoint Telegram posts updates to (behind a
//     reverse proxy terminating TLS), which checks Telegram's
//     X-Telegram-Bot-Api-Secret-Token header in constant time and refuses a
//     request without the secret with 401. Telegram posts each update
//     until a 2xx answers it, so an update whose change cannot be written
//     is answered 500 and comes again.
//
// What an update means is [Change]'s: a pure function, table-tested.
package intake
