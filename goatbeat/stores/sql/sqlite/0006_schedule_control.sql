-- goatbeat schema, version 6 (SQLite): schedule control; see ../postgres/0006_schedule_control.sql
-- for why. Nothing here rewrites next_run_at or last_run_at: every schedule keeps its phase.

ALTER TABLE goatbeat_schedule ADD COLUMN jitter REAL NOT NULL DEFAULT 0;
ALTER TABLE goatbeat_schedule ADD COLUMN overlap varchar(16) NOT NULL DEFAULT 'allow'
    CONSTRAINT goatbeat_schedule_overlap_check CHECK (overlap IN ('allow', 'skip', 'buffer_one'));
ALTER TABLE goatbeat_schedule ADD COLUMN max_runtime REAL NULL;
ALTER TABLE goatbeat_schedule ADD COLUMN pause_on_failure integer NULL;
ALTER TABLE goatbeat_schedule ADD COLUMN paused integer NOT NULL DEFAULT 0;
ALTER TABLE goatbeat_schedule ADD COLUMN paused_at TEXT NULL;
ALTER TABLE goatbeat_schedule ADD COLUMN paused_by varchar(200) NULL;
ALTER TABLE goatbeat_schedule ADD COLUMN pause_note TEXT NOT NULL DEFAULT '';
ALTER TABLE goatbeat_schedule ADD COLUMN skipped_count integer NOT NULL DEFAULT 0;
ALTER TABLE goatbeat_schedule ADD COLUMN active_execution_id integer NULL;

-- A paused row is never due: the due index leaves it out.
DROP INDEX goatbeat_schedule_due_idx;
CREATE INDEX goatbeat_schedule_due_idx
    ON goatbeat_schedule (next_run_at) WHERE enabled AND NOT paused AND next_run_at IS NOT NULL;

-- SQLite cannot change a CHECK constraint in place, so goatbeat_execution is rebuilt with the
-- kinds ('backfill' added) and the whole status list ('skipped' and 'buffered' added, and the
-- worker-reported 'running' and 'retried' of schema 5): a new table, every row copied with its
-- id, the AUTOINCREMENT counter carried over, the old table dropped, the new one renamed, the
-- indexes made again. The migration runs in one transaction: it all happens or none of it.
-- (A version that adds an execution column must be listed in the copy below too.)
CREATE TABLE goatbeat_execution_v6 (
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
                          'succeeded', 'failed', 'skipped', 'buffered'))
);
INSERT INTO goatbeat_execution_v6 (
    id, schedule_id, schedule_name, scheduled_at, idempotency_key, kind, status,
    fencing_token, scheduler_id, claimed_at, submitted_at, finished_at, attempts,
    backend_task_id, error, retry_at, started_at, runtime, worker, retries)
SELECT id, schedule_id, schedule_name, scheduled_at, idempotency_key, kind, status,
       fencing_token, scheduler_id, claimed_at, submitted_at, finished_at, attempts,
       backend_task_id, error, retry_at, started_at, runtime, worker, retries
FROM goatbeat_execution;
-- Ids are never reused, even those of rows deleted by hand: the counter moves over too.
INSERT INTO sqlite_sequence (name, seq)
SELECT 'goatbeat_execution_v6', seq FROM sqlite_sequence WHERE name = 'goatbeat_execution'
    AND NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'goatbeat_execution_v6');
UPDATE sqlite_sequence
SET seq = (SELECT seq FROM sqlite_sequence WHERE name = 'goatbeat_execution')
WHERE name = 'goatbeat_execution_v6'
    AND EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'goatbeat_execution');
DROP TABLE goatbeat_execution;
ALTER TABLE goatbeat_execution_v6 RENAME TO goatbeat_execution;
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
