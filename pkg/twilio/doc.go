// Package twilio is a client for the part of Twilio's Programmable
// Messaging API that sends an SMS: creating a Message resource (POST
// /2010-04-01/Accounts/{AccountSid}/Messages.json) and fetching the Account
// resource to check the credentials. It returns typed errors that work with
// errors.Is and errors.As ([*Error] for Twilio's JSON error answers, keyed
// on Twilio's error code; [*ResponseError], [*NetworkError],
// [*NotSentError], [*RequestError]), and [Classify] says what each means
// for delivery.
//
// The credentials (Account SID and auth token) never appear in a log line,
// an error or the client's String output, and neither does a phone number:
// Twilio's error messages quote the recipient's number ("The 'To' number
// +15005550001 is not a valid phone number."), and the client masks every
// number in them to its last two digits.
//
// Like the Bot API client (pkg/botapi), the client runs a delivery
// engine's admission check on the connection's first write of a request
// ([WithAdmission], internal/httpgate): a request the engine refuses never
// leaves the process.
//
// Its stand-in for tests, demos and chaos runs is pkg/twilio/emulator
// (binary cmd/sms-emulator). The provider's documentation the package
// follows is listed in docs/CHANNELS.md (SMS).
package twilio
