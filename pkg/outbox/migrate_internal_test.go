package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMigrateVersion2To3 upgrades a database the previous release wrote:
// rows keep their ids and content, the published prefix becomes the first
// marking, rows after the first pending one are pending (even one the old
// publisher had marked), AUTOINCREMENT is gone and new ids continue above
// the old ones.
func TestMigrateVersion2To3(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v2.db")
	db, err := sql.Open("sqlite", DSN(path, Options{}))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE outbox_schema (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for v, m := range migrations()[:2] {
		if _, err := db.Exec(m); err != nil {
			t.Fatalf("version %d: %v", v+1, err)
		}
		if _, err := db.Exec(`INSERT INTO outbox_schema VALUES (?, 1)`, v+1); err != nil {
			t.Fatal(err)
		}
	}
	publishedAt := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC).UnixNano()
	// Rows 1..4 published, 5 pending, 6 marked (out of order), 7 pending;
	// rows 8..9 were published and purged: AUTOINCREMENT had handed out 9.
	for id := 1; id <= 9; id++ {
		var pub any
		if id <= 4 || id == 6 || id >= 8 {
			pub = publishedAt + int64(id)
		}
		token := any(fmt.Sprint(100 + id))
		if id == 1 {
			token = nil // written by schema version 1
		}
		if _, err := db.Exec(`INSERT INTO outbox (id, key, channel, recipient, recipient_token, payload, created_at, published_at)
			VALUES (?, ?, 'telegram', ?, ?, '{}', ?, ?)`, id, fmt.Sprintf("k%d", id), 100+id, token, int64(id), pub); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`DELETE FROM outbox WHERE id >= 8`); err != nil {
		t.Fatal(err)
	}

	if err := Migrate(ctx, db); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	var version int
	if err := db.QueryRow(`SELECT MAX(version) FROM outbox_schema`).Scan(&version); err != nil || version != SchemaVersion() {
		t.Fatalf("schema version %d (%v), want %d", version, err, SchemaVersion())
	}
	var ddl string
	if err := db.QueryRow(`SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'outbox'`).Scan(&ddl); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(ddl, "AUTOINCREMENT") || strings.Contains(ddl, "published_at") {
		t.Fatalf("outbox after the migration: %s", ddl)
	}
	r := NewReader(db)
	if upto, err := r.PublishedUpTo(ctx); err != nil || upto != 4 {
		t.Fatalf("PublishedUpTo = %d, %v; want 4", upto, err)
	}
	var at int64
	if err := db.QueryRow(`SELECT published_at FROM outbox_status WHERE id = 3`).Scan(&at); err != nil || at != publishedAt+4 {
		t.Fatalf("row 3 published at %d (%v), want the prefix's time %d", at, err, publishedAt+4)
	}
	rows, err := r.Pending(ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, row := range rows {
		got = append(got, fmt.Sprintf("%d:%s:%s", row.ID, row.Key, row.Recipient))
	}
	if fmt.Sprint(got) != "[5:k5:105 6:k6:106 7:k7:107]" {
		t.Fatalf("pending after the migration: %v", got)
	}
	if res, err := db.Exec(`INSERT INTO outbox (key, channel, recipient, payload, created_at) VALUES ('new', 'telegram', 1, '{}', 1)`); err != nil {
		t.Fatal(err)
	} else if id, _ := res.LastInsertId(); id != 8 {
		t.Fatalf("new row id %d, want 8", id)
	}
	first, err := r.Pending(ctx, 0, 1)
	if err != nil || len(first) != 1 || first[0].ID != 5 {
		t.Fatalf("first pending %+v, %v", first, err)
	}
}

// TestMigrateEmptyVersion2 upgrades an empty outbox: nothing is marked.
func TestMigrateEmptyVersion2(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("sqlite", DSN(filepath.Join(t.TempDir(), "v2.db"), Options{}))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE outbox_schema (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for v, m := range migrations()[:2] {
		if _, err := db.Exec(m); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`INSERT INTO outbox_schema VALUES (?, 1)`, v+1); err != nil {
			t.Fatal(err)
		}
	}
	if err := Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	if upto, err := NewReader(db).PublishedUpTo(ctx); err != nil || upto != 0 {
		t.Fatalf("PublishedUpTo = %d, %v; want 0", upto, err)
	}
}
