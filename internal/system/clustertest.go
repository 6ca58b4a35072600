package system

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tgnotify/tgnotify/internal/builtbin"
	"github.com/tgnotify/tgnotify/internal/procs"
)

// StartTestCluster starts, for test t, a three-node cluster of the built
// nats-server (builtbin) from the configuration in configDir, with
// proxies on its routes and client ports so that a node can be cut off,
// in a temporary directory; it waits for a meta leader and for every node
// to be a member of the meta group (WaitMetaMembers), and returns the
// cluster and a connection to every node. Everything stops at the end of
// the test.
func StartTestCluster(t testing.TB, configDir string) (*Cluster, *nats.Conn) {
	t.Helper()
	bin := builtbin.Dir(t, "nats-server")
	dir := t.TempDir()
	sup, err := procs.New(filepath.Join(dir, "logs"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sup.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := StartCluster(ctx, ClusterOptions{Sup: sup, Bin: bin, ConfigDir: configDir, Dir: dir,
		Proxies: true, Unset: CleanEnv(), ReadyTimeout: 30 * time.Second, StopTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if err := WaitMetaLeader(ctx, nc); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitMetaMembers(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return c, nc
}
