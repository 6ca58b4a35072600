package outbox_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

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
