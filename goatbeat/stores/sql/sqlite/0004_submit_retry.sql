-- goatbeat schema, version 4 (SQLite): the submit backoff lives in the execution row.
-- Mirrors sql/postgres/0004_submit_retry.sql (instants as TEXT, like every other column).

ALTER TABLE goatbeat_execution ADD COLUMN retry_at TEXT NULL;
