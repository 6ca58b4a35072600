package outbox

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
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
// What is published is a prefix of the table: the publisher publishes rows
// in id order and marks a row only after every row before it. Each marking
// transaction adds one row to outbox_marks, (upto, at): every outbox row
// with id <= upto was published by then. The rows after the highest upto
// are the pending ones, so reading them is a range scan of the primary key,
// and marking writes one small row however many rows it covers.
type Reader struct {
	db *sql.DB
}

// NewReader returns a Reader over a database opened with [Open].
func NewReader(db *sql.DB) *Reader { return &Reader{db: db} }

// publishedUpTo is the SQL of the highest published id, 0 when none is.
const publishedUpTo = `(SELECT COALESCE(MAX(upto), 0) FROM outbox_marks)`

// Pending returns up to limit pending rows with id greater than afterID, in
// id order, without the cancelled ones: those are never published (a
// cancelled row after the last one published stays pending until a later
// row is marked). Ids commit in order (SQLite has one writer at a time and ids are
// assigned under its lock), so a reader that advances afterID to the last id
// it saw never skips a row that commits later.
func (r *Reader) Pending(ctx context.Context, afterID int64, limit int) ([]Row, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("reading pending rows: limit %d must be positive", limit)
	}
	rows, err := r.db.QueryContext(ctx, `SELECT id, key, channel, recipient, recipient_token, payload, created_at
		FROM outbox WHERE id > MAX(?, `+publishedUpTo+`) AND cancelled_at IS NULL ORDER BY id LIMIT ?`, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("reading pending rows after id %d: %w", afterID, err)
	}
	defer rows.Close()
	out := make([]Row, 0, min(limit, 1024))
	// The scan destinations are declared once: Scan takes their addresses,
	// so declared in the loop each would be a heap allocation per row.
	var (
		id, chat, created int64
		key, channel      string
		token             sql.NullString
		payload           sql.RawBytes
		arena             payloadArena
	)
	for rows.Next() {
		// The payload is scanned as RawBytes, valid until the next row, and
		// copied into the query's arena: scanned into a []byte, database/sql
		// would clone every payload into an allocation of its own.
		if err := rows.Scan(&id, &key, &channel, &chat, &token, &payload, &created); err != nil {
			return nil, fmt.Errorf("scanning pending row: %w", err)
		}
		row := Row{ID: id, Key: key, Channel: notify.Channel(channel), ChatID: chat, Recipient: token.String,
			Payload: arena.copy(payload), CreatedAt: time.Unix(0, created).UTC()}
		if !token.Valid { // written by schema version 1: a Telegram chat
			row.Recipient = strconv.FormatInt(chat, 10)
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading pending rows after id %d: %w", afterID, err)
	}
	return out, nil
}

// MarkPublished records that every row with id <= upto is published, as of
// at, in one transaction that writes one row of outbox_marks. The caller
// guarantees the prefix: it has published every row up to upto. Marking an
// id at or below what is already marked changes nothing.
func (r *Reader) MarkPublished(ctx context.Context, at time.Time, upto int64) error {
	if upto <= 0 {
		return fmt.Errorf("marking rows published: id %d must be positive", upto)
	}
	if _, err := r.db.ExecContext(ctx, `INSERT INTO outbox_marks (upto, at)
		SELECT ?1, ?2 WHERE ?1 > `+publishedUpTo, upto, at.UnixNano()); err != nil {
		return fmt.Errorf("marking rows up to %d published: %w", upto, err)
	}
	return nil
}

// PublishedUpTo returns the highest id marked published: every row with an
// id up to it is published, every row after it pending. It is 0 when
// nothing was marked.
func (r *Reader) PublishedUpTo(ctx context.Context) (int64, error) {
	var upto int64
	if err := r.db.QueryRowContext(ctx, `SELECT `+publishedUpTo).Scan(&upto); err != nil {
		return 0, fmt.Errorf("reading the published prefix: %w", err)
	}
	return upto, nil
}

// Purge deletes rows published before olderThan, chunk rows per transaction
// so the writer lock is never held for long, until none is left or ctx ends.
// It returns the number of rows deleted. It never deletes the row with the
// highest id (the trigger outbox_keep_newest would refuse): SQLite numbers a
// new row max(id)+1, and that row keeps new ids above every id ever used.
// The records of markings older than olderThan go too, except the newest.
//
// Keep the retention longer than any application retry horizon: once a row
// is purged its key is forgotten by the outbox (the worker's delivery record
// still prevents a second send).
func (r *Reader) Purge(ctx context.Context, olderThan time.Time, chunk int) (int64, error) {
	if chunk <= 0 {
		return 0, fmt.Errorf("purging published rows: chunk %d must be positive", chunk)
	}
	cutoff := olderThan.UnixNano()
	var total int64
	for {
		res, err := r.db.ExecContext(ctx, `DELETE FROM outbox WHERE id IN (
			SELECT id FROM outbox
			WHERE id <= (SELECT COALESCE(MAX(upto), 0) FROM outbox_marks WHERE at < ?1)
			  AND id < (SELECT MAX(id) FROM outbox)
			ORDER BY id LIMIT ?2)`, cutoff, chunk)
		if err != nil {
			return total, fmt.Errorf("purging published rows: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("purging published rows: %w", err)
		}
		total += n
		if n < int64(chunk) {
			break
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
	if _, err := r.db.ExecContext(ctx, `DELETE FROM outbox_marks
		WHERE at < ? AND upto < `+publishedUpTo, cutoff); err != nil {
		return total, fmt.Errorf("purging markings: %w", err)
	}
	return total, nil
}

// Backlog reports how many rows are pending and how old the oldest is.
func (r *Reader) Backlog(ctx context.Context) (Backlog, error) {
	// One statement, so the count and the oldest row come from the same
	// snapshot.
	var (
		b       Backlog
		created sql.NullInt64
	)
	err := r.db.QueryRowContext(ctx, `WITH p(upto) AS (SELECT `+publishedUpTo+`)
		SELECT (SELECT COUNT(*) FROM outbox, p WHERE id > p.upto AND cancelled_at IS NULL),
			(SELECT created_at FROM outbox, p WHERE id > p.upto AND cancelled_at IS NULL ORDER BY id LIMIT 1)`).Scan(&b.Pending, &created)
	if err != nil {
		return Backlog{}, fmt.Errorf("measuring the backlog: %w", err)
	}
	if created.Valid {
		b.Oldest = time.Unix(0, created.Int64).UTC()
	}
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

// payloadArena holds the payloads of one read in a few large blocks rather
// than an allocation per row. A block lives until every row whose payload
// it holds is released.
type payloadArena struct {
	block []byte
}

// payloadArenaBlock is the size of a block: about 100 payloads of an order
// notification.
const payloadArenaBlock = 32 << 10

// copy returns a copy of b in the arena. The copy's capacity is its length,
// so appending to it never writes over the next payload.
func (a *payloadArena) copy(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	if len(b) > payloadArenaBlock/4 {
		return bytes.Clone(b)
	}
	if cap(a.block)-len(a.block) < len(b) {
		a.block = make([]byte, 0, payloadArenaBlock)
	}
	start := len(a.block)
	a.block = append(a.block, b...)
	return a.block[start:len(a.block):len(a.block)]
}
