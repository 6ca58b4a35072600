package publisher_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// logRecords is a slog.Handler that keeps the message of every record.
type logRecords struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }

func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}

func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecords) WithGroup(string) slog.Handler      { return l }

// count returns how many records had the message msg.
func (l *logRecords) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if m == msg {
			n++
		}
	}
	return n
}

// ensureStreams is the publisher's default Prepare, on the test's own
// connection.
func ensureStreams(e *env) func(context.Context) error {
	streams := jetstream.Declare(jetstream.DefaultSettings()).ForPublisher()
	return func(ctx context.Context) error {
		_, err := jetstream.Ensure(ctx, e.js, streams)
		return err
	}
}

// After NOTIFY stopped answering, the publisher runs Prepare again in case
// the stream was deleted. In a cluster that silence is mostly an election,
// and Prepare's requests then go unanswered until their timeout. Such a
// Prepare must not hold publishing back: here it never returns until the
// test ends, NOTIFY comes back (the test creates it, as the new leader
// would answer), and the rows written meanwhile are published at once.
// Found by BENCHMARKS.md row 7b, where the publisher waited out a 4 s
// Prepare begun just before NOTIFY had its new leader.
func TestPrepareInAnElectionDoesNotHoldPublishingBack(t *testing.T) {
	e := newEnv(t)
	ensure := ensureStreams(e)
	var calls atomic.Int32
	hung := make(chan struct{})
	release := make(chan struct{})
	opts := testOptions(prometheus.NewRegistry())
	opts.Prepare = func(ctx context.Context) error {
		switch calls.Add(1) {
		case 1:
			return ensure(ctx)
		case 2:
			close(hung)
		}
		<-release // unanswered: not even its deadline ends it
		return ctx.Err()
	}
	e.start(t, opts)
	t.Cleanup(func() { close(release) }) // before the publisher stops
	e.enqueue(t, 0, 100, 5, 100)
	waitFor(t, 10*time.Second, func() bool { return e.pending(t) == 0 }, "first rows published")

	if err := e.js.DeleteStream(context.Background(), jetstream.StreamNotify); err != nil {
		t.Fatal(err)
	}
	e.enqueue(t, 100, 200, 5, 100)
	select {
	case <-hung:
	case <-time.After(30 * time.Second):
		t.Fatal("the publisher did not prepare the streams again after NOTIFY stopped answering")
	}
	if err := ensure(context.Background()); err != nil { // NOTIFY is back
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() bool { return e.pending(t) == 0 }, "rows published while Prepare hangs")
	if got := streamCount(e.js); got != 100 {
		t.Errorf("NOTIFY holds %d messages, want the 100 enqueued after it came back", got)
	}
	if got := calls.Load(); got != 2 {
		t.Errorf("Prepare called %d times, want 2: none beside the one still running", got)
	}
}

// The publisher says that publishing recovered when the first rows after a
// failure are marked, not when the round that marked them ends: a healthy
// round runs until shutdown, and an operator reading "recovered after 23s"
// at shutdown took a 6 s outage for 23 s.
func TestRecoveryIsLoggedWhenRowsAreMarked(t *testing.T) {
	e := newEnv(t)
	logs := &logRecords{}
	opts := testOptions(prometheus.NewRegistry())
	opts.Logger = slog.New(logs)
	e.start(t, opts)
	e.enqueue(t, 0, 100, 5, 100)
	waitFor(t, 10*time.Second, func() bool { return e.pending(t) == 0 }, "first rows published")

	e.srv.Shutdown()
	e.enqueue(t, 100, 200, 5, 100)
	waitFor(t, 10*time.Second, func() bool {
		return logs.count("publishing stopped; retrying with backoff") > 0
	}, "the publisher to report the outage")
	e.srv.Start(t)
	waitFor(t, 30*time.Second, func() bool { return e.pending(t) == 0 }, "the outage's rows published")
	waitFor(t, 10*time.Second, func() bool { return logs.count("publishing recovered") == 1 },
		"the recovery reported while the publisher runs on")
}
