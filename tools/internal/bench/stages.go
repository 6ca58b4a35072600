package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// storedWait bounds how long storedTimes waits for a fetch that finds no
// message before it gives up on the keys still missing.
const storedWait = 5 * time.Second

// storedTimes reads the Telegram notifications in NOTIFY from the first
// and returns, for each idempotency key in want, the instant the server
// stored it (its stream timestamp, on this machine's clock). It splits a
// notification's commit → send time into the publisher's part (commit →
// stored) and the worker's (stored → sent). Every key of want must be
// there: a missing one is an error naming how many.
func storedTimes(ctx context.Context, js natsjs.JetStream, want map[string]bool) (map[string]time.Time, error) {
	c, err := js.OrderedConsumer(ctx, jetstream.StreamNotify, natsjs.OrderedConsumerConfig{
		FilterSubjects: []string{jetstream.TelegramFilter},
	})
	if err != nil {
		return nil, fmt.Errorf("reading NOTIFY's timestamps: %w", err)
	}
	stored := make(map[string]time.Time, len(want))
	for len(stored) < len(want) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		batch, err := c.Fetch(1000, natsjs.FetchMaxWait(storedWait))
		if err != nil {
			return nil, fmt.Errorf("reading NOTIFY's timestamps: %w", err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				return nil, fmt.Errorf("reading NOTIFY's timestamps: %w", err)
			}
			if key := m.Headers().Get(nats.MsgIdHdr); want[key] {
				stored[key] = md.Timestamp
			}
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("reading NOTIFY's timestamps: %w", err)
		}
		if got == 0 {
			return nil, fmt.Errorf("NOTIFY holds %d of the %d notifications placed", len(stored), len(want))
		}
	}
	return stored, nil
}
