package bench

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
)

// storm is scenario 4d: a run with a 429 storm. Bot-wide pauses are opened
// on the emulator again and again while the worker sends at Telegram's
// limit; the worker must send nothing inside any of them.
func (r *runner) storm(ctx context.Context) *Result {
	n := r.cfg.StormOrders
	res := &Result{
		ID: "4d", Title: fmt.Sprintf("429 storm: %d bot-wide pauses of %v during %d sends", r.cfg.StormPauses, r.cfg.StormPause, n),
		Ours: "requests sent inside an announced pause", Reference: "429s answered",
		Unit: "requests", RefUnit: "429s",
		Goal: Goal{Text: "0 requests inside a pause", AtMost: true, Limit: 0}, GoalOnOurs: true,
		ExtraColumns: []string{"pauses opened", "paused (s)", "delivered", "rate outside pauses (msg/s)"},
		Method: fmt.Sprintf("One pipeline as in 4a (Telegram's limits, worker defaults). The shop places %d orders to "+
			"distinct chats; once sending has started, the benchmark opens a bot-wide pause on the emulator "+
			"(`OpenPause`, scope bot, retry_after %d s) %d times, %v after the previous one ended: the next "+
			"sendMessage gets 429 and the pause begins. Figure: the emulator's `sent_in_any_pause`, requests that "+
			"arrived while a pause was in force whose 429 the worker could have read (written at least "+
			"`SenderReactionTime`, 5 ms, before; judged on arrival). One run: it is a demonstration "+
			"with a plot, not a rate.", n, int(r.cfg.StormPause/time.Second), r.cfg.StormPauses, r.cfg.StormGap),
	}
	return r.measure(ctx, res, 1, func(ctx context.Context, _ int) (f RunFigures, err error) {
		err = r.withPipeline(ctx, "storm", telegram, nil, func(p *pipeline) error {
			for i := range n {
				if err := p.shop.place(ctx, fmt.Sprintf("S%d", i), int64(8_000_000+i)); err != nil {
					return err
				}
			}
			if _, err := p.emu.waitCount(ctx, 1, deliveryTimeout(1), nil); err != nil {
				return err
			}
			opened, err := r.openPauses(ctx, p.emu, n)
			if err != nil {
				return err
			}
			msgs, err := p.emu.waitCount(ctx, n, deliveryTimeout(n)+time.Duration(r.cfg.StormPauses)*(r.cfg.StormPause+r.cfg.StormGap), nil)
			if err != nil {
				return err
			}
			st := p.emu.emu.Stats()
			sends := sendTimes(msgs)
			var pauses []Span
			var paused time.Duration
			first := sends[0]
			for _, a := range p.emu.refusals() {
				if a.Status == http.StatusTooManyRequests {
					pauses = append(pauses, Span{From: a.At.Sub(first), To: a.At.Add(a.RetryAfter).Sub(first)})
					paused += a.RetryAfter
				}
			}
			active := sends[len(sends)-1].Sub(first) - paused
			f = RunFigures{
				Ours: float64(st.SentInAnyPause), Reference: float64(st.RateLimited), Ratio: math.NaN(),
				Extra: []string{
					fmt.Sprint(opened), fmt.Sprintf("%.0f", paused.Seconds()), fmt.Sprint(len(msgs)),
					fmt.Sprintf("%.1f", float64(len(msgs)-1)/active.Seconds()),
				},
			}
			r.report.Plots = append(r.report.Plots, Plot{
				Scenario: "4d",
				File:     "429-storm.png",
				Title:    fmt.Sprintf("Scenario 4d: 429 storm, %d bot-wide pauses (sent in any pause: %d)", len(pauses), st.SentInAnyPause),
				Caption: fmt.Sprintf("Messages the emulator accepted per half second, as msg/s, against the 30 msg/s limit; "+
					"shaded: the announced pauses (from each 429 to its retry_after). Requests inside a pause: %d; "+
					"429s answered: %d.", st.SentInAnyPause, st.RateLimited),
				Series: RateSeries{Sends: sends, Limit: telegram.BotRate, Bin: 500 * time.Millisecond, Pauses: pauses},
			})
			return nil
		})
		return f, err
	})
}

// openPauses opens the storm's pauses one after another: each waits
// StormGap, arms a bot-wide pause, waits for the 429 that announces it and
// for the pause to pass. It returns how many it opened. Sending must last
// long enough: a pause armed after the last of n messages is never
// announced.
func (r *runner) openPauses(ctx context.Context, emu *emulatorServer, n int) (int, error) {
	for i := range r.cfg.StormPauses {
		if err := pace(ctx, r.cfg.StormGap, time.Nanosecond); err != nil {
			return i, err
		}
		if emu.emu.Stats().Delivered >= int64(n) {
			return i, fmt.Errorf("all %d messages were sent before pause %d could be opened: raise StormOrders", n, i+1)
		}
		before := len(emu.refusals())
		if err := emu.emu.OpenPause(emulator.PauseRequest{Scope: emulator.ScopeBot, RetryAfter: int64(r.cfg.StormPause / time.Second)}); err != nil {
			return i, err
		}
		if err := waitFor(ctx, time.Minute, "for the 429 that opens a pause", func() bool { return len(emu.refusals()) > before }); err != nil {
			return i, err
		}
		if err := pace(ctx, r.cfg.StormPause, time.Nanosecond); err != nil {
			return i + 1, err
		}
	}
	return r.cfg.StormPauses, nil
}
