package outbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// A pending row that is cancelled is never read for publishing; a row of
// the published prefix is reported as published and becomes a cancel
// request for the publisher, until its result is recorded.
func TestCancel(t *testing.T) {
	db, _ := openDB(t)
	r := outbox.NewReader(db)
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC)
	before := time.Now()
	enqueueN(t, db, 1, 5)
	if err := r.MarkPublished(ctx, now, 2); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		key  string
		want outbox.CancelState
	}{
		{"order:4:accepted", outbox.CancelledPending},
		{"order:2:accepted", outbox.CancelledPublished},
		{"order:4:accepted", outbox.AlreadyCancelled},
	} {
		if got, err := outbox.Cancel(ctx, db, tc.key); err != nil || got != tc.want {
			t.Fatalf("Cancel(%s) = %v, %v; want %v", tc.key, got, err, tc.want)
		}
	}
	if _, err := outbox.Cancel(ctx, db, "order:99:accepted"); !errors.Is(err, outbox.ErrNotFound) {
		t.Fatalf("Cancel of an unknown key = %v, want ErrNotFound", err)
	}
	// The contract allows the same from SQL, in any language.
	if _, err := db.Exec(`UPDATE outbox SET cancelled_at = ? WHERE key = ? AND cancelled_at IS NULL`, now.UnixNano(), "order:5:accepted"); err != nil {
		t.Fatal(err)
	}

	pending, err := r.Pending(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(pending); len(got) != 1 || got[0] != 3 {
		t.Fatalf("pending ids %v, want [3]: cancelled rows are not published", got)
	}
	if b, err := r.Backlog(ctx); err != nil || b.Pending != 1 {
		t.Fatalf("backlog = %+v, %v; want 1 pending", b, err)
	}

	reqs, err := r.CancelRequests(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 1 || reqs[0].Key != "order:2:accepted" || reqs[0].CancelledAt.Before(before) || reqs[0].CancelledAt.After(time.Now()) {
		t.Fatalf("cancel requests %+v, want order:2 (only the published prefix)", reqs)
	}
	// Once the prefix covers the skipped rows, they are requests too: the
	// publisher may have had one in flight when it was cancelled.
	if err := r.MarkPublished(ctx, now, 5); err != nil {
		t.Fatal(err)
	}
	if err := r.SetCancelResult(ctx, reqs[0].ID, outbox.CancelResultTooLate); err != nil {
		t.Fatal(err)
	}
	reqs, err = r.CancelRequests(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 2 || reqs[0].Key != "order:4:accepted" || reqs[1].Key != "order:5:accepted" {
		t.Fatalf("cancel requests %+v, want order:4 and order:5", reqs)
	}
	var result string
	if err := db.QueryRow(`SELECT cancel_result FROM outbox_status WHERE key = 'order:2:accepted'`).Scan(&result); err != nil || result != outbox.CancelResultTooLate {
		t.Fatalf("cancel_result = %q, %v; want %q", result, err, outbox.CancelResultTooLate)
	}
}
