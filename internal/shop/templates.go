package shop

import (
	"strconv"

	"github.com/tgnotify/tgnotify/pkg/template"
)

// The events of an order the shop tells its customer about. Each is the
// last part of its notification's key: order:<id>:<event>.
const (
	EventAccepted  = "accepted"
	EventShipped   = "shipped"
	EventDelivered = "delivered"
)

// DefaultLocale is the locale of an order that names none, and the
// templates' fallback.
const DefaultLocale = "en"

// messageData is what the templates see of an order.
type messageData struct {
	ID       string
	Customer string
	Items    []itemData
	// Total is the order total in units with two decimals ("7.00").
	Total string
	// OrderURL is the order's page (WithOrderURL), empty without one.
	OrderURL string
}

type itemData struct {
	Name  string
	Qty   int64
	Total string
}

func newMessageData(o Order, orderURL string) messageData {
	d := messageData{ID: o.ID, Customer: o.Customer, Total: money(o.Total()), OrderURL: orderURL}
	for _, it := range o.Items {
		d.Items = append(d.Items, itemData{Name: it.Name, Qty: it.Qty, Total: money(it.Qty * it.PriceCents)})
	}
	return d
}

// money formats cents as units with two decimals.
func money(cents int64) string {
	s := strconv.FormatInt(cents%100, 10)
	if len(s) == 1 {
		s = "0" + s
	}
	return strconv.FormatInt(cents/100, 10) + "." + s
}

// Telegram's texts of the "accepted" event. The English one renders
// exactly what AcceptedMessage writes, which the demo, chaos and benchmark
// tools recognise by its first line, <b>Order <id> accepted</b>; the
// English SMS and email subject start with Order <id> accepted on a line
// of their own for the same reason (internal/system).
const (
	acceptedEN = `<b>Order {{.ID}} accepted</b>
{{if .Customer}}Hello, {{.Customer}}! {{end}}We have received your order:
{{range .Items}}• {{.Name}} × {{.Qty}} — {{.Total}}
{{end}}<b>Total: {{.Total}}</b>`
	acceptedRU = `<b>Заказ {{.ID}} принят</b>
{{if .Customer}}Здравствуйте, {{.Customer}}! {{end}}Мы получили ваш заказ:
{{range .Items}}• {{.Name}} × {{.Qty}} — {{.Total}}
{{end}}<b>Итого: {{.Total}}</b>`
)

// itemsHTML is the email's table of items, shared by both locales.
const itemsHTML = `<table cellpadding="4">{{range .Items}}<tr><td>{{.Name}}</td><td>× {{.Qty}}</td><td align="right">{{.Total}}</td></tr>{{end}}</table>`

// itemsText is the email's plain list of items.
const itemsText = `{{range .Items}}- {{.Name}} x {{.Qty}}: {{.Total}}
{{end}}`

// orderButton is a link to the order's page, shown when the shop has
// one (WithOrderURL).
func orderButton(label, suffix string) [][]template.ButtonSource {
	return [][]template.ButtonSource{{{Text: label, URL: "{{with .OrderURL}}{{.}}" + suffix + "{{end}}"}}}
}

// Templates returns the registry of the shop's messages: "accepted",
// "shipped" and "delivered" in English (the fallback) and Russian, for
// Telegram, email and SMS, with a button to the order's page when the shop
// has one.
//
// MAX has no templates of its own: it converts Telegram's HTML, which says
// the same in MAX's tags.
func Templates() (*template.Registry, error) {
	r := template.New(DefaultLocale)
	for _, t := range []struct {
		event, locale string
		src           template.Source
	}{
		{EventAccepted, "en", template.Source{
			Telegram:  acceptedEN,
			Subject:   "Order {{.ID}} accepted",
			EmailHTML: `<h2>Order {{.ID}} accepted</h2>{{if .Customer}}<p>Hello, {{.Customer}}!</p>{{end}}<p>We have received your order:</p>` + itemsHTML + `<p><b>Total: {{.Total}}</b></p>`,
			EmailText: "Order {{.ID}} accepted\n\n{{if .Customer}}Hello, {{.Customer}}!\n{{end}}We have received your order:\n" + itemsText + "Total: {{.Total}}",
			SMS:       "Order {{.ID}} accepted\nTotal: {{.Total}}. Thank you{{if .Customer}}, {{.Customer}}{{end}}!",
			Buttons:   orderButton("View order", ""),
		}},
		{EventAccepted, "ru", template.Source{
			Telegram:  acceptedRU,
			Subject:   "Заказ {{.ID}} принят",
			EmailHTML: `<h2>Заказ {{.ID}} принят</h2>{{if .Customer}}<p>Здравствуйте, {{.Customer}}!</p>{{end}}<p>Мы получили ваш заказ:</p>` + itemsHTML + `<p><b>Итого: {{.Total}}</b></p>`,
			EmailText: "Заказ {{.ID}} принят\n\n{{if .Customer}}Здравствуйте, {{.Customer}}!\n{{end}}Мы получили ваш заказ:\n" + itemsText + "Итого: {{.Total}}",
			SMS:       "Заказ {{.ID}} принят\nИтого: {{.Total}}. Спасибо{{if .Customer}}, {{.Customer}}{{end}}!",
			Buttons:   orderButton("Открыть заказ", ""),
		}},
		{EventShipped, "en", template.Source{
			Telegram:  "<b>Order {{.ID}} shipped</b>\n{{if .Customer}}{{.Customer}}, your{{else}}Your{{end}} order is on its way.",
			Subject:   "Order {{.ID}} shipped",
			EmailHTML: `<h2>Order {{.ID}} shipped</h2><p>{{if .Customer}}{{.Customer}}, your{{else}}Your{{end}} order is on its way.</p>`,
			EmailText: "Order {{.ID}} shipped\n\n{{if .Customer}}{{.Customer}}, your{{else}}Your{{end}} order is on its way.",
			SMS:       "Order {{.ID}} shipped\nIt is on its way.",
			Buttons:   orderButton("Track order", "/tracking"),
		}},
		{EventShipped, "ru", template.Source{
			Telegram:  "<b>Заказ {{.ID}} отправлен</b>\n{{if .Customer}}{{.Customer}}, ваш{{else}}Ваш{{end}} заказ уже в пути.",
			Subject:   "Заказ {{.ID}} отправлен",
			EmailHTML: `<h2>Заказ {{.ID}} отправлен</h2><p>{{if .Customer}}{{.Customer}}, ваш{{else}}Ваш{{end}} заказ уже в пути.</p>`,
			EmailText: "Заказ {{.ID}} отправлен\n\n{{if .Customer}}{{.Customer}}, ваш{{else}}Ваш{{end}} заказ уже в пути.",
			SMS:       "Заказ {{.ID}} отправлен\nОн уже в пути.",
			Buttons:   orderButton("Отследить заказ", "/tracking"),
		}},
		{EventDelivered, "en", template.Source{
			Telegram:  "<b>Order {{.ID}} delivered</b>\nThank you for shopping with us{{if .Customer}}, {{.Customer}}{{end}}!",
			Subject:   "Order {{.ID}} delivered",
			EmailHTML: `<h2>Order {{.ID}} delivered</h2><p>Thank you for shopping with us{{if .Customer}}, {{.Customer}}{{end}}!</p>`,
			EmailText: "Order {{.ID}} delivered\n\nThank you for shopping with us{{if .Customer}}, {{.Customer}}{{end}}!",
			SMS:       "Order {{.ID}} delivered\nThank you for shopping with us!",
			Buttons:   orderButton("Rate your order", "/review"),
		}},
		{EventDelivered, "ru", template.Source{
			Telegram:  "<b>Заказ {{.ID}} доставлен</b>\nСпасибо за покупку{{if .Customer}}, {{.Customer}}{{end}}!",
			Subject:   "Заказ {{.ID}} доставлен",
			EmailHTML: `<h2>Заказ {{.ID}} доставлен</h2><p>Спасибо за покупку{{if .Customer}}, {{.Customer}}{{end}}!</p>`,
			EmailText: "Заказ {{.ID}} доставлен\n\nСпасибо за покупку{{if .Customer}}, {{.Customer}}{{end}}!",
			SMS:       "Заказ {{.ID}} доставлен\nСпасибо за покупку!",
			Buttons:   orderButton("Оценить заказ", "/review"),
		}},
	} {
		if err := r.Add(t.event, t.locale, t.src); err != nil {
			return nil, err
		}
	}
	return r, nil
}
