package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

func enqueue(t *testing.T, db *sql.DB, n notify.Notification) bool {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	inserted, err := outbox.Enqueue(ctx, tx, n)
	if err != nil {
		t.Fatalf("Enqueue(%s): %v", n.Key, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return inserted
}

func validNotification() notify.Notification {
	return notify.Notification{
		Key:       "order:A1:accepted",
		ChatID:    100,
		Text:      "Order A1 accepted",
		CreatedAt: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
	}
}

func countRows(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM outbox`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestEnqueueIsIdempotent(t *testing.T) {
	db, _ := openDB(t)
	n := validNotification()
	if !enqueue(t, db, n) {
		t.Fatal("first Enqueue inserted = false, want true")
	}
	n.Text = "a different text under the same key"
	if enqueue(t, db, n) {
		t.Fatal("second Enqueue with the same key inserted = true, want false")
	}
	// Still a no-op after the row was published.
	if err := outbox.NewReader(db).MarkPublished(context.Background(), time.Now(), 1); err != nil {
		t.Fatal(err)
	}
	if enqueue(t, db, n) {
		t.Fatal("Enqueue after publishing inserted = true, want false")
	}
	if got := countRows(t, db); got != 1 {
		t.Fatalf("outbox has %d rows, want 1", got)
	}
}

func TestEnqueueRollback(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if inserted, err := outbox.Enqueue(ctx, tx, validNotification()); err != nil || !inserted {
		t.Fatalf("Enqueue = %v, %v", inserted, err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if got := countRows(t, db); got != 0 {
		t.Fatalf("after rollback the outbox has %d rows, want 0", got)
	}
}

func TestEnqueueInvalidWritesNothing(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	tx, _ := db.BeginTx(ctx, nil)
	defer tx.Rollback()
	n := validNotification()
	n.Text = ""
	_, err := outbox.Enqueue(ctx, tx, n)
	var ve *notify.ValidationError
	if !errors.Is(err, notify.ErrInvalid) || !errors.As(err, &ve) || ve.Field != "text" {
		t.Fatalf("Enqueue of an empty text = %v, want a validation error on text", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := countRows(t, db); got != 0 {
		t.Fatalf("outbox has %d rows, want 0", got)
	}
	if _, err := outbox.Enqueue(ctx, nil, validNotification()); err == nil {
		t.Fatal("Enqueue with a nil transaction succeeded")
	}
}

func TestEnqueueSetsCreatedAt(t *testing.T) {
	db, _ := openDB(t)
	n := validNotification()
	n.CreatedAt = time.Time{}
	before := time.Now()
	enqueue(t, db, n)
	rows, err := outbox.NewReader(db).Pending(context.Background(), 0, 10)
	if err != nil || len(rows) != 1 {
		t.Fatalf("Pending = %v, %v", rows, err)
	}
	got, err := notify.DecodePayload(rows[0].Payload)
	if err != nil {
		t.Fatal(err)
	}
	if got.CreatedAt.Before(before.Add(-time.Second)) || got.CreatedAt.After(time.Now()) || !got.CreatedAt.Equal(rows[0].CreatedAt) {
		t.Fatalf("created_at = %v (row %v), want about %v", got.CreatedAt, rows[0].CreatedAt, before)
	}
}

func TestEnqueueConcurrentWriters(t *testing.T) {
	db, _ := openDB(t)
	const writers, each = 8, 25
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		go func() {
			ctx := context.Background()
			for i := 0; i < each; i++ {
				err := func() error {
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						return err
					}
					defer tx.Rollback()
					n := validNotification()
					n.Key = fmt.Sprintf("k:%d:%d", w, i)
					if _, err := outbox.Enqueue(ctx, tx, n); err != nil {
						return err
					}
					return tx.Commit()
				}()
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for w := 0; w < writers; w++ {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent writer: %v (busy: %v)", err, outbox.IsBusy(err))
		}
	}
	if got := countRows(t, db); got != writers*each {
		t.Fatalf("outbox has %d rows, want %d", got, writers*each)
	}
}

// An application that opens the database itself, with its own driver
// settings, migrates it with Migrate and enqueues inside its own
// transaction, through a Writer or without one.
func TestEnqueueOnTheApplicationsOwnHandle(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "app.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i := 0; i < 2; i++ { // idempotent
		if err := outbox.Migrate(ctx, db); err != nil {
			t.Fatalf("Migrate (run %d): %v", i+1, err)
		}
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	w, err := outbox.NewWriter(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	// A database/sql transaction, through the Writer's prepared statement.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES ('A1')`); err != nil {
		t.Fatal(err)
	}
	if ok, err := w.Enqueue(ctx, tx, validNotification()); err != nil || !ok {
		t.Fatalf("Writer.Enqueue on the application's tx = %v, %v; want true, nil", ok, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	// A connection on which the application runs BEGIN IMMEDIATE itself.
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	n := validNotification()
	n.Key = "order:A2:accepted"
	if ok, err := w.Enqueue(ctx, conn, n); err != nil || !ok {
		t.Fatalf("Writer.Enqueue on a *sql.Conn = %v, %v; want true, nil", ok, err)
	}
	if ok, err := outbox.Enqueue(ctx, conn, n); err != nil || ok {
		t.Fatalf("Enqueue of the same key again = %v, %v; want false, nil", ok, err)
	}
	if _, err := conn.ExecContext(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	if got := countRows(t, db); got != 1 {
		t.Fatalf("outbox has %d rows after one commit and one rollback, want 1", got)
	}
	if _, err := w.Enqueue(ctx, (*sql.Tx)(nil), n); err == nil {
		t.Fatal("Writer.Enqueue with a nil *sql.Tx succeeded, want an error")
	}
}

// not_before is checked at enqueue against the created_at Enqueue sets:
// at most notify.MaxScheduleAhead ahead, and before expires_at.
func TestEnqueueScheduled(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		mutate func(n *notify.Notification)
	}{
		{"too far ahead", func(n *notify.Notification) { n.NotBefore = time.Now().Add(notify.MaxScheduleAhead + time.Minute) }},
		{"after expires_at", func(n *notify.Notification) {
			n.NotBefore, n.ExpiresAt = time.Now().Add(2*time.Hour), time.Now().Add(time.Hour)
		}},
	} {
		n := validNotification()
		n.CreatedAt = time.Time{}
		tc.mutate(&n)
		_, err := outbox.Enqueue(ctx, db, n)
		var ve *notify.ValidationError
		if !errors.As(err, &ve) || ve.Field != "not_before" {
			t.Errorf("%s: Enqueue = %v, want a validation error on not_before", tc.name, err)
		}
	}
	n := validNotification()
	n.CreatedAt = time.Time{}
	n.NotBefore = time.Now().Add(time.Hour).In(time.FixedZone("MSK", 3*3600))
	enqueue(t, db, n)
	rows, err := outbox.NewReader(db).Pending(ctx, 0, 10)
	if err != nil || len(rows) != 1 {
		t.Fatalf("Pending = %v, %v", rows, err)
	}
	got, err := notify.DecodePayload(rows[0].Payload)
	if err != nil {
		t.Fatal(err)
	}
	if !got.NotBefore.Equal(n.NotBefore) || got.NotBefore.Location() != time.UTC {
		t.Fatalf("not_before = %v, want %v in UTC", got.NotBefore, n.NotBefore)
	}
}
