package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// migrations are the outbox schema versions, applied in order. A migration is
// never edited once released: add a new one.
var migrations = []string{
	// Version 1: the outbox table.
	//   id AUTOINCREMENT: ids are never reused, so a cursor never skips.
	//   key UNIQUE: INSERT ... ON CONFLICT (key) DO NOTHING makes enqueue idempotent.
	//   published_at NULL while pending. There is deliberately no index on
	//   pending rows: it would cost the application a page write on every
	//   enqueue. Readers scan the primary key from a low-water mark instead
	//   (see Reader). The partial index on published rows is written by the
	//   publisher only, and keeps the purge cheap.
	`CREATE TABLE outbox (
		id           INTEGER PRIMARY KEY AUTOINCREMENT,
		key          TEXT    NOT NULL UNIQUE,
		channel      TEXT    NOT NULL,
		recipient    INTEGER NOT NULL,
		payload      BLOB    NOT NULL,
		created_at   INTEGER NOT NULL,
		published_at INTEGER
	);
	CREATE INDEX outbox_published ON outbox (published_at) WHERE published_at IS NOT NULL;`,
	// Version 2: notifications for other channels than Telegram.
	//   channel is the first channel of the notification's route, and
	//   recipient_token its recipient there as a subject token (the chat id,
	//   u<MAX user>, or e/p + a hash of an email address or phone number);
	//   the publisher sends the row to <prefix>.<channel>.<recipient_token>.
	//   recipient keeps the Telegram chat id (0 without one). Rows of
	//   version 1 have no token: the publisher uses recipient.
	`ALTER TABLE outbox ADD COLUMN recipient_token TEXT;`,
	// Version 3: fewer pages written per enqueue and per publish.
	//   The table is rebuilt without AUTOINCREMENT, which rewrote the
	//   sqlite_sequence page in every commit that enqueued. Ids are still
	//   never reused: SQLite gives a new row max(id)+1, and the trigger
	//   outbox_keep_newest refuses to delete the row with the highest id,
	//   so max(id) never goes down and a cursor never skips a row.
	//   published_at and its index are gone: the publisher no longer
	//   rewrites every published row. It records each marking transaction
	//   as one row of outbox_marks, "every outbox row with id <= upto
	//   is published, since at"; rows with id > MAX(upto) are pending. The
	//   view outbox_status shows each row with the time it was published
	//   (NULL while pending). The published prefix of the old table
	//   becomes the first outbox_marks row; rows published after a
	//   pending one (never written by the publisher) count as pending and
	//   are published again, which the stream de-duplicates.
	`CREATE TABLE outbox_v3 (
		id              INTEGER PRIMARY KEY,
		key             TEXT    NOT NULL UNIQUE,
		channel         TEXT    NOT NULL,
		recipient       INTEGER NOT NULL,
		recipient_token TEXT,
		payload         BLOB    NOT NULL,
		created_at      INTEGER NOT NULL
	);
	INSERT INTO outbox_v3 (id, key, channel, recipient, recipient_token, payload, created_at)
		SELECT id, key, channel, recipient, recipient_token, payload, created_at FROM outbox ORDER BY id;
	CREATE TABLE outbox_marks (
		upto INTEGER PRIMARY KEY,
		at   INTEGER NOT NULL
	);
	INSERT INTO outbox_marks (upto, at)
		SELECT id, published_at FROM outbox
		WHERE published_at IS NOT NULL
		  AND id < COALESCE((SELECT MIN(id) FROM outbox WHERE published_at IS NULL), 9223372036854775807)
		ORDER BY id DESC LIMIT 1;
	DROP TABLE outbox;
	ALTER TABLE outbox_v3 RENAME TO outbox;
	CREATE TRIGGER outbox_keep_newest BEFORE DELETE ON outbox
		WHEN OLD.id = (SELECT MAX(id) FROM outbox)
		BEGIN SELECT RAISE(ABORT, 'the newest outbox row is never deleted: it keeps ids from being reused'); END;
	CREATE VIEW outbox_status AS
		SELECT o.id, o.key, o.channel, o.recipient, o.recipient_token, o.payload, o.created_at,
			(SELECT p.at FROM outbox_marks p WHERE p.upto >= o.id ORDER BY p.upto LIMIT 1) AS published_at
		FROM outbox o;`,
}

// SchemaVersion is the outbox schema version this package writes.
func SchemaVersion() int { return len(migrations) }

// Migrate brings the outbox schema of db up to [SchemaVersion]: it creates
// the outbox table on a new database and applies later migrations to an
// older one. It is what [Open] runs; an application that opens its
// database itself (its own driver settings, its own pool) calls it once at
// start. It is safe to run concurrently from several processes and after a
// crash: each migration is applied in its own BEGIN IMMEDIATE transaction
// together with its bookkeeping row, so none is applied twice or half.
//
// A database migrated by a newer version of this package is refused with
// [ErrSchemaTooNew] and left untouched.
func Migrate(ctx context.Context, db *sql.DB) error {
	if db == nil {
		return errors.New("migrating outbox schema: database is nil")
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrating outbox schema: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS outbox_schema (
		version    INTEGER PRIMARY KEY,
		applied_at INTEGER NOT NULL
	)`); err != nil {
		return fmt.Errorf("creating schema table: %w", err)
	}
	for {
		done, err := migrateOne(ctx, conn)
		if err != nil || done {
			return err
		}
	}
}

// migrateOne applies the next migration, if any, and reports whether the
// schema is now current. It manages the transaction with explicit
// statements rather than database/sql's BeginTx, so that it is an immediate
// one whatever the DSN of the application's handle says.
func migrateOne(ctx context.Context, conn *sql.Conn) (done bool, err error) {
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		return false, fmt.Errorf("beginning migration: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`)
		}
	}()
	var current int
	if err := conn.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM outbox_schema`).Scan(&current); err != nil {
		return false, fmt.Errorf("reading schema version: %w", err)
	}
	switch {
	case current > len(migrations):
		return false, fmt.Errorf("%w: database is at version %d, this program knows up to %d; upgrade the program", ErrSchemaTooNew, current, len(migrations))
	case current == len(migrations):
		return true, nil
	}
	if _, err := conn.ExecContext(ctx, migrations[current]); err != nil {
		return false, fmt.Errorf("applying schema version %d: %w", current+1, err)
	}
	if _, err := conn.ExecContext(ctx, `INSERT INTO outbox_schema (version, applied_at) VALUES (?, ?)`, current+1, time.Now().UnixNano()); err != nil {
		return false, fmt.Errorf("recording schema version %d: %w", current+1, err)
	}
	if _, err := conn.ExecContext(ctx, `COMMIT`); err != nil {
		return false, fmt.Errorf("committing schema version %d: %w", current+1, err)
	}
	committed = true
	return false, nil
}
