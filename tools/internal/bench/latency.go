package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tgnotify/tgnotify/internal/shop"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/outbox"
	"github.com/tgnotify/tgnotify/pkg/publisher"
)

// Latency goals of issue 7.
const (
	pubAckGoal   = 10 * time.Millisecond
	deliveryGoal = 25 * time.Millisecond
)

// waitOne bounds the wait for one order's PubAck or delivery.
const waitOne = 30 * time.Second

// latency is scenario 3: (a) commit → PubAck while idle, on the default
// server and on one that fsyncs every write; (b) commit → sendMessage.
func (r *runner) latency(ctx context.Context) []*Result {
	var out []*Result
	for _, v := range []struct {
		id     string
		sync   serverSync
		orders int
		runs   int
	}{
		{"3a", syncDefault, r.cfg.PubAckOrders, r.cfg.Runs},
		{"3a′", syncAlways, r.cfg.PubAckSyncOrders, r.cfg.SyncRuns},
	} {
		res := &Result{
			ID: v.id, Title: "Commit → PubAck while idle, " + v.sync.String(),
			Ours: "p99 commit → PubAck", Reference: "the goal",
			Unit: "ms", RefUnit: "ms",
			Goal:         Goal{Text: "p99 ≤ 10 ms", AtMost: true, Limit: 1},
			ExtraColumns: []string{"p50 (ms)", "max (ms)", "raw publish→PubAck p50 (ms)", "raw publish→PubAck p99 (ms)"},
			Method: fmt.Sprintf("A fresh nats-server process per run (%s) and `pkg/publisher` running in this process "+
				"with default options (1 ms commit polling). The shop places %d orders one at a time (the first %d "+
				"not counted): commit, wait for the order's PubAck, then idle 5–15 ms. Latency: from `PlaceOrder` "+
				"returning (the commit is done) to the publisher's `AfterAck` hook receiving the row, which runs after "+
				"the PubAck reached the publisher's ack stage (so it is, if anything, late). Reference: the goal; for "+
				"context, each order is followed by one raw synchronous JetStream publish of the same message to the "+
				"same stream (`js.PublishMsg`, publish → PubAck), whose p50/p99 are the floor the server sets.",
				v.sync, v.orders, r.cfg.LatencyWarmup),
		}
		out = append(out, r.measure(ctx, res, v.runs, func(ctx context.Context, run int) (RunFigures, error) {
			return r.pubAckRun(ctx, v.sync, run, v.orders)
		}))
	}
	res := &Result{
		ID: "3b", Title: "Commit → sendMessage, publisher + worker running",
		Ours: "p99 commit → sendMessage", Reference: "the goal",
		Unit: "ms", RefUnit: "ms",
		Goal:         Goal{Text: "p99 ≤ 25 ms", AtMost: true, Limit: 1},
		ExtraColumns: []string{"p50 (ms)", "max (ms)"},
		Method: fmt.Sprintf("A fresh stack per run: nats-server (%s), `bin/publisher` and `bin/telegram-worker` "+
			"(default settings) as processes, the emulator with its limits off in this process. The shop places %d "+
			"orders to distinct chats one at a time (the first %d not counted): commit, wait until the emulator "+
			"accepted the message, then idle 40–60 ms, which keeps the pace under the worker's own 30 msg/s limit so "+
			"that its token bucket never delays a send. Latency: from `PlaceOrder` returning to the emulator's "+
			"timestamp of the accepted `sendMessage` (same clock).", syncDefault, r.cfg.DeliveryOrders, r.cfg.LatencyWarmup),
	}
	out = append(out, r.measure(ctx, res, r.cfg.Runs, r.deliveryRun))
	return out
}

// latencyFigures turns samples into a run's figures against goal.
func latencyFigures(samples []time.Duration, goal time.Duration) RunFigures {
	p99 := Percentile(samples, 99)
	return RunFigures{
		Ours: ms(p99), Reference: ms(goal), Ratio: ratio(ms(p99), ms(goal)),
		Extra: []string{fmt.Sprintf("%.2f", ms(Percentile(samples, 50))), fmt.Sprintf("%.2f", ms(Percentile(samples, 100)))},
	}
}

// pace waits a random duration in [base, base+spread), or until ctx ends.
func pace(ctx context.Context, base, spread time.Duration) error {
	t := time.NewTimer(base + rand.N(spread))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ackedRow is a row the publisher's AfterAck hook received, and when.
type ackedRow struct {
	key string
	at  time.Time
}

func (r *runner) pubAckRun(ctx context.Context, sync serverSync, run, orders int) (f RunFigures, err error) {
	err = r.withStack(ctx, "pubacks", sync, func(st *stack) error {
		if err := st.provision(ctx); err != nil {
			return err
		}
		s, err := openShop(ctx, filepath.Join(st.dir, "shop.db"))
		if err != nil {
			return err
		}
		defer s.close()
		nc, err := connect(ctx, st.natsURL, "bench-publisher")
		if err != nil {
			return err
		}
		defer nc.Close()
		acks := make(chan ackedRow, 1024)
		p, err := publisher.Open(ctx, s.path, nc, publisher.Options{
			Registerer: prometheus.NewRegistry(),
			AfterAck: func(rows []outbox.Row) error {
				at := time.Now()
				for _, row := range rows {
					acks <- ackedRow{row.Key, at}
				}
				return nil
			},
		})
		if err != nil {
			return err
		}
		defer p.Close()
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- p.Run(runCtx) }()
		defer func() { stop(); <-done }()
		if err := waitFor(ctx, readyTimeout, "for the publisher to lead", p.IsLeader); err != nil {
			return err
		}

		var lat, raw []time.Duration
		for i := range orders {
			id, chat := fmt.Sprintf("L%d-%d", run, i), int64(1000+i)
			if err := s.place(ctx, id, chat); err != nil {
				return err
			}
			committed := time.Now()
			at, err := waitAck(ctx, acks, shop.NotificationKey(id))
			if err != nil {
				return err
			}
			// The reference: the same message published straight to the
			// stream, under another id so it is not a duplicate.
			note := benchNotification(id, chat, time.Now().UTC())
			payload, err := note.MarshalPayload()
			if err != nil {
				return err
			}
			msg := jetstream.NotificationMsg(chat, "raw:"+note.Key, note.CreatedAt, notify.PayloadContentType, payload)
			t0 := time.Now()
			if _, err := st.js.PublishMsg(ctx, msg); err != nil {
				return fmt.Errorf("raw publish: %w", err)
			}
			rawLat := time.Since(t0)
			if i >= r.cfg.LatencyWarmup {
				lat = append(lat, at.Sub(committed))
				raw = append(raw, rawLat)
			}
			if err := pace(ctx, 5*time.Millisecond, 10*time.Millisecond); err != nil {
				return err
			}
		}
		f = latencyFigures(lat, pubAckGoal)
		f.Extra = append(f.Extra, fmt.Sprintf("%.2f", ms(Percentile(raw, 50))), fmt.Sprintf("%.2f", ms(Percentile(raw, 99))))
		return nil
	})
	return f, err
}

// waitAck waits for the PubAck of key, skipping any other row.
func waitAck(ctx context.Context, acks <-chan ackedRow, key string) (time.Time, error) {
	timeout := time.NewTimer(waitOne)
	defer timeout.Stop()
	for {
		select {
		case a := <-acks:
			if a.key == key {
				return a.at, nil
			}
		case <-timeout.C:
			return time.Time{}, fmt.Errorf("no PubAck for %s within %v", key, waitOne)
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

func (r *runner) deliveryRun(ctx context.Context, run int) (f RunFigures, err error) {
	err = r.withStack(ctx, "delivery", syncDefault, func(st *stack) error {
		if err := st.provision(ctx); err != nil {
			return err
		}
		if err := st.startEmulator(emulator.Limits{}); err != nil {
			return err
		}
		// The shop creates the schema before the publisher opens the file.
		s, err := openShop(ctx, filepath.Join(st.dir, "shop.db"))
		if err != nil {
			return err
		}
		defer s.close()
		if err := st.startPublisher(ctx, r.bin("publisher"), s.path); err != nil {
			return err
		}
		if err := st.startWorker(ctx, r.bin("telegram-worker")); err != nil {
			return err
		}
		var lat []time.Duration
		for i := range r.cfg.DeliveryOrders {
			chat := int64(5_000_000 + i)
			if err := s.place(ctx, fmt.Sprintf("E%d-%d", run, i), chat); err != nil {
				return err
			}
			committed := time.Now()
			at, err := st.emu.waitDelivered(ctx, chat)
			if err != nil {
				return err
			}
			if i >= r.cfg.LatencyWarmup {
				lat = append(lat, at.Sub(committed))
			}
			if err := pace(ctx, 40*time.Millisecond, 20*time.Millisecond); err != nil {
				return err
			}
		}
		f = latencyFigures(lat, deliveryGoal)
		return nil
	})
	return f, err
}

// waitDelivered waits until a message to chat was accepted and returns the
// emulator's time of the first one.
func (s *emulatorServer) waitDelivered(ctx context.Context, chat int64) (time.Time, error) {
	timeout := time.NewTimer(waitOne)
	defer timeout.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if m := s.emu.ChatMessages(chat); len(m) > 0 {
			return m[0].Time, nil
		}
		select {
		case <-s.wake:
		case <-tick.C:
		case <-timeout.C:
			return time.Time{}, errors.New("no sendMessage for chat " + fmt.Sprint(chat) + " within " + waitOne.String())
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}
