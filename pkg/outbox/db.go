package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"time"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// DefaultBusyTimeout is how long a connection waits for another writer's
// lock by default.
const DefaultBusyTimeout = 10 * time.Second

// Options tunes [Open]. The zero value is the recommended configuration.
type Options struct {
	// BusyTimeout is how long a connection waits for another writer's lock
	// before SQLITE_BUSY surfaces. Default [DefaultBusyTimeout].
	BusyTimeout time.Duration
	// MaxOpenConns bounds the connection pool. Default 8.
	MaxOpenConns int
	// JournalSizeLimit caps the size the -wal file is truncated to after a
	// checkpoint, in bytes. Default 64 MiB.
	JournalSizeLimit int64
}

func (o Options) withDefaults() Options {
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = DefaultBusyTimeout
	}
	if o.MaxOpenConns <= 0 {
		o.MaxOpenConns = 8
	}
	if o.JournalSizeLimit <= 0 {
		o.JournalSizeLimit = 64 << 20
	}
	return o
}

// Open opens (creating if needed) the SQLite database at path with the
// settings an outbox needs, and applies the outbox schema migrations.
//
// Every pooled connection gets:
//
//   - journal_mode=WAL: readers (the publisher) never block the writer (the
//     application) and vice versa. All processes must be on one host.
//   - busy_timeout: a writer waits for the lock instead of failing with
//     SQLITE_BUSY at once.
//   - _txlock=immediate: every transaction begins with BEGIN IMMEDIATE and
//     takes the write lock up front. A deferred transaction that reads and
//     then writes can fail with SQLITE_BUSY immediately, ignoring
//     busy_timeout; an immediate one waits its turn.
//   - synchronous=FULL: each commit is fsynced. With NORMAL a power loss can
//     roll back a committed transaction; if the publisher had already
//     published that row, the stream would hold a notification for an order
//     the database no longer has.
//   - foreign_keys=ON, for the application's own tables.
//   - journal_size_limit: the -wal file is truncated back after checkpoints.
//
// An outbox id is never reused (the newest row is never deleted, see the
// package's Schema section), so the publisher's "last published id" cursor
// never skips a row.
//
// A file that is not an SQLite database is refused with [ErrNotSQLite]; a
// database migrated by a newer version of this package with [ErrSchemaTooNew].
// Nothing is written to the file in either case.
func Open(ctx context.Context, path string, opts Options) (*sql.DB, error) {
	opts = opts.withDefaults()
	if path == "" {
		return nil, errors.New("opening outbox database: path is empty")
	}
	if err := checkSQLiteHeader(path); err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", DSN(path, opts))
	if err != nil {
		return nil, fmt.Errorf("opening outbox database %s: %w", path, err)
	}
	db.SetMaxOpenConns(opts.MaxOpenConns)
	db.SetMaxIdleConns(opts.MaxOpenConns)
	db.SetConnMaxIdleTime(0)
	if err := migrate(ctx, db, opts.BusyTimeout); err != nil {
		db.Close()
		if isNotADB(err) {
			return nil, fmt.Errorf("opening outbox database %s: %w", path, ErrNotSQLite)
		}
		return nil, fmt.Errorf("opening outbox database %s: %w", path, err)
	}
	return db, nil
}

// DSN returns the modernc.org/sqlite data source name with the pragmas
// [Open] documents. It is exported for tools that need their own *sql.DB on
// the same file with identical settings.
func DSN(path string, opts Options) string {
	opts = opts.withDefaults()
	q := url.Values{}
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "busy_timeout("+strconv.FormatInt(opts.BusyTimeout.Milliseconds(), 10)+")")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(ON)")
	q.Add("_pragma", "journal_size_limit("+strconv.FormatInt(opts.JournalSizeLimit, 10)+")")
	q.Set("_txlock", "immediate")
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}

// sqliteMagic is the first 16 bytes of every SQLite 3 database file.
const sqliteMagic = "SQLite format 3\x00"

// checkSQLiteHeader refuses an existing non-empty file that does not start
// with the SQLite header, before the driver gets a chance to touch it.
func checkSQLiteHeader(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("opening outbox database %s: %w", path, err)
	}
	defer f.Close()
	var hdr [16]byte
	n, err := io.ReadFull(f, hdr[:])
	switch {
	case n == 0 && (err == io.EOF):
		return nil // an empty file becomes a new database
	case err != nil && !errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("reading outbox database %s: %w", path, err)
	case string(hdr[:n]) != sqliteMagic:
		return fmt.Errorf("opening outbox database %s: %w", path, ErrNotSQLite)
	}
	return nil
}

func isNotADB(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_NOTADB
}

// IsBusy reports whether err is SQLite's "database is locked" (SQLITE_BUSY or
// SQLITE_LOCKED, with extended codes), the one error class worth retrying as is.
func IsBusy(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return true
	}
	return false
}
