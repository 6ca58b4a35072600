package publisher_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/system"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// NOTIFY's leader is cut off from its followers while the publisher stays
// connected to it (its clients' side works). The rows enqueued meanwhile
// are proposed there and never committed; the publisher's rounds time out
// and publish them again to the same leader, which acks a message whose id
// it has only proposed as if stored. No row may be marked published on
// such an ack: after the heal every row is in NOTIFY once, in order. Found
// by the long chaos run on the cluster: one order never reached NOTIFY
// (bug 39).
func TestNothingIsLostToACutOffLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster of nats-server processes")
	}
	c, admin := system.StartTestCluster(t, "../../configs/nats-cluster")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	connect := func(urls string) *nats.Conn {
		nc, err := nats.Connect(urls, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	js, err := natsjs.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, func() bool {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return jetstream.ProvisionStreams(pctx, js, jetstream.StreamSettings{Replicas: 3}) == nil
	}, "NOTIFY created with 3 replicas")
	leader, err := system.WaitLeader(ctx, admin, jetstream.StreamNotify, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := system.WaitCurrent(ctx, admin, jetstream.StreamNotify); err != nil {
		t.Fatal(err)
	}

	path := filepath.Join(t.TempDir(), "app.db")
	app, err := outbox.Open(ctx, path, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	// The publisher knows only the leader's address: it stays there
	// through the partition, as a client on the leader's side of it does.
	e := &env{nc: connect(c.URL(leader)), js: js, admin: admin, path: path, app: app, reader: outbox.NewReader(app)}
	opts := testOptions(nil)
	opts.AckTimeout = time.Second // rounds fail, and publish again, within the partition
	e.start(t, opts)
	const before, during, chats = 20, 40, 10
	e.enqueue(t, 0, before, chats, 1)
	waitFor(t, 60*time.Second, func() bool { return e.pending(t) == 0 }, "the first rows published")

	if err := c.Partition(leader, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Heal(leader) })
	e.enqueue(t, before, before+during, chats, 1)
	others := connect(otherURLs(c, leader))
	if _, err := system.WaitLeader(ctx, others, jetstream.StreamNotify, leader); err != nil {
		t.Fatalf("no new leader while %s is cut off: %v", leader, err)
	}
	// The partition lasts five AckTimeouts more (the fault's duration, not
	// a wait for something): rounds on the cut-off leader time out and
	// publish the same rows there again meanwhile.
	<-time.After(5 * opts.AckTimeout)
	if err := c.Heal(leader); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx, time.Minute); err != nil {
		t.Fatalf("after the heal: %v", err)
	}
	waitFor(t, 90*time.Second, func() bool { return e.pending(t) == 0 }, "every row marked published")
	if err := system.WaitCurrent(ctx, admin, jetstream.StreamNotify); err != nil {
		t.Fatal(err)
	}
	checkOnceInOrder(t, js, before+during, chats)
}

// otherURLs are the client addresses of every node but name.
func otherURLs(c *system.Cluster, name string) string {
	var urls string
	for _, n := range c.Names() {
		if n != name {
			if urls != "" {
				urls += ","
			}
			urls += c.URL(n)
		}
	}
	return urls
}
