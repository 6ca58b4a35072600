package delivery_test

import (
	"testing"

	"golang.org/x/time/rate"

	"github.com/tgnotify/tgnotify/internal/testenv"
	"github.com/tgnotify/tgnotify/pkg/delivery"
)

// The attempts kept in flight follow the channel's rate: enough for it
// while each takes up to InFlightHorizon (100 ms), 16 to 128.
func TestInFlightFollowsTheRate(t *testing.T) {
	for _, tc := range []struct {
		rate rate.Limit
		want int
	}{
		{0, 16}, {30, 16}, {160, 16}, {170, 17}, {1000, 100}, {1280, 128}, {5000, 128}, {rate.Inf, 128},
	} {
		if got := delivery.InFlightFor(tc.rate); got != tc.want {
			t.Errorf("InFlightFor(%v) = %d, want %d", tc.rate, got, tc.want)
		}
	}
}

// A worker configured without MaxInFlight derives it from its channel's
// rate: 16 for Telegram's 30 msg/s, 100 for a channel of 1000 msg/s (the
// paid broadcast's rate; a fixed 16 held the end-to-end benchmark at 460
// msg/s). One set explicitly is kept.
func TestWorkerDerivesMaxInFlightFromItsChannel(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{})
	for _, tc := range []struct {
		name string
		opts testenv.WorkerOptions
		want int
	}{
		{"telegram at 30 msg/s", testenv.WorkerOptions{}, 16},
		{"a channel of 1000 msg/s", testenv.WorkerOptions{Channel: &recorder{name: "email"}}, 100},
		{"set explicitly", testenv.WorkerOptions{Config: delivery.Config{MaxInFlight: 7}, Channel: &recorder{name: "sms"}}, 7},
	} {
		if got := env.StartWorker(tc.opts).MaxInFlight(); got != tc.want {
			t.Errorf("%s: MaxInFlight() = %d, want %d", tc.name, got, tc.want)
		}
	}
}
