package daemon

import (
	"context"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// foundObjects remembers the streams and consumers that Wait's attempts
// have found, so that an attempt cut short by an election does not look
// them up again: each attempt only has to get further than the last, and
// no attempt needs more time than one lookup takes (the long chaos run on
// the cluster: a worker started amid node faults looked its objects up
// for 53 s, each attempt starting over and, timed out, given twice the
// time of the one before, up to 16 s spent on one request lost in an
// election). Its lookups are hedged (Hedged). It serves one goroutine at a
// time.
type foundObjects struct {
	natsjs.JetStream
	streams   map[string]natsjs.Stream
	consumers map[[2]string]natsjs.Consumer
}

// newFoundObjects wraps js; it remembers nothing yet.
func newFoundObjects(js natsjs.JetStream) *foundObjects {
	return &foundObjects{JetStream: Hedged(js), streams: map[string]natsjs.Stream{}, consumers: map[[2]string]natsjs.Consumer{}}
}

// Stream returns the stream found before, or looks it up and remembers it
// if it exists.
func (f *foundObjects) Stream(ctx context.Context, name string) (natsjs.Stream, error) {
	if s, ok := f.streams[name]; ok {
		return s, nil
	}
	s, err := f.JetStream.Stream(ctx, name)
	if err == nil {
		f.streams[name] = s
	}
	return s, err
}

// Consumer returns the consumer found before, or looks it up and remembers
// it if it exists.
func (f *foundObjects) Consumer(ctx context.Context, stream, name string) (natsjs.Consumer, error) {
	key := [2]string{stream, name}
	if c, ok := f.consumers[key]; ok {
		return c, nil
	}
	c, err := f.JetStream.Consumer(ctx, stream, name)
	if err == nil {
		f.consumers[key] = c
	}
	return c, err
}

// Hedged wraps js so that its lookups of streams, consumers and KV buckets
// that go unanswered are sent again every jetstream.HedgeEvery beside the
// first (jetstream.Hedge): a request lost in an election is never
// answered, while its copy sent after the election ends is, so a daemon's
// start is ready within jetstream.HedgeEvery of the stream's new leader
// instead of when its attempt's bound runs out (the long chaos run on the
// cluster on ffd349f: worker starts of 10.6 s, three attempts of 2, 4 and
// 4 s, while NOTIFY's elections took 5.7 s at the median). Lookups only
// read, so their copies change nothing; everything else goes to js as it
// is.
func Hedged(js natsjs.JetStream) natsjs.JetStream {
	if h, ok := js.(hedgedJS); ok {
		return h
	}
	return hedgedJS{js}
}

type hedgedJS struct{ natsjs.JetStream }

func (h hedgedJS) Stream(ctx context.Context, name string) (natsjs.Stream, error) {
	return jetstream.Hedge(ctx, jetstream.HedgeEvery, func(ctx context.Context) (natsjs.Stream, error) { return h.JetStream.Stream(ctx, name) })
}

func (h hedgedJS) Consumer(ctx context.Context, stream, name string) (natsjs.Consumer, error) {
	return jetstream.Hedge(ctx, jetstream.HedgeEvery, func(ctx context.Context) (natsjs.Consumer, error) { return h.JetStream.Consumer(ctx, stream, name) })
}

func (h hedgedJS) KeyValue(ctx context.Context, bucket string) (natsjs.KeyValue, error) {
	return jetstream.Hedge(ctx, jetstream.HedgeEvery, func(ctx context.Context) (natsjs.KeyValue, error) { return h.JetStream.KeyValue(ctx, bucket) })
}
