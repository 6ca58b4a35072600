package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
)

// On a cluster every stream, bucket and consumer is a Raft group of its
// own, and nats-server places their leaders independently, so they spread
// over the nodes. A worker needs several of them for every message (NOTIFY
// and its consumer, the delivery records' bucket, the attempts' bucket):
// when any node dies, whichever of them it led is elected again, which
// takes nats-server 4-9 s (not configurable), and deliveries stop for that
// long. With the leaders spread, almost every node loss stops deliveries.
//
// A LeaderGatherer keeps the leaders of those groups on the node that
// leads one anchor stream (NOTIFY): it asks each group led elsewhere to
// step down in favour of that node (a step-down with a preferred server,
// nats-server 2.11+), which moves its leadership in well under a second.
// Then losing either of the two other nodes costs no election at all;
// only losing the leaders' node does, once. A group whose anchor's node is
// not a current replica of it (behind after a restart) is left where it is
// until it is.

// Defaults of [GatherOptions].
const (
	DefaultGatherInterval = time.Second
	DefaultGatherSettle   = 2 * time.Second
	DefaultGatherRetry    = 5 * time.Second
	defaultGatherTimeout  = time.Second
)

// LeaderGroup names a replicated group: a stream, or one of its consumers.
type LeaderGroup struct {
	// Stream is the stream's name (a bucket B is the stream KV_B).
	Stream string
	// Consumer is the consumer's durable name; "" for the stream itself.
	Consumer string
}

// String returns the stream's name, or stream/consumer.
func (g LeaderGroup) String() string {
	if g.Consumer == "" {
		return g.Stream
	}
	return g.Stream + "/" + g.Consumer
}

// infoSubject is the JetStream API subject of the group's info.
func (g LeaderGroup) infoSubject() string {
	if g.Consumer == "" {
		return "$JS.API.STREAM.INFO." + g.Stream
	}
	return "$JS.API.CONSUMER.INFO." + g.Stream + "." + g.Consumer
}

// stepDownSubject is the JetStream API subject of the group's step-down.
func (g LeaderGroup) stepDownSubject() string {
	if g.Consumer == "" {
		return "$JS.API.STREAM.LEADER.STEPDOWN." + g.Stream
	}
	return "$JS.API.CONSUMER.LEADER.STEPDOWN." + g.Stream + "." + g.Consumer
}

// GatherGroups returns the groups of d other than its stream NOTIFY, whose
// leaders should follow NOTIFY's: the dead-letter stream, every bucket and
// every channel's consumer.
func GatherGroups(d Declaration) []LeaderGroup {
	var gs []LeaderGroup
	for _, s := range d.Streams {
		if s.Name != d.Names.Stream {
			gs = append(gs, LeaderGroup{Stream: s.Name})
		}
	}
	for _, b := range d.Buckets {
		gs = append(gs, LeaderGroup{Stream: "KV_" + b.Bucket})
	}
	for _, c := range d.Consumers {
		gs = append(gs, LeaderGroup{Stream: c.Stream, Consumer: c.Config.Durable})
	}
	return gs
}

// GatherOptions configure a [LeaderGatherer].
type GatherOptions struct {
	// Anchor is the stream whose leader's node the others follow (NOTIFY).
	Anchor string
	// Groups are the groups to keep there.
	Groups []LeaderGroup
	// Interval is how often the leaders are compared. Default 1 s.
	Interval time.Duration
	// Settle is how long the anchor's leader must have led before the
	// others follow it, so that a string of elections is not chased.
	// Default 2 s.
	Settle time.Duration
	// Retry is how long a group is left alone after a step-down was asked
	// of it, whatever the answer. Default 5 s.
	Retry time.Duration
	// Active, when set, is asked before each comparison; nothing is done
	// while it returns false (a standby's gatherer stays quiet).
	Active func() bool
	// Logger receives a line per move and per failure. Default: discard.
	Logger *slog.Logger
	// Registerer receives the metrics (prefix tgnotify_leaders_). Nil
	// registers nothing.
	Registerer prometheus.Registerer
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// LeaderGatherer keeps the leaders of GatherOptions.Groups on the node that
// leads GatherOptions.Anchor. Create it with [NewLeaderGatherer].
type LeaderGatherer struct {
	nc   Requester
	opts GatherOptions
	log  *slog.Logger

	// retryAt is when each group may be asked again.
	retryAt map[LeaderGroup]time.Time
	// anchorLeader and anchorSeen are the anchor's leader at the last
	// pass and when it was first seen leading, for a server that does not
	// report leader_since.
	anchorLeader string
	anchorSeen   time.Time

	moves     *prometheus.CounterVec
	elsewhere prometheus.Gauge
}

// ErrNoAnchor is returned by [NewLeaderGatherer] without an anchor stream.
var ErrNoAnchor = errors.New("jetstream: a leader gatherer needs an anchor stream")

// NewLeaderGatherer returns a gatherer that works over nc.
func NewLeaderGatherer(nc *nats.Conn, o GatherOptions) (*LeaderGatherer, error) {
	return newLeaderGatherer(nc, o)
}

func newLeaderGatherer(nc Requester, o GatherOptions) (*LeaderGatherer, error) {
	if o.Anchor == "" {
		return nil, ErrNoAnchor
	}
	setNonZero(&o.Interval, DefaultGatherInterval)
	setNonZero(&o.Settle, DefaultGatherSettle)
	setNonZero(&o.Retry, DefaultGatherRetry)
	if o.Now == nil {
		o.Now = time.Now
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g := &LeaderGatherer{
		nc: nc, opts: o, log: log.With("anchor", o.Anchor), retryAt: map[LeaderGroup]time.Time{},
		moves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tgnotify", Subsystem: "leaders", Name: "moves_total",
			Help: "Step-downs asked of a group led away from the anchor stream's node, by group and result (moved, failed).",
		}, []string{"group", "result"}),
		elsewhere: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "tgnotify", Subsystem: "leaders", Name: "elsewhere",
			Help: "Groups whose leader was not on the anchor stream's node at the last comparison (elections included).",
		}),
	}
	if o.Registerer != nil {
		for _, c := range []prometheus.Collector{g.moves, g.elsewhere} {
			if err := o.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("registering the leader gatherer's metrics: %w", err)
			}
		}
	}
	return g, nil
}

// Run compares the leaders every Interval until ctx ends, and returns nil
// then.
func (g *LeaderGatherer) Run(ctx context.Context) error {
	t := time.NewTicker(g.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if g.opts.Active == nil || g.opts.Active() {
			g.pass(ctx)
		}
	}
}

// groupLeader is what a pass reads of a group's info.
type groupLeader struct {
	leader string
	since  *time.Time
	// replicas are the members other than the leader.
	replicas []replicaState
}

// replicaState is a follower as the leader sees it.
type replicaState struct {
	name    string
	current bool
	offline bool
}

// hasCurrent reports whether node is a current, online follower.
func (l groupLeader) hasCurrent(node string) bool {
	for _, r := range l.replicas {
		if r.name == node {
			return r.current && !r.offline
		}
	}
	return false
}

// pass compares every group's leader with the anchor's once and asks each
// one led elsewhere to move. It returns how many it asked.
func (g *LeaderGatherer) pass(ctx context.Context) int {
	anchor, err := g.leaderOf(ctx, LeaderGroup{Stream: g.opts.Anchor})
	if err != nil || anchor.leader == "" || len(anchor.replicas) == 0 {
		// An election, an unreachable server, or a stream that is not
		// replicated: nothing to follow.
		g.anchorLeader = ""
		return 0
	}
	now := g.opts.Now()
	if anchor.leader != g.anchorLeader {
		g.anchorLeader, g.anchorSeen = anchor.leader, now
	}
	since := g.anchorSeen
	if anchor.since != nil {
		since = *anchor.since
	}
	if now.Sub(since) < g.opts.Settle {
		return 0
	}
	target := anchor.leader
	asked, elsewhere := 0, 0
	for _, grp := range g.opts.Groups {
		l, err := g.leaderOf(ctx, grp)
		if err != nil || l.leader != target {
			elsewhere++
		}
		if err != nil || l.leader == "" || l.leader == target || now.Before(g.retryAt[grp]) || !l.hasCurrent(target) {
			continue
		}
		g.retryAt[grp] = now.Add(g.opts.Retry)
		asked++
		if err := g.stepDown(ctx, grp, target); err != nil {
			g.moves.WithLabelValues(grp.String(), "failed").Inc()
			g.log.Warn("could not move a leader to the anchor's node", "group", grp.String(), "from", l.leader, "to", target, "err", err)
			continue
		}
		g.moves.WithLabelValues(grp.String(), "moved").Inc()
		g.log.Info("moved a leader to the anchor's node", "group", grp.String(), "from", l.leader, "to", target)
	}
	g.elsewhere.Set(float64(elsewhere))
	return asked
}

// request asks subject with data, bounded by defaultGatherTimeout.
func (g *LeaderGatherer) request(ctx context.Context, subject string, data []byte, v any) error {
	ctx, cancel := context.WithTimeout(ctx, defaultGatherTimeout)
	defer cancel()
	return APIRequest(ctx, g.nc, subject, data, v)
}

// leaderOf reads a group's leader and followers from its info.
func (g *LeaderGatherer) leaderOf(ctx context.Context, grp LeaderGroup) (groupLeader, error) {
	var info struct {
		Cluster struct {
			Leader      string     `json:"leader"`
			LeaderSince *time.Time `json:"leader_since"`
			Replicas    []struct {
				Name    string `json:"name"`
				Current bool   `json:"current"`
				Offline bool   `json:"offline"`
			} `json:"replicas"`
		} `json:"cluster"`
	}
	if err := g.request(ctx, grp.infoSubject(), nil, &info); err != nil {
		return groupLeader{}, err
	}
	l := groupLeader{leader: info.Cluster.Leader, since: info.Cluster.LeaderSince}
	for _, r := range info.Cluster.Replicas {
		l.replicas = append(l.replicas, replicaState{name: r.Name, current: r.Current, offline: r.Offline})
	}
	return l, nil
}

// stepDown asks grp's leader to hand its leadership to node.
func (g *LeaderGatherer) stepDown(ctx context.Context, grp LeaderGroup, node string) error {
	body, err := json.Marshal(map[string]map[string]string{"placement": {"preferred": node}})
	if err != nil {
		return err
	}
	return g.request(ctx, grp.stepDownSubject(), body, nil)
}
