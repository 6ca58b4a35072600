package workerd

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tgnotify/tgnotify/internal/daemon"
	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// electingKV answers its first fail bucket lookups as JetStream does while
// the bucket's stream elects a leader.
type electingKV struct {
	natsjs.JetStream
	fail, calls atomic.Int32
}

func (j *electingKV) KeyValue(ctx context.Context, bucket string) (natsjs.KeyValue, error) {
	if j.calls.Add(1) <= j.fail.Load() {
		return nil, errors.New("nats: API error: code=503 err_code=10008 description=JetStream system temporarily unavailable")
	}
	return j.JetStream.KeyValue(ctx, bucket)
}

// A bucket that does not answer right after the objects were read is
// opened again, instead of ending the worker's start (the long cluster
// chaos run: an SMS worker exited with "opening bucket notify_delivered:
// context deadline exceeded").
func TestOpenWorkerRetriesWhileJetStreamElects(t *testing.T) {
	_, plain := natstest.Start(t).Connect(t)
	settings := jetstream.DefaultSettings()
	decl, err := jetstream.Declare(settings).ForWorker("telegram")
	if err != nil {
		t.Fatal(err)
	}
	objects, err := daemon.NewObjects(decl, daemon.JetStreamFlags{Provision: true, Settings: settings}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	js := &electingKV{JetStream: plain}
	js.fail.Store(2)
	res, err := openWorker(t.Context(), js, objects, settings.Names(), "telegram", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("openWorker = %v, want the resources once the bucket answers", err)
	}
	if res.Consumer == nil || res.Delivered == nil || js.calls.Load() <= 2 {
		t.Fatalf("resources %+v after %d bucket lookups; want them opened after the 2 failures", res, js.calls.Load())
	}

	ctx, cancel := context.WithCancel(t.Context())
	js.calls.Store(0)
	js.fail.Store(1 << 30)
	cancel()
	if _, err := openWorker(ctx, js, objects, settings.Names(), "telegram", slog.New(slog.DiscardHandler)); !errors.Is(err, context.Canceled) {
		t.Errorf("openWorker with its context ended = %v, want context.Canceled", err)
	}
}
