// Package template is a registry of notification templates: for each event
// (an order accepted, shipped, delivered) and locale, the text of every
// channel, rendered at enqueue into the notification's payload.
//
// A [Source] holds an event's templates in one locale, in Go's template
// syntax: the Telegram text, and optionally a MAX text, an email's HTML and
// plain-text parts, an SMS, an email subject, link buttons and a photo URL.
// Each is escaped by default for its channel's format:
//
//   - Telegram and MAX texts and the email's HTML part are parsed with
//     html/template: every value is escaped for the context it lands in (a
//     customer's "<script>" becomes "&lt;script&gt;", "&" becomes "&amp;",
//     a URL in an href is checked), so data can add neither markup nor a
//     broken entity. Telegram and MAX decode the numeric references
//     html/template writes (&#34; &#39; &#43;). Both are sent as HTML:
//     parse mode HTML for Telegram, format "html" for MAX, whose markdown
//     differs from Telegram's and documents no escaping; markdown's special
//     characters (* _ [ ] `) mean nothing in HTML and are shown as typed.
//   - The email's text part, the SMS, the subject, the buttons and the
//     photo URL are plain text, parsed with text/template: nothing is
//     escaped because nothing is markup (an SMS shows "<script>" as typed).
//     The subject and button labels have their white space collapsed to
//     single spaces, as a header and a label are one line.
//
// [Registry.Render] picks the templates of the event in the wanted locale,
// falling back to its base language ("ru-RU" to "ru") and then to the
// registry's fallback locale, and executes them with the caller's data. A
// template that fails to execute (a missing field, a function's error) is
// an error there, so the application refuses the notification at enqueue,
// in the transaction that would have written it, not the worker at send
// time. [Message.Apply] puts the result into a notification: Telegram's
// text with parse mode HTML, and the other channels' bodies for the
// channels on its route only (a channel without a body converts Telegram's
// text). Pass the route to Render too, and it executes only the templates
// Apply keeps. notify's validation then checks every limit when the
// notification is enqueued.
package template
