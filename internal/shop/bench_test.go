package shop_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/tgnotify/tgnotify/internal/shop"
)

// BenchmarkPlaceOrder measures what the outbox write adds to checkout: the
// same orders with and without their notification, in the same run. Each
// commit is fsynced (synchronous=FULL) in both cases.
func BenchmarkPlaceOrder(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts []shop.Option
	}{
		{"with_outbox", nil},
		{"without_outbox", []shop.Option{shop.WithoutNotifications()}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			bd := setup(b, bc.opts...)
			ctx := context.Background()
			o := order("")
			o.Items = append(o.Items, shop.Item{Name: "Cake <large>", Qty: 2, PriceCents: 1299})
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				o.ID = fmt.Sprint("B", i)
				if _, _, err := bd.svc.PlaceOrder(ctx, o); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
