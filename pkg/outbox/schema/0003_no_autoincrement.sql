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
