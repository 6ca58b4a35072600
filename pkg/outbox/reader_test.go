package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
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

func TestMarkPublishedRanges(t *testing.T) {
	db, _ := openDB(t)
	r := outbox.NewReader(db)
	ctx := context.Background()
	enqueueN(t, db, 1, 10)
	n, err := r.MarkPublished(ctx, time.Now(), outbox.IDRange{From: 1, To: 3}, outbox.IDRange{From: 6, To: 6})
	if err != nil || n != 4 {
		t.Fatalf("MarkPublished = %d, %v; want 4", n, err)
	}
	// Marking again changes nothing.
	if n, err := r.MarkPublished(ctx, time.Now(), outbox.IDRange{From: 1, To: 6}); err != nil || n != 2 {
		t.Fatalf("second MarkPublished = %d, %v; want 2 (rows 4 and 5)", n, err)
	}
	rows, err := r.Pending(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(rows); fmt.Sprint(got) != "[7 8 9 10]" {
		t.Fatalf("pending after marks = %v, want [7 8 9 10]", got)
	}
	if _, err := r.MarkPublished(ctx, time.Now(), outbox.IDRange{From: 5, To: 4}); err == nil {
		t.Fatal("MarkPublished with an empty range succeeded")
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
	if _, err := r.MarkPublished(ctx, time.Now(), outbox.IDRange{From: 1, To: 2}); err != nil {
		t.Fatal(err)
	}
	b, err = r.Backlog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Unix(1_700_000_003, 0).UTC(); b.Pending != 3 || !b.Oldest.Equal(want) {
		t.Fatalf("Backlog = %+v, want 3 pending, oldest %v", b, want)
	}
}

func TestPurgeOnlyOldPublishedRows(t *testing.T) {
	db, _ := openDB(t)
	r := outbox.NewReader(db)
	ctx := context.Background()
	enqueueN(t, db, 1, 25)
	old := time.Now().Add(-48 * time.Hour)
	if _, err := r.MarkPublished(ctx, old, outbox.IDRange{From: 1, To: 20}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.MarkPublished(ctx, time.Now(), outbox.IDRange{From: 21, To: 22}); err != nil {
		t.Fatal(err)
	}
	n, err := r.Purge(ctx, time.Now().Add(-24*time.Hour), 7) // 3 chunks: 7+7+6
	if err != nil || n != 20 {
		t.Fatalf("Purge = %d, %v; want 20", n, err)
	}
	if got := countRows(t, db); got != 5 {
		t.Fatalf("%d rows left, want 5 (2 recent published, 3 pending)", got)
	}
	// Ids are never reused after a purge, so a cursor never skips new rows.
	enqueueN(t, db, 100, 1)
	rows, _ := r.Pending(ctx, 25, 10)
	if len(rows) != 1 || rows[0].ID != 26 {
		t.Fatalf("new row after purge has ids %v, want [26]", ids(rows))
	}
	if _, err := r.Purge(ctx, time.Now(), 0); err == nil {
		t.Fatal("Purge with chunk 0 succeeded")
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

// The low-water mark only ever skips published rows: rows enqueued after a
// backlog measurement or a mark are still found, by this Reader and others.
func TestLowWaterMarkNeverSkips(t *testing.T) {
	db, _ := openDB(t)
	r := outbox.NewReader(db)
	ctx := context.Background()
	enqueueN(t, db, 1, 5)
	if _, err := r.MarkPublished(ctx, time.Now(), outbox.IDRange{From: 1, To: 3}, outbox.IDRange{From: 5, To: 5}); err != nil {
		t.Fatal(err)
	}
	b, err := r.Backlog(ctx)
	if err != nil || b.Pending != 1 {
		t.Fatalf("Backlog = %+v, %v; want 1 pending (row 4)", b, err)
	}
	rows, err := r.Pending(ctx, 0, 10)
	if err != nil || fmt.Sprint(ids(rows)) != "[4]" {
		t.Fatalf("Pending(0) = %v, %v; want [4]", ids(rows), err)
	}
	if _, err := r.MarkPublished(ctx, time.Now(), outbox.IDRange{From: 4, To: 4}); err != nil {
		t.Fatal(err)
	}
	if b, err := r.Backlog(ctx); err != nil || b.Pending != 0 {
		t.Fatalf("Backlog = %+v, %v; want empty", b, err)
	}
	enqueueN(t, db, 10, 2)
	rows, err = r.Pending(ctx, 0, 10)
	if err != nil || fmt.Sprint(ids(rows)) != "[6 7]" {
		t.Fatalf("Pending(0) after new rows = %v, %v; want [6 7]", ids(rows), err)
	}
	if b, err := outbox.NewReader(db).Backlog(ctx); err != nil || b.Pending != 2 {
		t.Fatalf("a fresh Reader's Backlog = %+v, %v; want 2 pending", b, err)
	}
}
