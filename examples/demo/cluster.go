package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tgnotify/tgnotify/internal/system"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// What -cluster does to the cluster during the burst, counted from its
// start: NOTIFY's leader steps down, then the node that leads NOTIFY then
// is SIGKILLed and started again on its store once the other two have
// elected a leader, and at least nodeDown after the kill. Started again
// before that, it could win the election itself (its own election timeout
// runs from its start), and the demo, waiting for another leader, failed
// (seen once in CI).
const (
	stepDownAfter = 1500 * time.Millisecond
	killAfter     = 4 * time.Second
	nodeDown      = 2 * time.Second
	// electionWait bounds the wait for a new leader; currentWait for every
	// node to be current again after the restart.
	electionWait = 30 * time.Second
	currentWait  = 90 * time.Second
)

// clusterStreams are the streams -cluster replicates, checked at the end:
// the two streams and the buckets' streams.
func clusterStreams() []string {
	return []string{jetstream.StreamNotify, jetstream.StreamDead,
		"KV_" + jetstream.BucketDelivered, "KV_" + jetstream.BucketChats, "KV_" + jetstream.BucketAttempts}
}

// clusterFault is one fault the demo caused and what followed.
type clusterFault struct {
	// at is when it was done, offset is from the start of the burst.
	at     time.Time
	offset time.Duration
	// node is the node whose leadership ended: stepped down or killed.
	node string
	// leader is NOTIFY's new leader, elected after the fault began.
	leader  string
	elected time.Duration
	// restarted and current are, for a kill, when the node was started
	// again and when every node was current again, from the kill.
	restarted, current time.Duration
	err                string
}

// clusterLog is what -cluster did during the burst and the replication at
// the end.
type clusterLog struct {
	stepDown, kill clusterFault
	// final is each replicated stream's leader and replicas at the end;
	// finalErr what could not be read.
	final    map[string]system.Replication
	finalErr []string
}

// clusterFaults steps NOTIFY's leader down and then SIGKILLs NOTIFY's
// leader node and restarts it, at their offsets from start, writing a line
// for each to note.
func (d *demo) clusterFaults(ctx context.Context, s *stack, nc *nats.Conn, start time.Time, note func(string)) *clusterLog {
	log := &clusterLog{}
	if !waitUntil(ctx, start.Add(stepDownAfter)) {
		return log
	}
	f := &log.stepDown
	f.node, f.err = leaderOf(ctx, nc)
	if f.err == "" {
		f.at, f.offset = time.Now(), time.Since(start)
		if err := system.StepDown(ctx, nc, jetstream.StreamNotify); err != nil {
			f.err = err.Error()
		} else {
			f.leader, f.elected, f.err = newLeader(ctx, nc, f.node, f.at)
		}
	}
	note(f.describe("step-down"))

	if !waitUntil(ctx, start.Add(killAfter)) {
		return log
	}
	f = &log.kill
	f.node, f.err = leaderOf(ctx, nc)
	if f.err == "" {
		// The election is watched from a node that stays up.
		var watch *nats.Conn
		for _, n := range s.cluster.Names() {
			if n != f.node && watch == nil {
				var err error
				if watch, err = nats.Connect(s.cluster.URL(n), nats.Name("demo-watch")); err != nil {
					f.err = err.Error()
				}
			}
		}
		if watch != nil {
			defer watch.Close()
			_, at, ok := s.cluster.Kill(f.node)
			f.at, f.offset = at, at.Sub(start)
			if !ok {
				f.err = "node " + f.node + " was not running"
			} else {
				f.leader, f.elected, f.err = newLeader(ctx, watch, f.node, f.at)
				note(f.describe("kill"))
				waitUntil(ctx, at.Add(nodeDown))
				err := s.cluster.Start(context.WithoutCancel(ctx), f.node)
				f.restarted = time.Since(at)
				if err != nil && f.err == "" {
					f.err = "restarting " + f.node + ": " + err.Error()
				}
				if err := s.cluster.WaitHealthy(ctx, currentWait); err != nil && f.err == "" {
					f.err = err.Error()
				}
				f.current = time.Since(f.at)
				note(f.describe("restart"))
				return log
			}
		}
	}
	note(f.describe("kill"))
	return log
}

// leaderOf returns NOTIFY's leader, or why it has none.
func leaderOf(ctx context.Context, nc *nats.Conn) (string, string) {
	ctx, cancel := context.WithTimeout(ctx, electionWait)
	defer cancel()
	l, err := system.WaitLeader(ctx, nc, jetstream.StreamNotify, "")
	if err != nil {
		return "", err.Error()
	}
	return l, ""
}

// newLeader waits for a leader of NOTIFY other than old and returns it with
// the time since the fault.
func newLeader(ctx context.Context, nc *nats.Conn, old string, since time.Time) (string, time.Duration, string) {
	ctx, cancel := context.WithTimeout(ctx, electionWait)
	defer cancel()
	l, err := system.WaitLeader(ctx, nc, jetstream.StreamNotify, old)
	if err != nil {
		return "", 0, err.Error()
	}
	return l, time.Since(since), ""
}

// waitUntil waits until t, reporting false if ctx ended first.
func waitUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// describe renders the fault for the progress and the report.
func (f clusterFault) describe(kind string) string {
	switch {
	case f.at.IsZero():
		return fmt.Sprintf("%s: not done (the demo ended first)", kind)
	case kind == "step-down" && f.err == "":
		return fmt.Sprintf("%5.1fs  NOTIFY's leader %s stepped down (what bin/nats stream cluster step-down NOTIFY asks): %s leads after %v",
			f.offset.Seconds(), f.node, f.leader, f.elected.Round(time.Millisecond))
	case kind == "kill" && f.err == "":
		return fmt.Sprintf("%5.1fs  SIGKILL of node %s (NOTIFY's leader): %s leads after %v (nats-server elects after 4–9 s without a leader)",
			f.offset.Seconds(), f.node, f.leader, f.elected.Round(time.Millisecond))
	case kind == "restart" && f.err == "":
		return fmt.Sprintf("%5.1fs  node %s started again on its store (down %v); every node current %v after the kill",
			(f.offset + f.restarted).Seconds(), f.node, f.restarted.Round(100*time.Millisecond), f.current.Round(100*time.Millisecond))
	}
	return fmt.Sprintf("%5.1fs  %s of %s FAILED: %s", f.offset.Seconds(), kind, f.node, f.err)
}

// collect reads each replicated stream's leader and replicas once every
// replica is current (within a bound).
func (l *clusterLog) collect(ctx context.Context, nc *nats.Conn) {
	l.final = map[string]system.Replication{}
	for _, st := range clusterStreams() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := system.WaitCurrent(wctx, nc, st)
		cancel()
		p, perr := system.StreamPlacement(ctx, nc, st)
		switch {
		case err != nil:
			l.finalErr = append(l.finalErr, err.Error())
		case perr != nil:
			l.finalErr = append(l.finalErr, perr.Error())
		}
		l.final[st] = p
	}
}

// check is the cluster's check: every stream on three current replicas at
// the end, and both faults carried out.
func (l *clusterLog) check() check {
	var problems []string
	for _, st := range clusterStreams() {
		p := l.final[st]
		current := 0
		for _, r := range p.Replicas {
			if r.Current && !r.Offline {
				current++
			}
		}
		if p.Leader == "" || current != 2 {
			problems = append(problems, fmt.Sprintf("%s: leader %q, %d of %d other replicas current", st, p.Leader, current, len(p.Replicas)))
		}
	}
	problems = append(problems, l.finalErr...)
	for _, f := range []struct {
		kind string
		f    clusterFault
	}{{"step-down", l.stepDown}, {"kill", l.kill}} {
		if f.f.err != "" || f.f.at.IsZero() {
			problems = append(problems, f.f.describe(f.kind))
		}
	}
	return check{ok: len(problems) == 0, detail: problems,
		text: "cluster: NOTIFY's leader stepped down and a node SIGKILLed during the burst; every stream and bucket on 3 current replicas at the end"}
}

// print writes the cluster's lines of the report.
func (l *clusterLog) print(w io.Writer) {
	fmt.Fprintln(w, "cluster         3 nodes (configs/nats-cluster), every stream, consumer and bucket on 3 replicas; every daemon given all three URLs")
	fmt.Fprintf(w, "                %s\n", l.stepDown.describe("step-down"))
	fmt.Fprintf(w, "                %s\n", l.kill.describe("kill"))
	if l.kill.current > 0 {
		fmt.Fprintf(w, "                %s\n", l.kill.describe("restart"))
	}
}
