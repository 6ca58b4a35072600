package publisher

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// A batch whose EOB never reached the stream (it went to a leader that
// stepped down) stays open there; the wait for its final PubAck sends the
// EOB again, and the stream commits the batch. Before, the wait pinged,
// got the latest flow ack again each time, and gave up after AckTimeout
// (bug 30 in docs/RELIABILITY.md).
func TestAwaitEndSendsALostEOBAgain(t *testing.T) {
	ctx := context.Background()
	nc, js := natstest.Start(t).Connect(t)
	if err := jetstream.ProvisionStreams(ctx, js, jetstream.StreamSettings{}); err != nil {
		t.Fatal(err)
	}
	p, err := Open(ctx, filepath.Join(t.TempDir(), "app.db"), nc, Options{AckTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	r := &round{p: p, stop: make(chan struct{}), lost: make(chan struct{}), finishCtx: ctx}

	b := p.acks.openFast(p.opts.fastFlow())
	rows := make([]outbox.Row, 3)
	for i := range rows {
		key := fmt.Sprintf("order:%d:accepted", i)
		rows[i] = outbox.Row{ID: int64(i + 1), Key: key, Channel: notify.ChannelTelegram, ChatID: 100, Recipient: "100",
			Payload: []byte(`{}`), CreatedAt: time.Now().UTC()}
	}
	if n, err := r.sendRows(b, rows, false); err != nil || n != len(rows) {
		t.Fatalf("sendRows = %d, %v", n, err)
	}
	b.markEOB(true) // as if its EOB had gone to a leader that is gone

	if err := r.awaitEnd(b); err != nil {
		t.Fatalf("awaitEnd: %v; want the batch committed by the EOB sent again", err)
	}
	if _, _, count, _ := b.state(); count != uint64(len(rows)) {
		t.Errorf("the final PubAck counts %d messages, want %d", count, len(rows))
	}
	info, err := js.Stream(ctx, jetstream.StreamNotify)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.CachedInfo().State.Msgs; got != uint64(len(rows)) {
		t.Errorf("NOTIFY holds %d messages, want %d", got, len(rows))
	}
}
