package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

func enqueueN(t *testing.T, db *sql.DB, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		nt := validNotification()
		nt.Key = fmt.Sprintf("order:%d:accepted", i)
		nt.ChatID = int64(100 + i%3)
		nt.CreatedAt = time.Unix(1_700_000_000+int64(i), 0).UTC()
		enqueue(t, db, nt)
	}
}

func TestPendingInIDOrderAfterCursor(t *testing.T) {
	db, _ := openDB(t)
	r := outbox.NewReader(db)
	ctx := context.Background()
	enqueueN(t, db, 1, 10)

	first, err := r.Pending(ctx, 0, 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 4 || first[0].ID != 1 || first[3].ID != 4 {
		t.Fatalf("first batch ids %v, want 1..4", ids(first))
	}
	if first[0].Key != "order:1:accepted" || first[0].ChatID != 101 || first[0].Channel != notify.ChannelTelegram {
		t.Fatalf("first row = %+v", first[0])
	}
	if n, err := notify.DecodePayload(first[0].Payload); err != nil || n.Key != first[0].Key {
		t.Fatalf("payload of first row decodes to %+v, %v", n, err)
	}
	rest, err := r.Pending(ctx, first[3].ID, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(rest) != 6 || rest[0].ID != 5 || rest[5].ID != 10 {
		t.Fatalf("rest ids %v, want 5..10", ids(rest))
	}
	if _, err := r.Pending(ctx, 0, 0); err == nil {
		t.Fatal("Pending with limit 0 succeeded")
	}
}

// TestPendingPayloadsAreTheirOwn reads many rows, small and large, in one
// query and checks that each payload is the one enqueued and that changing
// or appending to one leaves the others intact: Pending copies payloads into
// shared blocks.
func TestPendingPayloadsAreTheirOwn(t *testing.T) {
	db, _ := openDB(t)
	r := outbox.NewReader(db)
	ctx := context.Background()
	const n = 300
	want := make([]string, 0, n)
	for i := range n {
		nt := validNotification()
		nt.Key = fmt.Sprintf("order:%d:accepted", i)
		nt.Text = fmt.Sprintf("Order %d accepted", i)
		if i%50 == 7 { // larger than a quarter of a block: copied on its own
			nt.Text = strings.Repeat("ж", 4000)
		}
		enqueue(t, db, nt)
		want = append(want, nt.Text)
	}
	rows, err := r.Pending(ctx, 0, n)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != n {
		t.Fatalf("Pending returned %d rows, want %d", len(rows), n)
	}
	for i := range rows {
		if i+1 < len(rows) {
			// Writing over what follows a payload must not reach the next one.
			rows[i].Payload = append(rows[i].Payload, "garbage"...)
			for j := range rows[i].Payload {
				rows[i].Payload[j] = 'x'
			}
		}
		next := rows[(i+1)%len(rows)]
		if i+1 == len(rows) {
			continue
		}
		got, err := notify.DecodePayload(next.Payload)
		if err != nil {
			t.Fatalf("row %d: payload no longer decodes after row %d was changed: %v", next.ID, rows[i].ID, err)
		}
		if got.Key != next.Key || got.Text != want[i+1] {
			t.Fatalf("row %d: payload has key %q and text %.20q, want %q and %.20q", next.ID, got.Key, got.Text, next.Key, want[i+1])
		}
	}
}

func TestMarkPublishedPrefix(t *testing.T) {
	db, _ := openDB(t)
	r := outbox.NewReader(db)
	ctx := context.Background()
	enqueueN(t, db, 1, 10)
	if err := r.MarkPublished(ctx, time.Now(), 6); err != nil {
		t.Fatal(err)
	}
	// Marking a lower id changes nothing.
	if err := r.MarkPublished(ctx, time.Now(), 3); err != nil {
		t.Fatal(err)
	}
	if upto, err := r.PublishedUpTo(ctx); err != nil || upto != 6 {
		t.Fatalf("PublishedUpTo = %d, %v; want 6", upto, err)
	}
	rows, err := r.Pending(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(rows); fmt.Sprint(got) != "[7 8 9 10]" {
		t.Fatalf("pending after marks = %v, want [7 8 9 10]", got)
	}
	// A cursor ahead of the mark wins.
	if rows, err := r.Pending(ctx, 8, 100); err != nil || fmt.Sprint(ids(rows)) != "[9 10]" {
		t.Fatalf("Pending(8) = %v, %v; want [9 10]", ids(rows), err)
	}
	if err := r.MarkPublished(ctx, time.Now(), 0); err == nil {
		t.Fatal("MarkPublished of id 0 succeeded")
	}
	// outbox_status shows when each row was published.
	var published, pending int
	if err := db.QueryRow(`SELECT COUNT(published_at), COUNT(*) - COUNT(published_at) FROM outbox_status`).Scan(&published, &pending); err != nil {
		t.Fatal(err)
	}
	if published != 6 || pending != 4 {
		t.Fatalf("outbox_status: %d published, %d pending; want 6 and 4", published, pending)
	}
}

func TestBacklog(t *testing.T) {
	db, _ := openDB(t)
	r := outbox.NewReader(db)
	ctx := context.Background()
	b, err := r.Backlog(ctx)
	if err != nil || b.Pending != 0 || !b.Oldest.IsZero() {
		t.Fatalf("empty Backlog = %+v, %v", b, err)
	}
	enqueueN(t, db, 1, 5)
	if err := r.MarkPublished(ctx, time.Now(), 2); err != nil {
		t.Fatal(err)
	}
	b, err = r.Backlog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Unix(1_700_000_003, 0).UTC(); b.Pending != 3 || !b.Oldest.Equal(want) {
		t.Fatalf("Backlog = %+v, want 3 pending, oldest %v", b, want)
	}
	if err := r.MarkPublished(ctx, time.Now(), 5); err != nil {
		t.Fatal(err)
	}
	if b, err := r.Backlog(ctx); err != nil || b.Pending != 0 || !b.Oldest.IsZero() {
		t.Fatalf("Backlog = %+v, %v; want empty", b, err)
	}
}

func TestPurgeOnlyOldPublishedRows(t *testing.T) {
	db, _ := openDB(t)
	r := outbox.NewReader(db)
	ctx := context.Background()
	enqueueN(t, db, 1, 25)
	old := time.Now().Add(-48 * time.Hour)
	if err := r.MarkPublished(ctx, old, 20); err != nil {
		t.Fatal(err)
	}
	if err := r.MarkPublished(ctx, time.Now(), 22); err != nil {
		t.Fatal(err)
	}
	n, err := r.Purge(ctx, time.Now().Add(-24*time.Hour), 7) // 3 chunks: 7+7+6
	if err != nil || n != 20 {
		t.Fatalf("Purge = %d, %v; want 20", n, err)
	}
	if got := countRows(t, db); got != 5 {
		t.Fatalf("%d rows left, want 5 (2 recent published, 3 pending)", got)
	}
	var marks int
	if err := db.QueryRow(`SELECT COUNT(*) FROM outbox_marks`).Scan(&marks); err != nil || marks != 1 {
		t.Fatalf("%d markings left (%v), want only the recent one", marks, err)
	}
	if _, err := r.Purge(ctx, time.Now(), 0); err == nil {
		t.Fatal("Purge with chunk 0 succeeded")
	}
}

// TestIDsAreNeverReused is what lets the outbox do without AUTOINCREMENT:
// a purge that takes every published row leaves the newest, nobody can
// delete it, and so a new row, enqueued after the publisher restarts, gets
// an id above every id ever used and is found as pending.
func TestIDsAreNeverReused(t *testing.T) {
	db, path := openDB(t)
	r := outbox.NewReader(db)
	ctx := context.Background()
	enqueueN(t, db, 1, 10)
	if err := r.MarkPublished(ctx, time.Now().Add(-time.Hour), 10); err != nil {
		t.Fatal(err)
	}
	n, err := r.Purge(ctx, time.Now(), 3)
	if err != nil || n != 9 {
		t.Fatalf("Purge = %d, %v; want 9: every published row but the newest", n, err)
	}
	if _, err := db.Exec(`DELETE FROM outbox WHERE id = 10`); err == nil || !strings.Contains(err.Error(), "never deleted") {
		t.Fatalf("deleting the newest row: %v, want the trigger to refuse", err)
	}
	if _, err := db.Exec(`DELETE FROM outbox`); err == nil {
		t.Fatal("deleting every row succeeded, want the trigger to refuse")
	}

	// The publisher restarts: a new handle and a new Reader.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = outbox.Open(ctx, path, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	r = outbox.NewReader(db)
	enqueueN(t, db, 100, 3)
	rows, err := r.Pending(ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(ids(rows)); got != "[11 12 13]" {
		t.Fatalf("pending after purge and restart = %s, want [11 12 13]", got)
	}
}

func TestCheckpointTruncatesWAL(t *testing.T) {
	db, path := openDB(t)
	r := outbox.NewReader(db)
	ctx := context.Background()
	enqueueN(t, db, 1, 200)
	if st, err := os.Stat(path + "-wal"); err != nil || st.Size() == 0 {
		t.Fatalf("expected a non-empty -wal file before checkpoint: %v", err)
	}
	res, err := r.Checkpoint(ctx, "")
	if err != nil || res.Busy {
		t.Fatalf("Checkpoint = %+v, %v", res, err)
	}
	if st, err := os.Stat(path + "-wal"); err != nil || st.Size() != 0 {
		t.Fatalf("-wal after TRUNCATE checkpoint: size %d, %v; want 0", st.Size(), err)
	}
	if _, err := r.Checkpoint(ctx, "bogus"); err == nil {
		t.Fatal("Checkpoint with an unknown mode succeeded")
	}
	if err := r.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestCommitWatcherSeesOtherConnections(t *testing.T) {
	db, path := openDB(t)
	ctx := context.Background()
	w, err := outbox.NewCommitWatcher(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if changed, err := w.Changed(ctx); err != nil || changed {
		t.Fatalf("Changed before any commit = %v, %v", changed, err)
	}
	// Another *sql.DB stands in for another process.
	other, err := outbox.Open(ctx, path, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	done := make(chan error, 1)
	go func() {
		changed, err := w.Wait(ctx, time.Millisecond, 10*time.Second)
		if err == nil && !changed {
			err = fmt.Errorf("Wait timed out without seeing the commit")
		}
		done <- err
	}()
	enqueueN(t, other, 1, 1)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if changed, err := w.Wait(ctx, time.Millisecond, 5*time.Millisecond); err != nil || changed {
		t.Fatalf("Wait with no new commit = %v, %v; want false after the timeout", changed, err)
	}
}

func ids(rows []outbox.Row) []int64 {
	out := make([]int64, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}
