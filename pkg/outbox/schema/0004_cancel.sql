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
