package system

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

// Channels returns the names of every delivery channel, in the default
// route order: telegram, max, email, sms.
func Channels() []string {
	var out []string
	for _, c := range notify.Channels() {
		out = append(out, string(c))
	}
	return out
}

// ChannelConsumerInfo returns the consumer of channel's workers
// (<channel>-worker).
func ChannelConsumerInfo(ctx context.Context, js natsjs.JetStream, channel string) (*natsjs.ConsumerInfo, error) {
	name := jetstream.ConsumerName(channel)
	c, err := js.Consumer(ctx, jetstream.StreamNotify, name)
	if err != nil {
		return nil, fmt.Errorf("reading consumer %s: %w", name, err)
	}
	return c.Info(ctx)
}

// Backlog is what a channel's consumer still has: messages not yet
// delivered to a worker and messages a worker holds unacknowledged.
type Backlog struct {
	Channel             string
	Pending, AckPending uint64
}

// Backlogs returns the backlog of every channel's consumer, in
// [Channels] order.
func Backlogs(ctx context.Context, js natsjs.JetStream) ([]Backlog, error) {
	var out []Backlog
	for _, ch := range Channels() {
		info, err := ChannelConsumerInfo(ctx, js, ch)
		if err != nil {
			return out, err
		}
		out = append(out, Backlog{Channel: ch, Pending: info.NumPending, AckPending: uint64(info.NumAckPending)})
	}
	return out, nil
}

// Empty reports whether no channel has anything pending or unacknowledged.
func Empty(bs []Backlog) bool {
	for _, b := range bs {
		if b.Pending > 0 || b.AckPending > 0 {
			return false
		}
	}
	return true
}

// BacklogText describes the non-empty backlogs, "none" when all are empty.
func BacklogText(bs []Backlog) string {
	s := ""
	for _, b := range bs {
		if b.Pending == 0 && b.AckPending == 0 {
			continue
		}
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("%s %d pending, %d unacknowledged", b.Channel, b.Pending, b.AckPending)
	}
	if s == "" {
		return "none"
	}
	return s
}

// SubjectCount returns how many messages of stream match filter.
func SubjectCount(ctx context.Context, js natsjs.JetStream, stream, filter string) (uint64, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("reading stream %s: %w", stream, err)
	}
	info, err := st.Info(ctx, natsjs.WithSubjectFilter(filter))
	if err != nil {
		return 0, fmt.Errorf("reading stream %s: %w", stream, err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n, nil
}

// channelFilters are the subject filters of every channel's notifications.
func channelFilters() []string {
	var out []string
	for _, ch := range Channels() {
		out = append(out, jetstream.Subject(ch, ">"))
	}
	return out
}

// StreamNotification is a notification stored in NOTIFY: an original the
// publisher stored on the first channel of its route, or a copy a worker
// handed to the next channel (FallbackFrom set).
type StreamNotification struct {
	Seq       uint64
	Subject   string
	Channel   string
	Recipient string
	Key       string
	// At is when NOTIFY stored it.
	At time.Time
	// FallbackFrom and FallbackReason are the channel it came from and
	// why; empty for an original.
	FallbackFrom, FallbackReason string
}

// Notifications reads the headers of every notification in NOTIFY, on
// every channel, in stream order.
func Notifications(ctx context.Context, js natsjs.JetStream) ([]StreamNotification, error) {
	var out []StreamNotification
	err := readStream(ctx, js, channelFilters(), true, func() { out = out[:0] }, func(m natsjs.Msg, seq uint64) error {
		ch, rcpt, err := jetstream.ParseSubject(m.Subject())
		if err != nil {
			return err
		}
		var at time.Time
		if meta, err := m.Metadata(); err == nil {
			at = meta.Timestamp
		}
		out = append(out, StreamNotification{Seq: seq, Subject: m.Subject(), Channel: ch, Recipient: rcpt, At: at,
			Key:            m.Headers().Get(jetstream.HeaderKey),
			FallbackFrom:   m.Headers().Get(jetstream.HeaderFallbackFrom),
			FallbackReason: m.Headers().Get(jetstream.HeaderFallbackReason)})
		return nil
	})
	return out, err
}

// Event is an event of the pipeline (notify.events.delivered, .fallback,
// .dead) with its sequence in NOTIFY.
type Event struct {
	Seq uint64
	delivery.Event
}

// Events reads every delivered, fallback and dead event in NOTIFY, in
// stream order.
func Events(ctx context.Context, js natsjs.JetStream) ([]Event, error) {
	var out []Event
	filters := []string{jetstream.SubjectDelivered, jetstream.SubjectFallback, jetstream.SubjectDead}
	err := readStream(ctx, js, filters, false, func() { out = out[:0] }, func(m natsjs.Msg, seq uint64) error {
		var ev delivery.Event
		if err := json.Unmarshal(m.Data(), &ev); err != nil {
			return fmt.Errorf("event #%d on %s is not JSON: %w", seq, m.Subject(), err)
		}
		out = append(out, Event{Seq: seq, Event: ev})
		return nil
	})
	return out, err
}

// readAttempts bounds how often readStream starts over after JetStream
// failed to answer, readRetry the pause in between.
const (
	readAttempts = 20
	readRetry    = 250 * time.Millisecond
)

// handlerError is an error of readStream's fn: the messages are wrong, and
// reading them again would not help.
type handlerError struct{ err error }

func (e handlerError) Error() string { return e.err.Error() }
func (e handlerError) Unwrap() error { return e.err }

// readStream reads every message of NOTIFY matching filters with an
// ordered consumer, in stream order, handing each to fn. When JetStream
// does not answer — on a cluster, a leader that has just changed answers
// "no responders" or nothing for a moment (found by the demo on a
// cluster) — it starts over, calling reset first, up to readAttempts
// times while ctx lasts.
func readStream(ctx context.Context, js natsjs.JetStream, filters []string, headersOnly bool, reset func(), fn func(m natsjs.Msg, seq uint64) error) error {
	var err error
	for range readAttempts {
		reset()
		err = readStreamOnce(ctx, js, filters, headersOnly, func(m natsjs.Msg, seq uint64) error {
			if err := fn(m, seq); err != nil {
				return handlerError{err}
			}
			return nil
		})
		var he handlerError
		if err == nil || errors.As(err, &he) || ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(readRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
	return err
}

// readStreamOnce makes one attempt of readStream.
func readStreamOnce(ctx context.Context, js natsjs.JetStream, filters []string, headersOnly bool, fn func(m natsjs.Msg, seq uint64) error) error {
	var total uint64
	for _, f := range filters {
		n, err := SubjectCount(ctx, js, jetstream.StreamNotify, f)
		if err != nil {
			return err
		}
		total += n
	}
	if total == 0 {
		return nil
	}
	c, err := js.OrderedConsumer(ctx, jetstream.StreamNotify, natsjs.OrderedConsumerConfig{
		FilterSubjects: slices.Clone(filters), HeadersOnly: headersOnly,
	})
	if err != nil {
		return fmt.Errorf("reading stream %s: %w", jetstream.StreamNotify, err)
	}
	var read uint64
	for read < total {
		batch, err := c.Fetch(1000, natsjs.FetchMaxWait(5*time.Second))
		if err != nil {
			return fmt.Errorf("reading stream %s: %w", jetstream.StreamNotify, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			read++
			meta, err := m.Metadata()
			if err != nil {
				return err
			}
			if err := fn(m, meta.Sequence.Stream); err != nil {
				return err
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, natsjs.ErrNoMessages) {
			return fmt.Errorf("reading stream %s: %w", jetstream.StreamNotify, err)
		}
		if n == 0 {
			return fmt.Errorf("reading stream %s: %d of %d messages read, then nothing", jetstream.StreamNotify, read, total)
		}
	}
	return nil
}
