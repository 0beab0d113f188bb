-- goatbeat schema, version 2 (SQLite): worker-side idempotency (goatbeat.idempotency).
-- Mirrors sql/postgres/0002_worker_idempotency.sql column for column (instants as TEXT).

CREATE TABLE goatbeat_delivery (
    idempotency_key varchar(255) NOT NULL PRIMARY KEY,
    state           varchar(16)  NOT NULL,
    owner           varchar(255) NOT NULL,
    attempts        integer      NOT NULL DEFAULT 1,
    duplicates      integer      NOT NULL DEFAULT 0,
    started_at      TEXT         NOT NULL,
    expires_at      TEXT         NULL,
    finished_at     TEXT         NULL,
    CONSTRAINT goatbeat_delivery_state_check
        CHECK (state IN ('running', 'succeeded', 'failed'))
);
CREATE INDEX goatbeat_delivery_finished_idx
    ON goatbeat_delivery (finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE goatbeat_task_key (
    backend_task_id varchar(255) NOT NULL PRIMARY KEY,
    idempotency_key varchar(255) NOT NULL,
    created_at      TEXT         NOT NULL
);
CREATE INDEX goatbeat_task_key_created_idx ON goatbeat_task_key (created_at);
