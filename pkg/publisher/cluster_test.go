package publisher_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// clusterFaults is the schedule of the leader-change test: step-downs of
// NOTIFY's leader, and kills (shutdown, then a restart once another leader
// is elected and before the next fault) of whichever node leads it.
var clusterFaults = []string{
	"stepdown", "stepdown", "kill", "stepdown", "stepdown", "kill",
	"stepdown", "stepdown", "kill", "stepdown", "stepdown", "stepdown",
}

// rowsBetweenFaults is how many more messages the stream must hold before
// the next fault, so that every fault hits a publisher in full flow.
const rowsBetweenFaults = 300

// TestOrderHoldsAcrossStreamLeaderChanges publishes from an outbox that an
// application keeps filling, over 40 chats, into NOTIFY with three
// replicas on a three-node cluster, while NOTIFY's leader is stepped down
// and killed again and again. Every chat's messages must be stored once
// each, in outbox order, none missing: the fast-ingest batches of the
// publisher make a leader change unable to store a row after a later row
// that was lost (docs/PUBLISHER.md, "Why order per chat holds").
func TestOrderHoldsAcrossStreamLeaderChanges(t *testing.T) {
	e, c := newClusterEnv(t, transports[0])
	reg := prometheus.NewRegistry()
	opts := testOptions(reg)
	opts.AckTimeout = 10 * time.Second
	r := e.start(t, opts)
	n, faults := runClusterFaults(t, e, c, r)
	checkOnceInOrder(t, e.js, n, clusterChats)
	if got := metric(t, reg, "tgnotify_publisher_reordered_total"); got != 0 {
		t.Errorf("reordered_total = %v, want 0", got)
	}
	t.Logf("%d rows over %d chats, %d faults; publish errors %v (each ended a round, whose rows were published again)",
		n, clusterChats, faults, metric(t, reg, "tgnotify_publisher_publish_errors_total"))
}

// TestMessageByMessageCanReorder runs the same faults against the
// message-by-message transport, the fallback for a NOTIFY without
// allow_batched, and reports the chats it reordered. It demonstrates the
// risk the batches remove; a run may or may not hit it, so it asserts
// nothing about order and runs only when TGNOTIFY_REORDER_DEMO is set.
func TestMessageByMessageCanReorder(t *testing.T) {
	if os.Getenv("TGNOTIFY_REORDER_DEMO") == "" {
		t.Skip("set TGNOTIFY_REORDER_DEMO=1 to run the demonstration")
	}
	e, c := newClusterEnv(t, transports[1])
	reg := prometheus.NewRegistry()
	r := e.start(t, testOptions(reg))
	n, faults := runClusterFaults(t, e, c, r)
	msgs := streamMsgs(t, e.js)
	lastPerChat := map[string]string{}
	seen := map[string]int{}
	reordered := 0
	for _, m := range msgs {
		seen[m.key]++
		if prev, ok := lastPerChat[m.subject]; ok && prev >= m.key {
			reordered++
			t.Logf("chat %s: %s stored after %s", m.subject, m.key, prev)
		}
		lastPerChat[m.subject] = m.key
	}
	t.Logf("message by message: %d rows, %d stored, %d faults, %d stored out of order, reordered_total %v",
		n, len(msgs), faults, reordered, metric(t, reg, "tgnotify_publisher_reordered_total"))
}

// clusterChats is how many chats the cluster tests spread rows over.
const clusterChats = 40

// newClusterEnv starts a three-node cluster and creates NOTIFY with three
// replicas, for the transport tr. The env's connection is the publisher's,
// to every node; its js is a separate connection for the test's own
// requests.
func newClusterEnv(t *testing.T, tr transport) (*env, *natstest.Cluster) {
	t.Helper()
	c := natstest.StartCluster(t, 3)
	connect := func(name string) *nats.Conn {
		nc, err := jetstream.Connect(context.Background(), jetstream.Options{
			URLs:             c.URLs(),
			Name:             name,
			ReconnectWait:    20 * time.Millisecond,
			MaxReconnectWait: 200 * time.Millisecond,
		}, nil)
		if err != nil {
			t.Fatalf("connecting: %v", err)
		}
		t.Cleanup(nc.Close)
		waitFor(t, 10*time.Second, nc.IsConnected, "connected to the cluster")
		return nc
	}
	admin := connect("test-admin")
	js, err := natsjs.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return tr.create(ctx, js, 3) == nil
	}, "NOTIFY created with 3 replicas")
	waitStreamCurrent(t, admin)
	path := filepath.Join(t.TempDir(), "app.db")
	app, err := outbox.Open(context.Background(), path, outbox.Options{})
	if err != nil {
		t.Fatalf("opening outbox: %v", err)
	}
	t.Cleanup(func() { app.Close() })
	return &env{nc: connect("publisher-test"), js: js, admin: admin, path: path, app: app, reader: outbox.NewReader(app)}, c
}

// waitStreamCurrent waits until NOTIFY has a leader and both its other
// replicas are current.
func waitStreamCurrent(t *testing.T, nc *nats.Conn) natstest.StreamInfo {
	t.Helper()
	var info natstest.StreamInfo
	waitFor(t, 60*time.Second, func() bool {
		var err error
		info, err = natstest.Stream(nc, jetstream.StreamNotify)
		return err == nil && info.Leader != "" && info.Replicas == 2 && info.Current == 2
	}, "NOTIFY to have a leader and two current replicas")
	return info
}

// runClusterFaults runs the application and clusterFaults against the
// running publisher r, stops the application, waits until every row is
// marked published and returns how many rows there are and how many faults
// were injected.
func runClusterFaults(t *testing.T, e *env, c *natstest.Cluster, r *running) (n, faults int) {
	t.Helper()
	waitFor(t, 30*time.Second, r.p.IsLeader, "publisher to take the lock")
	a := startApp(t, e, clusterChats)
	stored := func() uint64 {
		info, err := natstest.Stream(e.admin, jetstream.StreamNotify)
		if err != nil {
			return 0
		}
		return info.Msgs
	}
	for _, fault := range clusterFaults {
		base := stored()
		waitFor(t, 2*time.Minute, func() bool { return stored() >= base+rowsBetweenFaults },
			"the publisher to store more rows before the next fault")
		before := waitStreamCurrent(t, e.admin)
		switch fault {
		case "stepdown":
			waitFor(t, time.Minute, func() bool { return natstest.StepDown(e.admin, jetstream.StreamNotify) == nil },
				"NOTIFY's leader to accept the step-down request")
			waitFor(t, time.Minute, func() bool {
				info, err := natstest.Stream(e.admin, jetstream.StreamNotify)
				return err == nil && info.Leader != "" && info.Leader != before.Leader
			}, "another leader after the step-down of "+before.Leader)
		case "kill":
			node := c.Node(before.Leader)
			node.Shutdown()
			waitFor(t, time.Minute, func() bool {
				info, err := natstest.Stream(e.admin, jetstream.StreamNotify)
				return err == nil && info.Leader != "" && info.Leader != before.Leader
			}, "another leader after the kill of "+before.Leader)
			node.Start(t)
		}
		faults++
	}
	waitStreamCurrent(t, e.admin)
	n = a.stop(t)
	waitFor(t, 3*time.Minute, func() bool { return e.pending(t) == 0 }, "every row marked published")
	return n, faults
}
