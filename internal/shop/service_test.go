package shop_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/shop"
	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

type bundle struct {
	db   *sql.DB
	path string
	svc  *shop.Service
}

func setup(t testing.TB, opts ...shop.Option) *bundle {
	t.Helper()
	path := filepath.Join(t.TempDir(), "shop.db")
	db, err := outbox.Open(context.Background(), path, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	svc, err := shop.NewService(context.Background(), db, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	return &bundle{db: db, path: path, svc: svc}
}

func (b *bundle) count(t testing.TB, table string) int {
	t.Helper()
	var n int
	if err := b.db.QueryRow(`SELECT COUNT(*) FROM ` + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func order(id string) shop.Order {
	return shop.Order{ID: id, ChatID: 100, Customer: "Ann", Items: []shop.Item{{Name: "Tea", Qty: 1, PriceCents: 350}}}
}

// The seed's scenario: the mobile app repeats POST /orders; the same order
// placed three times, including after its notification was published, is one
// order and one outbox row.
func TestPlaceOrderThreeTimes(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	first, created, err := b.svc.PlaceOrder(ctx, order("A1"))
	if err != nil || !created {
		t.Fatalf("first PlaceOrder = %v, %v", created, err)
	}
	second, created, err := b.svc.PlaceOrder(ctx, order("A1"))
	if err != nil || created {
		t.Fatalf("second PlaceOrder = created %v, %v; want false, nil", created, err)
	}
	if !second.CreatedAt.Equal(first.CreatedAt) || second.TotalCents != first.TotalCents {
		t.Fatalf("repeated order = %+v, want the stored %+v", second, first)
	}
	if err := outbox.NewReader(b.db).MarkPublished(ctx, time.Now(), 1); err != nil {
		t.Fatal(err)
	}
	if _, created, err := b.svc.PlaceOrder(ctx, order("A1")); err != nil || created {
		t.Fatalf("PlaceOrder after publishing = created %v, %v; want false, nil", created, err)
	}
	if o, n := b.count(t, "orders"), b.count(t, "outbox"); o != 1 || n != 1 {
		t.Fatalf("%d orders and %d outbox rows, want 1 and 1", o, n)
	}
	rows, err := outbox.NewReader(b.db).Pending(ctx, 0, 10)
	if err != nil || len(rows) != 0 {
		t.Fatalf("pending rows after publishing = %v, %v; want none", rows, err)
	}
}

func TestPlaceOrderNotification(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	o := shop.Order{ID: "B<7>", ChatID: -1001234, Customer: `Ann & "Bob" <script>`, Items: []shop.Item{
		{Name: "Tea <green>", Qty: 2, PriceCents: 350},
		{Name: "Cake", Qty: 1, PriceCents: 1299},
	}}
	if _, _, err := b.svc.PlaceOrder(ctx, o); err != nil {
		t.Fatal(err)
	}
	rows, err := outbox.NewReader(b.db).Pending(ctx, 0, 10)
	if err != nil || len(rows) != 1 {
		t.Fatalf("Pending = %v, %v", rows, err)
	}
	n, err := notify.DecodePayload(rows[0].Payload)
	if err != nil {
		t.Fatal(err)
	}
	if n.Key != "order:B<7>:accepted" || n.ChatID != -1001234 || n.ParseMode != notify.ParseModeHTML || n.Priority != notify.PriorityTransactional {
		t.Fatalf("notification = %+v", n)
	}
	for _, want := range []string{
		"<b>Order B&lt;7&gt; accepted</b>",
		"Ann &amp; &#34;Bob&#34; &lt;script&gt;",
		"• Tea &lt;green&gt; × 2 — 7.00",
		"• Cake × 1 — 12.99",
		"<b>Total: 19.99</b>",
	} {
		if !strings.Contains(n.Text, want) {
			t.Errorf("notification text %q does not contain %q", n.Text, want)
		}
	}
	if strings.Contains(n.Text, "<script>") || strings.Contains(n.Text, "<green>") {
		t.Errorf("customer-provided markup reached the message unescaped: %q", n.Text)
	}
}

func TestPlaceOrderConflict(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	if _, _, err := b.svc.PlaceOrder(ctx, order("A1")); err != nil {
		t.Fatal(err)
	}
	other := order("A1")
	other.Items[0].Qty = 2
	if _, _, err := b.svc.PlaceOrder(ctx, other); !errors.Is(err, shop.ErrConflict) {
		t.Fatalf("PlaceOrder with the same id and other content = %v, want ErrConflict", err)
	}
	if o, n := b.count(t, "orders"), b.count(t, "outbox"); o != 1 || n != 1 {
		t.Fatalf("%d orders and %d outbox rows, want 1 and 1", o, n)
	}
}

// A failure after Enqueue, inside the transaction, leaves neither the order
// nor its outbox row. The failure is real: a deferred foreign key that a
// trigger violates for one order makes COMMIT fail.
func TestPlaceOrderRollbackAfterEnqueue(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	for _, stmt := range []string{
		`CREATE TABLE parent (id INTEGER PRIMARY KEY)`,
		`CREATE TABLE audit (parent_id INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED)`,
		`CREATE TRIGGER fail_commit AFTER INSERT ON outbox WHEN NEW.key = 'order:BOOM:accepted'
			BEGIN INSERT INTO audit (parent_id) VALUES (42); END`,
	} {
		if _, err := b.db.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err := b.svc.PlaceOrder(ctx, order("BOOM"))
	if err == nil || !strings.Contains(err.Error(), "placing order BOOM: committing") {
		t.Fatalf("PlaceOrder = %v, want a commit failure", err)
	}
	if o, n, a := b.count(t, "orders"), b.count(t, "outbox"), b.count(t, "audit"); o != 0 || n != 0 || a != 0 {
		t.Fatalf("after the failed commit: %d orders, %d outbox rows, %d audit rows; want none", o, n, a)
	}
	// The next order goes through normally.
	if _, created, err := b.svc.PlaceOrder(ctx, order("A2")); err != nil || !created {
		t.Fatalf("PlaceOrder after a rollback = %v, %v", created, err)
	}
}

// Orders placed at once share transactions (outbox.Committer) and stay
// exactly what one at a time would give: each order and its notification
// once, a repeat answered with the stored order, a conflicting order
// refused while the others in its transaction are kept.
func TestConcurrentOrdersEachCommitOnce(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	if _, _, err := b.svc.PlaceOrder(ctx, order("X")); err != nil {
		t.Fatal(err)
	}
	const ids = 30
	type answer struct {
		id      string
		created bool
		err     error
	}
	answers := make(chan answer, 2*ids+5)
	var wg sync.WaitGroup
	for i := range 2 * ids {
		wg.Go(func() {
			id := fmt.Sprint("C", i%ids)
			p, created, err := b.svc.PlaceOrder(ctx, order(id))
			if err == nil && (p.ID != id || p.NotificationKey != shop.NotificationKey(id)) {
				err = fmt.Errorf("answered with order %s", p.ID)
			}
			answers <- answer{id, created, err}
		})
	}
	for range 5 {
		wg.Go(func() {
			other := order("X")
			other.Items[0].Qty = 9
			_, created, err := b.svc.PlaceOrder(ctx, other)
			answers <- answer{"X", created, err}
		})
	}
	wg.Wait()
	close(answers)
	created := map[string]int{}
	for a := range answers {
		switch {
		case a.id == "X":
			if !errors.Is(a.err, shop.ErrConflict) {
				t.Errorf("conflicting order X: %v, want ErrConflict", a.err)
			}
		case a.err != nil:
			t.Errorf("order %s: %v", a.id, a.err)
		case a.created:
			created[a.id]++
		}
	}
	for i := range ids {
		if id := fmt.Sprint("C", i); created[id] != 1 {
			t.Errorf("order %s created %d times, want once", id, created[id])
		}
	}
	if o, n := b.count(t, "orders"), b.count(t, "outbox"); o != ids+1 || n != ids+1 {
		t.Fatalf("%d orders and %d outbox rows, want %d of each", o, n, ids+1)
	}
}

func TestPlaceOrderValidation(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*shop.Order)
		field  string
	}{
		{"missing id", func(o *shop.Order) { o.ID = "" }, "id"},
		{"blank id", func(o *shop.Order) { o.ID = "  " }, "id"},
		{"id with space", func(o *shop.Order) { o.ID = "A 1" }, "id"},
		{"long id", func(o *shop.Order) { o.ID = strings.Repeat("x", shop.MaxOrderIDBytes+1) }, "id"},
		{"zero chat", func(o *shop.Order) { o.ChatID = 0 }, "chat_id"},
		{"no items", func(o *shop.Order) { o.Items = nil }, "items"},
		{"too many items", func(o *shop.Order) {
			o.Items = make([]shop.Item, shop.MaxItems+1)
			for i := range o.Items {
				o.Items[i] = shop.Item{Name: "x", Qty: 1}
			}
		}, "items"},
		{"zero qty", func(o *shop.Order) { o.Items[0].Qty = 0 }, "items[0].qty"},
		{"negative qty", func(o *shop.Order) { o.Items[0].Qty = -1 }, "items[0].qty"},
		{"huge qty", func(o *shop.Order) { o.Items[0].Qty = shop.MaxQuantity + 1 }, "items[0].qty"},
		{"negative price", func(o *shop.Order) { o.Items[0].PriceCents = -5 }, "items[0].price_cents"},
		{"huge price", func(o *shop.Order) { o.Items[0].PriceCents = shop.MaxPriceCents + 1 }, "items[0].price_cents"},
		{"empty item name", func(o *shop.Order) { o.Items[0].Name = "" }, "items[0].name"},
		{"long item name", func(o *shop.Order) { o.Items[0].Name = strings.Repeat("я", shop.MaxItemNameChars+1) }, "items[0].name"},
		{"long customer", func(o *shop.Order) { o.Customer = strings.Repeat("a", shop.MaxCustomerChars+1) }, "customer"},
		{"invalid utf8 customer", func(o *shop.Order) { o.Customer = "\xff" }, "customer"},
		{"message too long", func(o *shop.Order) {
			o.Items = make([]shop.Item, shop.MaxItems)
			for i := range o.Items {
				o.Items[i] = shop.Item{Name: strings.Repeat("<&>", shop.MaxItemNameChars/3), Qty: shop.MaxQuantity, PriceCents: shop.MaxPriceCents}
			}
		}, "items"},
	}
	b := setup(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := order("V1")
			tc.mutate(&o)
			_, _, err := b.svc.PlaceOrder(context.Background(), o)
			var inv *shop.InvalidOrderError
			if !errors.Is(err, shop.ErrInvalidOrder) || !errors.As(err, &inv) {
				t.Fatalf("PlaceOrder = %v, want an InvalidOrderError", err)
			}
			if inv.Field != tc.field {
				t.Fatalf("invalid field = %q (%v), want %q", inv.Field, err, tc.field)
			}
		})
	}
	if o, n := b.count(t, "orders"), b.count(t, "outbox"); o != 0 || n != 0 {
		t.Fatalf("invalid orders wrote %d orders and %d outbox rows", o, n)
	}
}

func TestOrderLookup(t *testing.T) {
	b := setup(t, shop.WithClock(func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }))
	ctx := context.Background()
	if _, err := b.svc.Order(ctx, "nope"); !errors.Is(err, shop.ErrNotFound) {
		t.Fatalf("Order(unknown) = %v, want ErrNotFound", err)
	}
	if _, _, err := b.svc.PlaceOrder(ctx, order("A1")); err != nil {
		t.Fatal(err)
	}
	got, err := b.svc.Order(ctx, "A1")
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != "A1" || got.TotalCents != 350 || got.NotificationKey != "order:A1:accepted" || !got.CreatedAt.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("Order(A1) = %+v", got)
	}
}

func TestWithoutNotifications(t *testing.T) {
	b := setup(t, shop.WithoutNotifications())
	for i := 0; i < 3; i++ {
		if _, _, err := b.svc.PlaceOrder(context.Background(), order(fmt.Sprint("N", i))); err != nil {
			t.Fatal(err)
		}
	}
	if o, n := b.count(t, "orders"), b.count(t, "outbox"); o != 3 || n != 0 {
		t.Fatalf("%d orders and %d outbox rows, want 3 and 0", o, n)
	}
}
