package outbox

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// migrationFiles are the outbox schema versions as SQL files,
// schema/NNNN_name.sql, applied in the order of their names. A migration is
// never edited once released: add a new file. Each file's comments say why
// the schema is as it is.
//
//go:embed schema/*.sql
var migrationFiles embed.FS

// schemaTableSQL creates the table that records which migrations a database
// has had.
const schemaTableSQL = `CREATE TABLE IF NOT EXISTS outbox_schema (
	version    INTEGER PRIMARY KEY,
	applied_at INTEGER NOT NULL
)`

// migrations returns the migrations' SQL in order: element i brings the
// schema from version i to i+1.
func migrations() []string {
	entries, err := fs.ReadDir(migrationFiles, "schema")
	if err != nil {
		panic(fmt.Sprintf("outbox: reading embedded migrations: %v", err)) // the files are compiled in
	}
	out := make([]string, 0, len(entries))
	for _, e := range entries { // sorted by name: 0001_..., 0002_...
		b, err := fs.ReadFile(migrationFiles, "schema/"+e.Name())
		if err != nil {
			panic(fmt.Sprintf("outbox: reading embedded migration %s: %v", e.Name(), err))
		}
		out = append(out, string(b))
	}
	return out
}

// SchemaVersion is the outbox schema version this package writes.
func SchemaVersion() int { return len(migrations()) }

// Migrate brings the outbox schema of db up to [SchemaVersion]: it creates
// the outbox table on a new database and applies later migrations to an
// older one. It is what [Open] runs; an application that opens its
// database itself (its own driver settings, its own pool) calls it once at
// start. It is safe to run concurrently from several processes and after a
// crash: each migration is applied in its own BEGIN IMMEDIATE transaction
// together with its bookkeeping row, so none is applied twice or half.
//
// Several processes opening a new database at once race to switch it to
// WAL: SQLite refuses the loser with SQLITE_BUSY at once, without waiting
// out busy_timeout, because waiting could deadlock. Migrate retries
// opening its connection while that happens, for up to
// [DefaultBusyTimeout].
//
// A database migrated by a newer version of this package is refused with
// [ErrSchemaTooNew] and left untouched.
func Migrate(ctx context.Context, db *sql.DB) error {
	return migrate(ctx, db, DefaultBusyTimeout)
}

// migrate is [Migrate], retrying a busy first connection for up to wait.
func migrate(ctx context.Context, db *sql.DB, wait time.Duration) error {
	if db == nil {
		return errors.New("migrating outbox schema: database is nil")
	}
	conn, err := connWhenNotBusy(ctx, db, wait)
	if err != nil {
		return fmt.Errorf("migrating outbox schema: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, schemaTableSQL); err != nil {
		return fmt.Errorf("creating schema table: %w", err)
	}
	steps := migrations()
	for {
		done, err := migrateOne(ctx, conn, steps)
		if err != nil || done {
			return err
		}
	}
}

// connWhenNotBusy returns a connection to db, opening it again while the
// open fails with SQLITE_BUSY, for up to wait. Opening a connection runs
// the DSN's pragmas, and journal_mode=WAL on a database that another
// connection is switching too fails at once instead of waiting.
func connWhenNotBusy(ctx context.Context, db *sql.DB, wait time.Duration) (*sql.Conn, error) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 5 * time.Millisecond
	b.MaxInterval = 100 * time.Millisecond
	return backoff.Retry(ctx, func() (*sql.Conn, error) {
		conn, err := db.Conn(ctx)
		if err != nil && !IsBusy(err) {
			return nil, backoff.Permanent(err)
		}
		return conn, err
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(wait))
}

// migrateOne applies the next migration, if any, and reports whether the
// schema is now current. It manages the transaction with explicit
// statements rather than database/sql's BeginTx, so that it is an immediate
// one whatever the DSN of the application's handle says.
func migrateOne(ctx context.Context, conn *sql.Conn, migrations []string) (done bool, err error) {
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
