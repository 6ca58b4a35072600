package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"

	"github.com/tgnotify/tgnotify/internal/shop"
	"github.com/tgnotify/tgnotify/internal/system"
)

// outcome is what must become of an order's notification.
type outcome int

const (
	// delivered: one copy, by one of the channels the order allows.
	delivered outcome = iota
	// deadLettered: no copy; a dead letter on every channel of its route
	// and one dead event.
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

// kind is what an order is meant to show: which addresses it carries and
// what its notification meets on the way.
type kind string

// The kinds of orders, as the report names them.
const (
	kindTelegram      kind = "Telegram chat"
	kindGroup         kind = "migrated Telegram group"
	kindTelegramEmail kind = "Telegram chat + email"
	kindTelegramSMS   kind = "Telegram chat + phone"
	kindBlocked       kind = "blocked Telegram chat + email"
	kindBlockedMax    kind = "blocked Telegram chat + blocked MAX user + email"
	kindDeactivated   kind = "deactivated Telegram chat, no other address"
	kindMax           kind = "MAX user only"
	kindEmail         kind = "email only"
	kindOutage        kind = "Telegram chat + phone, during the Telegram outage"
)

// The dead-letter reasons the engine gives when a channel takes too long.
const (
	reasonFallbackTimeout = "fallback_timeout"
	reasonMaxAttempts     = "max_attempts"
)

// plannedOrder is an order the demo places and what it expects of it.
type plannedOrder struct {
	order shop.Order
	kind  kind
	want  outcome
	// may lists the channels allowed to deliver it (delivered).
	may []string
	// wantChat is the chat a Telegram copy must arrive in.
	wantChat int64
	// reasons are the dead-letter reasons a channel may give when it
	// gives up on the notification, by channel; a channel not listed must
	// not give up on it.
	reasons map[string][]string
	repeat  repeatKind
	// outage marks the orders placed while Telegram is down.
	outage bool
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
	// mailNames are the customers' names in their email addresses.
	mailNames = []string{"ann", "boris", "chloe", "dmitri", "emma", "farid", "gul", "hana", "ivan", "jo"}
)

// Base ids of the demo's customers.
const (
	privateBase int64 = 1_000_000 // private Telegram chats
	outageBase  int64 = 1_100_000 // private chats of the orders placed during the outage
	maxBase     int64 = 7_100_000 // MAX users
)

// planOrders returns the orders of the burst: with the emulator, mostly
// private chats, every 50th to the migrated group, every 25th to a blocked
// or deactivated chat (those to a blocked chat carry an email, half of them
// also the MAX user who stopped the bot), and a share of customers with an
// email, a phone or only a MAX account; with the real Telegram, all to its
// chat.
func planOrders(c *config, runID string) []plannedOrder {
	rng := rand.New(rand.NewPCG(uint64(c.seed), 0x7467_6e6f_7469_6679))
	deadChats := append(append([]int64{}, blockedChats...), deactivatedChats...)
	orders := make([]plannedOrder, 0, c.orders)
	dead := 0
	for i := range c.orders {
		name := rng.IntN(len(customerNames))
		o := shop.Order{ID: fmt.Sprintf("%s-%04d", runID, i+1), Customer: customerNames[name]}
		// Every email address and phone is the order's own, so that the
		// channels' per-recipient limits do not hold the demo up.
		email := fmt.Sprintf("%s.%s@mail.example", mailNames[name], strings.ToLower(o.ID))
		phone := fmt.Sprintf("+1555%07d", i+1)
		p := plannedOrder{want: delivered, kind: kindTelegram, may: []string{"telegram"}}
		chat := privateBase + 1 + int64(rng.IntN(c.customers))
		switch {
		case c.real != nil:
			o.ChatID, p.wantChat = c.real.chatID, c.real.chatID
		case i%50 == 7:
			o.ChatID, p.wantChat, p.kind = groupChat, supergroupChat, kindGroup
		case i%25 == 3:
			o.ChatID = deadChats[dead%len(deadChats)]
			dead++
			switch {
			case o.ChatID == deactivatedChats[0]:
				p.kind, p.want, p.may = kindDeactivated, deadLettered, nil
				p.reasons = map[string][]string{"telegram": {"deactivated"}}
			case dead%4 == 1:
				o.MaxUserID, o.Email = maxBlockedUsers[0], email
				p.kind, p.may = kindBlockedMax, []string{"email"}
				p.reasons = map[string][]string{"telegram": {"blocked"}, "max": {"blocked"}}
			default:
				o.Email = email
				p.kind, p.may = kindBlocked, []string{"email"}
				p.reasons = map[string][]string{"telegram": {"blocked"}}
			}
		case i%20 == 9:
			o.MaxUserID = maxBase + 1 + int64(rng.IntN(c.customers))
			p.kind, p.may = kindMax, []string{"max"}
		case i%20 == 14:
			o.Email = email
			p.kind, p.may = kindEmail, []string{"email"}
		case i%10 == 5:
			o.ChatID, p.wantChat, o.Email = chat, chat, email
			p.kind, p.may = kindTelegramEmail, []string{"telegram", "email"}
			p.reasons = map[string][]string{"telegram": {reasonFallbackTimeout}}
		case i%25 == 17:
			o.ChatID, p.wantChat, o.Phone = chat, chat, phone
			p.kind, p.may = kindTelegramSMS, []string{"telegram", "sms"}
			p.reasons = map[string][]string{"telegram": {reasonFallbackTimeout}}
		default:
			o.ChatID, p.wantChat = chat, chat
		}
		o.Items = items(rng)
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

// planOutageOrders returns the orders placed while Telegram is down: each
// from a customer with a Telegram chat and a phone, so that after
// fallback_after on Telegram its notification goes by SMS.
func planOutageOrders(c *config, runID string) []plannedOrder {
	rng := rand.New(rand.NewPCG(uint64(c.seed), 0x6f75_7461_6765))
	orders := make([]plannedOrder, 0, c.outageOrders)
	for i := range c.outageOrders {
		chat := outageBase + 1 + int64(i)
		o := shop.Order{ID: fmt.Sprintf("%s-X%03d", runID, i+1), Customer: customerNames[rng.IntN(len(customerNames))],
			ChatID: chat, Phone: fmt.Sprintf("+1666%07d", i+1), Items: items(rng)}
		orders = append(orders, plannedOrder{order: o, kind: kindOutage, want: delivered, may: []string{"sms"}, wantChat: chat,
			reasons: map[string][]string{"telegram": {reasonFallbackTimeout, reasonMaxAttempts}}, outage: true})
	}
	return orders
}

// items draws one to three lines of an order.
func items(rng *rand.Rand) []shop.Item {
	var out []shop.Item
	for range 1 + rng.IntN(3) {
		it := catalog[rng.IntN(len(catalog))]
		it.Qty = 1 + int64(rng.IntN(3))
		out = append(out, it)
	}
	return out
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
