package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// fakeConn is a connection whose server serves JetStream or not, and which
// records the moves the watch asks for.
type fakeConn struct {
	mu      sync.Mutex
	servers []string
	at      int
	served  map[string]bool
	moves   []time.Time
	last    error
}

func (c *fakeConn) IsConnected() bool { return true }
func (c *fakeConn) LastError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}
func (c *fakeConn) ConnectedUrl() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.servers[c.at]
}
func (c *fakeConn) Servers() []string { return c.servers }
func (c *fakeConn) ForceReconnect() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = (c.at + 1) % len(c.servers)
	c.moves = append(c.moves, time.Now())
	return nil
}

func (c *fakeConn) probe() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.served[c.servers[c.at]] {
		return nil
	}
	return &natsjs.APIError{Code: 503, ErrorCode: jsClusterNotAvailable, Description: "JetStream system temporarily unavailable"}
}

func (c *fakeConn) moveTimes() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.moves...)
}

// The watch moves off a server that has not served JetStream for the whole
// wait, stays on one that serves, and when no server serves (the cluster
// lost its quorum) waits twice as long before each next move.
func TestUnservedWatchMovesOffACutOffServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeConn{servers: []string{"a", "b", "c"}, served: map[string]bool{"b": true}}
		w := &unservedWatch{nc: c, log: slog.New(slog.DiscardHandler), after: 15 * time.Second, probe: c.probe}
		closed := make(chan struct{})
		done := make(chan struct{})
		start := time.Now()
		go func() { w.run(closed); close(done) }()

		time.Sleep(10 * time.Second)
		if n := len(c.moveTimes()); n != 0 {
			t.Fatalf("moved %d times within 10 s: an election is not a reason to move", n)
		}
		time.Sleep(10 * time.Second)
		moves := c.moveTimes()
		if len(moves) != 1 || c.ConnectedUrl() != "b" {
			t.Fatalf("after 20 s unserved: %d moves, on %s; want one, to b", len(moves), c.ConnectedUrl())
		}
		if d := moves[0].Sub(start); d < 15*time.Second || d > 17*time.Second {
			t.Errorf("moved after %v, want 15-17 s", d)
		}
		time.Sleep(time.Minute)
		if n := len(c.moveTimes()); n != 1 {
			t.Fatalf("%d moves while b serves, want 1", n)
		}

		// Nobody serves: the moves come 15, 30, 60, 120, 120 s apart.
		c.mu.Lock()
		c.served = map[string]bool{}
		c.mu.Unlock()
		from, lost := len(c.moveTimes()), time.Now()
		time.Sleep(6 * time.Minute)
		moves = c.moveTimes()[from:]
		if len(moves) < 5 {
			t.Fatalf("%d moves in 6 minutes with no server serving, want 5", len(moves))
		}
		gaps := []time.Duration{moves[0].Sub(lost).Round(time.Second)}
		for i := 1; i < len(moves); i++ {
			gaps = append(gaps, moves[i].Sub(moves[i-1]).Round(time.Second))
		}
		want := []time.Duration{15 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute, 2 * time.Minute}
		for i, g := range want {
			if gaps[i] < g || gaps[i] > g+2*time.Second {
				t.Fatalf("moves %v apart with no server serving, want %v (each +1 s at most)", gaps, want)
			}
		}
		close(closed)
		<-done
	})
}

// Only the answers that say this server cannot serve JetStream count:
// errors that every server would give do not move the connection.
func TestUnservedErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{&natsjs.APIError{Code: 503, ErrorCode: jsClusterNotAvailable}, true},
		{fmt.Errorf("reading: %w", natsjs.ErrJetStreamNotEnabled), true}, // nats.go's "no responders"
		{context.DeadlineExceeded, true},
		{nats.ErrTimeout, true},
		{nats.ErrNoResponders, true},
		{natsjs.ErrJetStreamNotEnabledForAccount, false},
		{&natsjs.APIError{Code: 403, ErrorCode: 10000}, false},
		{errors.New("permissions violation"), false},
	} {
		if got := unserved(tc.err); got != tc.want {
			t.Errorf("unserved(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// A user whose permissions predate the watch may not ask $JS.API.INFO: the
// server drops the request, the probe times out and the connection's last
// error names the subject. The watch stops at once instead of moving the
// connection around, and says what to add.
func TestUnservedWatchStopsWhenTheInfoRequestIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeConn{servers: []string{"a", "b"}, served: map[string]bool{},
			last: fmt.Errorf("%w: Permissions Violation for Publish to \"$JS.API.INFO\"", nats.ErrPermissionViolation)}
		var logs strings.Builder
		w := &unservedWatch{nc: c, log: slog.New(slog.NewTextHandler(&logs, nil)), after: 15 * time.Second,
			probe: func() error { return context.DeadlineExceeded }}
		done := make(chan struct{})
		go func() { w.run(make(chan struct{})); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatal("the watch goes on after the info request was refused")
		}
		if n := len(c.moveTimes()); n != 0 {
			t.Errorf("%d moves, want none", n)
		}
		if !strings.Contains(logs.String(), "may not publish to $JS.API.INFO") {
			t.Errorf("the log does not say what to add: %s", logs.String())
		}
	})
}
