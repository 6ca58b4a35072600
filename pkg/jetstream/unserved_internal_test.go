package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// fakeConn is a connection whose servers serve JetStream or not, and which
// records the moves the watch asks for. A move goes where target says,
// else to the next server of the list (nats.go's own choice).
type fakeConn struct {
	mu      sync.Mutex
	servers []string
	at      int
	served  map[string]bool
	moves   []time.Time
	last    error
	target  *moveTarget
	asked   []string
	// onAsk, if set, runs when the watch asks server url for a second
	// opinion, before the answer.
	onAsk func(url string)
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
	pool := make([]nats.Server, len(c.servers))
	for i, s := range c.servers {
		pool[i] = nats.Server{URL: &url.URL{Scheme: "nats", Host: strings.TrimPrefix(s, "nats://")}}
	}
	var picked *nats.Server
	if c.target != nil {
		picked, _ = c.target.pick(pool, nats.ServerInfo{})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = (c.at + 1) % len(c.servers)
	if picked != nil {
		c.at = slices.IndexFunc(pool, func(s nats.Server) bool { return s.URL.Host == picked.URL.Host })
	}
	c.moves = append(c.moves, time.Now())
	return nil
}

// serve sets which servers serve JetStream.
func (c *fakeConn) serve(servers ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.served = map[string]bool{}
	for _, s := range servers {
		c.served[s] = true
	}
}

func (c *fakeConn) answer(server string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.served[server] {
		return nil
	}
	return &natsjs.APIError{Code: 503, ErrorCode: jsClusterNotAvailable, Description: "JetStream system temporarily unavailable"}
}

func (c *fakeConn) probe() error { return c.answer(c.ConnectedUrl()) }

// probeAt is the second opinion of server url.
func (c *fakeConn) probeAt(url string) error {
	c.mu.Lock()
	c.asked = append(c.asked, url)
	onAsk := c.onAsk
	c.mu.Unlock()
	if onAsk != nil {
		onAsk(url)
	}
	return c.answer(url)
}

func (c *fakeConn) moveTimes() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.moves...)
}

func (c *fakeConn) askedCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.asked)
}

// watchWithSecondOpinion returns a watch of c that asks the others.
func watchWithSecondOpinion(c *fakeConn) *unservedWatch {
	c.target = &moveTarget{}
	return &unservedWatch{nc: c, log: slog.New(slog.DiscardHandler), after: 15 * time.Second, probe: c.probe,
		probeAt: c.probeAt, target: c.target}
}

// runWatch runs w until the test's end.
func runWatch(t *testing.T, w *unservedWatch) {
	closed, done := make(chan struct{}), make(chan struct{})
	go func() { w.run(closed); close(done) }()
	t.Cleanup(func() { close(closed); <-done })
}

// A node cut off from its cluster while the others serve: the watch asks
// them after askOthersAfter and moves at once, to the server that answered
// (c, not the next one of the list), instead of waiting LeaveUnservedAfter.
// Then it stays.
func TestUnservedWatchMovesWhereTheSecondOpinionServes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeConn{servers: []string{"nats://a:4222", "nats://b:4222", "nats://c:4222"}}
		c.serve("nats://c:4222")
		start := time.Now()
		runWatch(t, watchWithSecondOpinion(c))
		time.Sleep(10 * time.Second)
		// The first probe fails at 1 s, the others are asked 3 s later.
		expectOneMove(t, c, start, "nats://c:4222", 4*time.Second, 5*time.Second)
	})
}

// expectOneMove checks that c moved once, to server, between lo and hi
// after start, and stays there for a minute.
func expectOneMove(t *testing.T, c *fakeConn, start time.Time, server string, lo, hi time.Duration) {
	t.Helper()
	moves := c.moveTimes()
	if len(moves) != 1 || c.ConnectedUrl() != server {
		t.Fatalf("%v unserved: %d moves, on %s; want one, to %s", time.Since(start), len(moves), c.ConnectedUrl(), server)
	}
	if d := moves[0].Sub(start); d < lo || d > hi {
		t.Errorf("moved after %v, want %v-%v", d, lo, hi)
	}
	time.Sleep(time.Minute)
	if n := len(c.moveTimes()); n != 1 {
		t.Fatalf("%d moves while %s serves, want 1", n, server)
	}
}

// In an election no node serves: the others are asked and say so, and
// nobody moves. When it ends, every node serves again together: the node
// the connection is on answers again when asked a second time, and the
// watch stays there.
func TestUnservedWatchStaysThroughAnElection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeConn{servers: []string{"nats://a:4222", "nats://b:4222", "nats://c:4222"}}
		runWatch(t, watchWithSecondOpinion(c))
		time.Sleep(10 * time.Second)
		if n := len(c.moveTimes()); n != 0 {
			t.Fatalf("%d moves in an election, want none", n)
		}
		if c.askedCount() == 0 {
			t.Fatal("the others were never asked")
		}
		// The election ends while the watch asks b.
		c.mu.Lock()
		c.onAsk = func(string) { c.serve("nats://a:4222", "nats://b:4222", "nats://c:4222") }
		c.mu.Unlock()
		time.Sleep(10 * time.Second)
		if n := len(c.moveTimes()); n != 0 || c.ConnectedUrl() != "nats://a:4222" {
			t.Fatalf("%d moves at the end of an election, now on %s; want none", n, c.ConnectedUrl())
		}
	})
}

// Without a second opinion (nobody else can be asked) the watch moves off a
// server that has not served JetStream for the whole wait, stays on one
// that serves, and when no server serves (the cluster lost its quorum)
// waits twice as long before each next move.
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
		expectOneMove(t, c, start, "b", 15*time.Second, 17*time.Second)

		// Nobody serves: the moves come 15, 30, 60, 120, 120 s apart.
		c.serve()
		from, lost := len(c.moveTimes()), time.Now()
		time.Sleep(6 * time.Minute)
		moves := c.moveTimes()[from:]
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

// The reconnect goes to the target once, whatever credentials its URL
// carries; a target outside the pool leaves the choice to nats.go.
func TestMoveTargetIsTakenOnce(t *testing.T) {
	pool := []nats.Server{{URL: &url.URL{Scheme: "nats", Host: "a:4222"}}, {URL: &url.URL{Scheme: "nats", Host: "b:4222"}}}
	var tg moveTarget
	if s, _ := tg.pick(pool, nats.ServerInfo{}); s != nil {
		t.Fatalf("no target: picked %v, want nats.go's choice", s.URL)
	}
	tg.set("nats://user:secret@b:4222")
	if s, d := tg.pick(pool, nats.ServerInfo{}); s == nil || s.URL.Host != "b:4222" || d != 0 {
		t.Fatalf("picked %v after %v, want b at once", s, d)
	}
	if s, _ := tg.pick(pool, nats.ServerInfo{}); s != nil {
		t.Fatalf("the target was taken twice: %v", s.URL)
	}
	tg.set("nats://z:4222")
	if s, _ := tg.pick(pool, nats.ServerInfo{}); s != nil {
		t.Fatalf("a target outside the pool picked %v", s.URL)
	}
	var none *moveTarget
	none.set("nats://a:4222") // a watch without a target
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
