-- goatbeat queries for SQLite (stdlib sqlite3, named :param placeholders).
-- Loaded by name: each query starts at a "-- name: <name>" line. Instants are passed in the
-- store's fixed-width UTC text form, so comparing text compares time.

-- name: schedules_all
SELECT id, name, source, task, trigger, timezone, args, kwargs, queue, exchange, routing_key,
       priority, expires, headers, misfire_policy, misfire_grace, catch_up_limit, one_off,
       enabled, start_at, end_at, next_run_at, last_run_at, last_status, total_run_count,
       missed_count, version, description, created_at, updated_at,
       jitter, overlap, max_runtime, pause_on_failure, paused, paused_at, paused_by,
       pause_note, skipped_count, published_fingerprint
FROM goatbeat_schedule
ORDER BY name;

-- name: schedules_by_source
SELECT id, name, source, task, trigger, timezone, args, kwargs, queue, exchange, routing_key,
       priority, expires, headers, misfire_policy, misfire_grace, catch_up_limit, one_off,
       enabled, start_at, end_at, next_run_at, last_run_at, last_status, total_run_count,
       missed_count, version, description, created_at, updated_at,
       jitter, overlap, max_runtime, pause_on_failure, paused, paused_at, paused_by,
       pause_note, skipped_count
FROM goatbeat_schedule
WHERE source = :source
ORDER BY name;

-- name: schedule_by_name
SELECT id, name, source, task, trigger, timezone, args, kwargs, queue, exchange, routing_key,
       priority, expires, headers, misfire_policy, misfire_grace, catch_up_limit, one_off,
       enabled, start_at, end_at, next_run_at, last_run_at, last_status, total_run_count,
       missed_count, version, description, created_at, updated_at,
       jitter, overlap, max_runtime, pause_on_failure, paused, paused_at, paused_by,
       pause_note, skipped_count, published_fingerprint
FROM goatbeat_schedule
WHERE name = :name;

-- name: schedule_by_id
SELECT id, name, source, task, trigger, timezone, args, kwargs, queue, exchange, routing_key,
       priority, expires, headers, misfire_policy, misfire_grace, catch_up_limit, one_off,
       enabled, start_at, end_at, next_run_at, last_run_at, last_status, total_run_count,
       missed_count, version, description, created_at, updated_at,
       jitter, overlap, max_runtime, pause_on_failure, paused, paused_at, paused_by,
       pause_note, skipped_count
FROM goatbeat_schedule
WHERE id = :id;

-- name: schedule_insert
INSERT INTO goatbeat_schedule (
    name, source, task, trigger, timezone, args, kwargs, queue, exchange, routing_key,
    priority, expires, headers, misfire_policy, misfire_grace, catch_up_limit, one_off,
    enabled, start_at, end_at, next_run_at, last_run_at, total_run_count, description,
    published_fingerprint, jitter, overlap, max_runtime, pause_on_failure, version, created_at,
    updated_at)
VALUES (
    :name, :source, :task, :trigger, :timezone, :args, :kwargs, :queue, :exchange,
    :routing_key, :priority, :expires, :headers, :misfire_policy, :misfire_grace,
    :catch_up_limit, :one_off, :enabled, :start_at, :end_at, :next_run_at, :last_run_at,
    :total_run_count, :description, :published_fingerprint, :jitter, :overlap, :max_runtime,
    :pause_on_failure, 1, :now, :now);

-- name: schedule_replace
UPDATE goatbeat_schedule SET
    task = :task, trigger = :trigger, timezone = :timezone, args = :args, kwargs = :kwargs,
    queue = :queue, exchange = :exchange, routing_key = :routing_key, priority = :priority,
    expires = :expires, headers = :headers, misfire_policy = :misfire_policy,
    misfire_grace = :misfire_grace, catch_up_limit = :catch_up_limit, one_off = :one_off,
    enabled = :enabled, start_at = :start_at, end_at = :end_at, description = :description,
    jitter = :jitter, overlap = :overlap, max_runtime = :max_runtime,
    pause_on_failure = :pause_on_failure,
    next_run_at = :next_run_at, last_status = :last_status,
    -- NULL keeps the column: only a publish moves the last run forward or records what it wrote.
    last_run_at = COALESCE(:last_run_at, last_run_at),
    published_fingerprint = COALESCE(:published_fingerprint, published_fingerprint),
    version = version + 1, updated_at = :now
WHERE id = :id AND version = :version;

-- name: schedule_set_fingerprint
-- A row published before schema version 3 whose definition is what is published again: record
-- it, without a version bump (nothing a scheduler reads changes).
UPDATE goatbeat_schedule SET published_fingerprint = :published_fingerprint
WHERE id = :id AND published_fingerprint IS NULL;

-- name: schedule_set_enabled
UPDATE goatbeat_schedule SET
    enabled = :enabled, next_run_at = :next_run_at, last_status = :last_status,
    version = version + 1, updated_at = :now
WHERE id = :id AND version = :version;

-- name: abandon_claimed
-- Occurrences of a schedule being deleted that were never submitted: nothing can submit them
-- any more, so they end as submit_failed instead of staying claimed (or buffered) forever.
UPDATE goatbeat_execution SET status = 'submit_failed', error = :error
WHERE schedule_id = :id AND status IN ('claimed', 'buffered');

-- name: schedule_delete
DELETE FROM goatbeat_schedule WHERE id = :id;

-- name: orphans
-- Enabled rows of a source that a publication of these names (a JSON array) does not declare.
SELECT name FROM goatbeat_schedule
WHERE source = :source AND enabled AND name NOT IN (SELECT value FROM json_each(:names))
ORDER BY name;

-- name: prune
UPDATE goatbeat_schedule SET
    enabled = 0, next_run_at = NULL, version = version + 1, updated_at = :now
WHERE source = :source AND enabled AND name NOT IN (SELECT value FROM json_each(:keep))
RETURNING name;

-- name: source_has_rows
SELECT 1 FROM goatbeat_schedule WHERE source = :source LIMIT 1;

-- name: next_due_at
SELECT min(next_run_at) AS next_due_at
FROM goatbeat_schedule
WHERE enabled AND NOT paused AND next_run_at IS NOT NULL;

-- name: buffered_runs
-- Buffered occurrences with the run each waits for (overlap buffer_one): the claim starts
-- those whose run has ended or expired; next_due_at wakes the leader for the expiry.
SELECT b.id AS buffered_id, b.scheduled_at AS buffered_at, s.max_runtime,
       a.status AS run_status, a.submitted_at AS run_submitted_at,
       a.claimed_at AS run_claimed_at
FROM goatbeat_execution b
JOIN goatbeat_schedule s ON s.id = b.schedule_id
LEFT JOIN goatbeat_execution a ON a.id = s.active_execution_id
WHERE b.status = 'buffered'
ORDER BY b.id;

-- name: promote_buffered
-- :ids is a JSON array of execution ids.
UPDATE goatbeat_execution SET
    status = 'claimed', fencing_token = :token, scheduler_id = :scheduler_id, claimed_at = :now
WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'buffered'
RETURNING id, schedule_id;

-- name: started_run
-- The run a schedule's overlap policy waits for from now on, counted as a run.
UPDATE goatbeat_schedule SET
    active_execution_id = :execution_id, total_run_count = total_run_count + :runs,
    last_status = coalesce(:status, last_status)
WHERE id = :id;

-- name: started_runs
-- started_run for a claim's batch: :runs is a JSON array of {id, execution_id}, one a
-- schedule; not counted as runs (claim_advance counted them).
UPDATE goatbeat_schedule AS s SET active_execution_id = r.execution_id
FROM (SELECT json_extract(value, '$.id') AS id,
             json_extract(value, '$.execution_id') AS execution_id
      FROM json_each(:runs)) AS r
WHERE s.id = r.id;

-- name: promoted_pending
SELECT e.id AS execution_id, e.schedule_id, e.schedule_name, e.scheduled_at, e.idempotency_key,
       e.kind, e.fencing_token, e.attempts, e.claimed_at, s.task, s.args, s.kwargs, s.queue,
       s.exchange, s.routing_key, s.priority, s.expires, s.headers, s.misfire_grace, s.jitter
FROM goatbeat_execution e
JOIN goatbeat_schedule s ON s.id = e.schedule_id
JOIN json_each(:ids) j ON j.value = e.id
ORDER BY j.key;

-- name: has_buffered
SELECT 1 FROM goatbeat_execution WHERE schedule_id = :id AND status = 'buffered' LIMIT 1;

-- name: lease_acquire
INSERT INTO goatbeat_lease (name, holder, token, expires_at, acquired_at)
VALUES (:name, :holder, 1, :expires_at, :now)
ON CONFLICT (name) DO UPDATE SET
    holder = excluded.holder,
    token = CASE WHEN goatbeat_lease.holder = excluded.holder THEN goatbeat_lease.token
                 ELSE goatbeat_lease.token + 1 END,
    expires_at = excluded.expires_at,
    acquired_at = CASE WHEN goatbeat_lease.holder = excluded.holder
                       THEN goatbeat_lease.acquired_at ELSE excluded.acquired_at END
WHERE goatbeat_lease.holder = excluded.holder OR goatbeat_lease.expires_at <= :now
RETURNING name, holder, token, expires_at;

-- name: lease_release
UPDATE goatbeat_lease SET expires_at = :now
WHERE name = :name AND holder = :holder AND token = :token AND expires_at > :now;

-- name: lease_read
-- The leases named in the JSON array :names, in its order.
SELECT l.name, l.holder, l.token, l.expires_at
FROM json_each(:names) AS j JOIN goatbeat_lease AS l ON l.name = j.value
ORDER BY j.key;

-- name: lease_check
SELECT 1 FROM goatbeat_lease
WHERE name = :name AND holder = :holder AND token = :token AND expires_at > :now;

-- name: claim_select_due
-- The predicate repeats the partial index's word for word so SQLite walks that index. A
-- schedule with an overlap policy comes with the run it waits for, and whether one of its
-- occurrences is buffered (the store judges whether that run still runs).
SELECT s.id, s.name, s.source, s.task, s.trigger, s.timezone, s.args, s.kwargs, s.queue,
       s.exchange, s.routing_key, s.priority, s.expires, s.headers, s.misfire_policy,
       s.misfire_grace, s.catch_up_limit, s.one_off, s.enabled, s.start_at, s.end_at,
       s.next_run_at, s.last_run_at, s.last_status, s.total_run_count, s.missed_count,
       s.version, s.description, s.created_at, s.updated_at, s.jitter, s.overlap,
       s.max_runtime, s.pause_on_failure, s.paused, s.paused_at, s.paused_by, s.pause_note,
       s.skipped_count,
       a.status AS run_status, a.submitted_at AS run_submitted_at,
       a.claimed_at AS run_claimed_at,
       CASE WHEN s.overlap = 'buffer_one' THEN EXISTS (
           SELECT 1 FROM goatbeat_execution b WHERE b.schedule_id = s.id AND b.status = 'buffered'
       ) END AS has_buffered
FROM goatbeat_schedule s
LEFT JOIN goatbeat_execution a ON s.overlap <> 'allow' AND a.id = s.active_execution_id
WHERE s.enabled AND NOT s.paused AND s.next_run_at IS NOT NULL AND s.next_run_at <= :now
ORDER BY s.next_run_at
LIMIT :limit;

-- name: claim_advance
-- The batch's compare-and-set: :advances is a JSON array of objects, one a schedule (the
-- fields of goatbeat.stores.dialect.Advanced); the ids advanced come back.
UPDATE goatbeat_schedule AS s SET
    next_run_at = CASE WHEN a.disable THEN NULL ELSE a.next_run_at END,
    last_run_at = coalesce(a.last_run_at, s.last_run_at),
    last_status = coalesce(a.last_status, s.last_status),
    total_run_count = s.total_run_count + a.runs,
    missed_count = s.missed_count + a.missed,
    skipped_count = s.skipped_count + a.skipped,
    enabled = s.enabled AND NOT a.disable,
    version = s.version + 1
FROM (SELECT json_extract(value, '$.id') AS id,
             json_extract(value, '$.version') AS version,
             json_extract(value, '$.next_run_at') AS next_run_at,
             json_extract(value, '$.last_run_at') AS last_run_at,
             json_extract(value, '$.last_status') AS last_status,
             json_extract(value, '$.runs') AS runs,
             json_extract(value, '$.missed') AS missed,
             json_extract(value, '$.skipped') AS skipped,
             json_extract(value, '$.disable') AS disable
      FROM json_each(:advances)) AS a
WHERE s.id = a.id AND s.version = a.version
RETURNING id;

-- name: claim_insert_executions
-- :runs is a JSON array of objects (the fields of goatbeat.stores.dialect.NewExecution),
-- inserted in its order; the ones written come back.
INSERT INTO goatbeat_execution (
    schedule_id, schedule_name, scheduled_at, idempotency_key, kind, status, fencing_token,
    scheduler_id, claimed_at, retry_at)
SELECT json_extract(value, '$.schedule_id'), json_extract(value, '$.schedule_name'),
       json_extract(value, '$.scheduled_at'), json_extract(value, '$.key'), 'scheduled',
       json_extract(value, '$.status'), :token, :scheduler_id, :now,
       json_extract(value, '$.retry_at')
FROM json_each(:runs)
WHERE true  -- an INSERT ... SELECT before ON CONFLICT needs a WHERE (SQLite's parser)
ORDER BY key
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id, idempotency_key;

-- name: pending
-- Rows backing off from a failed submission (retry_at in the future) wait for their turn.
SELECT e.id AS execution_id, e.schedule_id, e.schedule_name, e.scheduled_at, e.idempotency_key,
       e.kind, e.fencing_token, e.attempts, e.claimed_at, s.task, s.args, s.kwargs, s.queue,
       s.exchange, s.routing_key, s.priority, s.expires, s.headers, s.misfire_grace, s.jitter
FROM goatbeat_execution e
JOIN goatbeat_schedule s ON s.id = e.schedule_id
WHERE e.status = 'claimed' AND e.id NOT IN (SELECT value FROM json_each(:exclude))
  AND (e.retry_at IS NULL OR e.retry_at <= :now)
ORDER BY e.claimed_at, e.id
LIMIT :limit;

-- name: next_retry_at
SELECT min(retry_at) AS at FROM goatbeat_execution WHERE status = 'claimed';

-- name: record_outcome
-- Only a row still 'claimed' changes, except that a submission a worker already reported on
-- (it outran this bookkeeping) is recorded and keeps the worker's status. Matched by id and
-- key when the outcome has one (see the PostgreSQL record_outcomes).
UPDATE goatbeat_execution SET
    status = CASE WHEN status <> 'claimed' THEN status
                  WHEN :ok THEN 'submitted' WHEN :final THEN 'submit_failed' ELSE 'claimed' END,
    submitted_at = CASE WHEN :ok THEN :now ELSE submitted_at END,
    backend_task_id = CASE WHEN :ok THEN :backend_task_id ELSE backend_task_id END,
    error = CASE WHEN status <> 'claimed' THEN error WHEN :ok THEN NULL ELSE :error END,
    attempts = attempts + 1,
    retry_at = CASE WHEN :ok OR :final THEN NULL ELSE :retry_at END
WHERE id = :id AND (:key IS NULL OR idempotency_key = :key)
  AND (status = 'claimed' OR (:ok AND status IN (
    'running', 'retried', 'succeeded', 'failed', 'lost', 'expired')))
RETURNING schedule_id, scheduled_at, status;

-- name: claim_manual_run
-- A run-now (or backfill) execution is claimed by the leader that submits it (its id and
-- fencing token), once: a resubmission carries the same token, as for a claimed occurrence.
-- claimed_at becomes the moment of that claim (the request's instant stays in scheduled_at
-- and the key).
-- :ids is a JSON array of execution ids; those claimed come back.
UPDATE goatbeat_execution SET scheduler_id = :scheduler_id, fencing_token = :token,
    claimed_at = :now
WHERE id IN (SELECT value FROM json_each(:ids)) AND kind IN ('manual', 'backfill')
  AND status = 'claimed' AND fencing_token IS NULL
RETURNING id, schedule_id, scheduled_at;

-- name: manual_run
-- ... and counts as a run of its schedule (last_run_at only moves forward).
UPDATE goatbeat_schedule SET
    last_run_at = CASE WHEN last_run_at IS NULL OR last_run_at < :at THEN :at
                       ELSE last_run_at END,
    total_run_count = total_run_count + 1,
    last_status = 'claimed'
WHERE id = :schedule_id;

-- name: schedule_last_status
UPDATE goatbeat_schedule SET last_status = :status, missed_count = missed_count + :missed
WHERE id = :id;

-- name: refuse_target
SELECT id, source <> 'code' AND (next_run_at IS NOT NULL OR last_status IS NOT 'refused') AS park
FROM goatbeat_schedule WHERE id = :id AND task = :task;

-- name: refuse
-- A row not declared in code leaves scheduling (once); a code row keeps its next run.
UPDATE goatbeat_schedule SET
    last_status = 'refused',
    next_run_at = CASE WHEN :park THEN NULL ELSE next_run_at END,
    version = CASE WHEN :park THEN version + 1 ELSE version END,
    updated_at = CASE WHEN :park THEN :now ELSE updated_at END
WHERE id = :id;

-- name: refuse_executions
UPDATE goatbeat_execution SET status = 'submit_failed', error = :reason, retry_at = NULL
WHERE schedule_id = :id AND status = 'claimed';

-- name: request_run
INSERT INTO goatbeat_execution (
    schedule_id, schedule_name, scheduled_at, idempotency_key, kind, status, claimed_at)
VALUES (:schedule_id, :name, :at, :key, 'manual', 'claimed', :now)
ON CONFLICT (idempotency_key) DO NOTHING;

-- name: execution_by_key
SELECT id, schedule_id, schedule_name, scheduled_at, idempotency_key, kind, status,
       fencing_token, scheduler_id, claimed_at, submitted_at, finished_at, attempts,
       backend_task_id, error, started_at, runtime, worker, retries
FROM goatbeat_execution
WHERE idempotency_key = :key;

-- name: executions
SELECT id, schedule_id, schedule_name, scheduled_at, idempotency_key, kind, status,
       fencing_token, scheduler_id, claimed_at, submitted_at, finished_at, attempts,
       backend_task_id, error, started_at, runtime, worker, retries
FROM goatbeat_execution
ORDER BY scheduled_at DESC, id DESC
LIMIT :limit;

-- name: executions_by_name
SELECT id, schedule_id, schedule_name, scheduled_at, idempotency_key, kind, status,
       fencing_token, scheduler_id, claimed_at, submitted_at, finished_at, attempts,
       backend_task_id, error, started_at, runtime, worker, retries
FROM goatbeat_execution
WHERE schedule_name = :name
ORDER BY scheduled_at DESC, id DESC
LIMIT :limit;

-- name: executions_by_status
SELECT id, schedule_id, schedule_name, scheduled_at, idempotency_key, kind, status,
       fencing_token, scheduler_id, claimed_at, submitted_at, finished_at, attempts,
       backend_task_id, error, started_at, runtime, worker, retries
FROM goatbeat_execution
WHERE status = :status
ORDER BY scheduled_at DESC, id DESC
LIMIT :limit;

-- name: executions_by_name_status
SELECT id, schedule_id, schedule_name, scheduled_at, idempotency_key, kind, status,
       fencing_token, scheduler_id, claimed_at, submitted_at, finished_at, attempts,
       backend_task_id, error, started_at, runtime, worker, retries
FROM goatbeat_execution
WHERE schedule_name = :name AND status = :status
ORDER BY scheduled_at DESC, id DESC
LIMIT :limit;

-- name: notify
UPDATE goatbeat_notify SET counter = counter + 1, payload = :payload WHERE id = 1;

-- name: notify_counter
SELECT counter FROM goatbeat_notify WHERE id = 1;

-- name: applied_versions
SELECT version FROM goatbeat_schema_version ORDER BY version;

-- Worker-side idempotency (goatbeat.idempotency): the same statements as PostgreSQL's, with
-- the host's clock passed in (:now, :expires_at).

-- name: delivery_begin
INSERT INTO goatbeat_delivery (
    idempotency_key, state, owner, attempts, duplicates, started_at, expires_at)
VALUES (:key, 'running', :owner, 1, 0, :now, :expires_at)
ON CONFLICT (idempotency_key) DO UPDATE SET
    state = 'running', owner = excluded.owner, attempts = goatbeat_delivery.attempts + 1,
    started_at = excluded.started_at, expires_at = excluded.expires_at, finished_at = NULL
WHERE goatbeat_delivery.state = 'failed'
   OR (goatbeat_delivery.state = 'running' AND goatbeat_delivery.expires_at <= :now)
RETURNING attempts;

-- name: delivery_duplicate
UPDATE goatbeat_delivery SET duplicates = duplicates + 1
WHERE idempotency_key = :key
RETURNING state;

-- name: delivery_succeeded
INSERT INTO goatbeat_delivery (
    idempotency_key, state, owner, attempts, duplicates, started_at, expires_at, finished_at)
VALUES (:key, 'succeeded', :owner, 1, 0, :now, NULL, :now)
ON CONFLICT (idempotency_key) DO UPDATE SET
    state = 'succeeded',
    owner = CASE WHEN goatbeat_delivery.state = 'succeeded' THEN goatbeat_delivery.owner
                 ELSE excluded.owner END,
    attempts = goatbeat_delivery.attempts + CASE WHEN :counted THEN 0 ELSE 1 END,
    expires_at = NULL,
    finished_at = CASE WHEN goatbeat_delivery.state = 'succeeded'
                       THEN goatbeat_delivery.finished_at ELSE :now END
RETURNING state;

-- name: delivery_failed
UPDATE goatbeat_delivery SET state = 'failed', finished_at = :now, expires_at = NULL
WHERE idempotency_key = :key AND owner = :owner AND state = 'running';

-- name: delivery_read
SELECT idempotency_key, state, owner, attempts, duplicates, started_at, expires_at, finished_at
FROM goatbeat_delivery
WHERE idempotency_key = :key;

-- name: delivery_prune_deliveries
DELETE FROM goatbeat_delivery WHERE finished_at < :before;

-- name: delivery_prune_task_keys
DELETE FROM goatbeat_task_key WHERE created_at < :before;

-- name: task_key_note
INSERT INTO goatbeat_task_key (backend_task_id, idempotency_key, created_at)
VALUES (:task_id, :key, :now)
ON CONFLICT (backend_task_id) DO NOTHING;

-- name: task_key_find
SELECT idempotency_key FROM goatbeat_task_key WHERE backend_task_id = :task_id;

-- name: claim_quarantine
-- Due rows the claim cannot decode: out of scheduling until repaired (compare-and-set on each
-- object's id and version in the JSON array :rows); the ids written come back.
UPDATE goatbeat_schedule AS s SET next_run_at = NULL, last_status = :status,
    version = s.version + 1
FROM (SELECT json_extract(value, '$.id') AS id, json_extract(value, '$.version') AS version
      FROM json_each(:rows)) AS d
WHERE s.id = d.id AND s.version = d.version
RETURNING id;

-- name: abandon_damaged
-- A claimed execution whose schedule cannot be decoded: nothing can submit it.
UPDATE goatbeat_execution SET status = 'submit_failed', error = :error
WHERE id = :id AND status = 'claimed';

-- name: pause
UPDATE goatbeat_schedule SET
    paused = 1, paused_at = :paused_at, paused_by = :paused_by, pause_note = :pause_note,
    skipped_count = skipped_count + :withdrawn, version = version + 1, updated_at = :now
WHERE id = :id;

-- name: pause_withdraw
-- What a pause withdraws: buffered occurrences, and claimed ones never tried that wait for
-- their jittered instant.
UPDATE goatbeat_execution SET status = 'skipped', error = :error, retry_at = NULL
WHERE schedule_id = :id
  AND (status = 'buffered'
       OR (status = 'claimed' AND kind = 'scheduled' AND attempts = 0
           AND retry_at IS NOT NULL AND retry_at > :now));

-- name: resume
UPDATE goatbeat_schedule SET
    paused = 0, paused_at = NULL, paused_by = NULL, pause_note = '',
    next_run_at = :next_run_at, skipped_count = :skipped_count,
    version = version + 1, updated_at = :now
WHERE id = :id AND version = :version;

-- name: backfill_insert
-- :runs is a JSON array of {at, key}, inserted in its order; the keys written come back.
INSERT INTO goatbeat_execution (
    schedule_id, schedule_name, scheduled_at, idempotency_key, kind, status, claimed_at)
SELECT :schedule_id, :name, json_extract(value, '$.at'), json_extract(value, '$.key'),
       'backfill', 'claimed', :now
FROM json_each(:runs)
WHERE true  -- as in claim_insert_executions
ORDER BY key
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING idempotency_key;

-- name: statuses_by_keys
SELECT idempotency_key, status FROM goatbeat_execution
WHERE idempotency_key IN (SELECT value FROM json_each(:keys));
-- Operations (schema version 5): the statements of PostgreSQL's, with the store's clock
-- passed in (:now) and the multi-step writes done in one transaction by the store.

-- name: execution_for_report
SELECT id, schedule_id, scheduled_at, status, started_at
FROM goatbeat_execution
WHERE idempotency_key = :key;

-- name: record_started
UPDATE goatbeat_execution SET
    status = 'running', started_at = :now, worker = COALESCE(:worker, worker)
WHERE id = :id;

-- name: record_completion
UPDATE goatbeat_execution SET
    status = :outcome, finished_at = :now, error = :error, runtime = :runtime,
    worker = COALESCE(:worker, worker),
    retries = retries + CASE WHEN :outcome = 'retried' THEN 1 ELSE 0 END
WHERE id = :id;

-- name: schedule_report
-- A report on a schedule's run: its status when the run is the latest, and its record of
-- success (:counts_failure: a failure not counted before).
UPDATE goatbeat_schedule SET
    last_status = CASE WHEN :scheduled_at >= COALESCE(last_run_at, :scheduled_at)
                       THEN :status ELSE last_status END,
    last_success_at = CASE WHEN :status = 'succeeded' THEN :now ELSE last_success_at END,
    last_failure_at = CASE WHEN :status IN ('failed', 'lost') THEN :now
                           ELSE last_failure_at END,
    consecutive_failures = CASE
        WHEN :status = 'succeeded' THEN 0
        WHEN :counts_failure THEN consecutive_failures + 1
        ELSE consecutive_failures END
WHERE id = :id;

-- name: failure_pause
-- After a failure was counted: the schedule it pauses (pause_on_failure failures in a row),
-- unless it is paused already.
SELECT name, consecutive_failures FROM goatbeat_schedule
WHERE id = :id AND NOT paused AND pause_on_failure IS NOT NULL
  AND consecutive_failures >= pause_on_failure;

-- name: heartbeat
INSERT INTO goatbeat_scheduler (
    scheduler_id, role, lease, fencing_token, hostname, pid, version, started_at,
    heartbeat_at, expires_at)
VALUES (:scheduler_id, :role, :lease, :fencing_token, :hostname, :pid, :version, :now, :now,
        :expires_at)
ON CONFLICT (scheduler_id) DO UPDATE SET
    role = excluded.role, lease = excluded.lease, fencing_token = excluded.fencing_token,
    hostname = excluded.hostname, pid = excluded.pid, version = excluded.version,
    heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at;

-- name: scheduler_cleanup
DELETE FROM goatbeat_scheduler WHERE expires_at < :before;

-- name: scheduler_remove
DELETE FROM goatbeat_scheduler WHERE scheduler_id = :scheduler_id;

-- name: schedulers
SELECT scheduler_id, role, lease, fencing_token, hostname, pid, version, started_at,
       heartbeat_at, expires_at, expires_at <= :now AS stale
FROM goatbeat_scheduler
ORDER BY role, scheduler_id;

-- name: live_schedulers
SELECT scheduler_id FROM goatbeat_scheduler
WHERE heartbeat_at > :since AND expires_at > :now AND lease LIKE :pattern
ORDER BY scheduler_id;

-- name: record_miss
INSERT INTO goatbeat_miss (
    schedule_id, schedule_name, missed, first_at, last_at, scheduler_id, recorded_at)
VALUES ((SELECT id FROM goatbeat_schedule WHERE id = :schedule_id), :schedule_name, :missed,
        :first_at, :last_at, :scheduler_id, :now);

-- name: miss_prune
DELETE FROM goatbeat_miss WHERE recorded_at < :before;

-- name: status_counts
SELECT
    (SELECT count(*) FROM goatbeat_schedule
     WHERE enabled AND NOT paused AND next_run_at IS NOT NULL AND next_run_at <= :now) AS due,
    (SELECT count(*) FROM goatbeat_execution
     WHERE status = 'claimed' AND scheduled_at <= :now) AS pending,
    (SELECT COALESCE(sum(missed), 0) FROM goatbeat_miss WHERE recorded_at > :since) AS missed,
    (SELECT count(*) FROM goatbeat_execution
     WHERE status IN ('failed', 'submit_failed', 'lost', 'expired')
       AND scheduled_at > :since AND scheduled_at <= :now) AS failed;

-- name: status_oldest
SELECT at, name FROM (
    SELECT * FROM (
        SELECT next_run_at AS at, name FROM goatbeat_schedule
        WHERE enabled AND NOT paused AND next_run_at IS NOT NULL AND next_run_at <= :now
        ORDER BY next_run_at LIMIT 1)
    UNION ALL
    SELECT * FROM (
        SELECT scheduled_at AS at, schedule_name AS name FROM goatbeat_execution
        WHERE status = 'claimed' AND scheduled_at <= :now
        ORDER BY scheduled_at LIMIT 1)
)
ORDER BY at
LIMIT 1;

-- name: schedule_health
SELECT name, enabled, last_status, last_run_at, next_run_at, last_success_at, last_failure_at,
       consecutive_failures, missed_count,
       (enabled AND NOT paused AND (
           (next_run_at IS NOT NULL AND next_run_at <= :late)
           OR ((last_success_at IS NOT NULL OR last_failure_at IS NOT NULL)
               AND last_run_at IS NOT NULL AND last_run_at <= :late
               AND (last_success_at IS NULL OR last_success_at < last_run_at)))) AS overdue
FROM goatbeat_schedule
WHERE last_success_at IS NOT NULL OR last_failure_at IS NOT NULL OR missed_count > 0
   OR (enabled AND NOT paused AND next_run_at IS NOT NULL AND next_run_at <= :late)
ORDER BY overdue DESC, consecutive_failures DESC, name
LIMIT coalesce(:limit, -1);  -- NULL: no limit

-- name: publication_current
-- The latest code publication (schema version 8): its generation, set fingerprint, release.
SELECT generation, fingerprint, release, schedules, published_at
FROM goatbeat_publication ORDER BY generation DESC LIMIT 1;

-- name: publication_generation_of
-- The latest generation that published this set fingerprint (NULL when never published).
SELECT max(generation) AS generation FROM goatbeat_publication WHERE fingerprint = :fingerprint;

-- name: publication_record
INSERT INTO goatbeat_publication (generation, fingerprint, release, schedules, published_at)
SELECT coalesce(max(generation), 0) + 1, :fingerprint, :release, :schedules, :now
FROM goatbeat_publication
RETURNING generation;

-- name: schedule_rename
-- A renamed declaration takes the row of its old name over: same id, phase and last run.
UPDATE goatbeat_schedule SET name = :new_name, version = version + 1, updated_at = :now
WHERE id = :id AND version = :version;

-- name: schedule_rename_history
-- The runs and misses of a renamed schedule carry its new name (their keys stay as issued).
UPDATE goatbeat_execution SET schedule_name = :new_name WHERE schedule_id = :id;

-- name: schedule_rename_misses
UPDATE goatbeat_miss SET schedule_name = :new_name WHERE schedule_id = :id;

-- name: open_runs_started
-- Runs a worker started and did not end (running, retried); see ../postgres/queries.sql.
SELECT e.id, e.idempotency_key, e.schedule_name, e.status, e.claimed_at, e.submitted_at,
       e.started_at, e.finished_at, s.max_runtime, s.expires
FROM goatbeat_execution AS e JOIN goatbeat_schedule AS s ON s.id = e.schedule_id
WHERE e.status IN ('running', 'retried')
ORDER BY e.id
LIMIT :limit;

-- name: open_runs_submitted
SELECT e.id, e.idempotency_key, e.schedule_name, e.status, e.claimed_at, e.submitted_at,
       e.started_at, e.finished_at, s.max_runtime, s.expires
FROM goatbeat_execution AS e JOIN goatbeat_schedule AS s ON s.id = e.schedule_id
WHERE e.status = 'submitted' AND e.scheduled_at > :since
  AND (s.last_success_at IS NOT NULL OR s.last_failure_at IS NOT NULL)
ORDER BY e.id
LIMIT :limit;

-- name: longest_bound
SELECT max(max(COALESCE(max_runtime, 0), COALESCE(expires, 0))) AS seconds
FROM goatbeat_schedule;

-- name: refused_schedules
-- Schedules not declared in code that a scheduler refused and took out of scheduling: a
-- scheduler that knows their task now schedules them again.
SELECT name, task FROM goatbeat_schedule
WHERE enabled AND NOT paused AND source <> 'code' AND next_run_at IS NULL
  AND last_status = 'refused'
ORDER BY name;

-- name: retry_now
-- The backend is back (a submission succeeded after failures): the rows backing off from
-- failed submissions are due now rather than at the end of their backoff. The pending index.
UPDATE goatbeat_execution SET retry_at = :now
WHERE status = 'claimed' AND retry_at > :now;

-- name: refusals
-- The schedules a scheduler refused and that stay refused: goatbeat.core.health.is_refused, in
-- SQL. One pass over the schedule table; each refused row then walks its executions by the
-- schedule index: the reason of its latest refusal, and when the refusals began (the first
-- refused run after its latest run of any other outcome).
SELECT s.name, s.task, s.source, count(*) OVER () AS total,
       (SELECT e.error FROM goatbeat_execution AS e
        WHERE e.schedule_id = s.id AND e.status = 'submit_failed' AND e.error LIKE 'refused:%'
        ORDER BY e.scheduled_at DESC, e.id DESC LIMIT 1) AS reason,
       COALESCE(
           (SELECT min(e.claimed_at) FROM goatbeat_execution AS e
            WHERE e.schedule_id = s.id AND e.status = 'submit_failed'
              AND e.error LIKE 'refused:%'
              AND e.scheduled_at > COALESCE(
                  (SELECT x.scheduled_at FROM goatbeat_execution AS x
                   WHERE x.schedule_id = s.id AND x.status <> 'claimed'
                     AND NOT (x.status = 'submit_failed' AND COALESCE(x.error, '') LIKE 'refused:%')
                   ORDER BY x.scheduled_at DESC LIMIT 1),
                  '')),
           s.updated_at) AS refused_at
FROM goatbeat_schedule AS s
WHERE s.enabled AND NOT s.paused AND s.last_status = 'refused'
  AND (s.source = 'code' OR s.next_run_at IS NULL)
ORDER BY s.name
LIMIT coalesce(:limit, -1);  -- NULL: no limit

-- name: refusal_named
-- One schedule's refusal, as refusals: the name index.
SELECT s.name, s.task, s.source, count(*) OVER () AS total,
       (SELECT e.error FROM goatbeat_execution AS e
        WHERE e.schedule_id = s.id AND e.status = 'submit_failed' AND e.error LIKE 'refused:%'
        ORDER BY e.scheduled_at DESC, e.id DESC LIMIT 1) AS reason,
       COALESCE(
           (SELECT min(e.claimed_at) FROM goatbeat_execution AS e
            WHERE e.schedule_id = s.id AND e.status = 'submit_failed'
              AND e.error LIKE 'refused:%'
              AND e.scheduled_at > COALESCE(
                  (SELECT x.scheduled_at FROM goatbeat_execution AS x
                   WHERE x.schedule_id = s.id AND x.status <> 'claimed'
                     AND NOT (x.status = 'submit_failed' AND COALESCE(x.error, '') LIKE 'refused:%')
                   ORDER BY x.scheduled_at DESC LIMIT 1),
                  '')),
           s.updated_at) AS refused_at
FROM goatbeat_schedule AS s
WHERE s.enabled AND NOT s.paused AND s.last_status = 'refused'
  AND (s.source = 'code' OR s.next_run_at IS NULL)
  AND s.name = :name
ORDER BY s.name
LIMIT coalesce(:limit, -1);  -- NULL: no limit
