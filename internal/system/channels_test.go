package system_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/system"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// noLeaderJS answers its first fail stream lookups with "no responders",
// as a clustered stream does for a moment after its leader changed.
type noLeaderJS struct {
	natsjs.JetStream
	fail, calls atomic.Int32
}

func (j *noLeaderJS) Stream(ctx context.Context, name string) (natsjs.Stream, error) {
	if j.calls.Add(1) <= j.fail.Load() {
		return nil, nats.ErrNoResponders
	}
	return j.JetStream.Stream(ctx, name)
}

// Reading the events starts over while JetStream does not answer, and
// returns each event once (found by the demo on a cluster: "reading stream
// NOTIFY: nats: no responders available for request" right after a leader
// change failed its report).
func TestEventsReadAgainAfterNoResponders(t *testing.T) {
	_, plain := natstest.Start(t).Connect(t)
	ctx := t.Context()
	if err := jetstream.ProvisionStreams(ctx, plain, jetstream.StreamSettings{}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"order:1:accepted", "order:2:accepted"} {
		b, err := json.Marshal(delivery.Event{Key: key, Event: delivery.EventDelivered, Channel: "telegram", At: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := plain.Publish(ctx, jetstream.SubjectDelivered, b); err != nil {
			t.Fatal(err)
		}
	}
	js := &noLeaderJS{JetStream: plain}
	js.fail.Store(3)
	evs, err := system.Events(ctx, js)
	if err != nil {
		t.Fatalf("Events = %v, want the events once JetStream answers", err)
	}
	if len(evs) != 2 || evs[0].Key != "order:1:accepted" || evs[1].Key != "order:2:accepted" || js.calls.Load() <= 3 {
		t.Fatalf("events %+v after %d lookups; want the two, once each, after the 3 failures", evs, js.calls.Load())
	}

	js.calls.Store(0)
	js.fail.Store(1 << 30)
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := system.Events(short, js); err == nil {
		t.Error("Events succeeded although JetStream never answered")
	}
}
