package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/system"
)

// raftGroup is a stream or one of its consumers: in a cluster each is a
// raft group of its own, with its own leader and its own election.
type raftGroup struct {
	stream, consumer string
}

func (g raftGroup) String() string {
	if g.consumer == "" {
		return g.stream
	}
	return g.stream + "/" + g.consumer
}

// groupsLedBy lists the streams (KV buckets included) and consumers whose
// leader is node. A node's SIGKILL stalls each of them until its own
// election ends, so the silence after it is the slowest of those elections
// among the groups a delivery needs.
func groupsLedBy(ctx context.Context, js natsjs.JetStream, node string) ([]raftGroup, error) {
	var out []raftGroup
	var names []string
	streams := js.ListStreams(ctx)
	for si := range streams.Info() {
		names = append(names, si.Config.Name)
		if si.Cluster != nil && si.Cluster.Leader == node {
			out = append(out, raftGroup{stream: si.Config.Name})
		}
	}
	if err := streams.Err(); err != nil {
		return nil, fmt.Errorf("listing the streams: %w", err)
	}
	for _, name := range names {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("reading stream %s: %w", name, err)
		}
		consumers := s.ListConsumers(ctx)
		for ci := range consumers.Info() {
			if consumerLedBy(ci, node) {
				out = append(out, raftGroup{stream: name, consumer: ci.Name})
			}
		}
		if err := consumers.Err(); err != nil {
			return nil, fmt.Errorf("listing the consumers of %s: %w", name, err)
		}
	}
	slices.SortFunc(out, func(a, b raftGroup) int { return strings.Compare(a.String(), b.String()) })
	return out, nil
}

// consumerLedBy reports whether node leads the durable consumer ci. An
// ephemeral consumer (a KV watch, an ordered consumer) lives on one node
// and dies with it: its client creates another one on a node that is up,
// so it never has a next leader to wait for.
func consumerLedBy(ci *natsjs.ConsumerInfo, node string) bool {
	return ci.Config.Durable != "" && ci.Cluster != nil && ci.Cluster.Leader == node
}

// election is how long a group went without a leader after a fault.
type election struct {
	group raftGroup
	after time.Duration
	err   error
}

// watchElections waits, over nc (a connection to a node that stays up),
// until each group has a leader other than old, each in a goroutine of its
// own, and returns how long after at each one came.
func watchElections(ctx context.Context, nc *nats.Conn, groups []raftGroup, old string, at time.Time) []election {
	out := make([]election, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups {
		wg.Go(func() {
			out[i] = election{group: g}
			for {
				pctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
				var p system.Replication
				var err error
				if g.consumer == "" {
					p, err = system.StreamPlacement(pctx, nc, g.stream)
				} else {
					p, err = system.ConsumerPlacement(pctx, nc, g.stream, g.consumer)
				}
				cancel()
				if err == nil && p.Leader != "" && p.Leader != old {
					out[i].after = time.Since(at)
					return
				}
				if !sleepUntil(ctx, time.Now().Add(20*time.Millisecond)) {
					out[i].err = fmt.Errorf("no new leader of %s: %w (last error: %v)", g, ctx.Err(), err)
					return
				}
			}
		})
	}
	wg.Wait()
	return out
}

// describeElections says which other groups the killed node led and when
// each had its next leader, the slowest first.
func describeElections(es []election) string {
	if len(es) == 0 {
		return ""
	}
	slices.SortFunc(es, func(a, b election) int {
		if a.err != nil || b.err != nil {
			return boolCompare(a.err != nil, b.err != nil)
		}
		return cmp.Compare(b.after, a.after)
	})
	parts := make([]string, 0, len(es))
	for _, e := range es {
		if e.err != nil {
			parts = append(parts, fmt.Sprintf("%s: %v", e.group, e.err))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.1f s", e.group, e.after.Seconds()))
	}
	return "; it also led " + strings.Join(parts, ", ")
}

// boolCompare orders true before false.
func boolCompare(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	default:
		return 1
	}
}
