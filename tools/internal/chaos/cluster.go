package chaos

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tgnotify/tgnotify/internal/system"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// electionWait bounds the wait for a new leader after a fault; nats-server
// elects within 4–9 s of losing one.
const electionWait = 20 * time.Second

// nodeConns are the harness's connections to each node of a cluster, so
// that it can watch the cluster from a node a fault leaves alone (a
// connection that must move first would add its reconnection to what it
// measures).
type nodeConns struct {
	cluster *system.Cluster
	mu      sync.Mutex
	conns   map[string]*nats.Conn
}

// to returns a connection to node, made on first use.
func (n *nodeConns) to(node string) (*nats.Conn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if nc := n.conns[node]; nc != nil {
		return nc, nil
	}
	nc, err := nats.Connect(n.cluster.URL(node), nats.Name("chaos-watch-"+node), nats.MaxReconnects(-1),
		nats.ReconnectWait(100*time.Millisecond), nats.RetryOnFailedConnect(true))
	if err != nil {
		return nil, err
	}
	if n.conns == nil {
		n.conns = map[string]*nats.Conn{}
	}
	n.conns[node] = nc
	return nc, nil
}

// besides returns a connection to a node other than node.
func (n *nodeConns) besides(node string) (*nats.Conn, error) {
	for _, other := range n.cluster.Names() {
		if other != node {
			return n.to(other)
		}
	}
	return nil, fmt.Errorf("no node besides %s", node)
}

// close closes every connection.
func (n *nodeConns) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, nc := range n.conns {
		nc.Close()
	}
}

// placement asks each node in turn for the leader and replicas of stream
// (or of one of its consumers), each within a second, until one answers.
func (n *nodeConns) placement(ctx context.Context, stream, consumer string) (system.Replication, error) {
	var last error
	for _, node := range n.cluster.Names() {
		nc, err := n.to(node)
		if err != nil {
			last = err
			continue
		}
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		var p system.Replication
		if consumer != "" {
			p, err = system.ConsumerPlacement(qctx, nc, stream, consumer)
		} else {
			p, err = system.StreamPlacement(qctx, nc, stream)
		}
		cancel()
		if err == nil {
			return p, nil
		}
		last = err
	}
	return system.Replication{}, last
}

// notifyLeader returns NOTIFY's leader, "" when it has none or no node
// says.
func (in *injector) notifyLeader(ctx context.Context) string {
	p, err := in.nodes.placement(ctx, jetstream.StreamNotify, "")
	if err != nil {
		return ""
	}
	return p.Leader
}

// pickNode chooses the node of a KillNode or Partition: NOTIFY's leader
// when pick < 0.5 and it has one, else node.
func (in *injector) pickNode(ctx context.Context, pick float64, node string) (string, bool) {
	leader := in.notifyLeader(ctx)
	if pick < 0.5 && leader != "" {
		return leader, true
	}
	return node, node == leader
}

// watchElection waits, over a connection to a node other than gone, for
// NOTIFY to have a leader other than gone, and returns it with the time
// since start; "" when it did not within electionWait.
func (in *injector) watchElection(ctx context.Context, gone string, start time.Time) (string, time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, electionWait)
	defer cancel()
	nc, err := in.nodes.besides(gone)
	if err != nil {
		return "", 0
	}
	l, err := system.WaitLeader(ctx, nc, jetstream.StreamNotify, gone)
	if err != nil {
		return "", 0
	}
	return l, time.Since(start)
}

// waitHealthy waits until every node is current again, returning how long
// that took.
func (in *injector) waitHealthy(ctx context.Context, since time.Time) time.Duration {
	if err := in.s.cluster.WaitHealthy(ctx, healthyWait); err != nil {
		in.tl.problem("the cluster was not healthy again within %v: %v", healthyWait, err)
	}
	return time.Since(since)
}

// record adds a cluster fault to the timeline.
func (in *injector) record(f ClusterFault) {
	in.tl.mu.Lock()
	defer in.tl.mu.Unlock()
	in.tl.cluster = append(in.tl.cluster, f)
}

// restartNode restarts one node (SIGKILL when e.Hard, else SIGTERM), down
// for e.Delay, and waits until every node is current.
func (in *injector) restartNode(ctx context.Context, e Event) {
	restartCtx := context.WithoutCancel(ctx)
	down := time.Now()
	if e.Hard {
		in.s.cluster.Kill(e.Node)
	} else if err := in.s.cluster.Stop(e.Node); err != nil {
		in.tl.problem("stopping node %s: %v", e.Node, err)
	}
	pause(ctx, e.Delay)
	if err := in.s.cluster.Start(restartCtx, e.Node); err != nil {
		in.tl.problem("restarting node %s: %v", e.Node, err)
		return
	}
	r := NATSRestart{Hard: e.Hard, Down: down, Up: time.Now(), Node: e.Node}
	in.tl.mu.Lock()
	in.tl.natsRestart = append(in.tl.natsRestart, r)
	in.tl.mu.Unlock()
	healthy := in.waitHealthy(restartCtx, r.Up)
	how := "SIGTERM"
	if e.Hard {
		how = "SIGKILL"
	}
	in.logf("restarted node %s (%s), down %v, every node current %v later", e.Node, how, r.Up.Sub(r.Down).Round(time.Millisecond), healthy.Round(100*time.Millisecond))
}

// killNode SIGKILLs a node, starts it again after e.Delay on its store, and
// waits until every node is current.
func (in *injector) killNode(ctx context.Context, e Event) {
	restartCtx := context.WithoutCancel(ctx)
	node, wasLeader := in.pickNode(ctx, e.Pick, e.Node)
	_, at, ok := in.s.cluster.Kill(node)
	if !ok {
		return
	}
	f := ClusterFault{Kind: KillNode, Node: node, WasLeader: wasLeader, Start: at}
	elected := make(chan struct{})
	go func() {
		defer close(elected)
		if wasLeader {
			f.Leader, f.Elected = in.watchElection(restartCtx, node, at)
		}
	}()
	pause(ctx, e.Delay)
	if err := in.s.cluster.Start(restartCtx, node); err != nil {
		in.tl.problem("restarting node %s: %v", node, err)
	}
	f.End = time.Now()
	<-elected
	f.Healthy = in.waitHealthy(restartCtx, f.End)
	in.record(f)
	in.logf("killed node %s%s, back after %v%s, every node current %v later", node, leaderNote(wasLeader),
		f.End.Sub(at).Round(time.Millisecond), electionNote(f), f.Healthy.Round(100*time.Millisecond))
}

// partition cuts a node off for e.Delay, heals it and waits until every
// node is current.
func (in *injector) partition(ctx context.Context, e Event) {
	restartCtx := context.WithoutCancel(ctx)
	node, wasLeader := in.pickNode(ctx, e.Pick, e.Node)
	var clients system.CutMode
	switch e.Clients {
	case "refuse":
		clients = system.Refuse
	case "blackhole":
		clients = system.Blackhole
	}
	start := time.Now()
	if err := in.s.cluster.Partition(node, clients); err != nil {
		in.tl.problem("partitioning node %s: %v", node, err)
		return
	}
	f := ClusterFault{Kind: Partition, Node: node, Clients: e.Clients, WasLeader: wasLeader, Start: start}
	elected := make(chan struct{})
	go func() {
		defer close(elected)
		if wasLeader {
			f.Leader, f.Elected = in.watchElection(restartCtx, node, start)
		}
	}()
	pause(ctx, e.Delay)
	if err := in.s.cluster.Heal(node); err != nil {
		in.tl.problem("healing node %s: %v", node, err)
	}
	f.End = time.Now()
	<-elected
	f.Healthy = in.waitHealthy(restartCtx, f.End)
	in.record(f)
	what := "clients kept"
	if e.Clients != "" {
		what = "clients " + e.Clients
	}
	in.logf("partitioned node %s%s (%s) for %v%s, every node current %v after the heal", node, leaderNote(wasLeader), what,
		f.End.Sub(start).Round(time.Millisecond), electionNote(f), f.Healthy.Round(100*time.Millisecond))
}

// stepDown asks the leader of e.Target to step down and waits for the new
// one.
func (in *injector) stepDown(ctx context.Context, e Event) {
	bg := context.WithoutCancel(ctx)
	rctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	stream, consumer := e.Target, ""
	if c, ok := strings.CutPrefix(e.Target, "consumer:"); ok {
		stream, consumer = jetstream.StreamNotify, c
	}
	leader := func() string {
		p, err := in.nodes.placement(rctx, stream, consumer)
		if err != nil {
			return ""
		}
		return p.Leader
	}
	old := leader()
	nc, err := in.nodes.besides(old)
	if err != nil {
		in.tl.problem("step-down of %s: %v", e.Target, err)
		return
	}
	start := time.Now()
	if consumer != "" {
		err = system.ConsumerStepDown(rctx, nc, stream, consumer)
	} else {
		err = system.StepDown(rctx, nc, stream)
	}
	if err != nil {
		// A target without a leader right now (an election under way, a
		// node down) cannot step down: not a failure of the harness.
		in.logf("step-down of %s not done: %v", e.Target, err)
		return
	}
	f := ClusterFault{Kind: StepDown, Target: e.Target, Node: old, WasLeader: e.Target == jetstream.StreamNotify, Start: start, End: time.Now()}
	for f.Leader == "" && rctx.Err() == nil {
		if l := leader(); l != "" && l != old {
			f.Leader, f.Elected = l, time.Since(start)
			break
		}
		pause(rctx, 20*time.Millisecond)
	}
	in.record(f)
	in.logf("step-down of %s: leader %s → %s in %v", e.Target, orNone(old), orNone(f.Leader), f.Elected.Round(time.Millisecond))
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func leaderNote(wasLeader bool) string {
	if wasLeader {
		return " (NOTIFY's leader)"
	}
	return ""
}

func electionNote(f ClusterFault) string {
	switch {
	case !f.WasLeader:
		return ""
	case f.Leader == "":
		return fmt.Sprintf(", no new NOTIFY leader within %v", electionWait)
	}
	return fmt.Sprintf(", %s led NOTIFY %v after it began", f.Leader, f.Elected.Round(time.Millisecond))
}
