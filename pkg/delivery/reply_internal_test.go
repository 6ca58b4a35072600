package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/natstest"
)

// replyConsumers is a stream with one message on each of r.1, r.2 and
// r.3, and a pull consumer for each (C1, C2, C3) that redelivers only after
// a minute: within a test, only what a reply hands back comes again.
func replyConsumers(t *testing.T) (*nats.Conn, [3]natsjs.Consumer) {
	t.Helper()
	nc, js := natstest.Start(t).Connect(t)
	ctx := context.Background()
	st, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: "R", Subjects: []string{"r.>"}})
	if err != nil {
		t.Fatal(err)
	}
	var cs [3]natsjs.Consumer
	for i := range cs {
		n := strconv.Itoa(i + 1)
		if _, err := js.Publish(ctx, "r."+n, []byte(n)); err != nil {
			t.Fatal(err)
		}
		cs[i], err = st.CreateConsumer(ctx, natsjs.ConsumerConfig{
			Durable: "C" + n, FilterSubject: "r." + n, AckPolicy: natsjs.AckExplicitPolicy, AckWait: time.Minute,
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return nc, cs
}

// fetch fetches at most one message from c within wait.
func fetch(t *testing.T, c natsjs.Consumer, wait time.Duration) natsjs.Msg {
	t.Helper()
	b, err := c.Fetch(1, natsjs.FetchMaxWait(wait))
	if err != nil {
		t.Fatal(err)
	}
	for m := range b.Messages() {
		return m
	}
	return nil
}

// next fetches the next message from c.
func next(t *testing.T, c natsjs.Consumer) natsjs.Msg {
	t.Helper()
	m := fetch(t, c, 10*time.Second)
	if m == nil {
		t.Fatal("no message within 10s")
	}
	return m
}

func delivery(t *testing.T, m natsjs.Msg) (seq, delivered uint64) {
	t.Helper()
	meta, err := m.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	return meta.Sequence.Stream, meta.NumDelivered
}

// replySubject answers as nats.go's jetstream.Msg does, and the server
// reads each answer as that one: Nak redelivers, NakWithDelay not before
// its delay, TermWithReason ends the delivery and names the reason in the
// advisory, Ack moves the ack floor, and only InProgress may come twice.
func TestReplySubjectAnswersAsJetStreamMsg(t *testing.T) {
	nc, cs := replyConsumers(t)
	ctx := context.Background()
	if err := newReplySubject(nc, "").Ack(); !errors.Is(err, natsjs.ErrMsgNoReply) {
		t.Fatalf("answer without a reply subject: %v, want ErrMsgNoReply", err)
	}

	// Nak: the message comes again; then NakWithDelay holds it back.
	r := newReplySubject(nc, next(t, cs[0]).Reply())
	if err := r.Nak(); err != nil {
		t.Fatal(err)
	}
	if err := r.Ack(); !errors.Is(err, natsjs.ErrMsgAlreadyAckd) {
		t.Fatalf("Ack after Nak: %v, want ErrMsgAlreadyAckd", err)
	}
	m := next(t, cs[0])
	if seq, n := delivery(t, m); seq != 1 || n != 2 {
		t.Fatalf("after Nak: seq %d delivered %d times, want seq 1 twice", seq, n)
	}
	if err := newReplySubject(nc, m.Reply()).NakWithDelay(time.Hour); err != nil {
		t.Fatal(err)
	}
	if m := fetch(t, cs[0], 300*time.Millisecond); m != nil {
		seq, n := delivery(t, m)
		t.Fatalf("seq %d delivered again (%d deliveries) within the hour it was handed back for", seq, n)
	}

	// InProgress any number of times, then TermWithReason.
	terminated, err := nc.SubscribeSync("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.R.C2")
	if err != nil {
		t.Fatal(err)
	}
	r = newReplySubject(nc, next(t, cs[1]).Reply())
	for range 2 {
		if err := r.InProgress(); err != nil {
			t.Fatalf("InProgress: %v", err)
		}
	}
	if err := r.TermWithReason("blocked"); err != nil {
		t.Fatal(err)
	}
	adv, err := terminated.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no termination advisory: %v", err)
	}
	var a struct {
		StreamSeq uint64 `json:"stream_seq"`
		Reason    string `json:"reason"`
	}
	if err := json.Unmarshal(adv.Data, &a); err != nil {
		t.Fatal(err)
	}
	if a.StreamSeq != 2 || a.Reason != "blocked" {
		t.Fatalf("termination advisory for seq %d with reason %q, want seq 2, \"blocked\"", a.StreamSeq, a.Reason)
	}

	// Ack, once.
	r = newReplySubject(nc, next(t, cs[2]).Reply())
	if err := r.Ack(); err != nil {
		t.Fatal(err)
	}
	if err := r.Ack(); !errors.Is(err, natsjs.ErrMsgAlreadyAckd) {
		t.Fatalf("second Ack: %v, want ErrMsgAlreadyAckd", err)
	}
	want := []uint64{1, 0, 0} // seq 1 is pending: handed back for an hour
	for i, c := range cs {
		natstest.WaitFor(t, 10*time.Second, func() bool {
			info, err := c.Info(ctx)
			return err == nil && uint64(info.NumAckPending) == want[i] && info.NumPending == 0
		}, fmt.Sprintf("consumer C%d: %d pending", i+1, want[i]))
	}
}

// The packed headers read back as the map they were packed from, without
// the skipped header, values in order.
func TestPackHeaderRoundTrip(t *testing.T) {
	h := nats.Header{
		"Nats-Msg-Id":          {"order:1:accepted"},
		"Notify-Key":           {"order:1:accepted"},
		"Notify-Created-At":    {"2026-12-02T10:00:00.123456789Z"},
		"Content-Type":         {"application/vnd.tgnotify.notification+json"},
		"X-Trace":              {"a b", "c:d"},
		pinIDHeader:            {"abc"},
		"Notify-Channel-Since": {"2026-12-02T10:00:12Z"},
	}
	got, err := unpackHeader(packHeader(h, pinIDHeader))
	if err != nil {
		t.Fatal(err)
	}
	delete(h, pinIDHeader)
	if !reflect.DeepEqual(got, h) {
		t.Fatalf("read back %v, want %v", got, h)
	}
	if got, err := unpackHeader(packHeader(nil, pinIDHeader)); err != nil || len(got) != 0 {
		t.Fatalf("empty headers read back as %v, %v", got, err)
	}
}
