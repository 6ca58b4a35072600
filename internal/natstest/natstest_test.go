package natstest_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/natstest"
)

func TestRestartKeepsPortAndStore(t *testing.T) {
	srv := natstest.Start(t, natstest.WithSyncAlways())
	url := srv.URL()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Storage: natsjs.FileStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s.1", []byte("x")); err != nil {
		t.Fatal(err)
	}

	srv.Restart(t)
	if srv.URL() != url {
		t.Fatalf("URL changed from %s to %s", url, srv.URL())
	}
	natstest.WaitFor(t, 10*time.Second, nc.IsConnected, "client to reconnect")
	var msgs uint64
	natstest.WaitFor(t, 10*time.Second, func() bool {
		s, err := js.Stream(ctx, "S")
		if err != nil {
			return false
		}
		msgs = s.CachedInfo().State.Msgs
		return true
	}, "stream after restart")
	if msgs != 1 {
		t.Fatalf("stream holds %d messages after restart, want 1", msgs)
	}
}

func TestAuthOptions(t *testing.T) {
	srv := natstest.Start(t, natstest.WithToken("tok"))
	if _, err := nats.Connect(srv.URL(), nats.MaxReconnects(0)); err == nil {
		t.Fatal("connected without the token")
	}
	nc, err := nats.Connect(srv.URL(), nats.Token("tok"))
	if err != nil {
		t.Fatalf("connecting with the token: %v", err)
	}
	nc.Close()
}
