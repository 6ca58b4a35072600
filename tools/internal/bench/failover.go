package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/procs"
	"github.com/tgnotify/tgnotify/internal/system"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// Goals of issue 14: the longest silence after each fault.
const (
	workerKillGoal = 2 * time.Second
	leaderKillGoal = 3 * time.Second
	stepDownGoal   = time.Second
)

// failoverFault is what a failover run does to the running system.
type failoverFault int

const (
	// killActiveWorker SIGKILLs the telegram worker that is sending; a hot
	// standby runs beside it. One server.
	killActiveWorker failoverFault = iota + 1
	// killLeaderNode SIGKILLs the node leading NOTIFY in a three-node
	// cluster; it stays down for the fault window.
	killLeaderNode
	// stepDownLeader asks NOTIFY's leader to step down in a three-node
	// cluster.
	stepDownLeader
	// killOtherNode SIGKILLs a node that does not lead NOTIFY in a
	// three-node cluster; it stays down for the fault window.
	killOtherNode
)

// failover is scenario 7: the longest silence after a fault and the
// commit → delivery p99 of the orders committed while it lasted, each
// against the same figure measured without the fault earlier in the same
// run.
func (r *runner) failover(ctx context.Context) []*Result {
	var out []*Result
	for _, v := range []struct {
		id, title, what string
		fault           failoverFault
		goal            time.Duration
	}{
		{"7a", "SIGKILL of the active telegram worker, hot standby, one server", "after the SIGKILL", killActiveWorker, workerKillGoal},
		{"7b", "SIGKILL of NOTIFY's leader node, three-node cluster", "after the SIGKILL", killLeaderNode, leaderKillGoal},
		{"7c", "Step-down of NOTIFY's leader, three-node cluster", "after the step-down", stepDownLeader, stepDownGoal},
		{"7d", "SIGKILL of a node that does not lead NOTIFY, three-node cluster", "after the SIGKILL", killOtherNode, leaderKillGoal},
	} {
		silence := &Result{
			ID: v.id, Title: "Longest silence: " + v.title,
			Ours: "longest time without a delivery while orders waited, " + v.what, Reference: "the same, without the fault, earlier in the run",
			Unit: "ms", RefUnit: "ms", GoalOnOurs: true,
			Goal:         Goal{Text: fmt.Sprintf("≤ %v", v.goal), AtMost: true, Limit: ms(v.goal)},
			ExtraColumns: []string{"new leader / first delivery after the fault (ms)", "orders", "duplicates", "notes"},
			Method:       r.failoverMethod(v.fault),
		}
		latency := &Result{
			ID: v.id + "′", Title: "Commit → delivery p99 during the fault: " + v.title,
			Ours: "p99 of the orders committed in the fault window", Reference: "p99 of those committed in the window before it",
			Unit: "ms", RefUnit: "ms",
			Goal:         Goal{Text: "reported, no goal", Report: true},
			ExtraColumns: []string{"p50 fault (ms)", "p50 before (ms)", "max fault (ms)"},
			Method:       "The same runs as " + v.id + ".",
		}
		r.measureFailover(ctx, silence, latency, v.fault)
		out = append(out, silence, latency)
	}
	return out
}

// failoverMethod describes how a row of scenario 7 is measured.
func (r *runner) failoverMethod(f failoverFault) string {
	c := r.cfg
	common := fmt.Sprintf("Orders at a steady %.0f a second, each to a chat of its own, placed by the shop in this process (its outbox on a file), "+
		"delivered by `bin/publisher` and two `bin/telegram-worker` processes (one sending, one its hot standby; production settings) to the emulator "+
		"in this process with Telegram's limits on. After %v of warm-up, a reference window of %v, then the fault, then a fault window of %v; "+
		"orders stop at its end and the run waits until every one is delivered. **Silence**: the longest stretch without any delivery while an "+
		"order waited (it begins at the last delivery before it, or at the first waiting order's commit, whichever is later): within the "+
		"reference window, and from the last delivery before the fault until every order is delivered. **p99**: commit (PlaceOrder returned) → the emulator's timestamp, over the orders "+
		"committed in each window. %d runs, a fresh system each.", c.FailoverRate, c.FailoverWarmup, c.FailoverWindow, c.FailoverWindow, c.FailoverRuns)
	switch f {
	case killActiveWorker:
		return "One nats-server process (the production configuration, `sync_interval: always`). The fault: SIGKILL of the worker whose " +
			"`sent` count grew during the second before it. " + common
	case killLeaderNode:
		return "Three nats-server processes from `configs/nats-cluster` (routes between them, `sync_interval: always`), every stream, consumer and " +
			"bucket on 3 replicas, every daemon given the three URLs (nats.go picks among them at random). The fault: SIGKILL of the node " +
			"leading NOTIFY; it stays down for the fault window and is started again afterwards. The new leader's time is watched from a " +
			"surviving node, and so is each other stream, bucket and consumer the killed node led: the notes name them with the time " +
			"each had its next leader, the slowest first (a delivery waits for the leaders of NOTIFY, the worker's consumer and the " +
			"buckets it writes). " + common
	case killOtherNode:
		return "Three nats-server processes as in 7b, the publisher keeping every group's leader on NOTIFY's node (`-gather-leaders`, " +
			"docs/RUNBOOK.md). The fault: SIGKILL of a node that does not lead NOTIFY: the one the sending worker is connected to " +
			"(the only client subscribed to the pin subject, in the nodes' /connz), the worst case, else the first other one by name; " +
			"the notes say which. It stays down for the fault window and is started again afterwards. The notes name each stream, bucket and consumer it led, with the " +
			"time each had its next leader; the third column is the slowest of them (0: it led nothing). A daemon connected to it " +
			"moves to another node. " + common
	default:
		return "Three nats-server processes as in 7b. The fault: `$JS.API.STREAM.LEADER.STEPDOWN.NOTIFY`, what `nats stream cluster " +
			"step-down NOTIFY` sends. " + common
	}
}

// measureFailover runs the failover runs of one fault, each adding a run to
// both rows, and stops at the first failing run.
func (r *runner) measureFailover(ctx context.Context, silence, latency *Result, f failoverFault) {
	start := time.Now()
	defer func() { silence.Elapsed, latency.Elapsed = time.Since(start), time.Since(start) }()
	silence.Load, latency.Load = LoadAverage(), LoadAverage()
	silence.Measured, latency.Measured = start, start
	for i := range r.cfg.FailoverRuns {
		if err := ctx.Err(); err != nil {
			silence.fail(err)
			latency.fail(err)
			return
		}
		s, l, err := r.failoverRun(ctx, f, i)
		if err != nil {
			err = fmt.Errorf("run %d: %w", i+1, err)
			silence.fail(err)
			latency.fail(err)
			r.logf("%s %s run %d/%d failed: %v", silence.ID, silence.Title, i+1, r.cfg.FailoverRuns, err)
			return
		}
		silence.Runs = append(silence.Runs, s)
		latency.Runs = append(latency.Runs, l)
		r.logf("%s run %d/%d: %s; %s %s", silence.ID, i+1, r.cfg.FailoverRuns, silence.describeRun(s), latency.ID, latency.describeRun(l))
	}
}

// placedOrder is one order of a failover run: its chat and its commit.
type placedOrder struct {
	chat      int64
	committed time.Time
}

// failoverRun runs one system, one fault, and returns the two rows'
// figures.
func (r *runner) failoverRun(ctx context.Context, f failoverFault, run int) (silence, latency RunFigures, err error) {
	name := map[failoverFault]string{killActiveWorker: "failover-worker", killLeaderNode: "failover-leader", stepDownLeader: "failover-stepdown",
		killOtherNode: "failover-other"}[f]
	body := func(st *stack) error {
		if err := st.startEmulator(emulator.Limits{Enabled: true}); err != nil {
			return err
		}
		s, err := openShop(ctx, filepath.Join(st.dir, "shop.db"))
		if err != nil {
			return err
		}
		defer s.close()
		if err := st.startPublisher(ctx, r.bin("publisher"), s.path); err != nil {
			return err
		}
		if err := st.startWorker(ctx, r.bin("telegram-worker")); err != nil {
			return err
		}
		if err := st.startStandby(ctx, r.bin("telegram-worker")); err != nil {
			return err
		}
		silence, latency, err = r.failoverLoad(ctx, st, s, f, run)
		return err
	}
	if f == killActiveWorker {
		err = r.withStack(ctx, name, syncAlways, body)
	} else {
		err = r.withClusterStack(ctx, name, body)
	}
	return silence, latency, err
}

// failoverLoad places the orders, causes the fault, waits for every
// delivery and computes the figures.
func (r *runner) failoverLoad(ctx context.Context, st *stack, s *shopDB, f failoverFault, run int) (silence, latency RunFigures, err error) {
	c := r.cfg
	total := int((c.FailoverWarmup + 2*c.FailoverWindow).Seconds() * c.FailoverRate)
	base := int64(20_000_000 + run*1_000_000)
	start := time.Now()
	refStart := start.Add(c.FailoverWarmup)
	faultAt := refStart.Add(c.FailoverWindow)

	var mu sync.Mutex
	var orders []placedOrder
	placed := make(chan error, 1)
	go func() {
		for i := range total {
			at := start.Add(time.Duration(float64(i) / c.FailoverRate * float64(time.Second)))
			if !sleepUntil(ctx, at) {
				placed <- ctx.Err()
				return
			}
			chat := base + int64(i)
			if err := s.place(ctx, fmt.Sprintf("F%d-%d", run, i), chat); err != nil {
				placed <- err
				return
			}
			mu.Lock()
			orders = append(orders, placedOrder{chat: chat, committed: time.Now()})
			mu.Unlock()
		}
		placed <- nil
	}()

	// The fault.
	var after time.Duration
	var note string
	var faultErr error
	switch f {
	case killActiveWorker:
		after, note, faultErr = r.killActive(ctx, st, faultAt)
	case killLeaderNode:
		after, note, faultErr = killLeader(ctx, st, faultAt)
	case stepDownLeader:
		after, note, faultErr = stepDown(ctx, st, faultAt)
	case killOtherNode:
		after, note, faultErr = killOther(ctx, st, faultAt)
	}
	if err := <-placed; err != nil {
		return silence, latency, fmt.Errorf("placing orders: %w", err)
	}
	if faultErr != nil {
		return silence, latency, faultErr
	}
	if err := waitFor(ctx, 2*time.Minute, "for every order's delivery", func() bool { return deliveredChats(st.emu, base, total) == total }); err != nil {
		return silence, latency, fmt.Errorf("%w (%d of %d delivered)", err, deliveredChats(st.emu, base, total), total)
	}
	if f == killLeaderNode || f == killOtherNode {
		if err := restartAll(ctx, st); err != nil {
			return silence, latency, err
		}
	}

	msgs := st.emu.emu.Messages()
	first := map[int64]time.Time{}
	var deliveries []time.Time
	copies := map[int64]int{}
	for _, m := range msgs {
		deliveries = append(deliveries, m.Time)
		copies[m.ChatID]++
		if t, ok := first[m.ChatID]; !ok || m.Time.Before(t) {
			first[m.ChatID] = m.Time
		}
	}
	dups := 0
	for _, n := range copies {
		dups += n - 1
	}
	mu.Lock()
	defer mu.Unlock()
	var waits []system.Wait
	var refLat, faultLat []time.Duration
	faultEnd := faultAt.Add(c.FailoverWindow)
	for _, o := range orders {
		t := first[o.chat]
		waits = append(waits, system.Wait{From: o.committed, To: t})
		switch {
		case o.committed.Before(refStart):
		case o.committed.Before(faultAt):
			refLat = append(refLat, t.Sub(o.committed))
		case o.committed.Before(faultEnd):
			faultLat = append(faultLat, t.Sub(o.committed))
		}
	}
	longest := func(from, to time.Time) time.Duration {
		if s := system.Silences(waits, deliveries, from, to); len(s) > 0 {
			return s[0].Duration()
		}
		return 0
	}
	// The fault window's silence may begin just before the fault (at the
	// last delivery before it), and last past the window's end while its
	// orders still wait.
	faultSilence := longest(faultAt.Add(-time.Second), time.Time{})
	refSilence := longest(refStart, faultAt.Add(-time.Second))
	silence = RunFigures{Ours: ms(faultSilence), Reference: ms(refSilence), Ratio: ratio(ms(faultSilence), ms(refSilence)),
		Extra: []string{fmt.Sprintf("%.0f", ms(after)), fmt.Sprint(len(orders)), fmt.Sprint(dups), note}}
	p99f, p99r := Percentile(faultLat, 99), Percentile(refLat, 99)
	latency = RunFigures{Ours: ms(p99f), Reference: ms(p99r), Ratio: ratio(ms(p99f), ms(p99r)),
		Extra: []string{fmt.Sprintf("%.0f", ms(Percentile(faultLat, 50))), fmt.Sprintf("%.0f", ms(Percentile(refLat, 50))), fmt.Sprintf("%.0f", ms(Percentile(faultLat, 100)))}}
	return silence, latency, nil
}

// deliveredChats counts the chats base … base+n−1 the emulator delivered to.
func deliveredChats(s *emulatorServer, base int64, n int) int {
	seen := map[int64]bool{}
	for _, m := range s.emu.Messages() {
		if m.ChatID >= base && m.ChatID < base+int64(n) {
			seen[m.ChatID] = true
		}
	}
	return len(seen)
}

// sleepUntil waits until t, reporting false when ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// killActive SIGKILLs, at faultAt, the worker whose sent count grew in the
// second before, and returns when the standby's first delivery came.
func (r *runner) killActive(ctx context.Context, st *stack, faultAt time.Time) (time.Duration, string, error) {
	if !sleepUntil(ctx, faultAt.Add(-time.Second)) {
		return 0, "", ctx.Err()
	}
	before := [2]int64{sent(ctx, st.workerURL), sent(ctx, st.standbyURL)}
	if !sleepUntil(ctx, faultAt) {
		return 0, "", ctx.Err()
	}
	now := [2]int64{sent(ctx, st.workerURL), sent(ctx, st.standbyURL)}
	victim, other := &st.worker, st.standbyURL
	switch {
	case now[1]-before[1] > now[0]-before[0]:
		victim, other = &st.standby, st.workerURL
	case now[0] == before[0]:
		return 0, "", errors.New("neither worker sent anything in the second before the fault")
	}
	(*victim).Kill()
	killed := time.Now()
	*victim = nil // killed on purpose: not stopped at the end
	from := sent(ctx, other)
	err := waitFor(ctx, time.Minute, "for the standby's first delivery", func() bool { return sent(ctx, other) > from })
	return time.Since(killed), "", err
}

// sent reads a worker's sent count, -1 when it does not answer.
func sent(ctx context.Context, url string) int64 {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var s delivery.Stats
	if err := system.GetJSON(ctx, &http.Client{Timeout: time.Second}, url+"/stats", &s); err != nil {
		return -1
	}
	return s.Sent
}

// nodeKill is a node SIGKILLed by killNode: NOTIFY's leader before the
// kill, the node killed and when, the groups other than NOTIFY it led, and
// a connection to a surviving node to watch their elections from.
type nodeKill struct {
	leader, victim string
	led            []raftGroup
	watch          *nats.Conn
	at             time.Time
}

// killNode waits until faultAt and NOTIFY's leader, has pick choose the
// node to kill and the one to watch from, notes the groups other than
// NOTIFY that the victim leads, connects the watcher, and SIGKILLs the
// victim. The caller closes k.watch.
func killNode(ctx context.Context, st *stack, faultAt time.Time, pick func(leader string, nodes []string) (victim, watchFrom string)) (*nodeKill, error) {
	if !sleepUntil(ctx, faultAt) {
		return nil, ctx.Err()
	}
	leader, err := system.WaitLeader(ctx, st.nc, jetstream.StreamNotify, "")
	if err != nil {
		return nil, err
	}
	victim, watchFrom := pick(leader, st.cluster.Names())
	led, err := groupsLedBy(ctx, st.js, victim)
	if err != nil {
		return nil, err
	}
	led = slices.DeleteFunc(led, func(g raftGroup) bool { return g == raftGroup{stream: jetstream.StreamNotify} })
	watch, err := nats.Connect(st.cluster.URL(watchFrom), nats.Name("bench-watch"))
	if err != nil {
		return nil, err
	}
	_, at, ok := st.cluster.Kill(victim)
	if !ok {
		watch.Close()
		return nil, fmt.Errorf("node %s was not running", victim)
	}
	return &nodeKill{leader: leader, victim: victim, led: led, watch: watch, at: at}, nil
}

// firstOther is the first of nodes by name that is not node.
func firstOther(nodes []string, node string) string {
	for _, n := range nodes {
		if n != node {
			return n
		}
	}
	return ""
}

// killLeader SIGKILLs, at faultAt, the node leading NOTIFY, and returns how
// long the others took to elect a new leader, watched from one of them.
func killLeader(ctx context.Context, st *stack, faultAt time.Time) (time.Duration, string, error) {
	k, err := killNode(ctx, st, faultAt, func(leader string, nodes []string) (string, string) {
		return leader, firstOther(nodes, leader)
	})
	if err != nil {
		return 0, "", err
	}
	defer k.watch.Close()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	elections := make(chan []election, 1)
	go func() { elections <- watchElections(wctx, k.watch, k.led, k.victim, k.at) }()
	next, err := system.WaitLeader(wctx, k.watch, jetstream.StreamNotify, k.victim)
	after := time.Since(k.at)
	es := <-elections
	if err != nil {
		return 0, "", err
	}
	return after, fmt.Sprintf("%s → %s%s", k.victim, next, describeElections(es)), nil
}

// killOther SIGKILLs, at faultAt, a node that does not lead NOTIFY: the one
// the sending worker is connected to (the worst case: it must move), else
// the first other one by name. It returns how long the slowest of the
// groups it led took to elect a new leader (0 when it led none), watched
// from NOTIFY's node.
func killOther(ctx context.Context, st *stack, faultAt time.Time) (time.Duration, string, error) {
	worker := "the sending worker's node unknown"
	k, err := killNode(ctx, st, faultAt, func(leader string, nodes []string) (string, string) {
		on, err := st.cluster.NodeSubscribedTo(ctx, jetstream.DefaultNames().PinSubject(jetstream.DefaultChannel))
		switch {
		case err != nil:
			worker = "the sending worker's node unknown: " + err.Error()
		case on == leader:
			worker = "the sending worker was on NOTIFY's node"
		case on != "":
			worker = "the sending worker was connected to it"
			return on, leader
		}
		return firstOther(nodes, leader), leader
	})
	if err != nil {
		return 0, "", err
	}
	defer k.watch.Close()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	es := watchElections(wctx, k.watch, k.led, k.victim, k.at)
	var slowest time.Duration
	for _, e := range es {
		slowest = max(slowest, e.after)
	}
	note := fmt.Sprintf("killed %s (NOTIFY on %s; %s); it led nothing", k.victim, k.leader, worker)
	if len(es) > 0 {
		note = fmt.Sprintf("killed %s (NOTIFY on %s; %s)%s", k.victim, k.leader, worker, strings.Replace(describeElections(es), "; it also led", "; it led", 1))
	}
	return slowest, note, nil
}

// stepDown asks, at faultAt, NOTIFY's leader to step down and returns how
// long the next one took.
func stepDown(ctx context.Context, st *stack, faultAt time.Time) (time.Duration, string, error) {
	if !sleepUntil(ctx, faultAt) {
		return 0, "", ctx.Err()
	}
	leader, err := system.WaitLeader(ctx, st.nc, jetstream.StreamNotify, "")
	if err != nil {
		return 0, "", err
	}
	at := time.Now()
	if err := system.StepDown(ctx, st.nc, jetstream.StreamNotify); err != nil {
		return 0, "", err
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	next, err := system.WaitLeader(wctx, st.nc, jetstream.StreamNotify, leader)
	if err != nil {
		return 0, "", err
	}
	return time.Since(at), fmt.Sprintf("%s → %s", leader, next), nil
}

// restartAll starts every stopped node again and waits until the cluster
// is healthy, so that the stack stops cleanly.
func restartAll(ctx context.Context, st *stack) error {
	for _, n := range st.cluster.Names() {
		if st.cluster.Process(n) == nil {
			if err := st.cluster.Start(ctx, n); err != nil {
				return err
			}
		}
	}
	return st.cluster.WaitHealthy(ctx, 2*time.Minute)
}

// withClusterStack runs f on a fresh three-node cluster, provisioned with
// three replicas, as withStack does on one server.
func (r *runner) withClusterStack(ctx context.Context, name string, f func(*stack) error) (err error) {
	st, err := r.newClusterStack(ctx, name)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := st.close(); cerr != nil && err == nil {
			err = cerr
		}
		st.removeData(err != nil || r.cfg.KeepLogs)
	}()
	if err := f(st); err != nil {
		if ferr := st.failure(); ferr != nil {
			return fmt.Errorf("%w (%v)", err, ferr)
		}
		return err
	}
	return st.failure()
}

// newClusterStack starts the three nodes of configs/nats-cluster (next to
// the production nats-server.conf), connects to all three and provisions
// every stream, consumer and bucket with three replicas.
func (r *runner) newClusterStack(ctx context.Context, name string) (*stack, error) {
	r.stacks++
	dir := filepath.Join(r.cfg.WorkDir, fmt.Sprintf("%03d-%s", r.stacks, name))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	sup, err := procs.New(filepath.Join(dir, "logs"), nil)
	if err != nil {
		return nil, err
	}
	st := &stack{dir: dir, sup: sup}
	st.cluster, err = system.StartCluster(ctx, system.ClusterOptions{Sup: sup, Bin: r.cfg.BinDir, ConfigDir: r.clusterConfig(),
		Dir: filepath.Join(dir, "jetstream"), Unset: system.CleanEnv(), ReadyTimeout: readyTimeout, StopTimeout: stopTimeout})
	if err != nil {
		st.close()
		return nil, err
	}
	st.natsURL = st.cluster.URLs()
	if st.nc, err = connect(ctx, st.natsURL, "bench"); err != nil {
		st.close()
		return nil, err
	}
	if st.js, err = natsjs.New(st.nc); err != nil {
		st.close()
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := system.WaitMetaLeader(wctx, st.nc); err != nil {
		st.close()
		return nil, err
	}
	settings := jetstream.DefaultSettings()
	settings.Replicas = 3
	st.declaration = filepath.Join(dir, "jetstream.yaml")
	if err := os.WriteFile(st.declaration, []byte("replicas: 3\n"), 0o644); err != nil {
		st.close()
		return nil, err
	}
	for {
		_, err = jetstream.Provision(wctx, st.js, jetstream.Declare(settings), false)
		if err == nil || wctx.Err() != nil {
			break
		}
		sleepUntil(wctx, time.Now().Add(200*time.Millisecond+rand.N(100*time.Millisecond)))
	}
	if err != nil {
		st.close()
		return nil, fmt.Errorf("provisioning the cluster: %w", err)
	}
	return st, nil
}

// clusterConfig is the directory of the cluster's node files: beside the
// production nats-server.conf.
func (r *runner) clusterConfig() string {
	return filepath.Join(filepath.Dir(r.cfg.NATSConfig), "nats-cluster")
}
