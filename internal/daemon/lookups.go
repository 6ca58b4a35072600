package daemon

import (
	"context"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// foundObjects remembers the streams and consumers that Wait's attempts
// have found, so that an attempt cut short by an election does not look
// them up again: each attempt only has to get further than the last, and
// no attempt needs more time than one lookup takes (the long chaos run on
// the cluster: a worker started amid node faults looked its objects up
// for 53 s, each attempt starting over and, timed out, given twice the
// time of the one before, up to 16 s spent on one request lost in an
// election). It serves one goroutine at a time.
type foundObjects struct {
	natsjs.JetStream
	streams   map[string]natsjs.Stream
	consumers map[[2]string]natsjs.Consumer
}

// newFoundObjects wraps js; it remembers nothing yet.
func newFoundObjects(js natsjs.JetStream) *foundObjects {
	return &foundObjects{JetStream: js, streams: map[string]natsjs.Stream{}, consumers: map[[2]string]natsjs.Consumer{}}
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
