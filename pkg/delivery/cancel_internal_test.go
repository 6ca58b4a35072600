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

// A claim that finds another worker's claim holds off while that claim
// holds (Worker.heldElsewhere), and takes it over once it does not; either
// way it never takes over a claim it was not shown.
func TestClaimHeldOffByAnotherWorkersClaim(t *testing.T) {
	_, s, _ := cancelEnv(t)
	ctx := context.Background()
	s.worker = "A"
	first, err := s.claim(ctx, "k9", "100", 9)
	if err != nil || first.rev == 0 {
		t.Fatalf("claim = %+v, %v; want a claim", first, err)
	}
	holds := true
	var asked []DeliveryRecord
	s.worker = "B"
	s.held = func(_ context.Context, rec DeliveryRecord) bool { asked = append(asked, rec); return holds }
	c, err := s.claim(ctx, "k9", "100", 9)
	if err != nil || c.rev != 0 || c.held == nil || c.held.rev != first.rev {
		t.Fatalf("claim over A's live claim = %+v, %v; want held off by it", c, err)
	}
	if len(asked) != 1 || asked[0].ClaimedBy != "A" {
		t.Fatalf("asked about %+v, want A's claim", asked)
	}
	holds = false
	c, err = s.claim(ctx, "k9", "100", 9)
	if err != nil || c.rev <= first.rev || c.held != nil {
		t.Fatalf("claim over A's claim that no longer holds = %+v, %v; want it taken over", c, err)
	}
	e, err := readEntry(ctx, s.delivered, "k9")
	if err != nil || e == nil || e.rec.ClaimedBy != "B" || e.rev != c.rev {
		t.Fatalf("entry after the takeover = %+v, %v; want B's claim", e, err)
	}
}
