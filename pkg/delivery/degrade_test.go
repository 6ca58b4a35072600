package delivery_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/testenv"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

// The Bot API slows to 2 s per answer: the worker lowers its send rate and
// raises its request timeout, and restores both when answers are fast
// again.
func TestSlowAPILowersTheRateAndRecovers(t *testing.T) {
	t.Parallel()
	lim, cfg, tg := fastLimits()
	cfg.RequestTimeout, cfg.SlowThreshold = 5*time.Second, time.Second
	env := testenv.New(t, testenv.Options{Emulator: emulator.Config{Limits: lim}})
	w := env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: tg})
	if err := env.Emu.StartOutage(emulator.Outage{Mode: emulator.FaultSlow, Delay: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	sent := 0
	publish := func(n int) {
		for range n {
			sent++
			env.Publish(note(fmt.Sprintf("slow:%d", sent), int64(1000+sent), "hi"))
		}
	}
	publish(40)
	natstest.WaitFor(t, 30*time.Second, func() bool {
		d := w.Stats().Degradation
		return d.Slow && d.Rate < d.BaseRate && d.TimeoutText == "10s"
	}, "the worker to slow down and wait longer")
	env.Emu.StopOutage()
	natstest.WaitFor(t, 30*time.Second, func() bool {
		publish(2) // fast answers to judge by
		d := w.Stats().Degradation
		return !d.Slow && d.Rate == d.BaseRate && d.TimeoutText == "5s"
	}, "the worker to recover its rate and timeout")
	natstest.WaitFor(t, 30*time.Second, func() bool { return env.Emu.Stats().Delivered == int64(sent) }, "everything delivered")
}

// Under a 429 storm bulk notifications wait while transactional ones go,
// after each pause.
func TestStormBulkWaitsTransactionalGoes(t *testing.T) {
	t.Parallel()
	lim, cfg, tg := fastLimits()
	// The window is wide enough that the two 429s fall in it on a busy
	// machine, and the storm outlasts the transactional sends; bulk then
	// waits up to that long.
	cfg.StormThreshold, cfg.StormWindow = 2, 20*time.Second
	env := testenv.New(t, testenv.Options{Emulator: emulator.Config{Limits: lim}})
	w := env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: tg})
	for i := range 2 { // two 429s: a storm
		if err := env.Emu.OpenPause(emulator.PauseRequest{Scope: emulator.ScopeBot, RetryAfter: 1}); err != nil {
			t.Fatal(err)
		}
		env.Publish(note(fmt.Sprintf("storm:%d", i), 500, "t"))
		natstest.WaitFor(t, 20*time.Second, func() bool { return env.Emu.Stats().Delivered == int64(i+1) }, "delivered after the pause")
	}
	natstest.WaitFor(t, 10*time.Second, func() bool { return w.Stats().Degradation.SheddingBulk }, "bulk to wait")
	for c := int64(1); c <= 5; c++ {
		bulk := note(fmt.Sprintf("promo:%d", c), c, "bulk")
		bulk.Priority = notify.PriorityBulk
		env.Publish(bulk)
		env.Publish(note(fmt.Sprintf("order:%d", c), 100+c, "transactional"))
	}
	natstest.WaitFor(t, 60*time.Second, func() bool { return env.Emu.Stats().Delivered == 12 }, "everything delivered once the storm is over")
	var lastTransactional, firstBulk time.Time
	for _, m := range env.Emu.Messages() {
		switch m.Text {
		case "transactional":
			lastTransactional = later(lastTransactional, m.Time)
		case "bulk":
			if firstBulk.IsZero() || m.Time.Before(firstBulk) {
				firstBulk = m.Time
			}
		}
	}
	if !firstBulk.After(lastTransactional) {
		t.Fatalf("a bulk message went at %v, before the last transactional one at %v, during the storm", firstBulk, lastTransactional)
	}
	checkPauses(t, env, w)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
