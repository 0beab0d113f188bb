-- goatbeat schema, version 5 (SQLite): operations; see ../postgres/0005_operations.sql for why.
-- SQLite cannot change a CHECK constraint in place, so goatbeat_execution is rebuilt: a new
-- table with the new columns and the whole status list, every row copied with its id, the
-- AUTOINCREMENT counter carried over, the old table dropped, the new one renamed, the indexes
-- made again. The migration runs in one transaction: it all happens or none of it.
-- (A later version that adds an execution column must be listed in the copy below too.)

CREATE TABLE goatbeat_execution_v5 (
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
    CONSTRAINT goatbeat_execution_kind_check CHECK (kind IN ('scheduled', 'manual')),
    CONSTRAINT goatbeat_execution_status_check
        CHECK (status IN ('claimed', 'submitted', 'submit_failed', 'running', 'retried',
                          'succeeded', 'failed'))
);
INSERT INTO goatbeat_execution_v5 (
    id, schedule_id, schedule_name, scheduled_at, idempotency_key, kind, status,
    fencing_token, scheduler_id, claimed_at, submitted_at, finished_at, attempts,
    backend_task_id, error, retry_at)
SELECT id, schedule_id, schedule_name, scheduled_at, idempotency_key, kind, status,
       fencing_token, scheduler_id, claimed_at, submitted_at, finished_at, attempts,
       backend_task_id, error, retry_at
FROM goatbeat_execution;
-- Ids are never reused, even those of rows deleted by hand: the counter moves over too.
-- (The old counter is never below the largest id copied; renaming the table renames its entry.)
INSERT INTO sqlite_sequence (name, seq)
SELECT 'goatbeat_execution_v5', seq FROM sqlite_sequence WHERE name = 'goatbeat_execution'
    AND NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'goatbeat_execution_v5');
UPDATE sqlite_sequence
SET seq = (SELECT seq FROM sqlite_sequence WHERE name = 'goatbeat_execution')
WHERE name = 'goatbeat_execution_v5'
    AND EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'goatbeat_execution');
DROP TABLE goatbeat_execution;
ALTER TABLE goatbeat_execution_v5 RENAME TO goatbeat_execution;
CREATE INDEX goatbeat_execution_pending_idx
    ON goatbeat_execution (claimed_at) WHERE status = 'claimed';
CREATE INDEX goatbeat_execution_schedule_idx
    ON goatbeat_execution (schedule_id, scheduled_at DESC);
CREATE INDEX goatbeat_execution_status_idx
    ON goatbeat_execution (status, scheduled_at DESC);
CREATE INDEX goatbeat_execution_name_idx
    ON goatbeat_execution (schedule_name, scheduled_at DESC);

ALTER TABLE goatbeat_schedule ADD COLUMN last_success_at TEXT NULL;
ALTER TABLE goatbeat_schedule ADD COLUMN last_failure_at TEXT NULL;
ALTER TABLE goatbeat_schedule ADD COLUMN consecutive_failures integer NOT NULL DEFAULT 0;

CREATE TABLE goatbeat_scheduler (
    scheduler_id  varchar(255) NOT NULL PRIMARY KEY,
    role          varchar(16)  NOT NULL,
    lease         varchar(64)  NOT NULL,
    fencing_token integer      NULL,
    hostname      varchar(255) NOT NULL DEFAULT '',
    pid           integer      NULL,
    version       varchar(64)  NOT NULL DEFAULT '',
    started_at    TEXT         NOT NULL,
    heartbeat_at  TEXT         NOT NULL,
    expires_at    TEXT         NOT NULL,
    CONSTRAINT goatbeat_scheduler_role_check CHECK (role IN ('leader', 'standby'))
);

CREATE TABLE goatbeat_miss (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    schedule_id   integer      NULL
        CONSTRAINT goatbeat_miss_schedule_id_fkey
        REFERENCES goatbeat_schedule (id) ON DELETE SET NULL DEFERRABLE INITIALLY DEFERRED,
    schedule_name varchar(200) NOT NULL,
    missed        integer      NOT NULL,
    first_at      TEXT         NULL,
    last_at       TEXT         NULL,
    scheduler_id  varchar(255) NULL,
    recorded_at   TEXT         NOT NULL
);
CREATE INDEX goatbeat_miss_recorded_idx ON goatbeat_miss (recorded_at);
CREATE INDEX goatbeat_miss_schedule_idx ON goatbeat_miss (schedule_id);
