package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/tgnotify/tgnotify/pkg/notify"
)

// insertSQL writes one notification unless its key is already present.
const insertSQL = `INSERT INTO outbox (key, channel, recipient, recipient_token, payload, created_at)
	VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING`

// Execer is the part of a database handle that [Enqueue] needs. The
// application passes the transaction that saves its business data: a
// *sql.Tx satisfies it, and so do *sql.Conn and *sql.DB for callers that
// manage BEGIN and COMMIT themselves. Any database/sql driver for SQLite
// works, as long as the database has the outbox schema ([Migrate]).
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Writer enqueues notifications. It keeps its INSERT prepared on every pooled
// connection, which saves SQLite parsing the statement on each order; create
// one per database and share it between goroutines.
type Writer struct {
	insert *sql.Stmt
}

// NewWriter prepares the writer's statement on db, a database with the
// outbox schema. Close it when the database is closed.
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
// Invalid input returns an error matching [notify.ErrInvalid] that names
// the field; nothing is written then either. A zero CreatedAt is set to the
// current time.
//
// tx is normally a *sql.Tx of the database the Writer was made for; the
// prepared statement is then reused. Any other [Execer] gets the statement
// as text.
//
// The transaction should be an immediate one (the default for databases
// opened with [Open]; BEGIN IMMEDIATE otherwise) so that concurrent writers
// queue on busy_timeout instead of failing with SQLITE_BUSY.
func (w *Writer) Enqueue(ctx context.Context, tx Execer, n notify.Notification) (inserted bool, err error) {
	t, ok := tx.(*sql.Tx)
	switch {
	case tx == nil || ok && t == nil:
		return false, errors.New("enqueueing notification: transaction is nil")
	case ok:
		return enqueue(ctx, t.StmtContext(ctx, w.insert).ExecContext, n)
	}
	return Enqueue(ctx, tx, n)
}

// Enqueue is [Writer.Enqueue] without a prepared statement: SQLite parses the
// INSERT on every call. It suits occasional writers; a request path that
// enqueues on every call should keep a [Writer].
func Enqueue(ctx context.Context, tx Execer, n notify.Notification) (inserted bool, err error) {
	if tx == nil {
		return false, errors.New("enqueueing notification: transaction is nil")
	}
	if t, ok := tx.(*sql.Tx); ok && t == nil {
		return false, errors.New("enqueueing notification: transaction is nil")
	}
	return enqueue(ctx, func(ctx context.Context, args ...any) (sql.Result, error) {
		return tx.ExecContext(ctx, insertSQL, args...)
	}, n)
}

func enqueue(ctx context.Context, exec func(context.Context, ...any) (sql.Result, error), n notify.Notification) (bool, error) {
	n.Normalize()
	if n.CreatedAt.IsZero() {
		n.CreatedAt = time.Now()
	}
	n.CreatedAt = n.CreatedAt.UTC()
	if !n.ExpiresAt.IsZero() {
		n.ExpiresAt = n.ExpiresAt.UTC()
	}
	if !n.NotBefore.IsZero() {
		n.NotBefore = n.NotBefore.UTC()
	}
	payload, err := n.MarshalPayload()
	if err != nil {
		return false, err
	}
	first := n.Route[0]
	token, err := n.Recipient(first)
	if err != nil {
		return false, fmt.Errorf("enqueueing notification %q: %w", n.Key, err)
	}
	res, err := exec(ctx, n.Key, string(first), n.ChatID, token, payload, n.CreatedAt.UnixNano())
	if err != nil {
		return false, fmt.Errorf("enqueueing notification %q: %w", n.Key, err)
	}
	rows, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("enqueueing notification %q: %w", n.Key, err)
	}
	return rows == 1, nil
}
