package delivery_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tgnotify/tgnotify/internal/testenv"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// The worker's pull requests ask the server for an idle heartbeat at least
// every second. A request the server lost (its consumer's leader died in a
// cluster) is noticed by the missed heartbeats and issued again: with
// nats.go's default, half the expiry, that took 5 s under the default
// pinned TTL of 10 s, long after the new leader was elected.
func TestPullRequestsAskForFrequentHeartbeats(t *testing.T) {
	t.Parallel()
	lim, cfg, tg := fastLimits()
	env := testenv.New(t, testenv.Options{Emulator: emulator.Config{Limits: lim}})
	nc, _ := env.NATS.Connect(t)
	reqs := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe("$JS.API.CONSUMER.MSG.NEXT.>", reqs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: tg,
		Settings: jetstream.WorkerSettings{PinnedTTL: 10 * time.Second}})
	select {
	case m := <-reqs:
		var req struct {
			Expires   time.Duration `json:"expires"`
			Heartbeat time.Duration `json:"idle_heartbeat"`
		}
		if err := json.Unmarshal(m.Data, &req); err != nil {
			t.Fatalf("pull request %q: %v", m.Data, err)
		}
		if req.Heartbeat <= 0 || req.Heartbeat > time.Second {
			t.Errorf("pull request %s asks for heartbeats every %v, want at most 1s", m.Data, req.Heartbeat)
		}
		if req.Expires != 5*time.Second {
			t.Errorf("pull request %s expires after %v, want half the pinned TTL, 5s", m.Data, req.Expires)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the worker sent no pull request")
	}
}
