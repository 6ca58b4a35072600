package chaos

import (
	"context"
	"sync"
	"time"

	"github.com/tgnotify/tgnotify/internal/system"
)

// maxConcurrentPosts bounds the POST /orders requests in flight.
const maxConcurrentPosts = 16

// placeOrders posts each order at its offset from start (a repeated order
// twice at once) until the orders are placed or ctx ends. The shop commits
// orders in whatever order their requests win its write lock; the outbox ids
// record that order and the checks use them.
func placeOrders(ctx context.Context, pl *system.Placer, orders []PlannedOrder, start time.Time) {
	sem := make(chan struct{}, maxConcurrentPosts)
	var wg sync.WaitGroup
	defer wg.Wait()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for _, o := range orders {
		timer.Reset(time.Until(start.Add(o.At)))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		posts := 1
		if o.Repeat == RepeatNow {
			posts = 2
		}
		for range posts {
			select {
			case <-ctx.Done():
				return
			case sem <- struct{}{}:
			}
			wg.Go(func() {
				defer func() { <-sem }()
				pl.Post(ctx, o.Order)
			})
		}
	}
}

// placeLateRepeats posts again the orders planned to be repeated late.
func placeLateRepeats(ctx context.Context, pl *system.Placer, orders []PlannedOrder) int {
	sem := make(chan struct{}, maxConcurrentPosts)
	var wg sync.WaitGroup
	n := 0
	for _, o := range orders {
		if o.Repeat != RepeatLate {
			continue
		}
		n++
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			pl.Post(ctx, o.Order)
		})
	}
	wg.Wait()
	return n
}
