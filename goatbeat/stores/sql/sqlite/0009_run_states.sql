-- goatbeat schema, version 9 (SQLite): every run ends in a true state; see
-- ../postgres/0009_run_states.sql for why. 'lost' and 'expired' join the statuses.
-- SQLite cannot change a CHECK constraint in place, so goatbeat_execution is rebuilt as in
-- version 6: a new table, every row copied with its id, the AUTOINCREMENT counter carried
-- over, the old table dropped, the new one renamed, the indexes made again, in one
-- transaction. (A version that adds an execution column must be listed in the copy below.)
CREATE TABLE goatbeat_execution_v8 (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    schedule_id     integer      NULL
        CONSTRAINT goatbeat_execution_schedule_id_fkey
        REFERENCES goatbeat_schedule (id) ON DELETE SET NULL DEFERRABLE INITIALLY DEFERRED,
    schedule_name   varchar(200) NOT NULL,
    scheduled_at    TEXT         NOT NULL,
    idempotency_key varchar(255) NOT NULL,
    kind            varchar(16)  NOT NULL DEFAULT 'scheduled',
    status          varchar(16)  NOT NULL DEFAULT 'claimed',
    fencing_token   integer      NULL,
    scheduler_id    varchar(255) NULL,
    claimed_at      TEXT         NOT NULL,
    submitted_at    TEXT         NULL,
    finished_at     TEXT         NULL,
    attempts        integer      NOT NULL DEFAULT 0,
    backend_task_id varchar(255) NULL,
    error           TEXT         NULL,
    retry_at        TEXT         NULL,
    started_at      TEXT         NULL,
    runtime         REAL         NULL,
    worker          varchar(255) NULL,
    retries         integer      NOT NULL DEFAULT 0,
    CONSTRAINT goatbeat_execution_idempotency_key_key UNIQUE (idempotency_key),
    CONSTRAINT goatbeat_execution_kind_check CHECK (kind IN ('scheduled', 'manual', 'backfill')),
    CONSTRAINT goatbeat_execution_status_check
        CHECK (status IN ('claimed', 'submitted', 'submit_failed', 'running', 'retried',
                          'succeeded', 'failed', 'skipped', 'buffered', 'lost', 'expired'))
);
INSERT INTO goatbeat_execution_v8 (
    id, schedule_id, schedule_name, scheduled_at, idempotency_key, kind, status,
    fencing_token, scheduler_id, claimed_at, submitted_at, finished_at, attempts,
    backend_task_id, error, retry_at, started_at, runtime, worker, retries)
SELECT id, schedule_id, schedule_name, scheduled_at, idempotency_key, kind, status,
       fencing_token, scheduler_id, claimed_at, submitted_at, finished_at, attempts,
       backend_task_id, error, retry_at, started_at, runtime, worker, retries
FROM goatbeat_execution;
-- Ids are never reused, even those of rows deleted by hand: the counter moves over too.
INSERT INTO sqlite_sequence (name, seq)
SELECT 'goatbeat_execution_v8', seq FROM sqlite_sequence WHERE name = 'goatbeat_execution'
    AND NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'goatbeat_execution_v8');
UPDATE sqlite_sequence
SET seq = (SELECT seq FROM sqlite_sequence WHERE name = 'goatbeat_execution')
WHERE name = 'goatbeat_execution_v8'
    AND EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'goatbeat_execution');
DROP TABLE goatbeat_execution;
ALTER TABLE goatbeat_execution_v8 RENAME TO goatbeat_execution;
CREATE INDEX goatbeat_execution_pending_idx
    ON goatbeat_execution (claimed_at) WHERE status = 'claimed';
CREATE INDEX goatbeat_execution_schedule_idx
    ON goatbeat_execution (schedule_id, scheduled_at DESC);
CREATE INDEX goatbeat_execution_status_idx
    ON goatbeat_execution (status, scheduled_at DESC);
CREATE INDEX goatbeat_execution_name_idx
    ON goatbeat_execution (schedule_name, scheduled_at DESC);
CREATE INDEX goatbeat_execution_buffered_idx
    ON goatbeat_execution (schedule_id) WHERE status = 'buffered';
CREATE INDEX goatbeat_execution_open_idx
    ON goatbeat_execution (schedule_id) WHERE status IN ('submitted', 'running', 'retried');
