package publisher_test

import (
	"context"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// A row cancelled while pending is never published; a row cancelled after
// it was published is carried to the workers as a cancel mark. Both end
// with cancel_result 'cancelled' and a mark in notify_delivered that any
// later cancel finds.
func TestCancelledRows(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if err := jetstream.ProvisionStreams(ctx, e.js, jetstream.StreamSettings{}); err != nil {
		t.Fatalf("provisioning the streams: %v", err)
	}
	if _, err := jetstream.ProvisionWorker(ctx, e.js, jetstream.WorkerSettings{}); err != nil {
		t.Fatalf("provisioning the buckets: %v", err)
	}
	e.enqueue(t, 0, 5, 2, 5)
	cancel := func(key string, want outbox.CancelState) {
		t.Helper()
		if got, err := outbox.Cancel(ctx, e.app, key); err != nil || got != want {
			t.Fatalf("Cancel(%s) = %v, %v; want %v", key, got, err, want)
		}
	}
	cancel(notification(1, 2).Key, outbox.CancelledPending)

	opts := testOptions(nil)
	opts.CancelInterval = 20 * time.Millisecond
	e.start(t, opts)
	waitFor(t, 20*time.Second, func() bool { return e.pending(t) == 0 }, "every row marked published")
	var keys []string
	for _, m := range streamMsgs(t, e.js) {
		if m.subject == jetstream.SubjectCancelled {
			// The cancel of row 1, carried by now or not: an event, not
			// a notification.
			continue
		}
		keys = append(keys, m.key)
	}
	if len(keys) != 4 || keys[0] != notification(0, 2).Key || keys[1] != notification(2, 2).Key {
		t.Fatalf("stream holds %v, want rows 0, 2, 3, 4: the cancelled row is not published", keys)
	}
	cancel(notification(3, 2).Key, outbox.CancelledPublished)

	result := func(i int) string {
		var r *string
		if err := e.app.QueryRow(`SELECT cancel_result FROM outbox WHERE key = ?`, notification(i, 2).Key).Scan(&r); err != nil {
			t.Fatal(err)
		}
		if r == nil {
			return ""
		}
		return *r
	}
	waitFor(t, 20*time.Second, func() bool {
		return result(1) == outbox.CancelResultCancelled && result(3) == outbox.CancelResultCancelled
	}, "both cancels carried to the workers")
	for _, i := range []int{1, 3} {
		res, err := delivery.Cancel(ctx, e.js, jetstream.DefaultNames(), notification(i, 2).Key, "test", time.Now())
		if err != nil || res.Outcome != delivery.Cancelled || !res.Earlier || res.Record.CancelledBy != "publisher" {
			t.Fatalf("Cancel(row %d) = %+v, %v; want cancelled earlier by the publisher", i, res, err)
		}
	}
	if r := result(0); r != "" {
		t.Fatalf("row 0 has cancel_result %q, want none", r)
	}
}
