-- The tgnotify outbox, schema version 4.
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

-- Version 3: fewer pages written per enqueue and per publish.
--   The table is rebuilt without AUTOINCREMENT, which rewrote the
--   sqlite_sequence page in every commit that enqueued. Ids are still
--   never reused: SQLite gives a new row max(id)+1, and the trigger
--   outbox_keep_newest refuses to delete the row with the highest id,
--   so max(id) never goes down and a cursor never skips a row.
--   published_at and its index are gone: the publisher no longer
--   rewrites every published row. It records each marking transaction
--   as one row of outbox_marks, "every outbox row with id <= upto
--   is published, since at"; rows with id > MAX(upto) are pending. The
--   view outbox_status shows each row with the time it was published
--   (NULL while pending). The published prefix of the old table
--   becomes the first outbox_marks row; rows published after a
--   pending one (never written by the publisher) count as pending and
--   are published again, which the stream de-duplicates.
CREATE TABLE outbox_v3 (
	id              INTEGER PRIMARY KEY,
	key             TEXT    NOT NULL UNIQUE,
	channel         TEXT    NOT NULL,
	recipient       INTEGER NOT NULL,
	recipient_token TEXT,
	payload         BLOB    NOT NULL,
	created_at      INTEGER NOT NULL
);
INSERT INTO outbox_v3 (id, key, channel, recipient, recipient_token, payload, created_at)
	SELECT id, key, channel, recipient, recipient_token, payload, created_at FROM outbox ORDER BY id;
CREATE TABLE outbox_marks (
	upto INTEGER PRIMARY KEY,
	at   INTEGER NOT NULL
);
INSERT INTO outbox_marks (upto, at)
	SELECT id, published_at FROM outbox
	WHERE published_at IS NOT NULL
	  AND id < COALESCE((SELECT MIN(id) FROM outbox WHERE published_at IS NULL), 9223372036854775807)
	ORDER BY id DESC LIMIT 1;
DROP TABLE outbox;
ALTER TABLE outbox_v3 RENAME TO outbox;
CREATE TRIGGER outbox_keep_newest BEFORE DELETE ON outbox
	WHEN OLD.id = (SELECT MAX(id) FROM outbox)
	BEGIN SELECT RAISE(ABORT, 'the newest outbox row is never deleted: it keeps ids from being reused'); END;
CREATE VIEW outbox_status AS
	SELECT o.id, o.key, o.channel, o.recipient, o.recipient_token, o.payload, o.created_at,
		(SELECT p.at FROM outbox_marks p WHERE p.upto >= o.id ORDER BY p.upto LIMIT 1) AS published_at
	FROM outbox o;

-- Version 4: cancellation (issue 15).
--   cancelled_at is NULL until the application cancels the row
--   (outbox.Cancel, or UPDATE outbox SET cancelled_at = <Unix ns>
--   WHERE key = ? AND cancelled_at IS NULL). The publisher never
--   publishes a row it reads as cancelled. cancel_result is NULL until
--   the publisher has carried the cancel to the workers: it writes a
--   cancel mark for every cancelled row of the published prefix (the
--   row may have been published before it was cancelled, or while), and
--   records here what the mark found: 'cancelled', or 'too_late' when a
--   worker had begun sending or had delivered it. The partial index
--   holds only cancelled rows whose cancel is not carried yet: an enqueue
--   writes no page of it.
ALTER TABLE outbox ADD COLUMN cancelled_at INTEGER;
ALTER TABLE outbox ADD COLUMN cancel_result TEXT;
CREATE INDEX outbox_cancels ON outbox (id) WHERE cancelled_at IS NOT NULL AND cancel_result IS NULL;
DROP VIEW outbox_status;
CREATE VIEW outbox_status AS
	SELECT o.id, o.key, o.channel, o.recipient, o.recipient_token, o.payload, o.created_at,
		(SELECT p.at FROM outbox_marks p WHERE p.upto >= o.id ORDER BY p.upto LIMIT 1) AS published_at,
		o.cancelled_at, o.cancel_result
	FROM outbox o;

-- The migrations above, recorded as applied (applied_at in Unix nanoseconds).
INSERT INTO outbox_schema (version, applied_at) VALUES
	(1, CAST(strftime('%s', 'now') AS INTEGER) * 1000000000),
	(2, CAST(strftime('%s', 'now') AS INTEGER) * 1000000000),
	(3, CAST(strftime('%s', 'now') AS INTEGER) * 1000000000),
	(4, CAST(strftime('%s', 'now') AS INTEGER) * 1000000000);
