package publisher_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

const atomicBatchesMetric = "tgnotify_publisher_atomic_batches_total"

// enqueueUntil enqueues notifications in transactions of perTx rows from
// *next on, each stored before the next is written, until done reports
// true or tries transactions are written; it returns whether done did.
func (e *env) enqueueUntil(t *testing.T, next *int, perTx, chats, tries int, done func() bool) bool {
	t.Helper()
	for range tries {
		if done() {
			return true
		}
		e.enqueue(t, *next, *next+perTx, chats, perTx)
		*next += perTx
		want := uint64(*next)
		waitFor(t, 30*time.Second, func() bool { return streamCount(e.js) >= want }, fmt.Sprintf("the first %d rows stored", want))
	}
	return done()
}

// TestFreshRowsGoInAtomicBatchesAndSurviveACrash: on a NOTIFY with one
// replica, a transaction of many rows committed after the publisher caught
// up goes as atomic batches. When the publisher dies before marking them,
// the next one finds them pending but not fresh (they were there before it
// caught up), publishes them in fast-ingest batches, which the stream
// de-duplicates (an atomic batch would be refused whole), and its own
// fresh rows go atomically again.
func TestFreshRowsGoInAtomicBatchesAndSurviveACrash(t *testing.T) {
	const perTx, chats = 100, 7
	e := newEnv(t)
	transports[0].prepare(t, e)

	var armed atomic.Bool
	release := make(chan struct{})
	var releaseOnce sync.Once
	opts := testOptions(nil)
	opts.AfterAck = func([]outbox.Row) error {
		if armed.Load() {
			<-release
			return errCrash
		}
		return nil
	}
	reg := prometheus.NewRegistry()
	opts.Registerer = reg
	first := e.start(t, opts)
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })

	e.enqueue(t, 0, 1, chats, 1)
	next := 1
	waitFor(t, 10*time.Second, func() bool { return e.pending(t) == 0 }, "the first row marked")
	armed.Store(true) // from here on nothing is marked
	atomicSeen := func() bool { return metric(t, reg, atomicBatchesMetric) >= 1 }
	if !e.enqueueUntil(t, &next, perTx, chats, 20, atomicSeen) {
		t.Fatalf("%d rows stored in transactions of %d, none in an atomic batch", next, perTx)
	}
	if got := e.pending(t); got != int64(next-1) {
		t.Fatalf("%d rows pending, want the %d after the first", got, next-1)
	}
	checkOnceInOrder(t, e.js, next, chats)
	for _, m := range streamMsgs(t, e.js) {
		if id := m.header.Get(jetstream.HeaderMsgID); id != m.key {
			t.Fatalf("message %d: Nats-Msg-Id %q, want the key %q", m.seq, id, m.key)
		}
	}
	releaseOnce.Do(func() { close(release) })
	waitFor(t, 30*time.Second, first.exited, "the first publisher to crash")
	if err := first.stop(); !errors.Is(err, errCrash) {
		t.Fatalf("Run returned %v, want the crash", err)
	}

	reg2 := prometheus.NewRegistry()
	second := e.start(t, testOptions(reg2))
	waitFor(t, 60*time.Second, func() bool { return e.pending(t) == 0 }, "the second publisher marks the rows the first left")
	checkOnceInOrder(t, e.js, next, chats)
	if got := metric(t, reg2, atomicBatchesMetric); got != 0 {
		t.Fatalf("the second publisher sent %v atomic batches for rows that were there before it caught up, want 0", got)
	}
	if got := metric(t, reg2, "tgnotify_publisher_publish_errors_total"); got != 0 {
		t.Fatalf("publish_errors_total = %v republishing the stored rows, want 0", got)
	}
	atomicSeen2 := func() bool { return metric(t, reg2, atomicBatchesMetric) >= 1 }
	if !e.enqueueUntil(t, &next, perTx, chats, 20, atomicSeen2) {
		t.Fatalf("the second publisher stored %d rows in transactions of %d, none in an atomic batch", next, perTx)
	}
	waitFor(t, 30*time.Second, func() bool { return e.pending(t) == 0 }, "every row marked")
	checkOnceInOrder(t, e.js, next, chats)
	if second.exited() {
		t.Fatal("the second publisher stopped")
	}
}

// TestAtomicBatchesOnlyWhereTheyPay: atomic batches are used on a NOTIFY
// with one replica that takes them, and not when the publisher is told not
// to or NOTIFY lacks allow_atomic; the rows get through once, in order,
// either way, and none fails. Two atomic batches in a row show that the
// first left nothing of its own on the message the next one reuses.
func TestAtomicBatchesOnlyWhereTheyPay(t *testing.T) {
	for _, tc := range []struct {
		name       string
		noAtomic   bool
		allow      bool
		wantAtomic bool
	}{
		{name: "declared", allow: true, wantAtomic: true},
		{name: "NoAtomicBatches", noAtomic: true, allow: true},
		{name: "without allow_atomic", allow: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const perTx, chats, tries = 50, 5, 10
			e := newEnv(t)
			createNotify(t, e.js, func(cfg *natsjs.StreamConfig) { cfg.AllowAtomicPublish = tc.allow })
			reg := prometheus.NewRegistry()
			opts := testOptions(reg)
			opts.NoAtomicBatches = tc.noAtomic
			e.start(t, opts)
			next := 0
			atomicSeen := func() bool { return metric(t, reg, atomicBatchesMetric) >= 2 }
			got := e.enqueueUntil(t, &next, perTx, chats, tries, atomicSeen)
			if got != tc.wantAtomic {
				t.Fatalf("after %d transactions of %d rows, atomic batches used: %v, want %v", next/perTx, perTx, got, tc.wantAtomic)
			}
			waitFor(t, 30*time.Second, func() bool { return e.pending(t) == 0 }, "every row marked")
			checkOnceInOrder(t, e.js, next, chats)
			if got := metric(t, reg, "tgnotify_publisher_publish_errors_total"); got != 0 {
				t.Fatalf("publish_errors_total = %v, want 0", got)
			}
		})
	}
}

// TestRefusedAtomicBatchGoesAgainInFastBatches: NOTIFY stops taking atomic
// batches after the publisher read that it did; the refused batch stored
// nothing, the round fails, and its rows go again in fast-ingest batches,
// once each, in order.
func TestRefusedAtomicBatchGoesAgainInFastBatches(t *testing.T) {
	const perTx, chats = 100, 9
	e := newEnv(t)
	transports[0].prepare(t, e)
	reg := prometheus.NewRegistry()
	r := e.start(t, testOptions(reg))
	next := 0
	atomicSeen := func() bool { return metric(t, reg, atomicBatchesMetric) >= 1 }
	if !e.enqueueUntil(t, &next, perTx, chats, 20, atomicSeen) {
		t.Fatalf("%d rows stored in transactions of %d, none in an atomic batch", next, perTx)
	}
	waitFor(t, 30*time.Second, func() bool { return e.pending(t) == 0 }, "the first rows marked")
	createNotify(t, e.js, func(cfg *natsjs.StreamConfig) { cfg.AllowAtomicPublish = false })

	refused := func() bool { return metric(t, reg, "tgnotify_publisher_publish_errors_total") > 0 }
	if !e.enqueueUntil(t, &next, perTx, chats, 20, refused) {
		t.Fatalf("%d rows stored, no atomic batch refused", next)
	}
	batches := metric(t, reg, atomicBatchesMetric)
	errs := metric(t, reg, "tgnotify_publisher_publish_errors_total")
	// Each of these transactions is fresh once the round has caught up
	// again; none may go in a refused atomic batch.
	e.enqueueUntil(t, &next, perTx, chats, 3, func() bool { return false })
	waitFor(t, 30*time.Second, func() bool { return e.pending(t) == 0 }, "every row marked")
	checkOnceInOrder(t, e.js, next, chats)
	if got := metric(t, reg, atomicBatchesMetric); got != batches {
		t.Fatalf("%v atomic batches after NOTIFY refused one, want none (until the configuration is read again)", got-batches)
	}
	if got := metric(t, reg, "tgnotify_publisher_publish_errors_total"); got != errs {
		t.Fatalf("%v more rows failed after NOTIFY refused an atomic batch, want none: the publisher kept trying them", got-errs)
	}
	if r.exited() {
		t.Fatal("the publisher stopped")
	}
}

// createNotify creates (or updates) NOTIFY and NOTIFY_DEAD as declared,
// NOTIFY changed by edit.
func createNotify(t *testing.T, js natsjs.JetStream, edit func(*natsjs.StreamConfig)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, cfg := range jetstream.Declare(jetstream.DefaultSettings()).Streams {
		if cfg.Name == jetstream.StreamNotify {
			edit(&cfg)
		}
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			t.Fatalf("creating %s: %v", cfg.Name, err)
		}
	}
}
