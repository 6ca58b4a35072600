// Package emufault is what the project's API emulators (Telegram's Bot
// API in pkg/botapi/emulator, MAX in pkg/maxapi/emulator and Twilio in
// pkg/twilio/emulator) share about scripted outages: the fault modes, the
// [Outage] an operator or a test starts and its JSON form, the [Running]
// outage that picks the requests it hits, and the HTTP answers of a fault
// (a proxy's error page, a dropped connection, a wait that ends with the
// emulator).
//
// Each emulator names its two 5xx modes in a [Kind]: the one that answers
// with the API's own JSON error and the one that answers with a proxy's
// HTML page. Everything else is the same in the three, so that an outage
// started on one means the same on the others.
package emufault
