package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/tgnotify/tgnotify/internal/shop"
	"github.com/tgnotify/tgnotify/internal/system"
)

// outcome is what must become of an order's notification.
type outcome int

const (
	// delivered: one message in the expected chat.
	delivered outcome = iota
	// deadLettered: one dead letter with the expected reason, no message.
	deadLettered
)

// repeatKind says whether and when an order's POST is sent again.
type repeatKind int

const (
	noRepeat repeatKind = iota
	// repeatBurst: sent twice within the burst, possibly concurrently, as a
	// client that timed out and retried at once.
	repeatBurst
	// repeatLater: sent again after the whole burst, when its notification
	// is usually already delivered.
	repeatLater
)

// plannedOrder is an order the demo places and what it expects of it.
type plannedOrder struct {
	order      shop.Order
	want       outcome
	wantChat   int64  // the chat the message must arrive in (delivered)
	wantReason string // the dead-letter reason (deadLettered)
	repeat     repeatKind
}

// catalog and names make the orders look like orders.
var (
	catalog = []shop.Item{
		{Name: "Green tea", PriceCents: 450}, {Name: "Espresso beans 1 kg", PriceCents: 2290},
		{Name: "Oat milk", PriceCents: 199}, {Name: "Croissant", PriceCents: 250},
		{Name: "Ceramic mug", PriceCents: 1200}, {Name: "Dark chocolate 85%", PriceCents: 375},
		{Name: "Rooibos & vanilla", PriceCents: 520}, {Name: "Moka pot <3 cups>", PriceCents: 3490},
	}
	customerNames = []string{"Ann", "Boris", "Chloé", "Dmitri", "Emma", "Farid", "Gül", "Hana", "Ivan", "Jo"}
)

// planOrders returns the orders of a run: with the emulator, mostly private
// chats, every 50th to the migrated group, every 25th to a blocked or
// deactivated chat; with the real Telegram, all to its chat.
func planOrders(c *config, runID string) []plannedOrder {
	rng := rand.New(rand.NewPCG(uint64(c.seed), 0x7467_6e6f_7469_6679))
	deadChats := append(append([]int64{}, blockedChats...), deactivatedChats...)
	orders := make([]plannedOrder, 0, c.orders)
	dead := 0
	for i := range c.orders {
		p := plannedOrder{want: delivered}
		o := shop.Order{ID: fmt.Sprintf("%s-%04d", runID, i+1), Customer: customerNames[rng.IntN(len(customerNames))]}
		switch {
		case c.real != nil:
			o.ChatID, p.wantChat = c.real.chatID, c.real.chatID
		case i%50 == 7:
			o.ChatID, p.wantChat = groupChat, supergroupChat
		case i%25 == 3:
			o.ChatID = deadChats[dead%len(deadChats)]
			dead++
			p.want, p.wantReason = deadLettered, "blocked"
			if o.ChatID == deactivatedChats[0] {
				p.wantReason = "deactivated"
			}
		default:
			o.ChatID = 1_000_001 + int64(rng.IntN(c.customers))
			p.wantChat = o.ChatID
		}
		for range 1 + rng.IntN(3) {
			it := catalog[rng.IntN(len(catalog))]
			it.Qty = 1 + int64(rng.IntN(3))
			o.Items = append(o.Items, it)
		}
		p.order = o
		if rng.Float64() < c.repeat {
			p.repeat = repeatBurst
			if rng.IntN(2) == 0 {
				p.repeat = repeatLater
			}
		}
		orders = append(orders, p)
	}
	return orders
}

// placer sends the orders to the shop and records the answers.
type placer struct {
	*system.Placer
}

func newPlacer(shopURL string) *placer { return &placer{Placer: system.NewPlacer(shopURL)} }

// place sends every order (the repeats of the burst right after their
// original) with concurrency parallel clients, then the late repeats.
func (p *placer) place(ctx context.Context, orders []plannedOrder, concurrency int) {
	var burst, later []shop.Order
	for _, o := range orders {
		burst = append(burst, o.order)
		switch o.repeat {
		case repeatBurst:
			burst = append(burst, o.order)
		case repeatLater:
			later = append(later, o.order)
		}
	}
	p.run(ctx, burst, concurrency)
	p.run(ctx, later, concurrency)
}

func (p *placer) run(ctx context.Context, orders []shop.Order, concurrency int) {
	jobs := make(chan shop.Order)
	var wg sync.WaitGroup
	for range concurrency {
		wg.Go(func() {
			for o := range jobs {
				p.Post(ctx, o)
			}
		})
	}
	for _, o := range orders {
		select {
		case jobs <- o:
		case <-ctx.Done():
		}
	}
	close(jobs)
	wg.Wait()
}
