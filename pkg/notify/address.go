package notify

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/mail"
	"strconv"
	"strings"
)

// Channel names a delivery channel.
type Channel string

// The channels, in the order of [Notification.DefaultRoute].
const (
	ChannelTelegram Channel = "telegram"
	ChannelMax      Channel = "max"
	ChannelEmail    Channel = "email"
	ChannelSMS      Channel = "sms"
)

// Channels lists every channel in the default route order.
var channels = [...]Channel{ChannelTelegram, ChannelMax, ChannelEmail, ChannelSMS}

// Channels returns every known channel, in the default route order.
func Channels() []Channel { return channels[:] }

// Known reports whether c is a channel this package knows.
func (c Channel) Known() bool {
	for _, k := range channels {
		if c == k {
			return true
		}
	}
	return false
}

// maxEmailLength is the longest address SMTP allows (RFC 5321 path limit).
const maxEmailLength = 254

// DefaultRoute returns the channels whose address the notification has, in
// the order telegram, max, email, sms.
func (n *Notification) DefaultRoute() []Channel {
	var r []Channel
	if n.ChatID != 0 {
		r = append(r, ChannelTelegram)
	}
	if n.MaxUserID != 0 || n.MaxChatID != 0 {
		r = append(r, ChannelMax)
	}
	if n.Email != "" {
		r = append(r, ChannelEmail)
	}
	if n.Phone != "" {
		r = append(r, ChannelSMS)
	}
	return r
}

// HasAddress reports whether the notification has an address for c.
func (n *Notification) HasAddress(c Channel) bool {
	switch c {
	case ChannelTelegram:
		return n.ChatID != 0
	case ChannelMax:
		return n.MaxUserID != 0 || n.MaxChatID != 0
	case ChannelEmail:
		return n.Email != ""
	case ChannelSMS:
		return n.Phone != ""
	}
	return false
}

// Recipient returns the notification's recipient on channel c as a subject
// token: the last token of notify.<channel>.<recipient> and the key of the
// recipient's lane in a worker. Telegram's is the chat id; MAX's is u<user
// id> or c<chat id>. An email address or a phone number never appears in a
// subject or a log line in clear: theirs is e or p followed by
// [HashAddress] of the address.
func (n *Notification) Recipient(c Channel) (string, error) {
	if !n.HasAddress(c) {
		return "", fmt.Errorf("notification %q has no %s address", n.Key, c)
	}
	switch c {
	case ChannelTelegram:
		return strconv.FormatInt(n.ChatID, 10), nil
	case ChannelMax:
		if n.MaxUserID != 0 {
			return "u" + strconv.FormatInt(n.MaxUserID, 10), nil
		}
		return "c" + strconv.FormatInt(n.MaxChatID, 10), nil
	case ChannelEmail:
		return "e" + HashAddress(strings.ToLower(n.Email)), nil
	}
	return "p" + HashAddress(n.Phone), nil
}

// HashAddress returns a stable pseudonym of an address: the first 128 bits
// of its SHA-256, in hex. It names an email or phone recipient in subjects,
// lanes, shared state and logs, where the address itself must not appear.
// (A determined reader who guesses an address can confirm the guess; the
// hash keeps addresses out of sight, it does not make them secret.)
func HashAddress(addr string) string {
	sum := sha256.Sum256([]byte(addr))
	return hex.EncodeToString(sum[:16])
}

// Next returns the channel after c on the route, and false when c is the
// last one (or not on the route).
func (n *Notification) Next(c Channel) (Channel, bool) {
	route := n.Route
	if len(route) == 0 {
		route = n.DefaultRoute()
	}
	for i, r := range route {
		if r == c && i+1 < len(route) {
			return route[i+1], true
		}
	}
	return "", false
}

// validateAddresses checks every address that is given.
func (n *Notification) validateAddresses() error {
	if n.ChatID != 0 && (n.ChatID >= maxChatID || n.ChatID <= -maxChatID) {
		return invalid("chat_id", "%d is out of range for a Telegram chat id", n.ChatID)
	}
	if n.MaxUserID < 0 {
		return invalid("max_user_id", "%d must be positive", n.MaxUserID)
	}
	if n.MaxUserID != 0 && n.MaxChatID != 0 {
		return invalid("max_user_id", "give max_user_id or max_chat_id, not both")
	}
	if n.Email != "" {
		if err := ValidateEmail(n.Email); err != nil {
			return err
		}
	}
	if n.Phone != "" {
		if err := ValidatePhone(n.Phone); err != nil {
			return err
		}
	}
	return nil
}

// validateRoute checks that the route names known channels, once each, each
// with its address.
func (n *Notification) validateRoute(route []Channel) error {
	if len(route) == 0 {
		return invalid("chat_id", "no address: give at least one of chat_id, max_user_id, max_chat_id, email, phone")
	}
	if n.Channel != "" && (len(n.Route) > 1 || len(n.Route) == 1 && n.Route[0] != n.Channel) {
		return invalid("channel", "%q contradicts route %v (set route only)", n.Channel, n.Route)
	}
	seen := map[Channel]bool{}
	for i, c := range route {
		field := fmt.Sprintf("route[%d]", i)
		if n.Channel != "" && len(n.Route) == 0 {
			field = "channel"
		}
		switch {
		case !c.Known():
			return invalid(field, "unknown channel %q (want telegram, max, email or sms)", c)
		case seen[c]:
			return invalid(field, "channel %q appears twice", c)
		case !n.HasAddress(c):
			return invalid(addressField(c), "required: the route includes %s", c)
		}
		seen[c] = true
	}
	return nil
}

// addressField names the address field of a channel.
func addressField(c Channel) string {
	switch c {
	case ChannelMax:
		return "max_user_id"
	case ChannelEmail:
		return "email"
	case ChannelSMS:
		return "phone"
	}
	return "chat_id"
}

// ValidateEmail checks an email address: a bare addr-spec such as
// ann@example.com, without a display name or angle brackets, at most 254
// characters.
func ValidateEmail(addr string) error {
	if len(addr) > maxEmailLength {
		return invalid("email", "is %d characters long, the limit is %d", len(addr), maxEmailLength)
	}
	a, err := mail.ParseAddress(addr)
	if err != nil || a.Address != addr || a.Name != "" {
		return invalid("email", "%q is not an email address such as ann@example.com", addr)
	}
	local, domain, _ := strings.Cut(addr, "@")
	if local == "" || !strings.Contains(domain, ".") || strings.HasSuffix(domain, ".") {
		return invalid("email", "%q is not an email address such as ann@example.com", addr)
	}
	return nil
}

// ValidatePhone checks a phone number in E.164: a plus, a country code that
// does not start with 0, 8 to 15 digits in all (+79991234567).
func ValidatePhone(phone string) error {
	digits := strings.TrimPrefix(phone, "+")
	ok := len(phone) == len(digits)+1 && len(digits) >= 8 && len(digits) <= 15 && digits[0] != '0'
	for _, r := range digits {
		if r < '0' || r > '9' {
			ok = false
		}
	}
	if !ok {
		return invalid("phone", "%q is not an E.164 phone number such as +79991234567", phone)
	}
	return nil
}
