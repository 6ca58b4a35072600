package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tgnotify/tgnotify/pkg/notify"
)

// Row is one outbox row as the publisher reads it. Payload is the encoded
// notification, carried to the stream unchanged.
type Row struct {
	ID  int64
	Key string
	// Channel is the first channel of the notification's route.
	Channel notify.Channel
	// ChatID is the Telegram chat id, 0 without one.
	ChatID int64
	// Recipient is the recipient on Channel as a subject token
	// (notify.Notification.Recipient).
	Recipient string
	Payload   []byte
	CreatedAt time.Time
}

// IDRange is an inclusive range of outbox ids.
type IDRange struct{ From, To int64 }

// Backlog describes the pending part of the outbox.
type Backlog struct {
	// Pending is the number of rows not yet published.
	Pending int64
	// Oldest is the creation time of the oldest pending row; zero when
	// nothing is pending.
	Oldest time.Time
}

// Reader is the publisher's side of the outbox: it reads pending rows in id
// order, marks them published, purges old published rows and reports the
// backlog. All its statements are short, so it never starves WAL checkpoints.
//
// The outbox has no index on pending rows (it would slow every enqueue), so a
// Reader keeps a low-water mark: an id at or below which every row is known
// to be published. It only ever rises, because new rows always get higher ids
// and a published row never becomes pending again; every scan starts above
// it. Only the first scan of a Reader's life walks the published rows.
type Reader struct {
	db       *sql.DB
	lowWater atomic.Int64
}

// NewReader returns a Reader over a database opened with [Open].
func NewReader(db *sql.DB) *Reader { return &Reader{db: db} }

// raiseLowWater records that every row with id <= id is published.
func (r *Reader) raiseLowWater(id int64) {
	for {
		cur := r.lowWater.Load()
		if id <= cur || r.lowWater.CompareAndSwap(cur, id) {
			return
		}
	}
}

// Pending returns up to limit pending rows with id greater than afterID, in
// id order. Ids commit in order (SQLite has one writer at a time and ids are
// assigned under its lock), so a reader that advances afterID to the last id
// it saw never skips a row that commits later.
func (r *Reader) Pending(ctx context.Context, afterID int64, limit int) ([]Row, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("reading pending rows: limit %d must be positive", limit)
	}
	rows, err := r.db.QueryContext(ctx, `SELECT id, key, channel, recipient, recipient_token, payload, created_at
		FROM outbox WHERE id > ? AND published_at IS NULL ORDER BY id LIMIT ?`, max(afterID, r.lowWater.Load()), limit)
	if err != nil {
		return nil, fmt.Errorf("reading pending rows after id %d: %w", afterID, err)
	}
	defer rows.Close()
	out := make([]Row, 0, min(limit, 1024))
	for rows.Next() {
		var (
			row     Row
			channel string
			token   sql.NullString
			created int64
		)
		if err := rows.Scan(&row.ID, &row.Key, &channel, &row.ChatID, &token, &row.Payload, &created); err != nil {
			return nil, fmt.Errorf("scanning pending row: %w", err)
		}
		row.Channel = notify.Channel(channel)
		row.Recipient = token.String
		if !token.Valid { // written by schema version 1: a Telegram chat
			row.Recipient = strconv.FormatInt(row.ChatID, 10)
		}
		row.CreatedAt = time.Unix(0, created).UTC()
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading pending rows after id %d: %w", afterID, err)
	}
	return out, nil
}

// MarkPublished marks every pending row whose id falls in one of the ranges
// as published at the given time, in one transaction, and returns how many
// rows it changed. Rows already marked are left alone.
func (r *Reader) MarkPublished(ctx context.Context, at time.Time, ranges ...IDRange) (int64, error) {
	if len(ranges) == 0 {
		return 0, nil
	}
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("marking rows published: %w", err)
	}
	defer tx.Rollback()
	var total int64
	for _, rg := range ranges {
		if rg.From > rg.To {
			return 0, fmt.Errorf("marking rows published: empty range %d..%d", rg.From, rg.To)
		}
		res, err := tx.ExecContext(ctx, `UPDATE outbox SET published_at = ?
			WHERE id BETWEEN ? AND ? AND published_at IS NULL`, at.UnixNano(), rg.From, rg.To)
		if err != nil {
			return 0, fmt.Errorf("marking rows %d..%d published: %w", rg.From, rg.To, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, fmt.Errorf("marking rows %d..%d published: %w", rg.From, rg.To, err)
		}
		total += n
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("committing published marks: %w", err)
	}
	for _, rg := range ranges {
		// Every row in the range is published now; when the range touches
		// the low-water mark the mark can move past it.
		if rg.From <= r.lowWater.Load()+1 {
			r.raiseLowWater(rg.To)
		}
	}
	return total, nil
}

// Purge deletes rows published before olderThan, chunk rows per transaction
// so the writer lock is never held for long, until none is left or ctx ends.
// It returns the number of rows deleted.
//
// Keep the retention longer than any application retry horizon: once a row
// is purged its key is forgotten by the outbox (the worker's delivery record
// still prevents a second send).
func (r *Reader) Purge(ctx context.Context, olderThan time.Time, chunk int) (int64, error) {
	if chunk <= 0 {
		return 0, fmt.Errorf("purging published rows: chunk %d must be positive", chunk)
	}
	var total int64
	for {
		res, err := r.db.ExecContext(ctx, `DELETE FROM outbox WHERE id IN (
			SELECT id FROM outbox WHERE published_at IS NOT NULL AND published_at < ? LIMIT ?)`,
			olderThan.UnixNano(), chunk)
		if err != nil {
			return total, fmt.Errorf("purging published rows: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("purging published rows: %w", err)
		}
		total += n
		if n < int64(chunk) {
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}

// Backlog reports how many rows are pending and how old the oldest is, and
// raises the Reader's low-water mark to just below the oldest pending row.
func (r *Reader) Backlog(ctx context.Context) (Backlog, error) {
	// One statement, so the count, the first pending id and the highest id
	// come from the same snapshot.
	var (
		b              Backlog
		first, created sql.NullInt64
		maxID          int64
	)
	err := r.db.QueryRowContext(ctx, `SELECT
			(SELECT COUNT(*) FROM outbox WHERE id > ?1 AND published_at IS NULL),
			(SELECT id FROM outbox WHERE id > ?1 AND published_at IS NULL ORDER BY id LIMIT 1),
			(SELECT created_at FROM outbox WHERE id > ?1 AND published_at IS NULL ORDER BY id LIMIT 1),
			(SELECT COALESCE(MAX(id), 0) FROM outbox)`, r.lowWater.Load()).Scan(&b.Pending, &first, &created, &maxID)
	if err != nil {
		return Backlog{}, fmt.Errorf("measuring the backlog: %w", err)
	}
	if !first.Valid {
		r.raiseLowWater(maxID)
		return Backlog{}, nil
	}
	r.raiseLowWater(first.Int64 - 1)
	b.Oldest = time.Unix(0, created.Int64).UTC()
	return b, nil
}

// CheckpointResult is what PRAGMA wal_checkpoint reports.
type CheckpointResult struct {
	// Busy is true when the checkpoint could not finish because a reader or
	// writer held the database.
	Busy bool
	// LogFrames is the number of frames in the WAL; Checkpointed how many of
	// them were copied into the database.
	LogFrames, Checkpointed int
}

// Checkpoint copies the WAL into the database and, when no reader is in the
// way, truncates the -wal file, so it does not grow without bound. mode is
// PASSIVE, FULL, RESTART or TRUNCATE (the default when empty).
func (r *Reader) Checkpoint(ctx context.Context, mode string) (CheckpointResult, error) {
	switch mode = strings.ToUpper(mode); mode {
	case "":
		mode = "TRUNCATE"
	case "PASSIVE", "FULL", "RESTART", "TRUNCATE":
	default:
		return CheckpointResult{}, fmt.Errorf("checkpointing: unknown mode %q", mode)
	}
	var res CheckpointResult
	var busy int
	if err := r.db.QueryRowContext(ctx, "PRAGMA wal_checkpoint("+mode+")").Scan(&busy, &res.LogFrames, &res.Checkpointed); err != nil {
		return CheckpointResult{}, fmt.Errorf("checkpointing (%s): %w", mode, err)
	}
	res.Busy = busy != 0
	return res, nil
}

// Ping checks that the database answers a query.
func (r *Reader) Ping(ctx context.Context) error {
	var one int
	if err := r.db.QueryRowContext(ctx, `SELECT 1 FROM outbox_schema LIMIT 1`).Scan(&one); err != nil {
		return fmt.Errorf("pinging outbox database: %w", err)
	}
	return nil
}
