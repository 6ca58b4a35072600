-- Version 2: notifications for other channels than Telegram.
--   channel is the first channel of the notification's route, and
--   recipient_token its recipient there as a subject token (the chat id,
--   u<MAX user>, or e/p + a hash of an email address or phone number);
--   the publisher sends the row to <prefix>.<channel>.<recipient_token>.
--   recipient keeps the Telegram chat id (0 without one). Rows of
--   version 1 have no token: the publisher uses recipient.
ALTER TABLE outbox ADD COLUMN recipient_token TEXT;
