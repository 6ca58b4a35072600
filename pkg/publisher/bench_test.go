package publisher_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/outbox"
	"github.com/tgnotify/tgnotify/pkg/publisher"
)

// benchChats is how many chats the benchmark's notifications spread over.
const benchChats = 100

// BenchmarkDrain compares, side by side, the publisher draining b.N outbox
// rows into NOTIFY (outbox) with a raw JetStream async publish of the same
// messages (raw): same payloads, headers and message ids, same kind of
// stream (file storage, R1, the same embedded server setup). Both report
// msgs/s; the goal is outbox >= 0.8 x raw.
func BenchmarkDrain(b *testing.B) {
	b.Run("outbox", func(b *testing.B) {
		e := newEnv(b)
		if err := jetstream.ProvisionStreams(context.Background(), e.js, jetstream.StreamSettings{}); err != nil {
			b.Fatal(err)
		}
		e.enqueue(b, 0, b.N, benchChats, 10000)
		// Leave the WAL empty, as a running application's checkpoints would.
		if _, err := outbox.NewReader(e.app).Checkpoint(context.Background(), "TRUNCATE"); err != nil {
			b.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		b.ResetTimer()
		start, cpu0, alloc0 := time.Now(), cpuTime(), allocated()
		var acked atomic.Int64
		e.start(b, publisher.Options{Registerer: reg, AfterAck: func(rows []outbox.Row) error {
			acked.Add(int64(len(rows)))
			return nil
		}})
		// The hook counts acknowledged rows cheaply; the metric then tells
		// when the last ones are marked.
		waitFor(b, 10*time.Minute, func() bool { return acked.Load() >= int64(b.N) }, "all rows acknowledged")
		waitFor(b, time.Minute, func() bool {
			return metric(b, reg, "tgnotify_publisher_published_total") >= float64(b.N)
		}, "all rows marked published")
		elapsed, cpu := time.Since(start), cpuTime()-cpu0
		b.StopTimer()
		b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
		b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/msg")
		b.ReportMetric(float64(allocated()-alloc0)/float64(b.N), "alloc-B/msg")
		if got := streamCount(e.js); got != uint64(b.N) {
			b.Fatalf("stream holds %d messages, want %d", got, b.N)
		}
	})
	b.Run("raw", func(b *testing.B) {
		e := newEnv(b)
		if err := jetstream.ProvisionStreams(context.Background(), e.js, jetstream.StreamSettings{}); err != nil {
			b.Fatal(err)
		}
		type msg struct {
			chat    int64
			key     string
			created time.Time
			payload []byte
		}
		msgs := make([]msg, b.N)
		now := time.Now().UTC()
		for i := range msgs {
			n := notification(i, benchChats)
			n.CreatedAt = now
			p, err := n.MarshalPayload()
			if err != nil {
				b.Fatal(err)
			}
			msgs[i] = msg{n.ChatID, n.Key, now, p}
		}
		js, err := natsjs.New(e.nc)
		if err != nil {
			b.Fatal(err)
		}
		futures := make([]natsjs.PubAckFuture, 0, b.N)
		b.ResetTimer()
		start, cpu0, alloc0 := time.Now(), cpuTime(), allocated()
		for _, m := range msgs {
			f, err := js.PublishMsgAsync(jetstream.NotificationMsg(m.chat, m.key, m.created, notify.PayloadContentType, m.payload))
			if err != nil {
				b.Fatal(err)
			}
			futures = append(futures, f)
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(5 * time.Minute):
			b.Fatal("PubAcks did not complete")
		}
		elapsed, cpu := time.Since(start), cpuTime()-cpu0
		b.StopTimer()
		b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
		b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/msg")
		b.ReportMetric(float64(allocated()-alloc0)/float64(b.N), "alloc-B/msg")
		for _, f := range futures {
			select {
			case err := <-f.Err():
				b.Fatalf("publish failed: %v", err)
			default:
			}
		}
	})
}

// BenchmarkLatency measures commit -> PubAck while the publisher is idle:
// each iteration commits one notification and waits for its PubAck (seen
// through the AfterAck hook) before the next. It reports p50 and p99.
func BenchmarkLatency(b *testing.B) {
	e := newEnv(b)
	acked := make(chan time.Time, 1)
	r := e.start(b, publisher.Options{AfterAck: func([]outbox.Row) error {
		acked <- time.Now()
		return nil
	}})
	waitFor(b, 10*time.Second, func() bool { return r.p.IsLeader() && streamExists(e.js) }, "publisher ready")
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		tx, err := e.app.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := outbox.Enqueue(ctx, tx, notification(i, benchChats)); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		committed := time.Now()
		select {
		case at := <-acked:
			lat = append(lat, at.Sub(committed))
		case <-time.After(30 * time.Second):
			b.Fatal("no PubAck within 30s")
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[(len(lat)*99)/100].Microseconds())/1000, "p99-ms")
}

func streamExists(js natsjs.JetStream) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := js.Stream(ctx, jetstream.StreamNotify)
	return err == nil
}
