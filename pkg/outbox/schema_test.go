package outbox_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// updateSchemaEnv rewrites schema.sql from the migrations when set to 1.
const updateSchemaEnv = "TGNOTIFY_UPDATE_SCHEMA"

// The published schema.sql is exactly what Schema generates from the
// migrations.
func TestSchemaFile(t *testing.T) {
	const path = "schema.sql"
	if !strings.HasSuffix(outbox.SchemaFile, "/"+path) {
		t.Fatalf("SchemaFile = %q, want it to name this package's %s", outbox.SchemaFile, path)
	}
	want := outbox.Schema()
	if os.Getenv(updateSchemaEnv) == "1" {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("%s differs from what the migrations produce; run %s=1 go test ./pkg/outbox -run TestSchemaFile\n--- got:\n%s\n--- want:\n%s",
			path, updateSchemaEnv, got, want)
	}
}

// schemaOf describes a database's schema: every object SQLite keeps, with
// the statement that made it, and the versions recorded in outbox_schema.
type schemaOf struct {
	Objects  []string
	Versions []int
}

func readSchema(t *testing.T, db *sql.DB) schemaOf {
	t.Helper()
	ctx := context.Background()
	var s schemaOf
	rows, err := db.QueryContext(ctx, `SELECT type || ' ' || name || ' on ' || tbl_name || ': ' || COALESCE(sql, '') FROM sqlite_master ORDER BY type, name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var o string
		if err := rows.Scan(&o); err != nil {
			t.Fatal(err)
		}
		s.Objects = append(s.Objects, o)
	}
	vrows, err := db.QueryContext(ctx, `SELECT version FROM outbox_schema ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	defer vrows.Close()
	for vrows.Next() {
		var v int
		if err := vrows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		s.Versions = append(s.Versions, v)
	}
	return s
}

// A database made by running schema.sql is the database Migrate makes, and
// Migrate (the publisher's start) leaves it alone.
func TestSchemaMatchesMigrate(t *testing.T) {
	ctx := context.Background()
	migrated, _ := openDB(t)
	want := readSchema(t, migrated)
	if len(want.Versions) != outbox.SchemaVersion() {
		t.Fatalf("Migrate recorded versions %v, want 1..%d", want.Versions, outbox.SchemaVersion())
	}

	path := filepath.Join(t.TempDir(), "app.db")
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	script, err := os.ReadFile("schema.sql")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := raw.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{"BEGIN IMMEDIATE", string(script), "COMMIT"} {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("running schema.sql: %v", err)
		}
	}
	conn.Close()
	if got := readSchema(t, raw); !reflect.DeepEqual(got, want) {
		t.Fatalf("schema.sql made\n%+v\nwant what Migrate makes:\n%+v", got, want)
	}

	db, err := outbox.Open(ctx, path, outbox.Options{})
	if err != nil {
		t.Fatalf("Open on a database made by schema.sql: %v", err)
	}
	defer db.Close()
	if got := readSchema(t, db); !reflect.DeepEqual(got, want) {
		t.Fatalf("Migrate changed a database made by schema.sql:\n%+v\nwant\n%+v", got, want)
	}
	if !enqueue(t, db, validNotification()) {
		t.Fatal("Enqueue into a database made by schema.sql inserted nothing")
	}
}

// pragmaLine is one statement of connection.sql.
var pragmaLine = regexp.MustCompile(`^PRAGMA ([a-z_]+) = ([A-Za-z0-9]+);$`)

// connection.sql, the settings other languages run on each connection,
// says what Open's DSN sets.
func TestConnectionFile(t *testing.T) {
	f, err := os.Open("connection.sql")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	file := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "--") {
			continue
		}
		m := pragmaLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("connection.sql: %q is not a comment or a PRAGMA name = value; statement", line)
		}
		file[m[1]] = strings.ToLower(m[2])
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}

	dsn, err := url.Parse(outbox.DSN("x.db", outbox.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	q := dsn.Query()
	if q.Get("_txlock") != "immediate" {
		t.Errorf("DSN %s does not begin transactions with BEGIN IMMEDIATE", dsn)
	}
	want := map[string]string{}
	for _, p := range q["_pragma"] {
		name, value, ok := strings.Cut(strings.TrimSuffix(p, ")"), "(")
		if !ok {
			t.Fatalf("DSN pragma %q is not name(value)", p)
		}
		want[name] = strings.ToLower(value)
	}
	if !reflect.DeepEqual(file, want) {
		t.Fatalf("connection.sql sets %v, want what outbox.DSN sets: %v", file, want)
	}
}

// The migrations are numbered 0001, 0002, ... without a gap, so the order
// of their names is the order of the versions.
func TestMigrationFilesAreNumbered(t *testing.T) {
	entries, err := os.ReadDir("schema")
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`^(\d{4})_[a-z0-9_]+\.sql$`)
	for i, e := range entries {
		m := name.FindStringSubmatch(e.Name())
		if want := fmt.Sprintf("%04d", i+1); m == nil || m[1] != want {
			t.Errorf("schema/%s: want a name like %s_what.sql", e.Name(), want)
		}
	}
	if len(entries) != outbox.SchemaVersion() {
		t.Errorf("%d migration files, SchemaVersion %d", len(entries), outbox.SchemaVersion())
	}
}
