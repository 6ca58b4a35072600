package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tgnotify/tgnotify/examples/shop/shop"
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

// placement is what the shop answered for one order.
type placement struct {
	created   int       // 201 answers: must be exactly one
	repeated  int       // 200 answers
	createdAt time.Time // from the 201 answer
	mismatch  bool      // a 200 answer with another created_at
	errors    []string
}

// placer sends the orders to the shop and records the answers.
type placer struct {
	url    string
	client *http.Client

	mu      sync.Mutex
	results map[string]*placement

	sent     atomic.Int64 // requests answered 200 or 201
	created  atomic.Int64 // 201 answers
	failures atomic.Int64 // requests that failed for good
}

func newPlacer(shopURL string) *placer {
	return &placer{
		url:     shopURL + "/orders",
		client:  &http.Client{Timeout: 15 * time.Second},
		results: map[string]*placement{},
	}
}

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
				p.post(ctx, o)
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

// maxPostAttempts bounds the retries of one POST after a network error or a
// 5xx; each retry is itself a repeated request the shop must absorb.
const maxPostAttempts = 3

func (p *placer) post(ctx context.Context, o shop.Order) {
	body, err := json.Marshal(o)
	if err != nil {
		p.record(o.ID, 0, shop.PlacedOrder{}, fmt.Errorf("encoding: %w", err))
		return
	}
	var lastErr error
	for attempt := 1; attempt <= maxPostAttempts && ctx.Err() == nil; attempt++ {
		code, placed, err := p.postOnce(ctx, body)
		if err == nil && code < 500 {
			p.record(o.ID, code, placed, nil)
			return
		}
		if err == nil {
			err = fmt.Errorf("HTTP %d", code)
		}
		lastErr = err
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
		}
	}
	if lastErr == nil {
		lastErr = ctx.Err()
	}
	p.record(o.ID, 0, shop.PlacedOrder{}, lastErr)
}

func (p *placer) postOnce(ctx context.Context, body []byte) (int, shop.PlacedOrder, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return 0, shop.PlacedOrder{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, shop.PlacedOrder{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, shop.PlacedOrder{}, err
	}
	var placed shop.PlacedOrder
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated {
		if err := json.Unmarshal(b, &placed); err != nil {
			return 0, placed, fmt.Errorf("decoding the answer: %w", err)
		}
		return resp.StatusCode, placed, nil
	}
	if resp.StatusCode >= 500 {
		return resp.StatusCode, placed, nil
	}
	return resp.StatusCode, placed, fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))
}

func (p *placer) record(id string, code int, placed shop.PlacedOrder, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.results[id]
	if r == nil {
		r = &placement{}
		p.results[id] = r
	}
	switch {
	case err != nil:
		r.errors = append(r.errors, err.Error())
		p.failures.Add(1)
		return
	case code == http.StatusCreated:
		r.created++
		p.created.Add(1)
		if !r.createdAt.IsZero() && !r.createdAt.Equal(placed.CreatedAt) {
			r.mismatch = true
		}
		r.createdAt = placed.CreatedAt
	case code == http.StatusOK:
		r.repeated++
		if r.createdAt.IsZero() {
			r.createdAt = placed.CreatedAt // the 201 may still be on its way
		} else if !r.createdAt.Equal(placed.CreatedAt) {
			r.mismatch = true
		}
	default:
		r.errors = append(r.errors, "unexpected HTTP "+strconv.Itoa(code))
		p.failures.Add(1)
		return
	}
	p.sent.Add(1)
}

// snapshot returns a copy of the answers.
func (p *placer) snapshot() map[string]placement {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]placement, len(p.results))
	for id, r := range p.results {
		out[id] = *r
	}
	return out
}
