package shop

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/template"
)

// Limits on an order, so that every accepted order fits in one Telegram
// message and the database stays small.
const (
	MaxOrderIDBytes  = 64
	MaxCustomerChars = 128
	MaxItems         = 50
	MaxItemNameChars = 128
	MaxQuantity      = 10_000
	MaxPriceCents    = 100_000_000 // one million in currency units
)

// ErrInvalidOrder is matched by every order validation error; the concrete
// error is an [*InvalidOrderError] naming the field.
var ErrInvalidOrder = errors.New("invalid order")

// ErrConflict is returned when an order id is reused with different content.
var ErrConflict = errors.New("order id already used for a different order")

// ErrNotFound is returned for an unknown order id.
var ErrNotFound = errors.New("order not found")

// ErrTransition is matched by the error of a status change the order's
// status does not allow (delivering an order not shipped yet); the concrete
// error is a [*TransitionError].
var ErrTransition = errors.New("order status does not allow this")

// TransitionError says which change an order's status does not allow.
type TransitionError struct {
	ID, From, To string
}

// Error names the order and both statuses.
func (e *TransitionError) Error() string {
	return fmt.Sprintf("order %s is %s: it cannot become %s", e.ID, e.From, e.To)
}

// Is reports whether target is [ErrTransition].
func (e *TransitionError) Is(target error) bool { return target == ErrTransition }

// statusRank orders an order's statuses, which are the events it went
// through: accepted, shipped, delivered.
func statusRank(s string) int {
	switch s {
	case EventShipped:
		return 1
	case EventDelivered:
		return 2
	}
	return 0
}

// InvalidOrderError names the invalid field of an order and the reason.
type InvalidOrderError struct {
	Field  string
	Reason string
}

// Error returns the field and the reason.
func (e *InvalidOrderError) Error() string { return e.Field + ": " + e.Reason }

// Is reports whether target is [ErrInvalidOrder].
func (e *InvalidOrderError) Is(target error) bool { return target == ErrInvalidOrder }

func invalidOrder(field, format string, args ...any) error {
	return &InvalidOrderError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Item is one line of an order.
type Item struct {
	Name       string `json:"name"`
	Qty        int64  `json:"qty"`
	PriceCents int64  `json:"price_cents"`
}

// Order is what a customer places. ID is chosen by the client (the mobile app
// generates it once and repeats it on retries), which is what makes a
// repeated POST /orders recognisable. The customer gives at least one
// address to be told the order was accepted: a Telegram chat, a MAX user,
// an email address or a phone number; the notification tries them in the
// order telegram, max, email, sms. Locale is the customer's language (en,
// ru, ru-RU); the shop writes in English when it names none or one it does
// not have.
type Order struct {
	ID        string `json:"id"`
	ChatID    int64  `json:"chat_id,omitempty"`
	MaxUserID int64  `json:"max_user_id,omitempty"`
	Email     string `json:"email,omitempty"`
	Phone     string `json:"phone,omitempty"`
	Locale    string `json:"locale,omitempty"`
	Customer  string `json:"customer"`
	Items     []Item `json:"items"`
}

// PlacedOrder is an order as stored, with what the shop derived from it.
type PlacedOrder struct {
	Order
	TotalCents int64     `json:"total_cents"`
	CreatedAt  time.Time `json:"created_at"`
	// Status is accepted, shipped or delivered; ShippedAt and DeliveredAt
	// say when it became so.
	Status      string     `json:"status"`
	ShippedAt   *time.Time `json:"shipped_at,omitempty"`
	DeliveredAt *time.Time `json:"delivered_at,omitempty"`
	// NotificationKey is the key of the "order accepted" notification;
	// the others are NotificationKeyFor(id, "shipped") and "delivered".
	NotificationKey string `json:"notification_key"`
	// Notification is what became of the "order accepted" notification,
	// as the delivery pipeline's events told the shop.
	Notification NotificationStatus `json:"notification"`
}

// NotificationStatus is what the shop knows of an order's notification.
type NotificationStatus struct {
	// Status is pending (not delivered yet, possibly retrying or moved to
	// another channel), delivered or dead (no channel could deliver it).
	Status string `json:"status"`
	// Channel delivered it, or is trying it now.
	Channel string `json:"channel,omitempty"`
	// Reason says why it moved on or died.
	Reason string `json:"reason,omitempty"`
	// At is when the status last changed; absent while pending with no
	// news.
	At *time.Time `json:"at,omitempty"`
}

// Validate checks an order and returns an [*InvalidOrderError] for the first
// problem.
func (o *Order) Validate() error {
	switch {
	case strings.TrimSpace(o.ID) == "":
		return invalidOrder("id", "required")
	case len(o.ID) > MaxOrderIDBytes:
		return invalidOrder("id", "is %d bytes long, the limit is %d", len(o.ID), MaxOrderIDBytes)
	}
	for i := 0; i < len(o.ID); i++ {
		if c := o.ID[i]; c < 0x21 || c > 0x7e {
			return invalidOrder("id", "must be visible ASCII without spaces")
		}
	}
	if o.ChatID == 0 && o.MaxUserID == 0 && o.Email == "" && o.Phone == "" {
		return invalidOrder("chat_id", "give at least one address: chat_id, max_user_id, email or phone")
	}
	if o.MaxUserID < 0 {
		return invalidOrder("max_user_id", "must be positive")
	}
	if o.Email != "" {
		if err := notify.ValidateEmail(o.Email); err != nil {
			return invalidOrder("email", "%q is not an email address such as ann@example.com", o.Email)
		}
	}
	if o.Phone != "" {
		if err := notify.ValidatePhone(o.Phone); err != nil {
			return invalidOrder("phone", "%q is not an E.164 phone number such as +79991234567", o.Phone)
		}
	}
	if _, ok := template.NormalizeLocale(o.Locale); o.Locale != "" && !ok {
		return invalidOrder("locale", "%q is not a language tag such as en, ru or ru-RU", o.Locale)
	}
	if !utf8.ValidString(o.Customer) {
		return invalidOrder("customer", "is not valid UTF-8")
	}
	if n := utf8.RuneCountInString(o.Customer); n > MaxCustomerChars {
		return invalidOrder("customer", "is %d characters long, the limit is %d", n, MaxCustomerChars)
	}
	switch {
	case len(o.Items) == 0:
		return invalidOrder("items", "at least one item is required")
	case len(o.Items) > MaxItems:
		return invalidOrder("items", "%d items, the limit is %d", len(o.Items), MaxItems)
	}
	for i, it := range o.Items {
		field := fmt.Sprintf("items[%d]", i)
		switch {
		case strings.TrimSpace(it.Name) == "":
			return invalidOrder(field+".name", "required")
		case !utf8.ValidString(it.Name):
			return invalidOrder(field+".name", "is not valid UTF-8")
		case utf8.RuneCountInString(it.Name) > MaxItemNameChars:
			return invalidOrder(field+".name", "is longer than %d characters", MaxItemNameChars)
		case it.Qty <= 0:
			return invalidOrder(field+".qty", "must be positive, got %d", it.Qty)
		case it.Qty > MaxQuantity:
			return invalidOrder(field+".qty", "must be at most %d, got %d", MaxQuantity, it.Qty)
		case it.PriceCents < 0:
			return invalidOrder(field+".price_cents", "must not be negative, got %d", it.PriceCents)
		case it.PriceCents > MaxPriceCents:
			return invalidOrder(field+".price_cents", "must be at most %d, got %d", MaxPriceCents, it.PriceCents)
		}
	}
	return nil
}

// Total returns the order total in cents. Validate bounds quantities and
// prices so the sum cannot overflow.
func (o *Order) Total() int64 {
	var t int64
	for _, it := range o.Items {
		t += it.Qty * it.PriceCents
	}
	return t
}

// Equal reports whether two orders have the same content.
func (o *Order) Equal(other Order) bool {
	return o.ID == other.ID && o.ChatID == other.ChatID && o.MaxUserID == other.MaxUserID && o.Email == other.Email &&
		o.Phone == other.Phone && o.Locale == other.Locale && o.Customer == other.Customer && slices.Equal(o.Items, other.Items)
}

// NotificationKey names the "order accepted" event of an order; it is the
// idempotency key of its notification.
func NotificationKey(orderID string) string { return NotificationKeyFor(orderID, EventAccepted) }

// NotificationKeyFor names an event of an order (accepted, shipped,
// delivered): order:<id>:<event>, the idempotency key of its notification.
func NotificationKeyFor(orderID, event string) string { return "order:" + orderID + ":" + event }
