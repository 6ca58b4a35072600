// Package smstext measures and shapes the text of an SMS: which encoding a
// text needs (GSM-7 or UCS-2), how many segments it is sent and billed as,
// and the rule that turns a notification written for Telegram (HTML markup)
// into a plain text of at most N segments.
//
// It knows nothing of a provider: the segment arithmetic is that of GSM
// 03.38 / 3GPP TS 23.038, which every SMS provider applies, and both the
// SMS channel (pkg/channel/sms) and the provider emulator
// (pkg/twilio/emulator) use it. Standard library only.
//
// # Segments
//
// A text whose every character is in the GSM-7 default alphabet is sent in
// GSM-7: up to 160 septets in one SMS, and 153 per part when it must be
// concatenated (the user data header takes the rest). The characters of the
// GSM-7 extension table (^ { } \ [ ~ ] | € and form feed) are sent as an
// escape plus the character and count as two septets; a part never ends
// between the escape and its character. Any other character (Cyrillic, most
// accented letters, emoji, a typographic quote, a tab) makes the whole text
// UCS-2: up to 70 UTF-16 code units in one SMS, 67 per part; a character
// outside the Basic Multilingual Plane (most emoji) is two code units, and a
// part never ends between them.
package smstext
