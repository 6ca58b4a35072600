package publisher

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// learnAtomic reads NOTIFY's configuration once, not before every round:
// a read waits up to a second, and the rounds that follow a stream leader
// change come every few hundred milliseconds. It reads again only after
// NOTIFY refused an atomic batch (or a read failed), and then at most once
// per atomicRecheckInterval.
func TestLearnAtomicReadsOnceUntilARefusal(t *testing.T) {
	ctx := context.Background()
	srv := natstest.Start(t)
	nc, js := srv.Connect(t)
	if err := jetstream.ProvisionStreams(ctx, js, jetstream.StreamSettings{Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	var now atomic.Int64
	now.Store(time.Date(2026, 12, 7, 18, 0, 0, 0, time.UTC).UnixNano())
	p, err := Open(ctx, filepath.Join(t.TempDir(), "app.db"), nc, Options{Now: func() time.Time { return time.Unix(0, now.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	cjs := &natstest.CountingJS{JetStream: p.js}
	p.js = cjs
	advance := func(d time.Duration) { now.Add(int64(d)) }

	p.learnAtomic(ctx)
	if !p.atomicOK.Load() || cjs.Lookups.Load() != 1 {
		t.Fatalf("after the first read: atomic %v, %d lookups; want true, 1", p.atomicOK.Load(), cjs.Lookups.Load())
	}
	for range 5 {
		advance(2 * atomicRecheckInterval)
		p.learnAtomic(ctx)
	}
	if got := cjs.Lookups.Load(); got != 1 {
		t.Fatalf("%d lookups over five rounds after a successful read, want 1", got)
	}

	// A refusal: read again at the next round, at most once per interval.
	p.atomicOK.Store(false)
	p.atomicRefused.Store(true)
	advance(2 * atomicRecheckInterval)
	p.learnAtomic(ctx)
	if !p.atomicOK.Load() || cjs.Lookups.Load() != 2 {
		t.Fatalf("after a refusal: atomic %v, %d lookups; want true (the stream still takes them), 2", p.atomicOK.Load(), cjs.Lookups.Load())
	}
	p.atomicOK.Store(false)
	p.atomicRefused.Store(true)
	advance(atomicRecheckInterval / 2)
	p.learnAtomic(ctx)
	if p.atomicOK.Load() || cjs.Lookups.Load() != 2 {
		t.Fatalf("a second refusal within the interval: atomic %v, %d lookups; want false, 2", p.atomicOK.Load(), cjs.Lookups.Load())
	}
	advance(atomicRecheckInterval)
	p.learnAtomic(ctx)
	if !p.atomicOK.Load() || cjs.Lookups.Load() != 3 {
		t.Fatalf("after the interval: atomic %v, %d lookups; want true, 3", p.atomicOK.Load(), cjs.Lookups.Load())
	}
}
