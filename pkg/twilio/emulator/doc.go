// Package emulator is a stand-in for Twilio's Programmable Messaging API,
// faithful enough to test an SMS sender against and precise enough to
// measure one.
//
// An [Emulator] is a [net/http.Handler]. It serves, as Twilio documents
// them:
//
//   - POST /2010-04-01/Accounts/{AccountSid}/Messages.json: HTTP basic
//     authentication (Account SID, auth token), a form body (To, From or
//     MessagingServiceSid, Body), 201 with the Message resource (sid,
//     status "queued" or "accepted", num_segments as a string, ...);
//   - GET /2010-04-01/Accounts/{AccountSid}.json: the Account resource;
//   - errors as Twilio's JSON {"code", "message", "more_info", "status"}
//     with Twilio's codes: 20003 (authentication), 20404, 20429 (too many
//     requests, HTTP 429), 21211 (invalid To), 21212, 21602, 21603, 21604,
//     21606, 21408 (region not permitted), 21608 (not verified), 21610
//     (unsubscribed), 21611 (sender queue full), 21612, 21614 (not a mobile
//     number), 21617 (body too long), 20403, 20500, 20503.
//
// It models Twilio's limits on an injectable clock ([Limits]): a cap on
// concurrent requests and a request rate, refused with 429 / 20429 and a
// Retry-After header; a pause opened from the control API; and each
// sender's queue, which releases message segments at the sender's rate (1
// a second for a long code) and refuses a message with 21611 once it holds
// more than 10 hours of them. Faults ([FaultMode]) are Twilio's JSON 5xx,
// a proxy's HTML 5xx, dropped connections, extra latency, requests never
// answered, and messages created whose answer is lost.
//
// It records every message it created, with its body, encoding and
// segment count ([Emulator.Messages]), and counts every request
// ([Emulator.Stats]). Control methods ([Emulator.SetNumberState],
// [Emulator.StartOutage], [Emulator.OpenPause],
// [Emulator.SetAccountStatus], [Emulator.Reset]) change its behaviour at
// run time, in-process or over HTTP under /emulator/, as the Bot API
// emulator's do.
//
// The emulator is a test tool: its control endpoints are unauthenticated
// and its message records hold the recipients' numbers. Its logs never do:
// a number is logged as its last two digits.
//
// Use it in-process with httptest.NewServer(emu), or run it as the
// sms-emulator binary (cmd/sms-emulator); docs/CHANNELS.md (SMS) lists the
// flags and the control endpoints.
package emulator
