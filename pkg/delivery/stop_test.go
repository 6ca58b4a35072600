package delivery_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/testenv"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

// gatedChannel is a recorder whose requests wait for release before they
// ask admission, and tell entered when they begin to.
type gatedChannel struct {
	*recorder
	entered chan struct{}
	release chan struct{}
}

func (g *gatedChannel) Send(ctx context.Context, a *delivery.Attempt) delivery.Outcome {
	g.entered <- struct{}{}
	<-g.release
	return g.recorder.Send(ctx, a)
}

// logWatch is a slog handler that passes every record on and calls seen
// for a record with the message msg.
type logWatch struct {
	slog.Handler
	msg  string
	seen func()
}

func (h *logWatch) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.seen()
	}
	return h.Handler.Handle(ctx, r)
}

func (h *logWatch) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &logWatch{Handler: h.Handler.WithAttrs(attrs), msg: h.msg, seen: h.seen}
}

func (h *logWatch) WithGroup(name string) slog.Handler {
	return &logWatch{Handler: h.Handler.WithGroup(name), msg: h.msg, seen: h.seen}
}

// A request not written yet when the worker begins to stop is not written:
// during the stop only the requests already on their way finish, and the
// message goes back to the stream for the next worker, which sends it once.
// A request written during the stop, while JetStream did not answer, ended
// the stop with its delivery record unwritten, and the next worker sent it
// again (the long chaos run on the cluster, L53).
func TestNoRequestIsWrittenOnceTheStopBegins(t *testing.T) {
	t.Parallel()
	_, cfg, _ := fastLimits()
	cfg.ShutdownTimeout = 30 * time.Second
	env := testenv.New(t, testenv.Options{})
	stopping := make(chan struct{})
	var once sync.Once
	env.Log = slog.New(&logWatch{Handler: env.Log.Handler(), msg: delivery.StoppingMessage, seen: func() { once.Do(func() { close(stopping) }) }})
	gated := &gatedChannel{recorder: &recorder{name: "email"}, entered: make(chan struct{}, 1), release: make(chan struct{})}
	w := env.StartWorker(testenv.WorkerOptions{Config: cfg, Channel: gated})
	env.Publish(notify.Notification{Key: "order:1:accepted", Email: "ann@example.com", Text: "Order accepted",
		Route: []notify.Channel{notify.ChannelEmail}})
	natstest.WaitFor(t, 30*time.Second, received(gated.entered), "the attempt to reach its request")

	stopped := make(chan struct{})
	go func() {
		w.Stop(t)
		close(stopped)
	}()
	natstest.WaitFor(t, 30*time.Second, received(stopping), "the worker to begin to stop")
	close(gated.release)
	natstest.WaitFor(t, 30*time.Second, received(stopped), "the worker to stop")
	if got := gated.delivered(); len(got) != 0 {
		t.Fatalf("the worker sent %d notifications after it began to stop", len(got))
	}

	next := &recorder{name: "email"}
	env.StartWorker(testenv.WorkerOptions{Config: cfg, Channel: next})
	natstest.WaitFor(t, 20*time.Second, func() bool { return len(next.delivered()) == 1 }, "the next worker to send it")
	natstest.WaitFor(t, 10*time.Second, func() bool { return len(env.Events(delivery.EventDelivered)) == 1 }, "one delivered event")
	if got := next.delivered(); len(got) != 1 || got[0].Key != "order:1:accepted" {
		t.Fatalf("the next worker sent %v, want order:1:accepted once", got)
	}
}

// received reports whether ch has a value or is closed, without waiting.
func received[T any](ch <-chan T) func() bool {
	return func() bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
}
