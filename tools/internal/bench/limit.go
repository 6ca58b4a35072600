package bench

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"time"

	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
)

// Telegram's limits as the emulator enforces them and the worker keeps
// them by default.
var telegram = emulator.DefaultLimits()

// hotOthersGoal bounds the others' p99 with the hot chat against without
// it. The hot chat legitimately takes one of the bot's 30 msg/s while the
// others are sent (1000 others then take 1000/29 s instead of 1000/30 s, a
// ratio of 30/29 = 1.034); the bound adds 2.5% for run-to-run noise. What
// must not happen is the hot chat's backlog holding the others back.
const hotOthersGoal = 1.06

// pipeline is a stack with everything running: nats-server, the emulator
// with limits, the shop's database, the publisher and the worker (default
// settings: Telegram's limits).
type pipeline struct {
	*stack
	shop *shopDB
}

// withPipeline runs f on a fresh pipeline whose emulator enforces limits,
// on a server with the default sync.
func (r *runner) withPipeline(ctx context.Context, name string, limits emulator.Limits, workerFlags []string, f func(*pipeline) error) error {
	return r.withSyncPipeline(ctx, name, syncDefault, limits, workerFlags, f)
}

// withSyncPipeline runs f on a fresh pipeline whose emulator enforces
// limits, on a server that stores messages as sync says.
func (r *runner) withSyncPipeline(ctx context.Context, name string, sync serverSync, limits emulator.Limits, workerFlags []string, f func(*pipeline) error) error {
	return r.withStack(ctx, name, sync, func(st *stack) error {
		if err := st.provision(ctx); err != nil {
			return err
		}
		if err := st.startEmulator(limits); err != nil {
			return err
		}
		s, err := openShop(ctx, filepath.Join(st.dir, "shop.db"))
		if err != nil {
			return err
		}
		defer s.close()
		if err := st.startPublisher(ctx, r.bin("publisher"), s.path); err != nil {
			return err
		}
		if err := st.startWorker(ctx, r.bin("telegram-worker"), workerFlags...); err != nil {
			return err
		}
		return f(&pipeline{stack: st, shop: s})
	})
}

// deliveryTimeout bounds the wait for n messages at Telegram's 30 msg/s.
func deliveryTimeout(n int) time.Duration {
	return time.Duration(float64(n)/telegram.BotRate*1.5*float64(time.Second)) + time.Minute
}

// waitCount waits until at least n messages satisfying keep were
// delivered, and returns every delivered message.
func (s *emulatorServer) waitCount(ctx context.Context, n int, timeout time.Duration, keep func(emulator.Message) bool) ([]emulator.Message, error) {
	var msgs []emulator.Message
	count := func() int {
		msgs = s.emu.Messages()
		c := 0
		for _, m := range msgs {
			if keep == nil || keep(m) {
				c++
			}
		}
		return c
	}
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		c := count()
		if c >= n {
			return msgs, nil
		}
		if time.Now().After(deadline) {
			return msgs, fmt.Errorf("only %d of %d messages delivered within %v", c, n, timeout)
		}
		select {
		case <-ctx.Done():
			return msgs, ctx.Err()
		case <-tick.C:
		}
	}
}

// sendTimes returns the messages' emulator times, sorted.
func sendTimes(msgs []emulator.Message) []time.Time {
	t := make([]time.Time, len(msgs))
	for i, m := range msgs {
		t[i] = m.Time
	}
	slices.SortFunc(t, func(a, b time.Time) int { return a.Compare(b) })
	return t
}

// rateOf returns the rate of sorted events: intervals per second between
// the first and the last.
func rateOf(t []time.Time) float64 {
	if len(t) < 2 {
		return math.NaN()
	}
	return float64(len(t)-1) / t[len(t)-1].Sub(t[0]).Seconds()
}

// telegramLimit is scenario 4: the achieved rate against Telegram's limit,
// a hot chat, and a 429 storm.
func (r *runner) telegramLimit(ctx context.Context) []*Result {
	n := r.cfg.LimitChats
	rate := &Result{
		ID: "4a", Title: fmt.Sprintf("Telegram limit: %d notifications to %d chats", n, n),
		Ours: "achieved send rate", Reference: "Telegram's allowed bot rate",
		Unit: "msg/s", RefUnit: "msg/s",
		Goal:         Goal{Text: "≥ 0.97×, and 0 × 429", Limit: 0.97},
		ExtraColumns: []string{"delivered", "429s", "sent in any pause", "first → last send (s)"},
		Method: fmt.Sprintf("A fresh pipeline per run: nats-server (%s), `bin/publisher`, `bin/telegram-worker` with its "+
			"defaults (30 msg/s bot-wide, 1 msg/s per chat), and the emulator enforcing Telegram's limits "+
			"(`emulator.DefaultLimits`: 30 msg/s, burst 30; 1 msg/s per chat, burst 3). The shop places %d orders "+
			"to %d distinct chats as fast as it can; the run ends when the emulator accepted all of them. Rate: "+
			"(messages − 1) / (last − first send), from the emulator's own timestamps; 429s: the emulator's count. "+
			"%d runs: each is bound by Telegram's 30 msg/s (%.0f s of sending).",
			syncDefault, n, n, r.cfg.TelegramRuns, float64(n)/telegram.BotRate),
	}
	var plotted bool
	r.measure(ctx, rate, r.cfg.TelegramRuns, func(ctx context.Context, run int) (RunFigures, error) {
		f, sends, err := r.limitRun(ctx, run, rate)
		if err == nil && !plotted {
			plotted = true
			r.report.Plots = append(r.report.Plots, Plot{
				Scenario: "4a",
				File:     "telegram-limit.png",
				Title:    fmt.Sprintf("Scenario 4a: %d notifications to %d chats, Telegram's limits", n, n),
				Caption: fmt.Sprintf("Messages the emulator accepted per second (run 1 of %d) against Telegram's "+
					"30 msg/s bot-wide limit.", r.cfg.TelegramRuns),
				Series: RateSeries{Sends: sends, Limit: telegram.BotRate, Bin: time.Second},
			})
		}
		return f, err
	})

	hot, others := r.hotChat(ctx)
	storm := r.storm(ctx)
	return []*Result{rate, hot, others, storm}
}

func (r *runner) limitRun(ctx context.Context, run int, res *Result) (f RunFigures, sends []time.Time, err error) {
	n := r.cfg.LimitChats
	err = r.withPipeline(ctx, "limit", telegram, nil, func(p *pipeline) error {
		for i := range n {
			if err := p.shop.place(ctx, fmt.Sprintf("T%d-%d", run, i), int64(6_000_000+i)); err != nil {
				return err
			}
		}
		msgs, err := p.emu.waitCount(ctx, n, deliveryTimeout(n), nil)
		if err != nil {
			return err
		}
		sends = sendTimes(msgs)
		st := p.emu.emu.Stats()
		achieved := rateOf(sends)
		f = RunFigures{
			Ours: achieved, Reference: telegram.BotRate, Ratio: ratio(achieved, telegram.BotRate),
			Extra: []string{
				fmt.Sprint(len(msgs)), fmt.Sprint(st.RateLimited), fmt.Sprint(st.SentInAnyPause),
				fmt.Sprintf("%.1f", sends[len(sends)-1].Sub(sends[0]).Seconds()),
			},
		}
		c := res.check("429s provoked", 0)
		c.Values = append(c.Values, float64(st.RateLimited))
		return nil
	})
	return f, sends, err
}

// hotChatID is the hot chat of scenario 4b/4c; the others are
// hotOthersBase + i.
const (
	hotChatID     = 7_999_999
	hotOthersBase = 7_000_000
)

// hotFigures are what one hot-chat or baseline run measured.
type hotFigures struct {
	othersP50 time.Duration
	othersP99 time.Duration
	// hotSent is how many of the hot chat's messages were sent while the
	// others were, and hotRate its rate over that window.
	hotSent int
	hotRate float64
	limited int64
}

// hotChat measures 4b (the hot chat's rate) and 4c (the others' commit →
// delivery p99 with and without the hot chat), both variants in every run.
func (r *runner) hotChat(ctx context.Context) (hot, others *Result) {
	no, nh := r.cfg.HotOthers, r.cfg.HotMessages
	method := fmt.Sprintf("A fresh pipeline per variant, as in 4a (Telegram's limits, worker defaults). **With the "+
		"hot chat**: the shop places %d orders to %d distinct chats and, spread evenly among them, %d orders to "+
		"one hot chat; **without**: the same %d orders alone. Each run measures both variants, in alternating "+
		"order, until every other chat was delivered. Hot chat's rate: (its messages sent meanwhile − 1) / (the last "+
		"other's send − the first send of any chat), so a chat served at 1 msg/s from the start scores 1 and one "+
		"held back until the others are done scores near 0. Others' latency: from `PlaceOrder` returning to the "+
		"emulator's timestamp.",
		no, no, nh, no)
	hot = &Result{
		ID: "4b", Title: fmt.Sprintf("Hot chat: %d notifications to one chat among %d others", nh, no),
		Ours: "hot chat's send rate", Reference: "Telegram's per-chat limit",
		Unit: "msg/s", RefUnit: "msg/s",
		Goal:         Goal{Text: "≥ 0.97× (it cannot exceed 1×: 429s = 0)", Limit: 0.97},
		ExtraColumns: []string{"hot messages sent meanwhile", "429s"},
		Method:       method,
	}
	others = &Result{
		ID: "4c", Title: "Hot chat: the others' commit → delivery p99",
		Ours: "others' p99 with the hot chat", Reference: "the same without it",
		Unit: "s", RefUnit: "s",
		Goal:         Goal{Text: fmt.Sprintf("≤ %.2f×", hotOthersGoal), AtMost: true, Limit: hotOthersGoal},
		ExtraColumns: []string{"p50 with (s)", "p50 without (s)"},
		Method: method + fmt.Sprintf(" Goal: not worse than without the hot chat, within the hot chat's own fair "+
			"share: it takes 1 of the 30 msg/s while the others are sent, so %d others take %d/29 s instead of "+
			"%d/30 s (30/29 = 1.034×); the goal allows %.2f×, the fair share and 2.5%% for noise. Head-of-line "+
			"blocking behind the hot chat's backlog would show as the others waiting for its %d messages at 1 msg/s.",
			no, no, no, hotOthersGoal, nh),
	}
	r.measure(ctx, others, r.cfg.TelegramRuns, func(ctx context.Context, run int) (RunFigures, error) {
		var with, without hotFigures
		for k := range 2 {
			withHot := (k+run)%2 == 0
			fig, err := r.hotRun(ctx, run, withHot)
			if err != nil {
				return RunFigures{}, err
			}
			if withHot {
				with = fig
			} else {
				without = fig
			}
		}
		hr := with.hotRate
		hot.Runs = append(hot.Runs, RunFigures{
			Ours: hr, Reference: telegram.ChatRate, Ratio: ratio(hr, telegram.ChatRate),
			Extra: []string{fmt.Sprint(with.hotSent), fmt.Sprint(with.limited)},
		})
		c := hot.check("429s provoked", 0)
		c.Values = append(c.Values, float64(with.limited+without.limited))
		w, wo := with.othersP99.Seconds(), without.othersP99.Seconds()
		return RunFigures{Ours: w, Reference: wo, Ratio: ratio(w, wo), Extra: []string{
			fmt.Sprintf("%.1f", with.othersP50.Seconds()), fmt.Sprintf("%.1f", without.othersP50.Seconds()),
		}}, nil
	})
	hot.Error, hot.Elapsed, hot.Load = others.Error, others.Elapsed, others.Load
	return hot, others
}

// hotRun runs one variant of the hot-chat measurement.
func (r *runner) hotRun(ctx context.Context, run int, withHot bool) (fig hotFigures, err error) {
	no, nh := r.cfg.HotOthers, r.cfg.HotMessages
	name := "baseline"
	if withHot {
		name = "hot"
	}
	err = r.withPipeline(ctx, name, telegram, nil, func(p *pipeline) error {
		committed := make(map[int64]time.Time, no)
		every := max(1, no/nh)
		placedHot := 0
		placeHot := func() error {
			placedHot++
			return p.shop.place(ctx, fmt.Sprintf("H%d-%d", run, placedHot), hotChatID)
		}
		for i := range no {
			chat := int64(hotOthersBase + i)
			if err := p.shop.place(ctx, fmt.Sprintf("O%d-%d", run, i), chat); err != nil {
				return err
			}
			committed[chat] = time.Now()
			if withHot && i%every == 0 && placedHot < nh {
				if err := placeHot(); err != nil {
					return err
				}
			}
		}
		for withHot && placedHot < nh {
			if err := placeHot(); err != nil {
				return err
			}
		}
		isOther := func(m emulator.Message) bool { return m.ChatID != hotChatID }
		msgs, err := p.emu.waitCount(ctx, no, deliveryTimeout(no+no/29), isOther)
		if err != nil {
			return err
		}
		// The window: from the first send of any chat to the last of the
		// others. The hot chat's rate over it is (sent − 1) / window, the
		// rate of a chat that sends its first message at the start; 0 when
		// it sends one or none.
		first, last := sendTimes(msgs)[0], time.Time{}
		var lat []time.Duration
		for _, m := range msgs {
			if isOther(m) {
				lat = append(lat, m.Time.Sub(committed[m.ChatID]))
				if m.Time.After(last) {
					last = m.Time
				}
			}
		}
		for _, m := range msgs {
			if !isOther(m) && !m.Time.After(last) {
				fig.hotSent++
			}
		}
		fig.othersP50, fig.othersP99 = Percentile(lat, 50), Percentile(lat, 99)
		fig.hotRate = float64(max(0, fig.hotSent-1)) / last.Sub(first).Seconds()
		fig.limited = p.emu.emu.Stats().RateLimited
		return nil
	})
	return fig, err
}
