package reliability_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// TestBinariesRefuseUnusableDatabases points bin/publisher and bin/shop at a
// file that is not an SQLite database, at an SQLite file whose pages are
// garbage, and at an outbox migrated by a newer version: each must exit
// non-zero with a message naming the file and the problem, and leave the
// file exactly as it was.
func TestBinariesRefuseUnusableDatabases(t *testing.T) {
	dir := t.TempDir()
	notSQLite := filepath.Join(dir, "orders.csv")
	if err := os.WriteFile(notSQLite, []byte("id,chat_id,total\nA1,100,7.00\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(garbage, append([]byte("SQLite format 3\x00"), bytes.Repeat([]byte{0xA5}, 8192)...), 0o600); err != nil {
		t.Fatal(err)
	}
	newer := filepath.Join(dir, "newer.db")
	db, err := outbox.Open(context.Background(), newer, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO outbox_schema (version, applied_at) VALUES (?, 0)`, outbox.SchemaVersion()+1); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	cases := []struct {
		name, path, want string
	}{
		{"not SQLite", notSQLite, "not an SQLite database"},
		{"garbage pages", garbage, "not an SQLite database"},
		{"newer schema", newer, "upgrade the program"},
	}
	for _, binary := range []string{"publisher", "shop"} {
		for _, c := range cases {
			t.Run(binary+"/"+c.name, func(t *testing.T) {
				before, err := os.ReadFile(c.path)
				if err != nil {
					t.Fatal(err)
				}
				args := []string{"-db", c.path, "-http", freeAddr(t)}
				if binary == "publisher" {
					// NATS need not be up: the daemon opens the database
					// while its connection retries in the background.
					args = append(args, "-nats", "nats://"+freeAddr(t))
				}
				r := runBinary(t, bin(t, binary), nil, args...)
				if r.code == 0 {
					t.Fatalf("exit status 0, want a refusal; output:\n%s", r.output)
				}
				if !strings.Contains(r.output, c.want) || !strings.Contains(r.output, c.path) {
					t.Fatalf("the message does not say %q about %s:\n%s", c.want, c.path, r.output)
				}
				after, err := os.ReadFile(c.path)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(before, after) {
					t.Fatalf("%s changed the refused file", binary)
				}
			})
		}
	}
}
