package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Enqueue writes n into the outbox inside the caller's transaction, the same
// one that saves the business data, so both commit or neither does.
//
// It is idempotent on n.Key: if a notification with that key was ever
// enqueued (and not yet purged), nothing is written and inserted is false.
// Invalid input returns an error matching [ErrInvalid] that names the field;
// nothing is written then either. A zero CreatedAt is set to the current time.
//
// The transaction should be an immediate one (the default for databases
// opened with [Open]) so that concurrent writers queue on busy_timeout
// instead of failing with SQLITE_BUSY.
func Enqueue(ctx context.Context, tx *sql.Tx, n Notification) (inserted bool, err error) {
	if tx == nil {
		return false, fmt.Errorf("enqueueing notification: transaction is nil")
	}
	n.normalize()
	if n.CreatedAt.IsZero() {
		n.CreatedAt = time.Now()
	}
	n.CreatedAt = n.CreatedAt.UTC()
	if !n.ExpiresAt.IsZero() {
		n.ExpiresAt = n.ExpiresAt.UTC()
	}
	payload, err := n.MarshalPayload()
	if err != nil {
		return false, err
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO outbox (key, channel, recipient, payload, created_at)
		VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING`,
		n.Key, string(n.Channel), n.ChatID, payload, n.CreatedAt.UnixNano())
	if err != nil {
		return false, fmt.Errorf("enqueueing notification %q: %w", n.Key, err)
	}
	rows, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("enqueueing notification %q: %w", n.Key, err)
	}
	return rows == 1, nil
}
