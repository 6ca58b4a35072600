package jetstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/system"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// leaderOf returns the leader of grp ("" during an election or on error).
func leaderOf(nc *nats.Conn, grp jetstream.LeaderGroup) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var p system.Replication
	if grp.Consumer == "" {
		p, _ = system.StreamPlacement(ctx, nc, grp.Stream)
	} else {
		p, _ = system.ConsumerPlacement(ctx, nc, grp.Stream, grp.Consumer)
	}
	return p.Leader
}

// stepDownTo asks grp's leader to hand over to node; errors are returned
// for the caller to retry.
func stepDownTo(nc *nats.Conn, grp jetstream.LeaderGroup, node string) error {
	subject := "$JS.API.STREAM.LEADER.STEPDOWN." + grp.Stream
	if grp.Consumer != "" {
		subject = "$JS.API.CONSUMER.LEADER.STEPDOWN." + grp.Stream + "." + grp.Consumer
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return jetstream.APIRequest(ctx, nc, subject, []byte(`{"placement":{"preferred":"`+node+`"}}`), nil)
}

// TestLeaderGathererKeepsLeadersWithNotify provisions the real declaration
// with three replicas on a three-node cluster, scatters the leaders of the
// buckets, the dead-letter stream and the consumers away from NOTIFY's,
// and checks that the gatherer brings every one of them to NOTIFY's node;
// then it shuts that node down, and checks that they all follow NOTIFY's
// next leader.
func TestLeaderGathererKeepsLeadersWithNotify(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s := jetstream.DefaultSettings()
	s.Replicas = 3
	d := jetstream.Declare(s)
	natstest.WaitFor(t, time.Minute, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := jetstream.Provision(ctx, js, d, false)
		return err == nil
	}, "the declaration provisioned with three replicas")
	anchor := jetstream.LeaderGroup{Stream: jetstream.StreamNotify}
	groups := jetstream.GatherGroups(d)
	if len(groups) != 1+3+len(s.Channels) {
		// NOTIFY_DEAD, three buckets, a consumer per channel.
		t.Fatalf("GatherGroups = %v, want NOTIFY_DEAD, 3 buckets and %d consumers", groups, len(s.Channels))
	}
	all := append([]jetstream.LeaderGroup{anchor}, groups...)
	natstest.WaitFor(t, time.Minute, func() bool {
		for _, g := range all {
			if leaderOf(nc, g) == "" {
				return false
			}
		}
		return true
	}, "every group to have a leader")

	// Scatter: every group led by a node other than NOTIFY's.
	first := leaderOf(nc, anchor)
	other := map[string]string{"n1": "n2", "n2": "n3", "n3": "n1"}[first]
	natstest.WaitFor(t, time.Minute, func() bool {
		scattered := true
		for _, g := range groups {
			if leaderOf(nc, g) == first {
				scattered = false
				_ = stepDownTo(nc, g, other)
			}
		}
		return scattered && leaderOf(nc, anchor) == first
	}, "every group led away from NOTIFY's leader "+first)

	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	g, err := jetstream.NewLeaderGatherer(nc, jetstream.GatherOptions{
		Anchor: jetstream.StreamNotify, Groups: groups,
		Interval: 50 * time.Millisecond, Settle: time.Nanosecond, Retry: 500 * time.Millisecond,
		Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- g.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	gathered := func(node string) func() bool {
		return func() bool {
			for _, g := range all {
				if leaderOf(nc, g) != node {
					return false
				}
			}
			return true
		}
	}
	natstest.WaitFor(t, time.Minute, gathered(first), "every group led by "+first+", NOTIFY's leader")
	for _, g := range groups {
		if n := moved(t, reg, g.String()); n < 1 {
			t.Errorf("tgnotify_leaders_moves_total{group=%q,result=moved} = %d, want at least 1", g, n)
		}
	}

	// NOTIFY's node goes: every group follows NOTIFY's next leader.
	c.Node(first).Shutdown()
	var next string
	natstest.WaitFor(t, time.Minute, func() bool {
		next = leaderOf(nc, anchor)
		return next != "" && next != first
	}, "NOTIFY's next leader")
	natstest.WaitFor(t, time.Minute, func() bool {
		next = leaderOf(nc, anchor)
		return next != "" && gathered(next)()
	}, "every group led by NOTIFY's next leader")
}

// moved returns tgnotify_leaders_moves_total{group, result="moved"} in reg.
func moved(t *testing.T, reg *prometheus.Registry, group string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "tgnotify_leaders_moves_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["group"] == group && labels["result"] == "moved" {
				return int(m.GetCounter().GetValue())
			}
		}
	}
	return 0
}
