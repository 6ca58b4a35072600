package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync"

	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// An application saves its business data and the notification in one
// transaction. Repeating the request writes nothing.
func ExampleEnqueue() {
	dir, _ := os.MkdirTemp("", "outbox-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := outbox.Open(ctx, filepath.Join(dir, "shop.db"), outbox.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY)`); err != nil {
		log.Fatal(err)
	}

	placeOrder := func(id string, chatID int64, customer string) (bool, error) {
		tx, err := db.BeginTx(ctx, nil) // BEGIN IMMEDIATE
		if err != nil {
			return false, err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (?) ON CONFLICT DO NOTHING`, id); err != nil {
			return false, err
		}
		inserted, err := outbox.Enqueue(ctx, tx, notify.Notification{
			Key:       "order:" + id + ":accepted",
			ChatID:    chatID,
			Text:      "<b>Order " + notify.EscapeHTML(id) + " accepted</b>, " + notify.EscapeHTML(customer),
			ParseMode: notify.ParseModeHTML,
		})
		if err != nil {
			return false, err
		}
		return inserted, tx.Commit()
	}

	fmt.Println(placeOrder("A1", 100, "Ann <3"))
	fmt.Println(placeOrder("A1", 100, "Ann <3")) // the mobile app retried
	// Output:
	// true <nil>
	// false <nil>
}

// Requests that arrive together share one fsynced commit, each in a
// savepoint of its own: a request that fails loses only its own writes.
func ExampleCommitter() {
	dir, _ := os.MkdirTemp("", "outbox-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := outbox.Open(ctx, filepath.Join(dir, "shop.db"), outbox.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY, qty INTEGER NOT NULL CHECK (qty > 0))`); err != nil {
		log.Fatal(err)
	}
	w, err := outbox.NewWriter(ctx, db)
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	c := outbox.NewCommitter(db, 0) // one per database, shared by every request

	placeOrder := func(id string, qty int, chatID int64) error {
		return c.Run(ctx, func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, qty) VALUES (?, ?)`, id, qty); err != nil {
				return fmt.Errorf("saving order %s: %w", id, err)
			}
			_, err := w.Enqueue(ctx, tx, notify.Notification{Key: "order:" + id + ":accepted", ChatID: chatID, Text: "Order " + id + " accepted"})
			return err
		})
	}

	// Many requests at once, as an HTTP server gets them; B2 is invalid.
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, qty := range []int{1, 0, 2} {
		wg.Go(func() { errs[i] = placeOrder(fmt.Sprint("B", i+1), qty, 100) })
	}
	wg.Wait()
	for i, err := range errs {
		fmt.Printf("B%d: %v\n", i+1, err != nil)
	}
	var orders, notifications int
	if err := db.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM orders), (SELECT COUNT(*) FROM outbox)`).Scan(&orders, &notifications); err != nil {
		log.Fatal(err)
	}
	fmt.Println(orders, "orders,", notifications, "notifications")
	// Output:
	// B1: false
	// B2: true
	// B3: false
	// 2 orders, 2 notifications
}
