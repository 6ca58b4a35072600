package delivery

import (
	"context"
	"time"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// pollStats reads the queue depth (the consumer's pending and ack-pending
// messages) and the dead-letter count from JetStream every StatsInterval.
func (w *Worker) pollStats(ctx context.Context) {
	t := time.NewTicker(w.cfg.StatsInterval)
	defer t.Stop()
	for {
		w.pollOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *Worker) pollOnce(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.StatsInterval)
	defer cancel()
	if info, err := w.res.Consumer.Info(ctx); err == nil {
		depth := int64(info.NumPending) + int64(info.NumAckPending)
		w.queueDepth.Store(depth)
		w.m.queueDepth.Set(float64(depth))
	}
	if s, err := w.js.Stream(ctx, jetstream.StreamDead); err == nil {
		if info, err := s.Info(ctx); err == nil {
			w.dlqSize.Store(int64(info.State.Msgs))
			w.m.deadLetters.Set(float64(info.State.Msgs))
		}
	}
}
