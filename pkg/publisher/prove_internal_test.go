package publisher

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// The probe of an unverified batch's last row, against a real replicated
// NOTIFY: a stored row answers "stored"; a row the stream lacks answers
// "missing", and the probe leaves nothing behind: the stream does not
// store it, and does not take its message id for a duplicate later.
func TestProbeOnAReplicatedStream(t *testing.T) {
	ctx := context.Background()
	c := natstest.StartCluster(t, 3)
	nc, js := c.Nodes()[0].Connect(t)
	natstest.WaitFor(t, time.Minute, func() bool {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return jetstream.ProvisionStreams(ctx, js, jetstream.StreamSettings{Replicas: 3}) == nil
	}, "NOTIFY created with 3 replicas")
	p, err := Open(ctx, filepath.Join(t.TempDir(), "app.db"), nc, Options{AckTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	row := func(id int64, key string) outbox.Row {
		return outbox.Row{ID: id, Key: key, Channel: notify.ChannelTelegram, ChatID: 100, Recipient: "100"}
	}
	stored, absent := row(1, "order:1:accepted"), row(2, "order:2:accepted")
	publish := func(r outbox.Row) uint64 {
		t.Helper()
		m := nats.NewMsg(p.opts.Names.Subject(string(r.Channel), r.Recipient))
		m.Header.Set(jetstream.HeaderMsgID, r.Key)
		m.Data = []byte(`{}`)
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatalf("publishing %s: %v", r.Key, err)
		}
		if ack.Duplicate {
			t.Fatalf("publishing %s: reported a duplicate", r.Key)
		}
		return ack.Sequence
	}
	publish(stored)

	for _, tc := range []struct {
		row  outbox.Row
		want string
	}{{stored, proofStored}, {absent, proofMissing}} {
		got, err := p.probe(ctx, tc.row)
		if got != tc.want || err != nil {
			t.Errorf("probe(%s) = %q, %v; want %q", tc.row.Key, got, err, tc.want)
		}
	}
	info, err := js.Stream(ctx, jetstream.StreamNotify)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Msgs; n != 1 {
		t.Fatalf("NOTIFY holds %d messages after the probes, want 1: a probe was stored", n)
	}
	if seq := publish(absent); seq != 2 {
		t.Errorf("the probed absent row was stored at sequence %d, want 2", seq)
	}
}

// The answers a probe can get, as the stream sends them.
func TestProbeOutcome(t *testing.T) {
	for _, tc := range []struct {
		data, want string
		err        bool
	}{
		{data: `{"stream":"NOTIFY","seq":7,"duplicate": true}`, want: proofStored},
		{data: `{"error":{"code":409,"err_code":10158,"description":"duplicate message id is in process"},"stream":"NOTIFY","seq":0}`, want: proofProposed},
		{data: `{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 41"},"stream":"NOTIFY","seq":0}`, want: proofMissing},
		{data: `{"error":{"code":503,"err_code":10077,"description":"insufficient resources"},"stream":"NOTIFY","seq":0}`, want: proofFailed, err: true},
		{data: `{"stream":"NOTIFY","seq":8}`, want: proofFailed, err: true},
		{data: `not json`, want: proofFailed, err: true},
	} {
		got, err := probeOutcome([]byte(tc.data))
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("probeOutcome(%s) = %q, %v; want %q (error %v)", tc.data, got, err, tc.want, tc.err)
		}
	}
}
