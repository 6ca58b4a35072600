package shop_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tgnotify/tgnotify/internal/shop"
	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/outbox"
	"github.com/tgnotify/tgnotify/pkg/template"
)

// pending returns the notifications in the outbox, by key.
func (b *bundle) pending(t *testing.T) map[string]notify.Notification {
	t.Helper()
	rows, err := outbox.NewReader(b.db).Pending(context.Background(), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]notify.Notification{}
	for _, r := range rows {
		n, err := notify.DecodePayload(r.Payload)
		if err != nil {
			t.Fatalf("row %s: %v", r.Key, err)
		}
		out[n.Key] = n
	}
	return out
}

// The English "accepted" template says exactly what AcceptedMessage
// writes, which the demo, chaos and benchmark tools recognise.
func TestEnglishTemplateIsAcceptedMessage(t *testing.T) {
	b := setup(t)
	for _, o := range []shop.Order{
		order("A1"),
		{ID: "A-2", ChatID: 5, Items: []shop.Item{{Name: "Tea <green> & co", Qty: 3, PriceCents: 1205}, {Name: "Cake", Qty: 1, PriceCents: 7}}},
	} {
		if _, _, err := b.svc.PlaceOrder(context.Background(), o); err != nil {
			t.Fatal(err)
		}
		if got, want := b.pending(t)[shop.NotificationKey(o.ID)].Text, shop.AcceptedMessage(o); got != want {
			t.Errorf("order %s:\n got %q\nwant %q", o.ID, got, want)
		}
	}
}

// An order in Russian is told in Russian on every channel; a locale the
// shop does not have falls back to English; a region falls back to its
// language.
func TestOrderLocale(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	for _, tc := range []struct{ id, locale, telegram, subject, sms string }{
		{"R1", "ru", "<b>Заказ R1 принят</b>\nЗдравствуйте, Ann!", "Заказ R1 принят", "Заказ R1 принят\nИтого: 3.50. Спасибо, Ann!"},
		{"R2", "ru-RU", "<b>Заказ R2 принят</b>", "Заказ R2 принят", "Заказ R2 принят\n"},
		{"D1", "de", "<b>Order D1 accepted</b>", "Order D1 accepted", "Order D1 accepted\n"},
		{"E1", "", "<b>Order E1 accepted</b>", "Order E1 accepted", "Order E1 accepted\n"},
	} {
		o := order(tc.id)
		o.Locale, o.Email, o.Phone = tc.locale, "ann@example.com", "+79991234567"
		if _, _, err := b.svc.PlaceOrder(ctx, o); err != nil {
			t.Fatal(err)
		}
		n := b.pending(t)[shop.NotificationKey(tc.id)]
		if !strings.HasPrefix(n.Text, tc.telegram) || n.Subject != tc.subject || n.Bodies.SMS == nil || !strings.HasPrefix(n.Bodies.SMS.Text, tc.sms) ||
			n.Bodies.Email == nil || !strings.Contains(n.Bodies.Email.HTML, tc.subject) || !strings.HasPrefix(n.Bodies.Email.Text, tc.subject) || n.Bodies.Max != nil {
			t.Errorf("order %s in %q: %+v", tc.id, tc.locale, n)
		}
		if p, err := b.svc.Order(ctx, tc.id); err != nil || p.Locale != tc.locale {
			t.Errorf("order %s stored with locale %q (%v), want %q", tc.id, p.Locale, err, tc.locale)
		}
	}
	o := order("X1")
	o.Locale = "en US"
	if _, _, err := b.svc.PlaceOrder(ctx, o); !errors.Is(err, shop.ErrInvalidOrder) || !strings.Contains(err.Error(), "locale") {
		t.Fatalf("a malformed locale: %v, want an invalid order naming locale", err)
	}
	// A Telegram-only order carries no other channel's body: its payload
	// stays one every worker reads.
	if _, _, err := b.svc.PlaceOrder(ctx, order("T1")); err != nil {
		t.Fatal(err)
	}
	rows, _ := outbox.NewReader(b.db).Pending(ctx, 0, 100)
	for _, r := range rows {
		if r.Key == shop.NotificationKey("T1") && !strings.HasPrefix(string(r.Payload), `{"v":1,`) {
			t.Errorf("Telegram-only order's payload %s, want version 1", r.Payload)
		}
	}
}

// Customer data is escaped for each channel: HTML for Telegram and the
// email's HTML part, as typed in the email's text part, the subject and the
// SMS.
func TestCustomerDataEscapedPerChannel(t *testing.T) {
	b := setup(t)
	const evil = `<script>x()</script> & *Ann* _b_`
	o := shop.Order{ID: "Z1", ChatID: 5, Email: "ann@example.com", Phone: "+79991234567", Locale: "ru", Customer: evil,
		Items: []shop.Item{{Name: "Чай [зелёный]", Qty: 1, PriceCents: 350}}}
	if _, _, err := b.svc.PlaceOrder(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	n := b.pending(t)[shop.NotificationKey("Z1")]
	const html = `&lt;script&gt;x()&lt;/script&gt; &amp; *Ann* _b_`
	for _, tc := range []struct{ part, got, want string }{
		{"telegram", n.Text, "Здравствуйте, " + html + "!"},
		{"email html", n.Bodies.Email.HTML, "<p>Здравствуйте, " + html + "!</p>"},
		{"email text", n.Bodies.Email.Text, "Здравствуйте, " + evil + "!"},
		{"sms", n.Bodies.SMS.Text, "Спасибо, " + evil + "!"},
	} {
		if !strings.Contains(tc.got, tc.want) {
			t.Errorf("%s %q does not contain %q", tc.part, tc.got, tc.want)
		}
	}
	if strings.Contains(n.Text, "<script>") || strings.Contains(n.Bodies.Email.HTML, "<script>") {
		t.Errorf("markup reached an HTML part: %q / %q", n.Text, n.Bodies.Email.HTML)
	}
}

// A template that does not render refuses the order at enqueue: nothing
// is written.
func TestBrokenTemplateRefusedAtEnqueue(t *testing.T) {
	r := template.New("en")
	if err := r.Add(shop.EventAccepted, "en", template.Source{Telegram: "Order {{.ID}} for {{.Nickname}}"}); err != nil {
		t.Fatal(err)
	}
	b := setup(t, shop.WithTemplates(r))
	_, _, err := b.svc.PlaceOrder(context.Background(), order("A1"))
	var te *template.Error
	if !errors.Is(err, template.ErrRender) || !errors.As(err, &te) || te.Part != "telegram" {
		t.Fatalf("PlaceOrder = %v, want the template's render error", err)
	}
	if n := b.count(t, "orders") + b.count(t, "outbox"); n != 0 {
		t.Fatalf("%d rows written, want none", n)
	}
}

// Shipped and delivered: each status change enqueues its notification
// under order:<id>:<event>, once; a repeat writes nothing; the order of
// changes is enforced.
func TestShipAndDeliver(t *testing.T) {
	b := setup(t, shop.WithOrderURL("https://shop.example/orders/"))
	ctx := context.Background()
	o := order("A/1")
	o.Locale = "ru"
	if _, _, err := b.svc.PlaceOrder(ctx, o); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.svc.Deliver(ctx, "A/1"); !errors.Is(err, shop.ErrTransition) {
		t.Fatalf("delivering an order not shipped: %v, want ErrTransition", err)
	}
	for i, want := range []bool{true, false} {
		p, changed, err := b.svc.Ship(ctx, "A/1")
		if err != nil || changed != want || p.Status != shop.EventShipped || p.ShippedAt == nil {
			t.Fatalf("Ship #%d = %+v, changed %v, %v; want changed %v", i+1, p, changed, err, want)
		}
	}
	p, changed, err := b.svc.Deliver(ctx, "A/1")
	if err != nil || !changed || p.Status != shop.EventDelivered || p.DeliveredAt == nil {
		t.Fatalf("Deliver = %+v, %v, %v", p, changed, err)
	}
	if _, changed, err := b.svc.Deliver(ctx, "A/1"); err != nil || changed {
		t.Fatalf("delivering again: changed %v, %v; want a repeat", changed, err)
	}
	if _, changed, err := b.svc.Ship(ctx, "A/1"); err != nil || changed {
		t.Fatalf("shipping a delivered order: changed %v, %v; want nothing to do", changed, err)
	}
	if _, _, err := b.svc.Ship(ctx, "nope"); !errors.Is(err, shop.ErrNotFound) {
		t.Fatalf("shipping an unknown order: %v", err)
	}
	ns := b.pending(t)
	if len(ns) != 3 {
		t.Fatalf("outbox has %d notifications, want accepted, shipped and delivered", len(ns))
	}
	for _, tc := range []struct{ event, text, button, url string }{
		{shop.EventAccepted, "<b>Заказ A/1 принят</b>", "Открыть заказ", "https://shop.example/orders/A%2F1"},
		{shop.EventShipped, "<b>Заказ A/1 отправлен</b>\nAnn, ваш заказ уже в пути.", "Отследить заказ", "https://shop.example/orders/A%2F1/tracking"},
		{shop.EventDelivered, "<b>Заказ A/1 доставлен</b>\nСпасибо за покупку, Ann!", "Оценить заказ", "https://shop.example/orders/A%2F1/review"},
	} {
		n := ns[shop.NotificationKeyFor("A/1", tc.event)]
		if !strings.HasPrefix(n.Text, tc.text) || len(n.Buttons) != 1 || n.Buttons[0][0] != (notify.Button{Text: tc.button, URL: tc.url}) {
			t.Errorf("%s: %q with buttons %+v", tc.event, n.Text, n.Buttons)
		}
	}
	got, err := b.svc.Order(ctx, "A/1")
	if err != nil || got.Status != shop.EventDelivered || got.ShippedAt == nil || got.DeliveredAt == nil {
		t.Fatalf("Order = %+v, %v", got, err)
	}
}

func TestHTTPShipAndDeliver(t *testing.T) {
	b := setup(t)
	srv := httptest.NewServer(shop.NewHandler(b.svc, slog.New(slog.NewTextHandler(io.Discard, nil))))
	t.Cleanup(srv.Close)
	if code, _ := post(t, srv.URL, a1); code != http.StatusCreated {
		t.Fatalf("placing A1: %d", code)
	}
	call := func(path string) int {
		resp, err := http.Post(srv.URL+path, "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		path string
		code int
	}{
		{"/orders/A1/deliver", http.StatusConflict},
		{"/orders/A1/ship", http.StatusOK},
		{"/orders/A1/ship", http.StatusOK},
		{"/orders/A1/deliver", http.StatusOK},
		{"/orders/B9/ship", http.StatusNotFound},
	} {
		if got := call(tc.path); got != tc.code {
			t.Errorf("POST %s: %d, want %d", tc.path, got, tc.code)
		}
	}
	if n := b.count(t, "outbox"); n != 3 {
		t.Fatalf("%d outbox rows, want accepted, shipped and delivered", n)
	}
}
