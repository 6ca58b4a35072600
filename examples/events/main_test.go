package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/testenv"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

// lines is an io.Writer the test reads while run writes.
type lines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The example prints the events of a delivered notification and of one
// whose chat blocked the bot, as a real worker publishes them.
func TestExampleFollowsEvents(t *testing.T) {
	env := testenv.New(t, testenv.Options{Emulator: emulator.Config{Blocked: []int64{200}}})
	env.StartWorker(testenv.WorkerOptions{})
	env.Publish(notify.Notification{Key: "order:E1:accepted", ChatID: 100, Text: "E1"})
	env.Publish(notify.Notification{Key: "order:E2:accepted", ChatID: 200, Text: "E2"})

	ctx, cancel := context.WithCancel(context.Background())
	out := &lines{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-durable", "test-events"}, out, func(k string) string {
			if k == "NATS_URL" {
				return env.NATS.URL()
			}
			return ""
		})
	}()
	want := []string{
		"order:E1:accepted delivered by telegram to 100 (message ",
		"telegram recipient 200 unreachable: blocked",
		"order:E2:accepted dead: telegram gave up (blocked 403 ",
	}
	natstest.WaitFor(t, 20*time.Second, func() bool {
		for _, w := range want {
			if !strings.Contains(out.String(), w) {
				return false
			}
		}
		return true
	}, "the example to print the three events")
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
	t.Logf("output:\n%s", out)
}
