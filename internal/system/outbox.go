package system

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"time"

	_ "modernc.org/sqlite" // the outbox's SQLite driver, read-only here

	"github.com/tgnotify/tgnotify/pkg/notify"
)

// OutboxRow is a row of an application's outbox, as the publisher reads it:
// its id is the commit order.
type OutboxRow struct {
	ID  int64
	Key string
	// Channel is the first channel of the notification's route, Token its
	// recipient there (the subject token the publisher uses).
	Channel, Token string
	// Chat is the Telegram chat id (0 without one).
	Chat int64
	// Route is the notification's route as enqueued (its payload's, or
	// the default route of its addresses); nil when the payload does not
	// decode.
	Route     []string
	CreatedAt time.Time
	Published bool
}

// ReadOutbox reads every outbox row of the SQLite database at path,
// read-only, in id order, with each notification's route.
func ReadOutbox(ctx context.Context, path string) ([]OutboxRow, error) {
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() + "?mode=ro&_pragma=busy_timeout(10000)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("opening the outbox read-only: %w", err)
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT id, key, channel, COALESCE(recipient_token, ''), recipient, payload, created_at,
		published_at IS NOT NULL FROM outbox_status ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("reading the outbox: %w", err)
	}
	defer rows.Close()
	var out []OutboxRow
	for rows.Next() {
		var r OutboxRow
		var created int64
		var payload []byte
		if err := rows.Scan(&r.ID, &r.Key, &r.Channel, &r.Token, &r.Chat, &payload, &created, &r.Published); err != nil {
			return out, fmt.Errorf("reading the outbox: %w", err)
		}
		r.CreatedAt = time.Unix(0, created)
		if n, err := notify.DecodePayload(payload); err == nil {
			n.Normalize()
			for _, c := range n.Route {
				r.Route = append(r.Route, string(c))
			}
		}
		if r.Token == "" && r.Chat != 0 {
			r.Token = fmt.Sprint(r.Chat)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// PendingRows counts outbox rows not yet published.
func PendingRows(rows []OutboxRow) int {
	n := 0
	for _, r := range rows {
		if !r.Published {
			n++
		}
	}
	return n
}
