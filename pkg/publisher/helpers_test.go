package publisher_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/outbox"
	"github.com/tgnotify/tgnotify/pkg/publisher"
)

// env is a test bundle: an embedded NATS server, a client connection, and an
// outbox database file with the application's own handle on it.
type env struct {
	srv *natstest.Server
	nc  *nats.Conn
	js  natsjs.JetStream
	// admin is a connection of the test's own, separate from the
	// publisher's nc (cluster tests only).
	admin *nats.Conn
	path  string
	app   *sql.DB
	// reader counts the backlog; one Reader keeps its low-water mark, so
	// polling it walks only the rows still pending.
	reader *outbox.Reader
}

func newEnv(t testing.TB, opts ...natstest.Option) *env {
	t.Helper()
	srv := natstest.Start(t, opts...)
	nc, err := jetstream.Connect(context.Background(), jetstream.Options{
		URLs:             srv.URL(),
		Name:             "publisher-test",
		ReconnectWait:    20 * time.Millisecond,
		MaxReconnectWait: 200 * time.Millisecond,
	}, nil)
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	path := filepath.Join(t.TempDir(), "app.db")
	app, err := outbox.Open(context.Background(), path, outbox.Options{})
	if err != nil {
		t.Fatalf("opening outbox: %v", err)
	}
	t.Cleanup(func() { app.Close() })
	return &env{srv: srv, nc: nc, js: js, path: path, app: app, reader: outbox.NewReader(app)}
}

// notification returns the i-th test notification: chat 1000+i%chats, key
// "k-<i>".
func notification(i, chats int) notify.Notification {
	return notify.Notification{
		Key:       fmt.Sprintf("k-%07d", i),
		ChatID:    int64(1000 + i%chats),
		Text:      fmt.Sprintf("Order <b>#%d</b> was accepted and will ship tomorrow.", i),
		ParseMode: notify.ParseModeHTML,
	}
}

// enqueue writes notifications from..to-1 in transactions of up to perTx
// rows, as the application would.
func (e *env) enqueue(t testing.TB, from, to, chats, perTx int) {
	t.Helper()
	ctx := context.Background()
	for start := from; start < to; start += perTx {
		tx, err := e.app.BeginTx(ctx, nil)
		if err != nil {
			t.Fatalf("begin: %v", err)
		}
		for i := start; i < min(to, start+perTx); i++ {
			if _, err := outbox.Enqueue(ctx, tx, notification(i, chats)); err != nil {
				tx.Rollback()
				t.Fatalf("enqueue %d: %v", i, err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
}

// pending returns how many rows are not yet marked published.
func (e *env) pending(t testing.TB) int64 {
	t.Helper()
	b, err := e.reader.Backlog(context.Background())
	if err != nil {
		t.Fatalf("backlog: %v", err)
	}
	return b.Pending
}

// published reports whether the outbox row id is marked published.
func (e *env) published(t testing.TB, id int64) bool {
	t.Helper()
	var n int
	if err := e.app.QueryRow(`SELECT COUNT(*) FROM outbox_status WHERE id = ? AND published_at IS NOT NULL`, id).Scan(&n); err != nil {
		t.Fatalf("reading row %d: %v", id, err)
	}
	return n == 1
}

// transport is one of the publisher's two ways to publish, chosen by the
// stream's configuration.
type transport struct {
	name string
	// create creates NOTIFY (and NOTIFY_DEAD) with replicas replicas so
	// that the publisher uses this transport.
	create func(ctx context.Context, js natsjs.JetStream, replicas int) error
	// reportsDuplicates says whether the stream tells which messages were
	// duplicates (only per-message PubAcks do).
	reportsDuplicates bool
}

// prepare creates the streams of tr on e's single server.
func (tr transport) prepare(t testing.TB, e *env) {
	t.Helper()
	if err := tr.create(context.Background(), e.js, 1); err != nil {
		t.Fatalf("creating the streams: %v", err)
	}
}

// transports are fast-ingest batches (NOTIFY as declared) and message by
// message (NOTIFY without allow_batched, as an older declaration made it).
var transports = []transport{
	{name: "batches", create: func(ctx context.Context, js natsjs.JetStream, replicas int) error {
		return jetstream.ProvisionStreams(ctx, js, jetstream.StreamSettings{Replicas: replicas})
	}},
	{name: "messages", create: createWithoutBatches, reportsDuplicates: true},
}

// createWithoutBatches creates NOTIFY and NOTIFY_DEAD as declared, except
// that NOTIFY accepts no batches, fast-ingest or atomic (as a declaration
// older than both made it; a NOTIFY with allow_atomic would take the
// publisher's runs of fresh rows in atomic batches).
func createWithoutBatches(ctx context.Context, js natsjs.JetStream, replicas int) error {
	s := jetstream.DefaultSettings()
	s.Replicas = replicas
	for _, cfg := range jetstream.Declare(s).Streams {
		cfg.AllowBatchPublish = false
		cfg.AllowAtomicPublish = false
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("creating %s: %w", cfg.Name, err)
		}
	}
	return nil
}

// testOptions returns publisher options suited to tests: fast retries and lock
// polling, and a registry of its own.
func testOptions(reg *prometheus.Registry) publisher.Options {
	o := publisher.Options{
		RetryInitial:     20 * time.Millisecond,
		RetryMax:         200 * time.Millisecond,
		LockPollInterval: 20 * time.Millisecond,
		AckTimeout:       5 * time.Second,
	}
	if reg != nil {
		o.Registerer = reg
	}
	return o
}

// running is a publisher whose Run executes in a goroutine.
type running struct {
	p      *publisher.Publisher
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	err    error
}

// start opens a publisher on e's database and runs it until the test ends
// or stop is called.
func (e *env) start(t testing.TB, opts publisher.Options) *running {
	t.Helper()
	reg := prometheus.NewRegistry()
	if opts.Registerer == nil {
		opts.Registerer = reg
	} else if r, ok := opts.Registerer.(*prometheus.Registry); ok {
		reg = r
	}
	p, err := publisher.Open(context.Background(), e.path, e.nc, opts)
	if err != nil {
		t.Fatalf("opening publisher: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{p: p, reg: reg, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		err := p.Run(ctx)
		r.mu.Lock()
		r.err = err
		r.mu.Unlock()
	}()
	t.Cleanup(func() {
		r.stop()
		p.Close()
	})
	return r
}

// stop cancels Run and returns its error once it has returned.
func (r *running) stop() error {
	r.cancel()
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// exited reports whether Run has returned.
func (r *running) exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// metric returns the value of a counter or gauge in reg, 0 if absent.
func metric(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	for _, m := range series(t, reg, name) {
		return value(m)
	}
	return 0
}

// labeledMetric returns the value of the series of metric name in reg whose
// label has value val, -1 if there is none.
func labeledMetric(t testing.TB, reg *prometheus.Registry, name, label, val string) float64 {
	t.Helper()
	for _, m := range series(t, reg, name) {
		for _, l := range m.GetLabel() {
			if l.GetName() == label && l.GetValue() == val {
				return value(m)
			}
		}
	}
	return -1
}

// series returns the series of metric name in reg.
func series(t testing.TB, reg *prometheus.Registry, name string) []*dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()
		}
	}
	return nil
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetHistogram() != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return 0
}

// storedMsg is one message of the NOTIFY stream.
type storedMsg struct {
	seq     uint64
	subject string
	key     string
	data    []byte
	header  nats.Header
}

// streamMsgs reads every message of NOTIFY in stream order. It tries again
// while reading fails, as it does for a moment during a leader election.
func streamMsgs(t testing.TB, js natsjs.JetStream) []storedMsg {
	t.Helper()
	var (
		out []storedMsg
		err error
	)
	natstest.WaitFor(t, time.Minute, func() bool {
		out, err = readStream(js)
		return err == nil
	}, "reading NOTIFY")
	return out
}

// readStream reads every message of NOTIFY in stream order.
func readStream(js natsjs.JetStream) ([]storedMsg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, jetstream.StreamNotify)
	if err != nil {
		return nil, fmt.Errorf("stream: %w", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("stream info: %w", err)
	}
	total := info.State.Msgs
	if total == 0 {
		return nil, nil
	}
	c, err := s.OrderedConsumer(ctx, natsjs.OrderedConsumerConfig{})
	if err != nil {
		return nil, fmt.Errorf("ordered consumer: %w", err)
	}
	out := make([]storedMsg, 0, total)
	for uint64(len(out)) < total {
		batch, err := c.Fetch(int(min(total-uint64(len(out)), 1000)), natsjs.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, fmt.Errorf("fetch: %w", err)
		}
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				return nil, fmt.Errorf("metadata: %w", err)
			}
			out = append(out, storedMsg{seq: md.Sequence.Stream, subject: m.Subject(), key: m.Headers().Get(jetstream.HeaderKey), data: m.Data(), header: m.Headers()})
		}
		if err := batch.Error(); err != nil && !errors.Is(err, natsjs.ErrNoMessages) {
			return nil, fmt.Errorf("fetch: %w", err)
		}
	}
	return out, nil
}

// streamCount returns the number of messages in NOTIFY, 0 if it is missing.
func streamCount(js natsjs.JetStream) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, jetstream.StreamNotify)
	if err != nil {
		return 0
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0
	}
	return info.State.Msgs
}
