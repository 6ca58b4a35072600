-- Version 1: the outbox table.
--   id AUTOINCREMENT: ids are never reused, so a cursor never skips.
--   key UNIQUE: INSERT ... ON CONFLICT (key) DO NOTHING makes enqueue idempotent.
--   published_at NULL while pending. There is deliberately no index on
--   pending rows: it would cost the application a page write on every
--   enqueue. Readers scan the primary key from a low-water mark instead
--   (see Reader). The partial index on published rows is written by the
--   publisher only, and keeps the purge cheap.
CREATE TABLE outbox (
	id           INTEGER PRIMARY KEY AUTOINCREMENT,
	key          TEXT    NOT NULL UNIQUE,
	channel      TEXT    NOT NULL,
	recipient    INTEGER NOT NULL,
	payload      BLOB    NOT NULL,
	created_at   INTEGER NOT NULL,
	published_at INTEGER
);
CREATE INDEX outbox_published ON outbox (published_at) WHERE published_at IS NOT NULL;
