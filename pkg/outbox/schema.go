package outbox

import (
	"fmt"
	"strings"
)

// SchemaFile is where the repository publishes [Schema], for applications
// that write the outbox from another language: pkg/outbox/schema.sql. A test
// keeps the file equal to what the migrations produce.
const SchemaFile = "pkg/outbox/schema.sql"

// Schema returns the outbox schema at [SchemaVersion] as one SQL script, for
// an application that creates its tables itself (another language, its own
// migration tool): the bookkeeping table outbox_schema, every migration in
// order, and the rows that record them as applied, so that [Migrate] (which
// the publisher runs at start) finds the database current and changes
// nothing.
//
// Run it once, inside one BEGIN IMMEDIATE transaction, on a database that
// has no outbox table yet. A database it created is identical to one
// [Migrate] created.
func Schema() string {
	steps := migrations()
	var b strings.Builder
	fmt.Fprintf(&b, `-- The tgnotify outbox, schema version %d.
--
-- Generated from pkg/outbox/schema/*.sql (the migrations outbox.Migrate
-- applies); do not edit: TestSchemaFile checks it, and
-- TGNOTIFY_UPDATE_SCHEMA=1 go test ./pkg/outbox -run TestSchemaFile
-- rewrites it.
--
-- Run it once, in one transaction (BEGIN IMMEDIATE ... COMMIT), on a
-- database without an outbox table. docs/INTEGRATING.md says how to write
-- rows and which connection settings a writer must use.

`, len(steps))
	b.WriteString(schemaTableSQL + ";\n")
	for _, m := range steps {
		b.WriteString("\n" + strings.TrimRight(m, "\n") + "\n")
	}
	b.WriteString("\n-- The migrations above, recorded as applied (applied_at in Unix nanoseconds).\nINSERT INTO outbox_schema (version, applied_at) VALUES\n")
	for v := 1; v <= len(steps); v++ {
		sep := ","
		if v == len(steps) {
			sep = ";"
		}
		fmt.Fprintf(&b, "\t(%d, CAST(strftime('%%s', 'now') AS INTEGER) * 1000000000)%s\n", v, sep)
	}
	return b.String()
}
