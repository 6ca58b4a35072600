package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// idleTimeout bounds the wait for the next message of a scan that the
// server said has more to deliver.
const idleTimeout = 10 * time.Second

// errStop ends a scan early without an error.
var errStop = errors.New("stop scanning")

// scanRange reads the messages of stream that cfg selects, as they are when
// the scan starts, with an ordered consumer, and calls fn for each in stream
// order. fn returns errStop to end the scan early. Messages stored after the
// start are not read, so a scan ends even while the stream grows.
func scanRange(ctx context.Context, js natsjs.JetStream, stream string, cfg natsjs.OrderedConsumerConfig, fn func(natsjs.Msg) error) error {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("reading stream %s: %w", stream, err)
	}
	info := s.CachedInfo()
	if info.State.Msgs == 0 {
		return nil
	}
	last := info.State.LastSeq
	c, err := orderedConsumer(ctx, js, s, cfg)
	if err != nil {
		return fmt.Errorf("reading stream %s: %w", stream, err)
	}
	defer dispose(ctx, js, stream, c)
	ci, err := c.Info(ctx)
	if err != nil {
		return fmt.Errorf("reading stream %s: %w", stream, err)
	}
	if ci.NumPending == 0 {
		return nil
	}
	it, err := c.Messages(natsjs.PullMaxMessages(1024))
	if err != nil {
		return fmt.Errorf("reading stream %s: %w", stream, err)
	}
	defer it.Stop()
	for {
		next, cancel := context.WithTimeout(ctx, idleTimeout)
		m, err := it.Next(natsjs.NextContext(next))
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			return fmt.Errorf("reading stream %s: no message for %v although more were pending", stream, idleTimeout)
		case errors.Is(err, natsjs.ErrMsgIteratorClosed):
			return nil
		case err != nil:
			return fmt.Errorf("reading stream %s: %w", stream, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("reading stream %s: %w", stream, err)
		}
		if meta.Sequence.Stream > last {
			return nil
		}
		if err := fn(m); err != nil {
			if errors.Is(err, errStop) {
				return nil
			}
			return err
		}
		if meta.NumPending == 0 || meta.Sequence.Stream == last {
			return nil
		}
	}
}

// consumerIdle is how long the server keeps an ordered consumer this
// package forgot to delete (it deletes every one it made when done).
const consumerIdle = 30 * time.Second

// orderedConsumer creates an ordered consumer on s that the server reaps
// soon after it is left alone.
func orderedConsumer(ctx context.Context, js natsjs.JetStream, s natsjs.Stream, cfg natsjs.OrderedConsumerConfig) (natsjs.Consumer, error) {
	if cfg.InactiveThreshold == 0 {
		cfg.InactiveThreshold = consumerIdle
	}
	return s.OrderedConsumer(ctx, cfg)
}

// dispose deletes an ordered consumer once it has served.
func dispose(ctx context.Context, js natsjs.JetStream, stream string, c natsjs.Consumer) {
	info := c.CachedInfo()
	if info == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = js.DeleteConsumer(ctx, stream, info.Name)
}
