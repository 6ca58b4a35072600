package publisher_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/outbox"
	"github.com/tgnotify/tgnotify/pkg/publisher"
)

// checkOnceInOrder verifies that the stream holds exactly the notifications
// 0..n-1 once each, and that each chat's messages are in outbox order.
func checkOnceInOrder(t *testing.T, js natsjs.JetStream, n, chats int) []storedMsg {
	t.Helper()
	msgs := streamMsgs(t, js)
	if len(msgs) != n {
		t.Fatalf("stream holds %d messages, want %d", len(msgs), n)
	}
	seen := make(map[string]bool, n)
	lastPerChat := make(map[string]string)
	for _, m := range msgs {
		if seen[m.key] {
			t.Fatalf("key %s stored twice", m.key)
		}
		seen[m.key] = true
		// Keys are k-<index>, zero-padded, and indexes were enqueued in
		// order, so per chat the keys must increase.
		if prev, ok := lastPerChat[m.subject]; ok && prev >= m.key {
			t.Fatalf("chat %s: %s stored after %s, want outbox order", m.subject, m.key, prev)
		}
		lastPerChat[m.subject] = m.key
	}
	for i := range n {
		if k := notification(i, chats).Key; !seen[k] {
			t.Fatalf("key %s missing from the stream", k)
		}
	}
	return msgs
}

func TestDrainsEveryRowOnceInOrder(t *testing.T) {
	const n, chats = 10000, 100
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	// Half the rows wait before the publisher starts, half arrive while
	// it runs, in transactions of various sizes.
	e.enqueue(t, 0, n/2, chats, 500)
	r := e.start(t, testOptions(reg))
	for from := n / 2; from < n; {
		to := min(n, from+1+from%97)
		e.enqueue(t, from, to, chats, 50)
		from = to
	}
	waitFor(t, 60*time.Second, func() bool { return e.pending(t) == 0 }, "every row marked published")
	msgs := checkOnceInOrder(t, e.js, n, chats)

	// Body and headers.
	rows, err := e.app.Query(`SELECT key, recipient, payload, created_at FROM outbox`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	type want struct {
		chat    int64
		payload []byte
		created int64
	}
	byKey := map[string]want{}
	for rows.Next() {
		var k string
		var w want
		if err := rows.Scan(&k, &w.chat, &w.payload, &w.created); err != nil {
			t.Fatal(err)
		}
		byKey[k] = w
	}
	for _, m := range msgs {
		w := byKey[m.key]
		if got, want := m.subject, jetstream.TelegramSubject(w.chat); got != want {
			t.Fatalf("%s: subject %q, want %q", m.key, got, want)
		}
		if string(m.data) != string(w.payload) {
			t.Fatalf("%s: body differs from the outbox payload", m.key)
		}
		if got := m.header.Get(jetstream.HeaderMsgID); got != m.key {
			t.Fatalf("%s: Nats-Msg-Id %q, want the key", m.key, got)
		}
		meta, err := jetstream.ParseNotificationHeaders(m.header)
		if err != nil {
			t.Fatalf("%s: %v", m.key, err)
		}
		if got := meta.CreatedAt.UnixNano(); got != w.created {
			t.Fatalf("%s: Notify-Created-At %d, want %d", m.key, got, w.created)
		}
		if meta.ContentType != notify.PayloadContentType {
			t.Fatalf("%s: Content-Type %q, want %q", m.key, meta.ContentType, notify.PayloadContentType)
		}
	}

	for name, want := range map[string]float64{
		"tgnotify_publisher_published_total":       n,
		"tgnotify_publisher_duplicates_total":      0,
		"tgnotify_publisher_publish_errors_total":  0,
		"tgnotify_publisher_commit_to_ack_seconds": n,
		"tgnotify_publisher_is_leader":             1,
		"tgnotify_publisher_reordered_total":       0,
	} {
		if got := metric(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if got := metric(t, reg, "tgnotify_publisher_batch_size"); got < 1 {
		t.Errorf("batch_size observations = %v, want > 0", got)
	}
	// The backlog refresh backs off while counting is slow (under the race
	// detector, with thousands of rows pending).
	waitFor(t, 60*time.Second, func() bool {
		return metric(t, reg, "tgnotify_publisher_backlog") == 0
	}, "backlog gauge back to 0")
	if err := r.stop(); err != nil {
		t.Fatalf("Run returned %v, want nil", err)
	}
	if got := metric(t, reg, "tgnotify_publisher_is_leader"); got != 0 {
		t.Errorf("is_leader after stop = %v, want 0", got)
	}
}

var errCrash = errors.New("simulated crash")

func TestCrashBetweenPubAckAndMarking(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			const n, chats = 3000, 30
			e := newEnv(t)
			tr.prepare(t, e)
			e.enqueue(t, 0, n, chats, 1000)

			// The first publisher "crashes" after its second group of
			// acknowledged rows: the first group is marked, the second is
			// in the stream but not marked.
			var calls atomic.Int32
			var crashed []outbox.Row
			opts := testOptions(nil)
			opts.BatchSize = 100
			opts.AfterAck = func(rows []outbox.Row) error {
				if calls.Add(1) == 2 {
					crashed = slices.Clone(rows)
					return errCrash
				}
				return nil
			}
			first := e.start(t, opts)
			waitFor(t, 30*time.Second, first.exited, "first publisher to crash")
			if err := first.stop(); !errors.Is(err, errCrash) {
				t.Fatalf("Run returned %v, want the crash", err)
			}
			if len(crashed) == 0 {
				t.Fatal("no rows were acknowledged before the crash")
			}
			for _, row := range crashed {
				if e.published(t, row.ID) {
					t.Fatalf("row %d, acknowledged just before the crash, is marked published", row.ID)
				}
			}

			reg := prometheus.NewRegistry()
			e.start(t, testOptions(reg))
			waitFor(t, 60*time.Second, func() bool { return e.pending(t) == 0 }, "second publisher drains")
			checkOnceInOrder(t, e.js, n, chats)
			if tr.reportsDuplicates {
				if got := metric(t, reg, "tgnotify_publisher_duplicates_total"); got < float64(len(crashed)) {
					t.Errorf("duplicates_total = %v, want at least the %d republished rows", got, len(crashed))
				}
			}
		})
	}
}

func TestSurvivesNATSOutage(t *testing.T) {
	const chats = 20
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	r := e.start(t, testOptions(reg))
	waitFor(t, 10*time.Second, func() bool { return r.p.Ready(context.Background()) == nil }, "publisher ready")

	// The application keeps enqueueing, 10 rows every 5ms, throughout.
	app := startApp(t, e, chats)
	waitFor(t, 30*time.Second, func() bool { return streamCount(e.js) >= 500 }, "some rows published")

	e.srv.Shutdown()
	waitFor(t, 10*time.Second, func() bool {
		return errors.Is(r.p.Ready(context.Background()), publisher.ErrNATSUnavailable)
	}, "readiness to fail while NATS is down")
	// NATS stays down while the application writes for a few seconds.
	downUntil := time.Now().Add(3 * time.Second)
	waitFor(t, 10*time.Second, func() bool { return time.Now().After(downUntil) }, "outage to last 3s")
	if e.pending(t) == 0 {
		t.Fatal("no row is pending during the outage")
	}
	e.srv.Start(t)

	// The application goes on writing 2,000 rows a second while the
	// publisher catches up, so the catch-up takes as long as the drain
	// needs to outrun it: seconds here, but CI's run under -race on a
	// shared machine once took more than 30 s. The wait checks that the
	// backlog gets published, not how fast (BENCHMARKS.md measures that).
	atRestart := app.enqueued()
	waitFor(t, 2*time.Minute, func() bool { return streamCount(e.js) >= uint64(atRestart) }, "the backlog of the outage to be published")
	n := app.stop(t)
	waitFor(t, 60*time.Second, func() bool { return e.pending(t) == 0 }, "every row marked published")
	waitFor(t, 10*time.Second, e.nc.IsConnected, "the test's own connection to reconnect")
	checkOnceInOrder(t, e.js, n, chats)
	waitFor(t, 10*time.Second, func() bool { return r.p.Ready(context.Background()) == nil }, "ready again")
	if got := metric(t, reg, "tgnotify_publisher_reordered_total"); got != 0 {
		t.Errorf("reordered_total = %v, want 0", got)
	}
}

// app enqueues notifications in the background like a busy application.
type app struct {
	next atomic.Int64
	quit chan struct{}
	done chan error
}

func startApp(t *testing.T, e *env, chats int) *app {
	a := &app{quit: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		ctx := context.Background()
		for {
			select {
			case <-a.quit:
				a.done <- nil
				return
			case <-tick.C:
			}
			i := int(a.next.Load())
			tx, err := e.app.BeginTx(ctx, nil)
			if err != nil {
				a.done <- err
				return
			}
			for j := i; j < i+10; j++ {
				if _, err := outbox.Enqueue(ctx, tx, notification(j, chats)); err != nil {
					tx.Rollback()
					a.done <- err
					return
				}
			}
			if err := tx.Commit(); err != nil {
				a.done <- err
				return
			}
			a.next.Store(int64(i + 10))
		}
	}()
	t.Cleanup(func() {
		select {
		case <-a.quit:
		default:
			close(a.quit)
			<-a.done
		}
	})
	return a
}

func (a *app) enqueued() int { return int(a.next.Load()) }

// stop stops the application and returns how many rows it enqueued.
func (a *app) stop(t *testing.T) int {
	t.Helper()
	close(a.quit)
	if err := <-a.done; err != nil {
		t.Fatalf("application: %v", err)
	}
	return a.enqueued()
}

func TestStandbyTakesOver(t *testing.T) {
	for _, how := range []string{"stop", "crash"} {
		t.Run(how, func(t *testing.T) {
			const chats = 10
			e := newEnv(t)
			var crash atomic.Bool
			opts := testOptions(nil)
			opts.AfterAck = func([]outbox.Row) error {
				if crash.Load() {
					return errCrash
				}
				return nil
			}
			first := e.start(t, opts)
			waitFor(t, 10*time.Second, first.p.IsLeader, "first publisher to lead")
			second := e.start(t, testOptions(nil))
			if err := second.p.Ready(context.Background()); !errors.Is(err, publisher.ErrStandby) {
				t.Fatalf("second publisher Ready = %v, want ErrStandby", err)
			}

			e.enqueue(t, 0, 1000, chats, 100)
			waitFor(t, 30*time.Second, func() bool { return e.pending(t) == 0 }, "first publisher drains")
			if second.p.IsLeader() {
				t.Fatal("standby took the lock while the leader ran")
			}

			switch how {
			case "stop":
				if err := first.stop(); err != nil {
					t.Fatalf("first Run returned %v", err)
				}
				e.enqueue(t, 1000, 1100, chats, 100)
			case "crash":
				crash.Store(true)
				e.enqueue(t, 1000, 1100, chats, 100)
				waitFor(t, 30*time.Second, first.exited, "first publisher to crash")
			}
			waitFor(t, 10*time.Second, second.p.IsLeader, "standby to take over")
			e.enqueue(t, 1100, 2000, chats, 100)
			waitFor(t, 30*time.Second, func() bool { return e.pending(t) == 0 }, "second publisher drains")
			checkOnceInOrder(t, e.js, 2000, chats)
		})
	}
}

func TestConflictingStreamStopsRun(t *testing.T) {
	e := newEnv(t)
	_, err := e.js.CreateStream(context.Background(), natsjs.StreamConfig{
		Name:      jetstream.StreamNotify,
		Subjects:  []string{jetstream.StreamNotifySubjects},
		Retention: natsjs.WorkQueuePolicy,
		Storage:   natsjs.FileStorage,
	})
	if err != nil {
		t.Fatal(err)
	}
	r := e.start(t, testOptions(nil))
	waitFor(t, 10*time.Second, r.exited, "Run to return")
	err = r.stop()
	if !errors.Is(err, jetstream.ErrStreamConflict) {
		t.Fatalf("Run returned %v, want ErrStreamConflict", err)
	}
	for _, want := range []string{"NOTIFY", "retention"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestShutdownMarksInFlightRows(t *testing.T) {
	e := newEnv(t)
	e.enqueue(t, 0, 2000, 10, 2000)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var acked []outbox.Row
	var once sync.Once
	opts := testOptions(nil)
	opts.BatchSize = 100
	opts.AfterAck = func(rows []outbox.Row) error {
		// SIGTERM arrives between the PubAcks and the marking.
		once.Do(func() {
			acked = slices.Clone(rows)
			cancel()
		})
		return nil
	}
	p, err := publisher.Open(context.Background(), e.path, e.nc, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Run(ctx); err != nil {
		t.Fatalf("Run returned %v after cancel, want nil", err)
	}
	if len(acked) == 0 {
		t.Fatal("the hook saw no rows")
	}
	for _, row := range acked {
		if !e.published(t, row.ID) {
			t.Fatalf("row %d, acknowledged at the shutdown, is not marked published", row.ID)
		}
	}
	// Whatever was left is drained by the next run, once.
	e.start(t, testOptions(nil))
	waitFor(t, 30*time.Second, func() bool { return e.pending(t) == 0 }, "next run drains")
	checkOnceInOrder(t, e.js, 2000, 10)
}

func TestDuplicateCountsAsPublished(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			e := newEnv(t)
			tr.prepare(t, e)
			// The stream already has the message, as after a crash between
			// PubAck and marking.
			n := notification(0, 1)
			if _, err := e.js.Publish(context.Background(), jetstream.TelegramSubject(n.ChatID), []byte("{}"), natsjs.WithMsgID(n.Key)); err != nil {
				t.Fatal(err)
			}
			e.enqueue(t, 0, 2, 1, 2)
			reg := prometheus.NewRegistry()
			e.start(t, testOptions(reg))
			waitFor(t, 10*time.Second, func() bool {
				return metric(t, reg, "tgnotify_publisher_published_total") == 2
			}, "both rows marked published")
			if tr.reportsDuplicates {
				if got := metric(t, reg, "tgnotify_publisher_duplicates_total"); got != 1 {
					t.Errorf("duplicates_total = %v, want 1", got)
				}
			}
			if got := streamCount(e.js); got != 2 {
				t.Errorf("stream holds %d messages, want 2", got)
			}
		})
	}
}

func TestPurgeAndCheckpointBoundTheWAL(t *testing.T) {
	const n = 20000
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	opts := testOptions(reg)
	opts.PurgeRetention = time.Millisecond
	opts.PurgeInterval = 20 * time.Millisecond
	opts.PurgeChunk = 500
	opts.CheckpointInterval = 20 * time.Millisecond
	opts.TruncateInterval = 50 * time.Millisecond
	e.start(t, opts)
	for i := 0; i < n; i += 2000 {
		e.enqueue(t, i, i+2000, 50, 500)
	}
	walSize := func() int64 {
		fi, err := os.Stat(e.path + "-wal")
		if err != nil {
			return 0
		}
		return fi.Size()
	}
	// Every row goes but the newest, which keeps ids from being reused.
	var left int64
	waitFor(t, 60*time.Second, func() bool {
		if err := e.app.QueryRow(`SELECT COUNT(*) FROM outbox`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		return left == 1 && walSize() < 64<<10
	}, "rows purged and the WAL truncated")
	if got := metric(t, reg, "tgnotify_publisher_purged_total"); got != n-1 {
		t.Errorf("purged_total = %v, want %d", got, n-1)
	}
	if got := streamCount(e.js); got != n {
		t.Errorf("stream holds %d messages, want %d", got, n)
	}
}

func TestRunTwiceIsRefused(t *testing.T) {
	e := newEnv(t)
	r := e.start(t, testOptions(nil))
	waitFor(t, 10*time.Second, r.p.IsLeader, "leader")
	if err := r.p.Run(context.Background()); !errors.Is(err, publisher.ErrRunning) {
		t.Fatalf("second Run returned %v, want ErrRunning", err)
	}
}

func TestOptionsValidateNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		opts  publisher.Options
		field string
	}{
		{publisher.Options{BatchSize: -1}, "BatchSize"},
		{publisher.Options{BatchSize: 1000, MaxInFlight: 10}, "MaxInFlight"},
		{publisher.Options{PollInterval: -time.Second}, "PollInterval"},
		{publisher.Options{RetryInitial: time.Minute, RetryMax: time.Second}, "RetryMax"},
	} {
		err := tc.opts.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tc.opts, err, tc.field)
		}
	}
	if err := (publisher.Options{}).Validate(); err != nil {
		t.Errorf("zero Options: %v", err)
	}
}

func TestRecreatesADeletedStream(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	e.start(t, testOptions(reg))
	e.enqueue(t, 0, 100, 5, 100)
	waitFor(t, 10*time.Second, func() bool { return e.pending(t) == 0 }, "first rows published")
	if err := e.js.DeleteStream(context.Background(), jetstream.StreamNotify); err != nil {
		t.Fatal(err)
	}
	// Publishing now gets "no responders": the round fails, the streams
	// are provisioned again, and the rows go out.
	e.enqueue(t, 100, 200, 5, 100)
	waitFor(t, 30*time.Second, func() bool { return e.pending(t) == 0 }, "rows after the deletion published")
	if got := streamCount(e.js); got != 100 {
		t.Errorf("new stream holds %d messages, want the 100 enqueued after the deletion", got)
	}
	if got := metric(t, reg, "tgnotify_publisher_publish_errors_total"); got < 1 {
		t.Errorf("publish_errors_total = %v, want the failed publish counted", got)
	}
}

func TestStartsWhileNATSIsDown(t *testing.T) {
	e := newEnv(t)
	e.srv.Shutdown()
	nc, err := jetstream.Connect(context.Background(), jetstream.Options{
		URLs: e.srv.URL(), ReconnectWait: 20 * time.Millisecond, MaxReconnectWait: 100 * time.Millisecond,
	}, nil)
	if err != nil {
		t.Fatalf("Connect with NATS down: %v", err)
	}
	defer nc.Close()
	p, err := publisher.Open(context.Background(), e.path, nc, testOptions(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	e.enqueue(t, 0, 200, 5, 100)
	waitFor(t, 10*time.Second, func() bool {
		return errors.Is(p.Ready(context.Background()), publisher.ErrNATSUnavailable)
	}, "readiness to report NATS unavailable")
	e.srv.Start(t)
	waitFor(t, 30*time.Second, func() bool { return e.pending(t) == 0 }, "rows published once NATS is up")
	waitFor(t, 10*time.Second, e.nc.IsConnected, "the test's own connection to reconnect")
	checkOnceInOrder(t, e.js, 200, 5)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v", err)
	}
}

// TestFallsBackToMessagesAndReturnsToBatches starts on a NOTIFY that
// refuses fast-ingest batches (an existing stream of an older declaration):
// the publisher publishes message by message; once the stream accepts
// batches (tgnotify provision) it returns to them within
// batchRetryInterval (a minute, on an injected clock here).
func TestFallsBackToMessagesAndReturnsToBatches(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if err := createWithoutBatches(ctx, e.js, 1); err != nil {
		t.Fatal(err)
	}
	var offset atomic.Int64
	reg := prometheus.NewRegistry()
	opts := testOptions(reg)
	opts.Now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	e.start(t, opts)
	e.enqueue(t, 0, 300, 7, 100)
	waitFor(t, 30*time.Second, func() bool { return e.pending(t) == 0 }, "rows published message by message")
	if got := metric(t, reg, "tgnotify_publisher_fast_batches"); got != 0 {
		t.Errorf("fast_batches = %v while NOTIFY refuses batches, want 0", got)
	}

	s, err := e.js.Stream(ctx, jetstream.StreamNotify)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.AllowBatchPublish = true
	if _, err := e.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	offset.Store(int64(2 * time.Minute))
	waitFor(t, 30*time.Second, func() bool { return metric(t, reg, "tgnotify_publisher_fast_batches") == 1 },
		"the publisher to try batches again")
	e.enqueue(t, 300, 600, 7, 100)
	waitFor(t, 30*time.Second, func() bool { return e.pending(t) == 0 }, "rows published in batches")
	checkOnceInOrder(t, e.js, 600, 7)
}
