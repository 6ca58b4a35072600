-- The tgnotify outbox, schema version 2.
--
-- Generated from pkg/outbox/schema/*.sql (the migrations outbox.Migrate
-- applies); do not edit: TestSchemaFile checks it, and
-- TGNOTIFY_UPDATE_SCHEMA=1 go test ./pkg/outbox -run TestSchemaFile
-- rewrites it.
--
-- Run it once, in one transaction (BEGIN IMMEDIATE ... COMMIT), on a
-- database without an outbox table. docs/INTEGRATING.md says how to write
-- rows and which connection settings a writer must use.

CREATE TABLE IF NOT EXISTS outbox_schema (
	version    INTEGER PRIMARY KEY,
	applied_at INTEGER NOT NULL
);

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

-- Version 2: notifications for other channels than Telegram.
--   channel is the first channel of the notification's route, and
--   recipient_token its recipient there as a subject token (the chat id,
--   u<MAX user>, or e/p + a hash of an email address or phone number);
--   the publisher sends the row to <prefix>.<channel>.<recipient_token>.
--   recipient keeps the Telegram chat id (0 without one). Rows of
--   version 1 have no token: the publisher uses recipient.
ALTER TABLE outbox ADD COLUMN recipient_token TEXT;

-- The migrations above, recorded as applied (applied_at in Unix nanoseconds).
INSERT INTO outbox_schema (version, applied_at) VALUES
	(1, CAST(strftime('%s', 'now') AS INTEGER) * 1000000000),
	(2, CAST(strftime('%s', 'now') AS INTEGER) * 1000000000);
