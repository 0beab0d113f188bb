-- goatbeat schema, version 6 (PostgreSQL): schedule control. Pause and resume with a note,
-- backfill, deterministic jitter, the overlap policy, pause on failure.
-- Like 0001, `goatbeat migrate` and the Django app's migration 0006 run this very file.
-- Nothing here rewrites next_run_at or last_run_at: every schedule keeps its phase.

-- The definition gains four options; every existing row gets the behaviour it had (no
-- jitter, overlap allowed, no runtime limit, never paused on failure). A published
-- fingerprint hashes them only when set, so the fingerprints recorded before stay valid.
-- The pause (who, when, why) and the count of occurrences skipped on purpose are state.
-- active_execution_id: the last run the overlap policy started, which the next occurrence
-- waits for (no foreign key: a run's row may go, the pointer then means "nothing running").
ALTER TABLE goatbeat_schedule
    ADD COLUMN jitter              double precision NOT NULL DEFAULT 0,
    ADD COLUMN overlap             varchar(16)      NOT NULL DEFAULT 'allow',
    ADD COLUMN max_runtime         double precision NULL,
    ADD COLUMN pause_on_failure    integer          NULL,
    ADD COLUMN paused              boolean          NOT NULL DEFAULT false,
    ADD COLUMN paused_at           timestamptz      NULL,
    ADD COLUMN paused_by           varchar(200)     NULL,
    ADD COLUMN pause_note          text             NOT NULL DEFAULT '',
    ADD COLUMN skipped_count       bigint           NOT NULL DEFAULT 0,
    ADD COLUMN active_execution_id bigint           NULL,
    ADD CONSTRAINT goatbeat_schedule_overlap_check
        CHECK (overlap IN ('allow', 'skip', 'buffer_one'));

-- A paused row is never due: the due index leaves it out, so the claim's index walk never
-- meets it however many schedules are paused (it keeps next_run_at, where the pause began).
DROP INDEX goatbeat_schedule_due_idx;
CREATE INDEX goatbeat_schedule_due_idx
    ON goatbeat_schedule (next_run_at) WHERE enabled AND NOT paused AND next_run_at IS NOT NULL;

-- 'backfill' runs: past instants submitted on request, under their scheduled keys.
ALTER TABLE goatbeat_execution DROP CONSTRAINT goatbeat_execution_kind_check;
ALTER TABLE goatbeat_execution ADD CONSTRAINT goatbeat_execution_kind_check
    CHECK (kind IN ('scheduled', 'manual', 'backfill')) NOT VALID;
ALTER TABLE goatbeat_execution VALIDATE CONSTRAINT goatbeat_execution_kind_check;

-- 'skipped' (the overlap policy, or a pause, kept it from starting) and 'buffered' (it waits
-- for the running run) join the list. The whole list is written again, the worker-reported
-- 'running' and 'retried' (schema 5) included, so the constraint is the same whichever of
-- the two versions a database took first. NOT VALID then VALIDATE: writers are not blocked.
ALTER TABLE goatbeat_execution DROP CONSTRAINT goatbeat_execution_status_check;
ALTER TABLE goatbeat_execution ADD CONSTRAINT goatbeat_execution_status_check
    CHECK (status IN ('claimed', 'submitted', 'submit_failed', 'running', 'retried',
                      'succeeded', 'failed', 'skipped', 'buffered')) NOT VALID;
ALTER TABLE goatbeat_execution VALIDATE CONSTRAINT goatbeat_execution_status_check;

-- Each claim looks for buffered occurrences whose run has ended: nearly always none.
CREATE INDEX goatbeat_execution_buffered_idx
    ON goatbeat_execution (schedule_id) WHERE status = 'buffered';
