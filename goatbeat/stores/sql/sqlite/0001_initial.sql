-- goatbeat schema, version 1 (SQLite). Mirrors sql/postgres/0001_initial.sql column for column;
-- instants are TEXT in one fixed-width UTC form ('2026-12-01T08:00:00.000000Z') so that text
-- order is time order, JSON is TEXT, booleans are 0/1.

CREATE TABLE goatbeat_schedule (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    name            varchar(200) NOT NULL,
    source          varchar(32)  NOT NULL DEFAULT 'code',
    task            varchar(255) NOT NULL,
    trigger         TEXT         NOT NULL,
    timezone        varchar(64)  NOT NULL DEFAULT 'UTC',
    args            TEXT         NOT NULL DEFAULT '[]',
    kwargs          TEXT         NOT NULL DEFAULT '{}',
    queue           varchar(200) NULL,
    exchange        varchar(200) NULL,
    routing_key     varchar(200) NULL,
    priority        integer      NULL,
    expires         REAL         NULL,
    headers         TEXT         NOT NULL DEFAULT '{}',
    misfire_policy  varchar(16)  NOT NULL DEFAULT 'run_once',
    misfire_grace   REAL         NOT NULL DEFAULT 60,
    catch_up_limit  integer      NOT NULL DEFAULT 100,
    one_off         integer      NOT NULL DEFAULT 0,
    enabled         integer      NOT NULL DEFAULT 1,
    start_at        TEXT         NULL,
    end_at          TEXT         NULL,
    next_run_at     TEXT         NULL,
    last_run_at     TEXT         NULL,
    last_status     varchar(32)  NULL,
    total_run_count integer      NOT NULL DEFAULT 0,
    missed_count    integer      NOT NULL DEFAULT 0,
    version         integer      NOT NULL DEFAULT 1,
    description     TEXT         NOT NULL DEFAULT '',
    created_at      TEXT         NOT NULL,
    updated_at      TEXT         NOT NULL,
    CONSTRAINT goatbeat_schedule_name_key UNIQUE (name),
    CONSTRAINT goatbeat_schedule_source_check
        CHECK (source IN ('code', 'admin', 'celery', 'django_celery_beat')),
    CONSTRAINT goatbeat_schedule_misfire_policy_check
        CHECK (misfire_policy IN ('run_once', 'skip', 'run_all'))
);

-- The due query repeats this predicate word for word so SQLite may use the partial index.
CREATE INDEX goatbeat_schedule_due_idx
    ON goatbeat_schedule (next_run_at) WHERE enabled AND next_run_at IS NOT NULL;
CREATE INDEX goatbeat_schedule_source_idx ON goatbeat_schedule (source, name);

CREATE TABLE goatbeat_execution (
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
    CONSTRAINT goatbeat_execution_idempotency_key_key UNIQUE (idempotency_key),
    CONSTRAINT goatbeat_execution_kind_check CHECK (kind IN ('scheduled', 'manual')),
    CONSTRAINT goatbeat_execution_status_check
        CHECK (status IN ('claimed', 'submitted', 'submit_failed', 'succeeded', 'failed'))
);

CREATE INDEX goatbeat_execution_pending_idx
    ON goatbeat_execution (claimed_at) WHERE status = 'claimed';
CREATE INDEX goatbeat_execution_schedule_idx
    ON goatbeat_execution (schedule_id, scheduled_at DESC);
CREATE INDEX goatbeat_execution_status_idx
    ON goatbeat_execution (status, scheduled_at DESC);
CREATE INDEX goatbeat_execution_name_idx
    ON goatbeat_execution (schedule_name, scheduled_at DESC);

CREATE TABLE goatbeat_lease (
    name        varchar(64)  NOT NULL PRIMARY KEY,
    holder      varchar(255) NOT NULL,
    token       integer      NOT NULL,
    expires_at  TEXT         NOT NULL,
    acquired_at TEXT         NOT NULL
);

-- SQLite has no LISTEN/NOTIFY: notify() bumps this counter and waiters in other processes
-- poll it (cheaply, behind PRAGMA data_version).
CREATE TABLE goatbeat_notify (
    id      integer NOT NULL PRIMARY KEY CHECK (id = 1),
    counter integer NOT NULL,
    payload TEXT    NULL
);
INSERT INTO goatbeat_notify (id, counter, payload) VALUES (1, 0, NULL);
