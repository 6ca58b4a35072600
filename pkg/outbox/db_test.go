package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// openDB opens a fresh outbox database in a temporary directory.
func openDB(t testing.TB) (*sql.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "outbox.db")
	db, err := outbox.Open(context.Background(), path, outbox.Options{})
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { db.Close() })
	return db, path
}

func TestOpenSettings(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	// A pool has several connections: every one must carry the pragmas.
	conns := make([]*sql.Conn, 3)
	for i := range conns {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	for i, c := range conns {
		var mode string
		var sync, busy int
		if err := c.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&sync); err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy); err != nil {
			t.Fatal(err)
		}
		if mode != "wal" || sync != 2 || busy != 10000 {
			t.Errorf("connection %d: journal_mode=%s synchronous=%d busy_timeout=%d, want wal, 2 (FULL), 10000", i, mode, sync, busy)
		}
	}
	var sqlText string
	if err := db.QueryRowContext(ctx, `SELECT sql FROM sqlite_master WHERE name = 'outbox'`).Scan(&sqlText); err != nil {
		t.Fatal(err)
	}
	// Ids are never reused without AUTOINCREMENT (which would rewrite
	// sqlite_sequence in every enqueue): the newest row cannot be deleted.
	if strings.Contains(sqlText, "AUTOINCREMENT") {
		t.Errorf("outbox table is AUTOINCREMENT: %s", sqlText)
	}
	var trigger string
	if err := db.QueryRowContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'outbox'`).Scan(&trigger); err != nil || trigger != "outbox_keep_newest" {
		t.Errorf("trigger on outbox: %q, %v; want outbox_keep_newest", trigger, err)
	}
}

func TestOpenIsIdempotent(t *testing.T) {
	db, path := openDB(t)
	ctx := context.Background()
	tx, _ := db.BeginTx(ctx, nil)
	if _, err := outbox.Enqueue(ctx, tx, validNotification()); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		again, err := outbox.Open(ctx, path, outbox.Options{})
		if err != nil {
			t.Fatalf("reopen %d: %v", i, err)
		}
		var versions, rows int
		again.QueryRowContext(ctx, `SELECT COUNT(*) FROM outbox_schema`).Scan(&versions)
		again.QueryRowContext(ctx, `SELECT COUNT(*) FROM outbox`).Scan(&rows)
		again.Close()
		if versions != outbox.SchemaVersion() || rows != 1 {
			t.Fatalf("after reopen %d: %d schema rows, %d outbox rows; want %d and 1", i, versions, rows, outbox.SchemaVersion())
		}
	}
}

// TestOpenConcurrentFirstOpen opens new databases from several goroutines
// at once, as processes starting together do. The losers of the race to
// switch a new file to WAL get SQLITE_BUSY without a busy wait; Open must
// absorb that. One round lost the race about once in sixty runs, so the
// test plays many rounds, each on a new file.
func TestOpenConcurrentFirstOpen(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	for round := 0; round < 60; round++ {
		path := filepath.Join(dir, fmt.Sprintf("outbox-%d.db", round))
		errs := make(chan error, 8)
		for i := 0; i < cap(errs); i++ {
			go func() {
				db, err := outbox.Open(ctx, path, outbox.Options{})
				if err == nil {
					db.Close()
				}
				errs <- err
			}()
		}
		for i := 0; i < cap(errs); i++ {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: concurrent Open: %v", round, err)
			}
		}
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	db, path := openDB(t)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `INSERT INTO outbox_schema (version, applied_at) VALUES (?, 0)`, outbox.SchemaVersion()+1); err != nil {
		t.Fatal(err)
	}
	db.Close()
	before, _ := os.ReadFile(path)
	_, err := outbox.Open(ctx, path, outbox.Options{})
	if !errors.Is(err, outbox.ErrSchemaTooNew) {
		t.Fatalf("Open of a newer schema = %v, want ErrSchemaTooNew", err)
	}
	if !strings.Contains(err.Error(), "upgrade") {
		t.Errorf("error %q should tell the operator what to do", err)
	}
	after, _ := os.ReadFile(path)
	if string(before) != string(after) {
		t.Errorf("refusing a newer schema changed the database file")
	}
}

func TestOpenRefusesNonSQLite(t *testing.T) {
	for name, content := range map[string]string{
		"text":      "this is not a database\n",
		"short":     "SQLite",
		"json-like": `{"orders":[]}` + strings.Repeat(" ", 200),
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "not.db")
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := outbox.Open(context.Background(), path, outbox.Options{})
			if !errors.Is(err, outbox.ErrNotSQLite) {
				t.Fatalf("Open = %v, want ErrNotSQLite", err)
			}
			got, _ := os.ReadFile(path)
			if string(got) != content {
				t.Errorf("Open modified a file it refused")
			}
		})
	}
}

func TestOpenEmptyFileBecomesDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "empty.db")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := outbox.Open(context.Background(), path, outbox.Options{})
	if err != nil {
		t.Fatalf("Open of an empty file: %v", err)
	}
	db.Close()
}

func TestOpenEmptyPath(t *testing.T) {
	if _, err := outbox.Open(context.Background(), "", outbox.Options{}); err == nil {
		t.Fatal("Open(\"\") = nil error, want one")
	}
}
