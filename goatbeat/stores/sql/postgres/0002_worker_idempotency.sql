-- goatbeat schema, version 2 (PostgreSQL): worker-side idempotency (goatbeat.idempotency).
-- Written by the workers of guarded tasks, never by the scheduler; nothing in version 1 changes.
-- Like 0001, `goatbeat migrate` and the Django app's migration 0002 run this very file.

-- One row per occurrence (idempotency key) a guarded task has run, is running, or failed.
CREATE TABLE goatbeat_delivery (
    idempotency_key varchar(255) NOT NULL PRIMARY KEY,
    state           varchar(16)  NOT NULL,
    -- The delivery that holds the key (or last held it): host:pid:random, one per delivery.
    owner           varchar(255) NOT NULL,
    -- Deliveries that ran the task body, and deliveries skipped as duplicates.
    attempts        integer      NOT NULL DEFAULT 1,
    duplicates      integer      NOT NULL DEFAULT 0,
    started_at      timestamptz  NOT NULL,
    -- When a running claim may be taken over (its worker presumed dead); NULL: never.
    expires_at      timestamptz  NULL,
    finished_at     timestamptz  NULL,
    CONSTRAINT goatbeat_delivery_state_check
        CHECK (state IN ('running', 'succeeded', 'failed'))
);
-- prune_deliveries() deletes finished rows by age.
CREATE INDEX goatbeat_delivery_finished_idx
    ON goatbeat_delivery (finished_at) WHERE finished_at IS NOT NULL;

-- A Django Tasks message cannot carry the key, so the scheduler notes the key of every task
-- result it enqueues for a guarded task, in the enqueue's own transaction.
CREATE TABLE goatbeat_task_key (
    backend_task_id varchar(255) NOT NULL PRIMARY KEY,
    idempotency_key varchar(255) NOT NULL,
    created_at      timestamptz  NOT NULL DEFAULT now()
);
CREATE INDEX goatbeat_task_key_created_idx ON goatbeat_task_key (created_at);
