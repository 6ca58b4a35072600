package delivery_test

import (
	"context"
	"fmt"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"

	"golang.org/x/time/rate"

	"github.com/tgnotify/tgnotify/internal/testenv"
	"github.com/tgnotify/tgnotify/pkg/botapi"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/channel/telegram"
	"github.com/tgnotify/tgnotify/pkg/delivery"
)

// The attempts kept in flight follow the channel's rate: enough for it
// while each takes up to InFlightHorizon (200 ms), 16 to 512 with atomic
// batches, 16 to 256 with every record written on its own.
func TestInFlightFollowsTheRate(t *testing.T) {
	for _, tc := range []struct {
		rate         rate.Limit
		batched, one int
	}{
		{0, 16, 16}, {30, 16, 16}, {80, 16, 16}, {85, 17, 17}, {1000, 200, 200}, {1280, 256, 256},
		{2000, 400, 256}, {2560, 512, 256}, {5000, 512, 256}, {rate.Inf, 512, 256},
	} {
		if got := delivery.InFlightFor(tc.rate, false); got != tc.batched {
			t.Errorf("InFlightFor(%v, false) = %d, want %d", tc.rate, got, tc.batched)
		}
		if got := delivery.InFlightFor(tc.rate, true); got != tc.one {
			t.Errorf("InFlightFor(%v, true) = %d, want %d", tc.rate, got, tc.one)
		}
	}
}

// A worker configured without MaxInFlight derives it from its channel's
// rate: 16 for Telegram's 30 msg/s, 200 for a channel of 1000 msg/s (the
// paid broadcast's rate; a fixed 16 held the end-to-end benchmark at 460
// msg/s), 512 with the limits far off (256 when it writes every record on
// its own). One set explicitly is kept.
func TestWorkerDerivesMaxInFlightFromItsChannel(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{})
	for _, tc := range []struct {
		name string
		opts testenv.WorkerOptions
		want int
	}{
		{"telegram at 30 msg/s", testenv.WorkerOptions{}, 16},
		{"a channel of 1000 msg/s", testenv.WorkerOptions{Channel: &recorder{name: "email"}}, 200},
		{"set explicitly", testenv.WorkerOptions{Config: delivery.Config{MaxInFlight: 7}, Channel: &recorder{name: "sms"}}, 7},
		{"telegram with its limits far off", testenv.WorkerOptions{Telegram: telegram.Config{BotRate: 1e6, ChatRate: 1000, GroupPerMinute: 1e6}}, 512},
		{"the same writing every record on its own", testenv.WorkerOptions{
			Config: delivery.Config{SingleRecordWrites: true}, Telegram: telegram.Config{BotRate: 1e6, ChatRate: 1000, GroupPerMinute: 1e6}}, 256},
	} {
		if got := env.StartWorker(tc.opts).MaxInFlight(); got != tc.want {
			t.Errorf("%s: MaxInFlight() = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// goroutineSender wraps the Bot API client and records which goroutine
// made each call.
type goroutineSender struct {
	telegram.Sender
	mu  sync.Mutex
	ids map[string]int
}

func (g *goroutineSender) SendMessage(ctx context.Context, p botapi.SendMessageParams) (*botapi.Message, error) {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := strings.Cut(strings.TrimPrefix(string(buf), "goroutine "), " ")
	g.mu.Lock()
	g.ids[id]++
	g.mu.Unlock()
	return g.Sender.SendMessage(ctx, p)
}

// senderGoroutines counts the goroutines running or idling in
// Worker.sender, across the process.
func senderGoroutines() int {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	return strings.Count(b.String(), "delivery.(*Worker).sender(")
}

// Attempts run on sender goroutines that outlive them: 200 sends with 4 in
// flight are made by a few goroutines, not one new goroutine (and a
// stack grown again through the HTTP client) each. They stop with the
// worker. Not parallel: it counts the process's goroutines.
func TestAttemptsReuseTheirGoroutines(t *testing.T) {
	lim, cfg, tg := fastLimits()
	cfg.MaxInFlight = 4
	env := testenv.New(t, testenv.Options{Emulator: emulator.Config{Limits: lim}})
	api := &goroutineSender{Sender: env.Client(testenv.Token), ids: map[string]int{}}
	w := env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: tg, API: api})
	const n = 200
	for i := range n {
		env.Publish(note(fmt.Sprintf("k:%d", i), int64(1000+i), "hi"))
	}
	waitDelivered(t, env, n)
	api.mu.Lock()
	calls, goroutines := 0, len(api.ids)
	for _, c := range api.ids {
		calls += c
	}
	api.mu.Unlock()
	// A request retried on a busy machine is one call more, from a sender
	// too. A launch in the moment between a sender's result and its wait
	// for the next attempt starts one more sender, so a busy machine may
	// use a few more than MaxInFlight; one goroutine per attempt used 200.
	if most := 2 * cfg.MaxInFlight; calls < n || goroutines > most {
		t.Fatalf("%d sendMessage calls came from %d goroutines, want at least %d from at most %d", calls, goroutines, n, most)
	}
	if got := senderGoroutines(); got < 1 || got > 2*cfg.MaxInFlight {
		t.Fatalf("%d sender goroutines while the worker idles, want 1 to %d", got, 2*cfg.MaxInFlight)
	}
	w.Stop(t)
	if got := senderGoroutines(); got != 0 {
		t.Fatalf("%d sender goroutines after the worker stopped, want 0", got)
	}
}
