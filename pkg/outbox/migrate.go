package outbox

import (
	"context"
	"database/sql"
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
}

// SchemaVersion is the outbox schema version this package writes.
func SchemaVersion() int { return len(migrations) }

// migrate applies the pending migrations, each in its own immediate
// transaction together with its bookkeeping row, so concurrent openers and
// crashes never apply one twice or half.
func migrate(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS outbox_schema (
		version    INTEGER PRIMARY KEY,
		applied_at INTEGER NOT NULL
	)`); err != nil {
		return fmt.Errorf("creating schema table: %w", err)
	}
	for {
		done, err := migrateOne(ctx, db)
		if err != nil || done {
			return err
		}
	}
}

// migrateOne applies the next migration, if any, and reports whether the
// schema is now current.
func migrateOne(ctx context.Context, db *sql.DB) (done bool, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("beginning migration: %w", err)
	}
	defer tx.Rollback()
	var current int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM outbox_schema`).Scan(&current); err != nil {
		return false, fmt.Errorf("reading schema version: %w", err)
	}
	switch {
	case current > len(migrations):
		return false, fmt.Errorf("%w: database is at version %d, this program knows up to %d; upgrade the program", ErrSchemaTooNew, current, len(migrations))
	case current == len(migrations):
		return true, nil
	}
	if _, err := tx.ExecContext(ctx, migrations[current]); err != nil {
		return false, fmt.Errorf("applying schema version %d: %w", current+1, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO outbox_schema (version, applied_at) VALUES (?, ?)`, current+1, time.Now().UnixNano()); err != nil {
		return false, fmt.Errorf("recording schema version %d: %w", current+1, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("committing schema version %d: %w", current+1, err)
	}
	return false, nil
}
