package delivery

import (
	"context"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// cancelEnv is a NATS server with the streams and buckets, and a store on
// notify_delivered that counts lost cancels.
func cancelEnv(t *testing.T) (natsjs.JetStream, *store, *int) {
	t.Helper()
	s := recordStore(t)
	lost := new(int)
	s.cancelLost = func() { *lost++ }
	return s.js, s, lost
}

// Of a claim and a cancel mark on one key exactly one is created; a
// released claim lets a later cancel win, and the next claim finds it.
func TestClaimAndCancelMark(t *testing.T) {
	js, s, _ := cancelEnv(t)
	ctx := context.Background()
	c, err := s.claim(ctx, "k1", "100", 7)
	if err != nil || c.rev == 0 || c.found != nil {
		t.Fatalf("claim = %+v, %v; want a claim", c, err)
	}
	res, err := Cancel(ctx, js, jetstream.DefaultNames(), "k1", "test", time.Now())
	if err != nil || res.Outcome != CancelTooLate || res.Record.State != StateSending || res.Record.StreamSeq != 7 {
		t.Fatalf("Cancel during the claim = %+v, %v; want too late, sending", res, err)
	}
	s.release(ctx, "k1", c.rev)
	if res, err = Cancel(ctx, js, jetstream.DefaultNames(), "k1", "test", time.Now()); err != nil || res.Outcome != Cancelled || res.Earlier {
		t.Fatalf("Cancel after the release = %+v, %v; want cancelled", res, err)
	}
	if c, err = s.claim(ctx, "k1", "100", 7); err != nil || c.rev != 0 || c.found == nil || c.found.state() != StateCancelled {
		t.Fatalf("claim after the cancel = %+v, %v; want the cancel mark found", c, err)
	}
	if done, err := s.isDelivered(ctx, "k1"); err != nil || !done {
		t.Fatalf("isDelivered of a cancelled key = %v, %v; want true (nothing to send)", done, err)
	}

	// A claim left by an attempt that died is taken over at its revision.
	first, err := s.claim(ctx, "k2", "100", 8)
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.claim(ctx, "k2", "100", 8)
	if err != nil || second.rev <= first.rev || second.found != nil {
		t.Fatalf("second claim = %+v, %v; want the claim taken over", second, err)
	}
	if err := s.record(ctx, DeliveryRecord{Key: "k2", Channel: "telegram", Recipient: "100", DeliveredAt: time.Now()}, second.rev); err != nil {
		t.Fatal(err)
	}
	if res, err := Cancel(ctx, js, jetstream.DefaultNames(), "k2", "test", time.Now()); err != nil || res.Outcome != CancelTooLate || res.Record.State != StateDelivered {
		t.Fatalf("Cancel after the delivery = %+v, %v; want too late, delivered", res, err)
	}
}

// A send without a claim (notify_delivered took no write in time) whose
// record finds a cancel mark overwrites it and counts the lost cancel.
func TestUnclaimedSendOverACancel(t *testing.T) {
	js, s, lost := cancelEnv(t)
	ctx := context.Background()
	if res, err := Cancel(ctx, js, jetstream.DefaultNames(), "k3", "test", time.Now()); err != nil || res.Outcome != Cancelled {
		t.Fatalf("Cancel = %+v, %v", res, err)
	}
	if err := s.record(ctx, DeliveryRecord{Key: "k3", Channel: "telegram", Recipient: "100", DeliveredAt: time.Now()}, 0); err != nil {
		t.Fatal(err)
	}
	e, err := readEntry(ctx, s.delivered, "k3")
	if err != nil || e == nil || e.state() != StateDelivered || *lost != 1 {
		t.Fatalf("entry %+v, %v, lost %d; want the delivery record and one lost cancel", e, err, *lost)
	}
	// Unclaimed and nothing there: a plain create, nothing lost.
	if err := s.record(ctx, DeliveryRecord{Key: "k4", Channel: "telegram", Recipient: "100", DeliveredAt: time.Now()}, 0); err != nil || *lost != 1 {
		t.Fatalf("record = %v, lost %d; want nil, still 1", err, *lost)
	}
}
