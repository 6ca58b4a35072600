package daemon_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tgnotify/tgnotify/internal/daemon"
	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// electingStream leaves the lookups of one stream unanswered until the
// election ends, as a stream does while it elects a leader (copies of the
// lookup too), and counts every lookup.
type electingStream struct {
	natsjs.JetStream
	electing string
	ends     time.Time

	mu        sync.Mutex
	streams   map[string]int
	consumers int
}

func (j *electingStream) Stream(ctx context.Context, name string) (natsjs.Stream, error) {
	j.mu.Lock()
	j.streams[name]++
	j.mu.Unlock()
	if name == j.electing && time.Now().Before(j.ends) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return j.JetStream.Stream(ctx, name)
}

func (j *electingStream) Consumer(ctx context.Context, stream, name string) (natsjs.Consumer, error) {
	j.mu.Lock()
	j.consumers++
	j.mu.Unlock()
	return j.JetStream.Consumer(ctx, stream, name)
}

// An attempt of Wait that runs out of time on one stream (its election
// outlasting the attempt's bound, copies of the lookup and all) leaves the
// next attempt only the objects from that stream on: the ones found are
// not looked up again.
func TestWaitDoesNotLookUpWhatItFound(t *testing.T) {
	_, plain := natstest.Start(t).Connect(t)
	settings := jetstream.DefaultSettings()
	decl, err := jetstream.Declare(settings).ForWorker("telegram")
	if err != nil {
		t.Fatal(err)
	}
	if len(decl.Streams) < 2 || len(decl.Consumers) == 0 {
		t.Fatalf("the telegram worker's declaration has %d streams and %d consumers, want at least 2 and 1", len(decl.Streams), len(decl.Consumers))
	}
	objects, err := daemon.NewObjects(decl, daemon.JetStreamFlags{Provision: true, Settings: settings}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if err := objects.Wait(t.Context(), plain); err != nil {
		t.Fatalf("creating the objects: %v", err)
	}

	first, electing := decl.Streams[0].Name, decl.Streams[1].Name
	// The election outlasts the first attempt (2 s).
	js := &electingStream{JetStream: plain, electing: electing, ends: time.Now().Add(2100 * time.Millisecond), streams: map[string]int{}}
	if err := objects.Wait(t.Context(), js); err != nil {
		t.Fatalf("Wait = %v, want nil once %s answers", err, electing)
	}
	if js.streams[first] != 1 || js.streams[electing] < 2 {
		t.Errorf("looked up %s %d times and %s %d times, want 1 (found by the first attempt) and at least 2 (unanswered, then found)",
			first, js.streams[first], electing, js.streams[electing])
	}
	if js.consumers != len(decl.Consumers) {
		t.Errorf("%d consumer lookups, want %d: one each, by the attempt that got to them", js.consumers, len(decl.Consumers))
	}
}
