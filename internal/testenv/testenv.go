// Package testenv assembles the real components of the pipeline for tests:
// an embedded NATS server with JetStream (internal/natstest), the provisioned
// streams, the Bot API emulator over real HTTP, a Bot API client, and
// telegram workers running in-process. Tests and benchmarks of several
// packages share it.
package testenv

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/pkg/botapi"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/channel/telegram"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

// Token is the bot token the emulator accepts.
const Token = "123456:test-token_ABC"

// Env is a running NATS + emulator pair.
type Env struct {
	T      testing.TB
	NATS   *natstest.Server
	NC     *nats.Conn
	JS     natsjs.JetStream
	Emu    *emulator.Emulator
	BotURL string
	Log    *slog.Logger
	// Names are the names of the env's deployment: its streams, subjects
	// and buckets (Options.Streams.Prefix; default notify).
	Names jetstream.Names
}

// Options tune New.
type Options struct {
	// Emulator configures the emulator; Token defaults to [Token].
	Emulator emulator.Config
	// NATS are options of the embedded server.
	NATS []natstest.Option
	// Streams are the NOTIFY/NOTIFY_DEAD settings; their Prefix names the
	// deployment ([Env.Names]).
	Streams jetstream.StreamSettings
	// Connect are extra options of the test's own NATS connection
	// (credentials for a server that requires them).
	Connect []nats.Option
}

// Logger returns a logger for tests: silent unless TGNOTIFY_TEST_LOG=1.
func Logger(t testing.TB) *slog.Logger {
	if os.Getenv("TGNOTIFY_TEST_LOG") == "1" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// New starts NATS with JetStream, provisions the streams and starts the
// emulator. Everything stops at the end of the test.
func New(t testing.TB, o Options) *Env {
	t.Helper()
	e := &Env{T: t, Log: Logger(t)}
	names, err := jetstream.NewNames(o.Streams.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	e.Names = names
	e.NATS = natstest.Start(t, o.NATS...)
	nc, err := nats.Connect(e.NATS.URL(), append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, o.Connect...)...)
	if err != nil {
		t.Fatalf("connecting to NATS: %v", err)
	}
	t.Cleanup(nc.Close)
	e.NC = nc
	if e.JS, err = natsjs.New(nc); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := jetstream.ProvisionStreams(ctx, e.JS, o.Streams); err != nil {
		t.Fatalf("provisioning streams: %v", err)
	}
	cfg := o.Emulator
	if cfg.Token == "" {
		cfg.Token = Token
	}
	if e.Emu, err = emulator.New(cfg); err != nil {
		t.Fatalf("starting emulator: %v", err)
	}
	srv := httptest.NewServer(e.Emu)
	t.Cleanup(func() { e.Emu.Close(); srv.Close() })
	e.BotURL = srv.URL
	return e
}

// WithPrefix provisions the streams of a second deployment, with subject
// prefix prefix, on e's server and returns an Env for it: the same server,
// connection and emulator, the names of prefix.
func (e *Env) WithPrefix(prefix string, s jetstream.StreamSettings) *Env {
	e.T.Helper()
	names, err := jetstream.NewNames(prefix)
	if err != nil {
		e.T.Fatal(err)
	}
	s.Prefix = names.Prefix
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := jetstream.ProvisionStreams(ctx, e.JS, s); err != nil {
		e.T.Fatalf("provisioning the streams of prefix %s: %v", prefix, err)
	}
	other := *e
	other.Names = names
	return &other
}

// Client returns a Bot API client for the emulator.
func (e *Env) Client(token string) *botapi.Client {
	e.T.Helper()
	c, err := botapi.New(token, botapi.WithBaseURL(e.BotURL), botapi.WithTimeout(5*time.Second))
	if err != nil {
		e.T.Fatal(err)
	}
	return c
}

// Publish puts a notification on its subject (the first channel of its
// route), as the publisher would.
func (e *Env) Publish(n notify.Notification) uint64 {
	e.T.Helper()
	if n.CreatedAt.IsZero() {
		n.CreatedAt = time.Now().UTC()
	}
	payload, err := n.MarshalPayload()
	if err != nil {
		e.T.Fatalf("encoding %s: %v", n.Key, err)
	}
	n.Normalize()
	token, err := n.Recipient(n.Route[0])
	if err != nil {
		e.T.Fatal(err)
	}
	subject := e.Names.Subject(string(n.Route[0]), token)
	ack, err := e.JS.PublishMsg(context.Background(), jetstream.Msg(subject, n.Key, n.CreatedAt, notify.PayloadContentType, payload))
	if err != nil {
		e.T.Fatalf("publishing %s: %v", n.Key, err)
	}
	return ack.Sequence
}

// PublishRaw puts arbitrary bytes on a subject, as `nats pub` would.
func (e *Env) PublishRaw(subject string, body []byte, headers nats.Header) uint64 {
	e.T.Helper()
	ack, err := e.JS.PublishMsg(context.Background(), &nats.Msg{Subject: subject, Data: body, Header: headers})
	if err != nil {
		e.T.Fatalf("publishing to %s: %v", subject, err)
	}
	return ack.Sequence
}

// Events returns the events of one kind (delivered, fallback, dead) stored
// in the work stream (NOTIFY) so far.
func (e *Env) Events(kind string) []delivery.Event {
	e.T.Helper()
	ctx := context.Background()
	s, err := e.JS.Stream(ctx, e.Names.Stream)
	if err != nil {
		e.T.Fatal(err)
	}
	var out []delivery.Event
	c, err := s.OrderedConsumer(ctx, natsjs.OrderedConsumerConfig{FilterSubjects: []string{e.Names.Prefix + ".events." + kind}})
	if err != nil {
		e.T.Fatal(err)
	}
	n, err := c.Info(ctx)
	if err != nil {
		e.T.Fatal(err)
	}
	for left := n.NumPending; left > 0; left-- {
		m, err := c.Next(natsjs.FetchMaxWait(5 * time.Second))
		if err != nil {
			e.T.Fatalf("reading events: %v", err)
		}
		var ev delivery.Event
		if err := json.Unmarshal(m.Data(), &ev); err != nil {
			e.T.Fatalf("event %s: %v", m.Data(), err)
		}
		out = append(out, ev)
	}
	return out
}

// DeadLetters returns every message stored in the dead-letter stream
// (NOTIFY_DEAD).
func (e *Env) DeadLetters() []*natsjs.RawStreamMsg {
	e.T.Helper()
	ctx := context.Background()
	s, err := e.JS.Stream(ctx, e.Names.DeadStream)
	if err != nil {
		e.T.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		e.T.Fatal(err)
	}
	var out []*natsjs.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err == nil {
			out = append(out, m)
		}
	}
	return out
}

// Worker is a telegram worker running in-process.
type Worker struct {
	*delivery.Worker
	Registry  *prometheus.Registry
	Resources *jetstream.WorkerResources
	cancel    context.CancelFunc
	done      chan error
	stopped   bool
}

// WorkerOptions tune StartWorker.
type WorkerOptions struct {
	Config delivery.Config
	// Telegram are the channel's settings (its rates).
	Telegram telegram.Config
	Settings jetstream.WorkerSettings
	// Token overrides the bot token (to provoke 401).
	Token string
	// API overrides the Bot API client (to inject faults).
	API telegram.Sender
	// NC overrides the NATS connection the worker uses.
	NC *nats.Conn
	// Channel, when set, is the channel the worker drives instead of
	// Telegram; its consumer (<name>-worker on notify.<name>.>) is
	// provisioned for it. Settings.Prefix defaults to the env's.
	Channel delivery.Channel
	// Now is the worker's clock (default time.Now).
	Now func() time.Time
	// Reconnects says when NC came back after a disconnect
	// (delivery.Deps.Reconnects); NC's jetstream.Options.Reconnects.
	Reconnects *jetstream.Reconnects
	// WrapChats, when set, wraps the worker's notify_chats bucket (to
	// inject faults into its shared state).
	WrapChats func(natsjs.KeyValue) natsjs.KeyValue
	// NoWait makes StartWorker return without waiting for the worker to
	// be ready (for a worker that cannot load its shared state yet).
	NoWait bool
	// WrapAttempts, when set, wraps the worker's notify_attempts bucket
	// (to inject faults into its attempt and give-up marks).
	WrapAttempts func(natsjs.KeyValue) natsjs.KeyValue
	// WrapConsumer, when set, wraps the worker's consumer (to inject
	// faults into its reads of the consumer).
	WrapConsumer func(natsjs.Consumer) natsjs.Consumer
}

// StartWorker provisions the worker's consumer and buckets and runs a
// worker until Stop or the end of the test. The consumer's ack wait follows
// the worker's.
func (e *Env) StartWorker(o WorkerOptions) *Worker {
	e.T.Helper()
	if o.Config.AckWait == 0 {
		o.Config.AckWait = 5 * time.Second
	}
	if o.Settings.AckWait == 0 {
		o.Settings.AckWait = o.Config.AckWait
	}
	if o.Settings.MaxAckPending == 0 {
		o.Settings.MaxAckPending = 10_000
	}
	if o.Settings.PinnedTTL == 0 {
		o.Settings.PinnedTTL = 2 * time.Second
	}
	if o.Config.StatsInterval == 0 {
		o.Config.StatsInterval = 200 * time.Millisecond
	}
	if o.Settings.Prefix == "" {
		o.Settings.Prefix = e.Names.Prefix
	}
	js := e.JS
	if o.NC != nil {
		var err error
		if js, err = natsjs.New(o.NC); err != nil {
			e.T.Fatal(err)
		}
	}
	ctx := context.Background()
	res, err := jetstream.ProvisionWorker(ctx, js, o.Settings)
	if err != nil {
		e.T.Fatalf("provisioning worker: %v", err)
	}
	if o.WrapChats != nil {
		res.Chats = o.WrapChats(res.Chats)
	}
	if o.WrapAttempts != nil {
		res.Attempts = o.WrapAttempts(res.Attempts)
	}
	if o.WrapConsumer != nil {
		res.Consumer = o.WrapConsumer(res.Consumer)
	}
	var ch delivery.Channel = o.Channel
	if ch == nil {
		api := o.API
		if api == nil {
			token := o.Token
			if token == "" {
				token = Token
			}
			api = e.Client(token)
		}
		if ch, err = telegram.New(o.Telegram, api); err != nil {
			e.T.Fatalf("creating the telegram channel: %v", err)
		}
	} else {
		cfg := jetstream.WorkerConsumerConfig(o.Settings)
		name := ch.Name()
		cfg.Durable, cfg.Description = name+"-worker", "tgnotify "+name+" worker"
		cfg.FilterSubject, cfg.PriorityGroups = res.Names.ChannelFilter(name), []string{name}
		if res.Consumer, err = js.CreateOrUpdateConsumer(ctx, res.Names.Stream, cfg); err != nil {
			e.T.Fatalf("provisioning the %s consumer: %v", name, err)
		}
	}
	reg := prometheus.NewRegistry()
	w, err := delivery.New(o.Config, delivery.Deps{JS: js, Resources: res, Channel: ch, Logger: e.Log, Registry: reg, Now: o.Now, Reconnects: o.Reconnects})
	if err != nil {
		e.T.Fatalf("creating worker: %v", err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	rw := &Worker{Worker: w, Registry: reg, Resources: res, cancel: cancel, done: make(chan error, 1)}
	go func() { rw.done <- w.Run(runCtx) }()
	e.T.Cleanup(func() { rw.Stop(e.T) })
	if !o.NoWait {
		natstest.WaitFor(e.T, 10*time.Second, func() bool { return w.Ready() == nil || w.Stats().TokenRejected }, "worker ready")
	}
	return rw
}

// Stop stops the worker gracefully and checks that Run returned nil.
func (w *Worker) Stop(t testing.TB) {
	t.Helper()
	if w.stopped {
		return
	}
	w.stopped = true
	w.cancel()
	select {
	case err := <-w.done:
		if err != nil {
			t.Errorf("worker Run returned %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("worker did not stop within 30s")
	}
}
