-- goatbeat schema, version 4 (PostgreSQL): the submit backoff lives in the execution row.
-- A failed submission leaves its row 'claimed' with retry_at = the database's now() plus the
-- backoff; pending() leaves it out until then. Kept in the row rather than in the scheduler's
-- memory, the backoff survives a store error, a restart and a failover: a new leader neither
-- retries early nor forgets the row. NULL (every row written before version 4): due at once.
-- Like 0001, `goatbeat migrate` and the Django app's migration 0004 run this very file.
-- (Versions 3 and 4 are other changes; the versions are applied in order, each once.)

ALTER TABLE goatbeat_execution ADD COLUMN retry_at timestamptz NULL;
