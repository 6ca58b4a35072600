package shop

import (
	"strconv"
	"strings"

	"github.com/tgnotify/tgnotify/pkg/notify"
)

// AcceptedMessage renders the "order accepted" notification in Telegram's
// HTML parse mode:
//
//	<b>Order A1 accepted</b>
//	Hello, Ann! We have received your order:
//	• Tea × 2 — 7.00
//	<b>Total: 7.00</b>
//
// Every customer-provided string (order id, customer name, item names) goes
// through notify.EscapeHTML, so it can be neither markup nor a broken entity.
//
// The shop itself renders its messages from its templates ([Templates]),
// whose English "accepted" Telegram text is this one (for text without
// quotes, apostrophes or plus signs, which html/template writes as numeric
// references). AcceptedMessage is for tools that need the text without a
// registry: the benchmarks enqueue it directly.
func AcceptedMessage(o Order) string {
	var b strings.Builder
	b.Grow(128 + 64*len(o.Items))
	b.WriteString("<b>Order ")
	b.WriteString(notify.EscapeHTML(o.ID))
	b.WriteString(" accepted</b>\n")
	if o.Customer != "" {
		b.WriteString("Hello, ")
		b.WriteString(notify.EscapeHTML(o.Customer))
		b.WriteString("! ")
	}
	b.WriteString("We have received your order:\n")
	for _, it := range o.Items {
		b.WriteString("• ")
		b.WriteString(notify.EscapeHTML(it.Name))
		b.WriteString(" × ")
		b.WriteString(strconv.FormatInt(it.Qty, 10))
		b.WriteString(" — ")
		writeMoney(&b, it.Qty*it.PriceCents)
		b.WriteByte('\n')
	}
	b.WriteString("<b>Total: ")
	writeMoney(&b, o.Total())
	b.WriteString("</b>")
	return b.String()
}

// writeMoney writes an amount in cents as units with two decimals.
func writeMoney(b *strings.Builder, cents int64) {
	b.WriteString(strconv.FormatInt(cents/100, 10))
	b.WriteByte('.')
	if c := cents % 100; c < 10 {
		b.WriteByte('0')
		b.WriteString(strconv.FormatInt(c, 10))
	} else {
		b.WriteString(strconv.FormatInt(c, 10))
	}
}
