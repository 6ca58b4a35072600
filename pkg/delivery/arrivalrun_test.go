package delivery_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/natstest"
)

// A takeover ends without checking its lanes when every delivery in
// (ack floor, last delivered], in consumer sequences, reached the worker
// (arrivalrun.go). That rests on nats-server numbering deliveries so: each
// delivery, a redelivery too, takes the next consumer sequence, and the
// ack floor stays below the first delivery of every message not yet
// acknowledged, however its redeliveries were acked. This pins it to the
// server the project builds with: were it to change, the rule would let a
// recipient's later message go before one another worker holds.
func TestConsumerAckFloorStaysBelowEveryUnacknowledgedDelivery(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: "FLOOR", Subjects: []string{"floor.>"}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.CreateConsumer(ctx, natsjs.ConsumerConfig{Durable: "c", AckPolicy: natsjs.AckExplicitPolicy, AckWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		if _, err := js.Publish(ctx, fmt.Sprintf("floor.%d", i+1), nil); err != nil {
			t.Fatal(err)
		}
	}
	// fetch returns the next n deliveries by stream sequence, checking
	// the consumer sequence each took.
	fetch := func(n int, wantCseq ...uint64) map[uint64]natsjs.Msg {
		t.Helper()
		b, err := c.Fetch(n, natsjs.FetchMaxWait(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		out := map[uint64]natsjs.Msg{}
		i := 0
		for m := range b.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			if i >= len(wantCseq) || meta.Sequence.Consumer != wantCseq[i] {
				t.Fatalf("delivery %d of stream sequence %d took consumer sequence %d, want %v", i, meta.Sequence.Stream, meta.Sequence.Consumer, wantCseq)
			}
			out[meta.Sequence.Stream] = m
			i++
		}
		if i != len(wantCseq) {
			t.Fatalf("%d deliveries, want %d", i, len(wantCseq))
		}
		return out
	}
	ack := func(m natsjs.Msg) {
		t.Helper()
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	floor := func() (floor, delivered uint64) {
		t.Helper()
		info, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.AckFloor.Consumer, info.Delivered.Consumer
	}

	first := fetch(6, 1, 2, 3, 4, 5, 6)
	ack(first[1])
	ack(first[3])
	if err := first[2].Nak(); err != nil {
		t.Fatal(err)
	}
	again := fetch(1, 7) // 2, redelivered
	ack(again[2])        // acked through its redelivery
	if f, d := floor(); f != 3 || d != 7 {
		t.Fatalf("ack floor %d, delivered %d with 4, 5 and 6 out: want 3 and 7", f, d)
	}
	if err := first[4].Nak(); err != nil {
		t.Fatal(err)
	}
	again = fetch(1, 8) // 4, redelivered, out
	ack(first[5])
	ack(first[6])
	if f, d := floor(); f >= 4 || d != 8 {
		t.Fatalf("ack floor %d, delivered %d with only 4 out (first delivered as 4, again as 8): want the floor below 4, delivered 8", f, d)
	}
	ack(again[4])
	if f, d := floor(); f != 8 || d != 8 {
		t.Fatalf("ack floor %d, delivered %d with nothing out: want 8 and 8", f, d)
	}
}
