package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// insertSQL writes one notification unless its key is already present.
const insertSQL = `INSERT INTO outbox (key, channel, recipient, payload, created_at)
	VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING`

// Writer enqueues notifications. It keeps its INSERT prepared on every pooled
// connection, which saves SQLite parsing the statement on each order; create
// one per database and share it between goroutines.
type Writer struct {
	insert *sql.Stmt
}

// NewWriter prepares the writer's statement on db, a database opened with
// [Open]. Close it when the database is closed.
func NewWriter(ctx context.Context, db *sql.DB) (*Writer, error) {
	st, err := db.PrepareContext(ctx, insertSQL)
	if err != nil {
		return nil, fmt.Errorf("preparing outbox insert: %w", err)
	}
	return &Writer{insert: st}, nil
}

// Close releases the prepared statement.
func (w *Writer) Close() error { return w.insert.Close() }

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
func (w *Writer) Enqueue(ctx context.Context, tx *sql.Tx, n Notification) (inserted bool, err error) {
	if tx == nil {
		return false, errors.New("enqueueing notification: transaction is nil")
	}
	return enqueue(ctx, tx.StmtContext(ctx, w.insert).ExecContext, n)
}

// Enqueue is [Writer.Enqueue] without a prepared statement: SQLite parses the
// INSERT on every call. It suits occasional writers; a request path that
// enqueues on every call should keep a [Writer].
func Enqueue(ctx context.Context, tx *sql.Tx, n Notification) (inserted bool, err error) {
	if tx == nil {
		return false, errors.New("enqueueing notification: transaction is nil")
	}
	return enqueue(ctx, func(ctx context.Context, args ...any) (sql.Result, error) {
		return tx.ExecContext(ctx, insertSQL, args...)
	}, n)
}

func enqueue(ctx context.Context, exec func(context.Context, ...any) (sql.Result, error), n Notification) (bool, error) {
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
	res, err := exec(ctx, n.Key, string(n.Channel), n.ChatID, payload, n.CreatedAt.UnixNano())
	if err != nil {
		return false, fmt.Errorf("enqueueing notification %q: %w", n.Key, err)
	}
	rows, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("enqueueing notification %q: %w", n.Key, err)
	}
	return rows == 1, nil
}
