package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// fakeCluster answers the gatherer's info and step-down requests from a
// table of groups, and records the step-downs asked.
type fakeCluster struct {
	groups map[string]fakeGroup // by info subject
	asked  []string             // "subject -> preferred"
}

// fakeGroup is a group's state as its info reports it.
type fakeGroup struct {
	leader string
	since  time.Time
	// followers maps a follower's name to whether it is current.
	followers map[string]bool
	// unanswered makes the info request time out (no leader).
	unanswered bool
}

func (f *fakeCluster) RequestWithContext(_ context.Context, subject string, data []byte) (*nats.Msg, error) {
	if g, ok := f.groups[subject]; ok {
		if g.unanswered {
			return nil, context.DeadlineExceeded
		}
		type replica struct {
			Name    string `json:"name"`
			Current bool   `json:"current"`
		}
		var info struct {
			Cluster struct {
				Leader      string     `json:"leader,omitempty"`
				LeaderSince *time.Time `json:"leader_since,omitempty"`
				Replicas    []replica  `json:"replicas,omitempty"`
			} `json:"cluster"`
		}
		info.Cluster.Leader = g.leader
		if !g.since.IsZero() {
			info.Cluster.LeaderSince = &g.since
		}
		for name, current := range g.followers {
			info.Cluster.Replicas = append(info.Cluster.Replicas, replica{Name: name, Current: current})
		}
		b, _ := json.Marshal(info)
		return &nats.Msg{Data: b}, nil
	}
	var body struct {
		Placement struct {
			Preferred string `json:"preferred"`
		} `json:"placement"`
	}
	if err := json.Unmarshal(data, &body); err != nil {
		return nil, err
	}
	f.asked = append(f.asked, subject+" -> "+body.Placement.Preferred)
	return &nats.Msg{Data: []byte(`{"success":true}`)}, nil
}

// TestGatherPass checks what one pass asks: only groups led elsewhere,
// with a leader, whose follower on the anchor's node is current; nothing
// before the anchor's leader settled, while it is being elected, or while
// the gatherer is not active; and a group not again before Retry.
func TestGatherPass(t *testing.T) {
	now := time.Date(2026, 12, 4, 5, 0, 0, 0, time.UTC)
	settled := now.Add(-time.Minute)
	f := &fakeCluster{groups: map[string]fakeGroup{
		"$JS.API.STREAM.INFO.NOTIFY":                   {leader: "n1", since: settled, followers: map[string]bool{"n2": true, "n3": true}},
		"$JS.API.STREAM.INFO.KV_a":                     {leader: "n2", followers: map[string]bool{"n1": true, "n3": true}},
		"$JS.API.STREAM.INFO.KV_b":                     {leader: "n1", followers: map[string]bool{"n2": true, "n3": true}},
		"$JS.API.STREAM.INFO.KV_c":                     {leader: "n3", followers: map[string]bool{"n1": false, "n2": true}},
		"$JS.API.STREAM.INFO.KV_d":                     {unanswered: true},
		"$JS.API.CONSUMER.INFO.NOTIFY.telegram-worker": {leader: "n3", followers: map[string]bool{"n1": true, "n2": true}},
		"$JS.API.CONSUMER.INFO.NOTIFY.max-worker":      {leader: "", followers: map[string]bool{}},
		"$JS.API.STREAM.INFO.NOTIFY_DEAD":              {leader: "n2", followers: map[string]bool{"n3": true}},
	}}
	active := true
	g, err := newLeaderGatherer(f, GatherOptions{
		Anchor: "NOTIFY",
		Groups: []LeaderGroup{{Stream: "KV_a"}, {Stream: "KV_b"}, {Stream: "KV_c"}, {Stream: "KV_d"},
			{Stream: "NOTIFY", Consumer: "telegram-worker"}, {Stream: "NOTIFY", Consumer: "max-worker"}, {Stream: "NOTIFY_DEAD"}},
		Now:    func() time.Time { return now },
		Active: func() bool { return active },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	want := []string{
		"$JS.API.STREAM.LEADER.STEPDOWN.KV_a -> n1",
		"$JS.API.CONSUMER.LEADER.STEPDOWN.NOTIFY.telegram-worker -> n1",
	}
	if n := g.pass(ctx); n != 2 || !slices.Equal(f.asked, want) {
		t.Fatalf("first pass asked %d: %q, want %q (KV_b is with NOTIFY; KV_c's n1 is behind; KV_d and max-worker have no leader; NOTIFY_DEAD has no n1)", n, f.asked, want)
	}
	if got := metricValue(t, g.elsewhere); got != 6 {
		t.Fatalf("tgnotify_leaders_elsewhere = %v, want 6 (every group but KV_b)", got)
	}

	// Nothing again before Retry, even though nothing moved.
	f.asked = nil
	now = now.Add(DefaultGatherRetry - time.Millisecond)
	if n := g.pass(ctx); n != 0 {
		t.Fatalf("a pass within Retry asked %q", f.asked)
	}
	now = now.Add(time.Millisecond)
	if n := g.pass(ctx); n != 2 {
		t.Fatalf("a pass after Retry asked %q, want the two again", f.asked)
	}

	// A new anchor leader is followed only once it settled.
	f.asked = nil
	now = now.Add(time.Hour)
	f.groups["$JS.API.STREAM.INFO.NOTIFY"] = fakeGroup{leader: "n2", since: now.Add(-DefaultGatherSettle + time.Millisecond),
		followers: map[string]bool{"n1": true, "n3": true}}
	if n := g.pass(ctx); n != 0 {
		t.Fatalf("a pass before the anchor's leader settled asked %q", f.asked)
	}
	now = now.Add(time.Millisecond)
	if n := g.pass(ctx); n != 3 {
		t.Fatalf("a pass after the anchor's leader settled asked %q, want KV_b, KV_c and the consumer to move to n2", f.asked)
	}

	// Without leader_since, the gatherer's own first sighting counts.
	f.asked = nil
	now = now.Add(time.Hour)
	f.groups["$JS.API.STREAM.INFO.NOTIFY"] = fakeGroup{leader: "n3", followers: map[string]bool{"n1": true, "n2": true}}
	if n := g.pass(ctx); n != 0 {
		t.Fatalf("a pass that first saw the anchor's leader asked %q", f.asked)
	}
	now = now.Add(DefaultGatherSettle)
	if n := g.pass(ctx); n == 0 {
		t.Fatal("a pass a Settle after the first sighting asked nothing")
	}

	// An anchor being elected, or not replicated: nothing.
	for name, anchor := range map[string]fakeGroup{
		"no leader":      {leader: "", followers: map[string]bool{"n1": true}},
		"unanswered":     {unanswered: true},
		"not replicated": {leader: "n1", since: settled},
	} {
		f.asked = nil
		now = now.Add(time.Hour)
		f.groups["$JS.API.STREAM.INFO.NOTIFY"] = anchor
		if n := g.pass(ctx); n != 0 {
			t.Errorf("anchor %s: a pass asked %q", name, f.asked)
		}
	}

	// Run asks nothing while not active.
	f.groups["$JS.API.STREAM.INFO.NOTIFY"] = fakeGroup{leader: "n1", since: settled, followers: map[string]bool{"n2": true, "n3": true}}
	f.asked = nil
	active = false
	g.opts.Interval = time.Millisecond
	rctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := g.Run(rctx); err != nil || len(f.asked) != 0 {
		t.Fatalf("Run while not active: err %v, asked %q", err, f.asked)
	}
}

// TestNewLeaderGathererNeedsAnAnchor checks the error without one.
func TestNewLeaderGathererNeedsAnAnchor(t *testing.T) {
	if _, err := newLeaderGatherer(&fakeCluster{}, GatherOptions{}); !errors.Is(err, ErrNoAnchor) {
		t.Fatalf("err = %v, want ErrNoAnchor", err)
	}
}

// TestGatherStepDownRefused checks that a refused step-down is counted as
// failed and the group left alone for Retry.
func TestGatherStepDownRefused(t *testing.T) {
	now := time.Date(2026, 12, 4, 5, 0, 0, 0, time.UTC)
	f := &refusingCluster{fakeCluster{groups: map[string]fakeGroup{
		"$JS.API.STREAM.INFO.NOTIFY": {leader: "n1", since: now.Add(-time.Minute), followers: map[string]bool{"n2": true, "n3": true}},
		"$JS.API.STREAM.INFO.KV_a":   {leader: "n2", followers: map[string]bool{"n1": true, "n3": true}},
	}}}
	g, err := newLeaderGatherer(f, GatherOptions{Anchor: "NOTIFY", Groups: []LeaderGroup{{Stream: "KV_a"}}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if n := g.pass(context.Background()); n != 1 {
		t.Fatalf("pass asked %d, want 1", n)
	}
	if got := metricValue(t, g.moves.WithLabelValues("KV_a", "failed")); got != 1 {
		t.Fatalf("failed moves = %v, want 1", got)
	}
	if n := g.pass(context.Background()); n != 0 {
		t.Fatalf("a pass within Retry after a refusal asked %d", n)
	}
}

// refusingCluster refuses every step-down.
type refusingCluster struct{ fakeCluster }

func (r *refusingCluster) RequestWithContext(ctx context.Context, subject string, data []byte) (*nats.Msg, error) {
	if data != nil {
		return &nats.Msg{Data: []byte(`{"error":{"code":400,"err_code":10039,"description":"preferred server \"n1\" not current"}}`)}, nil
	}
	return r.fakeCluster.RequestWithContext(ctx, subject, data)
}

// metricValue reads a counter's or a gauge's value.
func metricValue(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Counter != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

// TestAPIRequestErrors checks the *APIError of a refusal, of a failed
// request and of an answer that is not JSON.
func TestAPIRequestErrors(t *testing.T) {
	ctx := context.Background()
	var ae *APIError
	err := APIRequest(ctx, &refusingCluster{}, "$JS.API.STREAM.LEADER.STEPDOWN.KV_a", []byte(`{}`), nil)
	if !errors.As(err, &ae) || ae.Code != 10039 || ae.Subject != "$JS.API.STREAM.LEADER.STEPDOWN.KV_a" {
		t.Fatalf("refusal: err = %v, want an *APIError with code 10039 naming the subject", err)
	}
	f := &fakeCluster{groups: map[string]fakeGroup{"$JS.API.STREAM.INFO.X": {unanswered: true}}}
	if err := APIRequest(ctx, f, "$JS.API.STREAM.INFO.X", nil, nil); !errors.As(err, &ae) || !errors.Is(err, context.DeadlineExceeded) || ae.Code != 0 {
		t.Fatalf("failed request: err = %v, want an *APIError wrapping context.DeadlineExceeded", err)
	}
	if err := APIRequest(ctx, notJSON{}, "$JS.API.INFO", nil, nil); !errors.As(err, &ae) || ae.Code != 0 {
		t.Fatalf("not JSON: err = %v, want an *APIError", err)
	}
}

// notJSON answers every request with text.
type notJSON struct{}

func (notJSON) RequestWithContext(context.Context, string, []byte) (*nats.Msg, error) {
	return &nats.Msg{Data: []byte("+OK")}, nil
}
