package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Querier is the part of a database handle that [Cancel] needs: a *sql.Tx,
// *sql.Conn or *sql.DB.
type Querier interface {
	Execer
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// CancelState says what [Cancel] found in the outbox.
type CancelState int

// States of a cancelled row.
const (
	// CancelledPending: the row was pending. The publisher does not
	// publish it — unless it was publishing it at that very moment; then
	// it cancels it in NATS right after (see [Cancel]).
	CancelledPending CancelState = iota + 1
	// CancelledPublished: the row was published already. The publisher
	// carries the cancel to the workers (a cancel mark): whether it came in
	// time is the row's cancel_result and the event notify.events.cancelled
	// or notify.events.cancel_too_late.
	CancelledPublished
	// AlreadyCancelled: an earlier cancel marked the row; nothing changed.
	AlreadyCancelled
)

// String names the state.
func (s CancelState) String() string {
	switch s {
	case CancelledPending:
		return "cancelled before it was published"
	case CancelledPublished:
		return "published already: the publisher carries the cancel to the workers"
	case AlreadyCancelled:
		return "cancelled before"
	}
	return fmt.Sprintf("CancelState(%d)", int(s))
}

// ErrNotFound is returned by [Cancel] for a key the outbox does not hold
// (never enqueued, or purged).
var ErrNotFound = errors.New("no outbox row with this key")

// Cancel cancels the notification with this idempotency key, in the
// caller's transaction (or on a connection or pool): it sets the row's
// cancelled_at to the current time, which is all an application in another language needs to
// do too (docs/INTEGRATING.md). It takes no NATS connection.
//
//   - A pending row is never published afterwards: CancelledPending. The
//     one exception is a row the publisher had read and was publishing at
//     that moment: the publisher finds the cancel when it marks the row
//     published and writes the cancel mark for the workers at once; the
//     worker's send and the mark race on one key, and the event (and the
//     row's cancel_result) says which won.
//   - A published row is cancelled by the publisher, which writes a cancel
//     mark in notify_delivered for every cancelled row of the published
//     prefix within a second or so: CancelledPublished. The mark stops the
//     send unless a worker has begun sending or delivered it; the outcome
//     is the row's cancel_result ('cancelled' or 'too_late') and the event
//     notify.events.cancelled or notify.events.cancel_too_late. `tgnotify
//     cancel` writes the mark at once and says which.
//
// A key the outbox does not hold returns [ErrNotFound]; a row cancelled
// before returns AlreadyCancelled and changes nothing.
func Cancel(ctx context.Context, db Querier, key string) (CancelState, error) {
	now := time.Now()
	if db == nil {
		return 0, errors.New("cancelling notification: database is nil")
	}
	// One statement decides and writes, so a marking that commits between
	// a read and the update cannot make the answer wrong.
	var published bool
	err := db.QueryRowContext(ctx, `UPDATE outbox SET cancelled_at = ?1
		WHERE key = ?2 AND cancelled_at IS NULL
		RETURNING id <= `+publishedUpTo, now.UnixNano(), key).Scan(&published)
	switch {
	case err == nil && published:
		return CancelledPublished, nil
	case err == nil:
		return CancelledPending, nil
	case !errors.Is(err, sql.ErrNoRows):
		return 0, fmt.Errorf("cancelling notification %q: %w", key, err)
	}
	var one int
	err = db.QueryRowContext(ctx, `SELECT 1 FROM outbox WHERE key = ?`, key).Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, fmt.Errorf("cancelling notification %q: %w", key, ErrNotFound)
	case err != nil:
		return 0, fmt.Errorf("cancelling notification %q: %w", key, err)
	}
	return AlreadyCancelled, nil
}

// Cancel results the publisher records in cancel_result.
const (
	CancelResultCancelled = "cancelled"
	CancelResultTooLate   = "too_late"
)

// CancelRequest is a cancelled row of the published prefix whose cancel
// the publisher has not carried to the workers yet.
type CancelRequest struct {
	ID          int64
	Key         string
	CancelledAt time.Time
}

// CancelRequests returns up to limit cancelled rows of the published
// prefix without a cancel_result, in id order (the partial index
// outbox_cancels holds only those).
func (r *Reader) CancelRequests(ctx context.Context, limit int) ([]CancelRequest, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT id, key, cancelled_at FROM outbox INDEXED BY outbox_cancels
		WHERE cancelled_at IS NOT NULL AND cancel_result IS NULL AND id <= `+publishedUpTo+` ORDER BY id LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("reading cancel requests: %w", err)
	}
	defer rows.Close()
	var out []CancelRequest
	for rows.Next() {
		var (
			c  CancelRequest
			at int64
		)
		if err := rows.Scan(&c.ID, &c.Key, &at); err != nil {
			return nil, fmt.Errorf("reading cancel requests: %w", err)
		}
		c.CancelledAt = time.Unix(0, at).UTC()
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading cancel requests: %w", err)
	}
	return out, nil
}

// SetCancelResult records what carrying a cancel to the workers found:
// [CancelResultCancelled] or [CancelResultTooLate].
func (r *Reader) SetCancelResult(ctx context.Context, id int64, result string) error {
	if _, err := r.db.ExecContext(ctx, `UPDATE outbox SET cancel_result = ? WHERE id = ?`, result, id); err != nil {
		return fmt.Errorf("recording the cancel result of row %d: %w", id, err)
	}
	return nil
}
