package outbox

import "errors"

// ErrSchemaTooNew is returned by [Open] and [Migrate] when the database was
// migrated by a newer version of this package than the running one. The
// database is left untouched: running old code against a newer schema could
// lose data.
var ErrSchemaTooNew = errors.New("outbox schema is newer than this program supports")

// ErrNotSQLite is returned by [Open] when the file exists but is not an SQLite
// database.
var ErrNotSQLite = errors.New("file is not an SQLite database")
