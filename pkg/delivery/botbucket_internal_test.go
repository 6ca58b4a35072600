package delivery

import (
	"fmt"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// A dispatcher that launches every send some milliseconds after its token
// became due keeps the channel-wide rate: at 1000 msg/s a bucket of one
// token lost every launch's lateness beyond a millisecond, and with it most
// of the rate. No window of a second holds more sends than the rate plus
// the burst (botBurst).
func TestLateDispatcherKeepsTheChannelRate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		perSec float64
		late   time.Duration
	}{
		{"paid broadcast, on time", 1000, 0},
		{"paid broadcast, 3 ms late", 1000, 3 * time.Millisecond},
		{"paid broadcast, 9 ms late", 1000, 9 * time.Millisecond},
		{"Telegram's 30/s, 20 ms late", 30, 20 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const span = 10 * time.Second
			s, _ := newTestScheduler(tc.perSec)
			lanes := int(tc.perSec*span.Seconds()) + 100
			for c := 1; c <= lanes; c++ {
				s.arrive(mkJob(uint64(c), fmt.Sprint(c)), t0)
			}
			var at []time.Time
			now := t0
			for now.Before(t0.Add(span)) {
				j, wake := s.next(now)
				if j != nil {
					at = append(at, now)
					s.finish(j, now, true, moveOn, 0)
					continue
				}
				if wake.IsZero() {
					t.Fatalf("after %d sends nothing is left to wait for", len(at))
				}
				now = wake.Add(tc.late)
			}
			if got, want := float64(len(at))/span.Seconds(), 0.995*tc.perSec; got < want {
				t.Fatalf("%.1f sends a second, want at least %.1f (99.5%% of %v/s)", got, want, tc.perSec)
			}
			limit := int(tc.perSec) + botBurst(rate.Limit(tc.perSec))
			end := 0
			for i := range at {
				for end < len(at) && at[end].Before(at[i].Add(time.Second)) {
					end++
				}
				if n := end - i; n > limit {
					t.Fatalf("%d sends in the second from %v, want at most %d", n, at[i].Sub(t0), limit)
				}
			}
		})
	}
}

func TestBotBurst(t *testing.T) {
	for _, tc := range []struct {
		r    rate.Limit
		want int
	}{
		{30, 1},
		{199, 1},
		{200, 2},
		{1000, 10},
		{rate.Inf, 1},
		{0, 1},
	} {
		if got := botBurst(tc.r); got != tc.want {
			t.Errorf("botBurst(%v) = %d, want %d", tc.r, got, tc.want)
		}
	}
}

// The burst follows the rate when graceful degradation changes it: at 30
// msg/s the bucket is one token again.
func TestSetRateSetsTheBurst(t *testing.T) {
	s, _ := newTestScheduler(1000)
	if b := s.bot.Burst(); b != 10 {
		t.Fatalf("burst at 1000/s = %d, want 10", b)
	}
	s.setRate(30, t0)
	if b, l := s.bot.Burst(), s.bot.Limit(); b != 1 || l != 30 {
		t.Fatalf("after setRate(30): burst %d, rate %v; want 1, 30", b, l)
	}
}
