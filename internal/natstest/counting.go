package natstest

import (
	"context"
	"sync/atomic"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// CountingJS is a JetStream context that counts the stream lookups
// (Stream) made through it: tests of code that must not look a stream up
// too often use it.
type CountingJS struct {
	natsjs.JetStream
	// Lookups is the number of Stream calls so far.
	Lookups atomic.Int64
}

// Stream counts the lookup and makes it.
func (c *CountingJS) Stream(ctx context.Context, name string) (natsjs.Stream, error) {
	c.Lookups.Add(1)
	return c.JetStream.Stream(ctx, name)
}
