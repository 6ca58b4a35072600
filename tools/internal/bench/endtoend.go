package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/tgnotify/tgnotify/internal/shop"
)

// Goals of the end-to-end scenario at the paid-broadcast rate (issue 17).
const (
	endToEndRateGoal = 0.97
	// endToEndPlacers is how many orders the shop places at once at most,
	// each as a request of its own would.
	endToEndPlacers = 64
	endToEndP99Goal = 250 * time.Millisecond
)

// endToEnd is scenario 8: the whole pipeline at Telegram's paid-broadcast
// rate, on a server that fsyncs every write: (a) the rate it keeps, (b) how
// long a notification takes from the commit to Telegram.
func (r *runner) endToEnd(ctx context.Context) []*Result {
	n := r.cfg.EndToEndRate * int(r.cfg.EndToEndDuration/time.Second)
	secs := fmt.Sprintf("%.0f s", r.cfg.EndToEndDuration.Seconds())
	method := fmt.Sprintf("A fresh pipeline per run on a nats-server with %s: the shop's database in this process, "+
		"`bin/publisher` (default settings), `bin/telegram-worker -paid-broadcast` (bot-wide %.0f msg/s, 1 msg/s per "+
		"chat, every other setting at its default) and the emulator enforcing Telegram's limits "+
		"(`emulator.DefaultLimits`: with allow_paid_broadcast %.0f msg/s, burst %d; 1 msg/s per chat, burst %d). The "+
		"shop places %d orders/s for %s (%d orders) on a fixed schedule, order i due i/%d s after the start, each "+
		"in a call of its own as concurrent requests would (at most %d at once; when it falls behind it catches up "+
		"at once), and commits the orders that arrive together in one transaction (`outbox.Committer`), round robin over %d chats, so each chat gets one every %.0f s, "+
		"within its own limit. The run ends when the emulator accepted every order's message. Rate: (messages − 1) / "+
		"(last − first send) from the emulator's timestamps; 429s: the emulator's count; latency: from `PlaceOrder` "+
		"returning (the commit) to the emulator's timestamp of the order's `sendMessage` (same clock), every order "+
		"counted. The run also checks that each order was sent once.",
		syncAlways, telegram.PaidRate, telegram.PaidRate, telegram.PaidBurst, telegram.ChatBurst,
		r.cfg.EndToEndRate, secs, n, r.cfg.EndToEndRate, endToEndPlacers, r.cfg.EndToEndChats,
		float64(r.cfg.EndToEndChats)/float64(r.cfg.EndToEndRate))
	rate := &Result{
		ID: "8a", Title: fmt.Sprintf("End to end at the paid-broadcast rate: %d notifications/s for %s, %s", r.cfg.EndToEndRate, secs, syncAlways),
		Ours: "delivery rate (shop → outbox → publisher → worker → Telegram)", Reference: "the rate placed (Telegram's paid-broadcast limit)",
		Unit: "msg/s", RefUnit: "msg/s",
		Goal:         Goal{Text: fmt.Sprintf("≥ %.2f×, and 0 × 429", endToEndRateGoal), Limit: endToEndRateGoal},
		ExtraColumns: []string{"orders placed", "shop's placing rate (orders/s)", "429s", "first → last send (s)"},
		Method:       method,
	}
	latency := &Result{
		ID: "8b", Title: fmt.Sprintf("End to end at the paid-broadcast rate: commit → delivery, %s", syncAlways),
		Ours: "p99 commit → sendMessage", Reference: "the goal",
		Unit: "ms", RefUnit: "ms",
		Goal: Goal{Text: fmt.Sprintf("p99 ≤ %d ms", endToEndP99Goal.Milliseconds()), AtMost: true, Limit: 1},
		ExtraColumns: []string{"p50 (ms)", "max (ms)",
			"commit → stored p50 (ms)", "commit → stored p99 (ms)", "stored → sent p50 (ms)", "stored → sent p99 (ms)"},
		Method: method + " Each run then reads every order's notification back from NOTIFY for the instant the " +
			"server stored it (its stream timestamp, same clock), which splits the latency into the publisher's part, " +
			"commit → stored, and the worker's, stored → sent (each column a percentile of its own).",
	}
	r.measure(ctx, rate, r.cfg.SyncRuns, func(ctx context.Context, run int) (RunFigures, error) {
		f, lat, err := r.endToEndRun(ctx, run, n, rate)
		if err == nil {
			lf := latencyFigures(lat.total, endToEndP99Goal)
			for _, part := range [][]time.Duration{lat.toStored, lat.toSent} {
				for _, q := range []float64{50, 99} {
					lf.Extra = append(lf.Extra, fmt.Sprintf("%.2f", ms(Percentile(part, q))))
				}
			}
			latency.Runs = append(latency.Runs, lf)
		}
		return f, err
	})
	latency.Error, latency.Elapsed, latency.Load = rate.Error, rate.Elapsed, rate.Load
	return []*Result{rate, latency}
}

// endToEndLatency is every order's commit → send time, and its two parts:
// commit → stored in NOTIFY, and stored → sent.
type endToEndLatency struct {
	total, toStored, toSent []time.Duration
}

// endToEndRun measures one run: n orders at the configured rate.
func (r *runner) endToEndRun(ctx context.Context, run, n int, res *Result) (f RunFigures, lat endToEndLatency, err error) {
	offered := float64(r.cfg.EndToEndRate)
	err = r.withSyncPipeline(ctx, "endtoend", syncAlways, telegram, []string{"-paid-broadcast"}, func(p *pipeline) error {
		committed, placing, err := r.placeOnSchedule(ctx, p.shop, run, n)
		if err != nil {
			return err
		}
		msgs, err := p.emu.waitCount(ctx, n, r.cfg.EndToEndDuration+2*time.Minute, nil)
		if err != nil {
			return err
		}
		if len(msgs) != n {
			return fmt.Errorf("the emulator accepted %d messages, want each of %d orders once", len(msgs), n)
		}
		seen := make(map[string]bool, n)
		keys := make(map[string]bool, n)
		for _, m := range msgs {
			id := orderID(m.Text)
			at, ok := committed[id]
			if !ok || seen[id] {
				return fmt.Errorf("message %q is not one of the orders, or was sent twice", id)
			}
			seen[id] = true
			keys[shop.NotificationKeyFor(id, shop.EventAccepted)] = true
			lat.total = append(lat.total, m.Time.Sub(at))
		}
		stored, err := storedTimes(ctx, p.js, keys)
		if err != nil {
			return err
		}
		for _, m := range msgs {
			id := orderID(m.Text)
			at := stored[shop.NotificationKeyFor(id, shop.EventAccepted)]
			lat.toStored = append(lat.toStored, at.Sub(committed[id]))
			lat.toSent = append(lat.toSent, m.Time.Sub(at))
		}
		sends := sendTimes(msgs)
		achieved := rateOf(sends)
		limited := p.emu.emu.Stats().RateLimited
		f = RunFigures{
			Ours: achieved, Reference: offered, Ratio: ratio(achieved, offered),
			Extra: []string{
				fmt.Sprint(n), fmt.Sprintf("%.0f", placing), fmt.Sprint(limited),
				fmt.Sprintf("%.1f", sends[len(sends)-1].Sub(sends[0]).Seconds()),
			},
		}
		c := res.check("429s provoked", 0)
		c.Values = append(c.Values, float64(limited))
		return nil
	})
	return f, lat, err
}

// orderID returns the order id of the shop's accepted-order message:
// "<b>Order ID accepted</b>...".
func orderID(text string) string {
	rest, _ := strings.CutPrefix(text, "<b>Order ")
	id, _, _ := strings.Cut(rest, " accepted</b>")
	return id
}

// placeOnSchedule places n orders at the configured rate, order i due i/rate
// after the start, each in a goroutine of its own (at most endToEndPlacers at
// once), and returns when each order was committed and the rate at which the
// shop placed them.
func (r *runner) placeOnSchedule(ctx context.Context, s *shopDB, run, n int) (committed map[string]time.Time, placing float64, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu     sync.Mutex
		failed error
		wg     sync.WaitGroup
		slots  = make(chan struct{}, endToEndPlacers)
	)
	committed = make(map[string]time.Time, n)
	interval := time.Second / time.Duration(r.cfg.EndToEndRate)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	start := time.Now()
schedule:
	for i := range n {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				break schedule
			case <-timer.C:
			}
		}
		select {
		case <-ctx.Done():
			break schedule
		case slots <- struct{}{}:
		}
		id := fmt.Sprintf("P%d-%d", run, i)
		wg.Go(func() {
			defer func() { <-slots }()
			err := s.place(ctx, id, int64(20_000_000+i%r.cfg.EndToEndChats))
			at := time.Now()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if failed == nil {
					failed = fmt.Errorf("placing order %s: %w", id, err)
				}
				cancel()
				return
			}
			committed[id] = at
		})
	}
	wg.Wait()
	if failed != nil {
		return nil, 0, failed
	}
	if len(committed) != n {
		return nil, 0, fmt.Errorf("placed %d of %d orders: %w", len(committed), n, context.Cause(ctx))
	}
	return committed, float64(n-1) / time.Since(start).Seconds(), nil
}
