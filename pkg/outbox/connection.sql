-- The settings of every connection that writes the tgnotify outbox: run
-- these statements right after opening the database, on each connection
-- (they are per connection, except journal_mode, which the file keeps).
-- outbox.Open sets the same through outbox.DSN, and TestConnectionFile
-- keeps the two equal. docs/INTEGRATING.md says why each one matters.
--
-- Then begin every transaction that writes with BEGIN IMMEDIATE.
PRAGMA busy_timeout = 10000;
PRAGMA journal_mode = WAL;
PRAGMA synchronous = FULL;
PRAGMA foreign_keys = ON;
PRAGMA journal_size_limit = 67108864;
