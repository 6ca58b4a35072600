package delivery

import (
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// A busy chat whose every send is launched a little after its token became
// due (waiting for the bot-wide slot, a timer firing late) keeps its rate:
// the lateness is not added to every interval. Two sends are never closer
// than 95% of the interval. The clock is synthetic; the lane's limiter and
// tokenDue are the dispatcher's.
func TestLateLaunchesDoNotSlowABusyChat(t *testing.T) {
	for _, tc := range []struct {
		name      string
		perSec    float64
		late      time.Duration // launch after the token became due
		roundTrip time.Duration
	}{
		{"private chat, 30 ms late", 1, 30 * time.Millisecond, 40 * time.Millisecond},
		{"private chat, later than the slack", 1, 120 * time.Millisecond, 40 * time.Millisecond},
		{"group, 100 ms late", 20.0 / 60, 100 * time.Millisecond, 40 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			interval := time.Duration(float64(time.Second) / tc.perSec)
			slack := interval / chatSlackFraction
			l := &lane{limiter: rate.NewLimiter(rate.Limit(tc.perSec), 1)}
			start := time.Unix(1_000_000, 0)
			launch := start
			l.readyAt = start
			var launches []time.Time
			const sends = 50
			for range sends {
				launches = append(launches, launch)
				l.limiter.ReserveN(l.tokenDue(launch), 1)
				// The answer comes back; the dispatcher reschedules the lane
				// as reschedule does, and launches it late.
				now := launch.Add(tc.roundTrip)
				l.readyAt = now
				if tokens := l.limiter.TokensAt(now); tokens < 1 {
					l.readyAt = now.Add(time.Duration((1 - tokens) / tc.perSec * float64(time.Second)))
				}
				launch = l.readyAt.Add(tc.late)
			}
			for i := 1; i < len(launches); i++ {
				if gap := launches[i].Sub(launches[i-1]); gap < interval-slack {
					t.Fatalf("sends %d and %d are %v apart, want at least %v (95%% of %v)", i-1, i, gap, interval-slack, interval)
				}
			}
			// Lateness up to the slack is absorbed: the chat keeps its rate.
			// Beyond it, each send loses only what exceeds the slack.
			perSend := interval + max(tc.late-slack, 0)
			want := time.Duration(sends-1) * perSend
			if got := launches[sends-1].Sub(launches[0]); got > want+tc.late {
				t.Fatalf("%d sends took %v, want at most %v (%v each)", sends, got, want+tc.late, perSend)
			}
		})
	}
}
