package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/builtbin"
	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/procs"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// TestBinaryAgainstStandaloneServer runs the built bin/publisher, a leader
// and a standby, against a real nats-server process: the leader drains, the
// standby reports itself on /readyz, takes over when the leader is killed
// with SIGKILL, drains the rest, and exits 0 on SIGTERM.
func TestBinaryAgainstStandaloneServer(t *testing.T) {
	bin := builtbin.Dir(t, "nats-server", "publisher")
	dir := t.TempDir()
	sup, err := procs.New(filepath.Join(dir, "logs"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sup.Close)
	ctx := context.Background()

	natsAddr, monAddr := freeAddr(t), freeAddr(t)
	_, natsPort, _ := strings.Cut(natsAddr, ":")
	_, monPort, _ := strings.Cut(monAddr, ":")
	server, err := sup.Start(procs.Spec{Name: "nats-server", Path: filepath.Join(bin, "nats-server"),
		Args: []string{"-js", "-sd", filepath.Join(dir, "js"), "-a", "127.0.0.1", "-p", natsPort, "-m", monPort}})
	if err != nil {
		t.Fatal(err)
	}
	if err := server.WaitReady(ctx, "http://"+monAddr+"/healthz", 20*time.Second); err != nil {
		t.Fatal(err)
	}
	natsURL := "nats://" + natsAddr

	dbPath := filepath.Join(dir, "app.db")
	app, err := outbox.Open(ctx, dbPath, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	enqueue(t, app, 0, 300)

	start := func(name, httpAddr string) *procs.Process {
		p, err := sup.Start(procs.Spec{Name: name, Path: filepath.Join(bin, "publisher"),
			Args:  []string{"-db", dbPath, "-nats", natsURL, "-http", httpAddr, "-lock-poll-interval", "50ms", "-log-format", "json"},
			Unset: []string{"NATS_URL"}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	leaderAddr, standbyAddr := freeAddr(t), freeAddr(t)
	leader := start("publisher-1", leaderAddr)
	if err := leader.WaitReady(ctx, "http://"+leaderAddr+"/readyz", 20*time.Second); err != nil {
		t.Fatal(err)
	}
	standby := start("publisher-2", standbyAddr)
	if err := standby.WaitReady(ctx, "http://"+standbyAddr+"/healthz", 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if code, body := httpStatus("http://" + standbyAddr + "/readyz"); code != 503 || !strings.Contains(body, "standby") {
		t.Fatalf("standby /readyz = %d %s, want 503 naming the standby", code, body)
	}

	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 20*time.Second, func() bool { return streamMsgs(js) == 300 }, "the leader to publish 300 rows")

	leader.Kill()
	if err := standby.WaitReady(ctx, "http://"+standbyAddr+"/readyz", 20*time.Second); err != nil {
		t.Fatalf("standby did not take over: %v", err)
	}
	enqueue(t, app, 300, 600)
	natstest.WaitFor(t, 20*time.Second, func() bool { return streamMsgs(js) == 600 }, "the new leader to publish the rest")
	if err := standby.Stop(); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, standby.Tail(20))
	}

	// Each row once: 600 distinct keys in 600 messages.
	c, err := js.OrderedConsumer(ctx, jetstream.StreamNotify, natsjs.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for len(keys) < 600 {
		batch, err := c.Fetch(600, natsjs.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			keys[m.Headers().Get(jetstream.HeaderKey)] = true
			n++
		}
		if n == 0 {
			break
		}
	}
	if len(keys) != 600 {
		t.Fatalf("%d distinct keys in the stream, want 600", len(keys))
	}
}
