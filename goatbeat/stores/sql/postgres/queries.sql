-- goatbeat queries for PostgreSQL (psycopg 3, named %(param)s placeholders).
-- Loaded by name: each query starts at a "-- name: <name>" line. Keep them free of literal
-- percent signs (psycopg would read them as placeholders).

-- name: now
SELECT now() AS now;

-- name: database_identity
-- Which database this is (the cluster's system identifier: a pg_basebackup standby shares
-- its primary's, a restored dump does not) and on which timeline it writes (a promotion
-- starts a new one): the scheduler compares them between renewals (docs/failover.md).
-- The timeline is the first 8 hex digits of the current WAL file's name.
SELECT s.system_identifier::text AS system_identifier,
       ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int AS timeline
FROM pg_control_system() AS s;

-- name: publish_lock
-- Serialises concurrent publishers (several replicas deploying at once) without touching the
-- claim path: claims never take this lock.
SELECT pg_advisory_xact_lock(7450411716450971649);

-- name: schedules_by_names
SELECT id, name, source, task, trigger, timezone, args, kwargs, queue, exchange, routing_key,
       priority, expires, headers, misfire_policy, misfire_grace, catch_up_limit, one_off,
       enabled, start_at, end_at, next_run_at, last_run_at, last_status, total_run_count,
       missed_count, version, description, created_at, updated_at,
       jitter, overlap, max_runtime, pause_on_failure, paused, paused_at, paused_by,
       pause_note, skipped_count, published_fingerprint
FROM goatbeat_schedule
WHERE name = ANY(%(names)s::text[]);

-- name: source_has_rows
-- Whether a publication has anything to compare with (walks the (source, name) index).
SELECT 1 AS found FROM goatbeat_schedule WHERE source = %(source)s LIMIT 1;

-- name: publish_unchanged
-- The declared names stored with exactly the declared definition, compared in the database so
-- that an unchanged declaration costs neither a full row on the wire nor a write: same source,
-- a fingerprint recorded, not quarantined, every definition column equal. The declarations come
-- as one JSON array of [name, args, kwargs, headers, k]; k indexes %(shared)s, a JSON array of
-- the other definition columns (in this order: goatbeat.stores.definitions.SHARED_COLUMNS), one
-- entry per distinct combination, since a schedules.py repeats a few tasks, triggers and
-- policies many times. The stored row's columns, as one JSON array, must equal its entry: one
-- comparison per row, with to_jsonb's meaning for each column (text as strings, numbers
-- compared as numbers, instants as ISO text). A value this comparison cannot confirm (an instant
-- rendered in another time zone, 1 declared where true is stored) only sends the row to the
-- exact comparison in Python, never the other way round.
-- Each name is looked up by the unique index (OFFSET 0 keeps the planner from hashing the whole
-- table instead, which stale statistics after a bulk insert would make it do per statement).
SELECT s.name
FROM jsonb_array_elements(%(declared)s::jsonb) AS e,
     LATERAL (SELECT * FROM goatbeat_schedule WHERE name = e ->> 0 OFFSET 0) AS s
WHERE s.source = %(source)s
  AND s.published_fingerprint IS NOT NULL
  AND s.last_status IS DISTINCT FROM 'invalid'
  AND s.args = e -> 1
  AND s.kwargs = e -> 2
  AND s.headers = e -> 3
  AND jsonb_build_array(
          s.task, s.trigger, s.timezone, s.queue, s.exchange, s.routing_key, s.priority,
          s.expires, s.misfire_policy, s.misfire_grace, s.catch_up_limit, s.one_off,
          s.start_at, s.end_at, s.description, s.jitter, s.overlap, s.max_runtime,
          s.pause_on_failure
      ) = (SELECT %(shared)s::jsonb) -> (e ->> 4)::int;  -- parsed once (an InitPlan)

-- name: schedule_copy
-- New rows of a publication, in bulk (version, created_at and updated_at take their defaults:
-- 1, now(), now(), as schedule_insert writes them).
COPY goatbeat_schedule (
    name, source, task, trigger, timezone, args, kwargs, queue, exchange, routing_key,
    priority, expires, headers, misfire_policy, misfire_grace, catch_up_limit, one_off,
    enabled, start_at, end_at, next_run_at, last_run_at, total_run_count, description,
    published_fingerprint, jitter, overlap, max_runtime, pause_on_failure)
FROM STDIN;

-- name: schedule_by_name
SELECT id, name, source, task, trigger, timezone, args, kwargs, queue, exchange, routing_key,
       priority, expires, headers, misfire_policy, misfire_grace, catch_up_limit, one_off,
       enabled, start_at, end_at, next_run_at, last_run_at, last_status, total_run_count,
       missed_count, version, description, created_at, updated_at,
       jitter, overlap, max_runtime, pause_on_failure, paused, paused_at, paused_by,
       pause_note, skipped_count, published_fingerprint
FROM goatbeat_schedule
WHERE name = %(name)s;

-- name: list_schedules
SELECT id, name, source, task, trigger, timezone, args, kwargs, queue, exchange, routing_key,
       priority, expires, headers, misfire_policy, misfire_grace, catch_up_limit, one_off,
       enabled, start_at, end_at, next_run_at, last_run_at, last_status, total_run_count,
       missed_count, version, description, created_at, updated_at,
       jitter, overlap, max_runtime, pause_on_failure, paused, paused_at, paused_by,
       pause_note, skipped_count
FROM goatbeat_schedule
WHERE %(source)s::text IS NULL OR source = %(source)s::text
ORDER BY name;

-- name: schedule_insert
INSERT INTO goatbeat_schedule (
    name, source, task, trigger, timezone, args, kwargs, queue, exchange, routing_key,
    priority, expires, headers, misfire_policy, misfire_grace, catch_up_limit, one_off,
    enabled, start_at, end_at, next_run_at, last_run_at, total_run_count, description,
    published_fingerprint, jitter, overlap, max_runtime, pause_on_failure, version, created_at,
    updated_at)
VALUES (
    %(name)s, %(source)s, %(task)s, %(trigger)s, %(timezone)s, %(args)s, %(kwargs)s, %(queue)s,
    %(exchange)s, %(routing_key)s, %(priority)s, %(expires)s, %(headers)s, %(misfire_policy)s,
    %(misfire_grace)s, %(catch_up_limit)s, %(one_off)s, %(enabled)s, %(start_at)s, %(end_at)s,
    %(next_run_at)s, %(last_run_at)s, %(total_run_count)s, %(description)s,
    %(published_fingerprint)s, %(jitter)s, %(overlap)s, %(max_runtime)s, %(pause_on_failure)s,
    1, now(), now())
RETURNING id, name, source, task, trigger, timezone, args, kwargs, queue, exchange, routing_key,
          priority, expires, headers, misfire_policy, misfire_grace, catch_up_limit, one_off,
          enabled, start_at, end_at, next_run_at, last_run_at, last_status, total_run_count,
          missed_count, version, description, created_at, updated_at,
       jitter, overlap, max_runtime, pause_on_failure, paused, paused_at, paused_by,
       pause_note, skipped_count;

-- name: schedule_replace
-- Compare-and-set on version: a claim or an edit that landed since the row was read wins.
UPDATE goatbeat_schedule SET
    task = %(task)s, trigger = %(trigger)s, timezone = %(timezone)s, args = %(args)s,
    kwargs = %(kwargs)s, queue = %(queue)s, exchange = %(exchange)s,
    routing_key = %(routing_key)s, priority = %(priority)s, expires = %(expires)s,
    headers = %(headers)s, misfire_policy = %(misfire_policy)s,
    misfire_grace = %(misfire_grace)s, catch_up_limit = %(catch_up_limit)s,
    one_off = %(one_off)s, enabled = %(enabled)s, start_at = %(start_at)s, end_at = %(end_at)s,
    description = %(description)s, jitter = %(jitter)s, overlap = %(overlap)s,
    max_runtime = %(max_runtime)s, pause_on_failure = %(pause_on_failure)s,
    next_run_at = %(next_run_at)s,
    last_status = %(last_status)s,
    -- NULL keeps the column: only a publish moves the last run forward or records what it wrote.
    last_run_at = COALESCE(%(last_run_at)s::timestamptz, last_run_at),
    published_fingerprint = COALESCE(%(published_fingerprint)s::text, published_fingerprint),
    version = version + 1, updated_at = now()
WHERE id = %(id)s AND version = %(version)s
RETURNING id, name, source, task, trigger, timezone, args, kwargs, queue, exchange, routing_key,
          priority, expires, headers, misfire_policy, misfire_grace, catch_up_limit, one_off,
          enabled, start_at, end_at, next_run_at, last_run_at, last_status, total_run_count,
          missed_count, version, description, created_at, updated_at,
       jitter, overlap, max_runtime, pause_on_failure, paused, paused_at, paused_by,
       pause_note, skipped_count;

-- name: schedule_set_fingerprint
-- A row published before schema version 3 whose definition is what is published again: record
-- it, without a version bump (nothing a scheduler reads changes).
UPDATE goatbeat_schedule SET published_fingerprint = %(published_fingerprint)s
WHERE id = %(id)s AND published_fingerprint IS NULL;

-- name: schedule_set_enabled
UPDATE goatbeat_schedule SET
    enabled = %(enabled)s, next_run_at = %(next_run_at)s, last_status = %(last_status)s,
    version = version + 1, updated_at = now()
WHERE id = %(id)s AND version = %(version)s
RETURNING id, name, source, task, trigger, timezone, args, kwargs, queue, exchange, routing_key,
          priority, expires, headers, misfire_policy, misfire_grace, catch_up_limit, one_off,
          enabled, start_at, end_at, next_run_at, last_run_at, last_status, total_run_count,
          missed_count, version, description, created_at, updated_at,
       jitter, overlap, max_runtime, pause_on_failure, paused, paused_at, paused_by,
       pause_note, skipped_count;

-- name: abandon_claimed
-- Occurrences of a schedule being deleted that were never submitted: nothing can submit them
-- any more, so they end as submit_failed instead of staying claimed (or buffered) forever.
UPDATE goatbeat_execution SET status = 'submit_failed', error = %(error)s
WHERE schedule_id = %(id)s AND status IN ('claimed', 'buffered');

-- name: schedule_delete
DELETE FROM goatbeat_schedule WHERE id = %(id)s;

-- name: orphans
-- Enabled rows of a source that a publication of these names (a JSON array of strings) does not
-- declare. An anti-join on the JSON array: a text[] of 100,000 names costs psycopg's escaping
-- of each, and NOT (name = ANY(...)) a search of the array per row.
SELECT s.name FROM goatbeat_schedule AS s
WHERE s.source = %(source)s AND s.enabled
  AND NOT EXISTS (
      SELECT FROM jsonb_array_elements_text(%(names)s::jsonb) AS d(name) WHERE d.name = s.name)
ORDER BY s.name;

-- name: prune
UPDATE goatbeat_schedule SET
    enabled = false, next_run_at = NULL, version = version + 1, updated_at = now()
WHERE source = %(source)s AND enabled AND NOT (name = ANY(%(keep)s::text[]))
RETURNING name;

-- name: next_due_at
-- The earliest instant a claim has work: a next_run_at (the due index, paused rows left out),
-- or a buffered occurrence whose run ended (its own past instant) or expires (max_runtime).
-- least() ignores NULLs: a run claimed and not yet sent has no expiry to wait for.
-- With shards (goatbeat/core/shards.py) only the schedules of one shard count; the shard is
-- the first four bytes of the SHA-256 of the UTF-8 name modulo the shard count, exactly as
-- Python computes it, so it is never stored (see docs/scaling.md). Every shard filter says
-- "not in any OTHER shard" (%(others)s) rather than "= this shard": the same rows, but the
-- planner estimates an inequality as barely selective and keeps walking the due index, where
-- an equality on an expression is estimated at 0.5 % and, with most of the table due (an
-- hourly burst), makes it scan and sort the whole table instead, every batch.
SELECT least(
    (SELECT min(next_run_at) FROM goatbeat_schedule
     WHERE enabled AND NOT paused AND next_run_at IS NOT NULL
       AND (%(shards)s::int = 1 OR mod(('x' || left(encode(sha256(convert_to(name, 'UTF8')), 'hex'), 8))::bit(32)::bigint, %(shards)s::int) <> ALL(%(others)s::int[]))),
    (SELECT min(CASE
                WHEN a.status IS NULL
                     OR a.status NOT IN ('claimed', 'submitted', 'running', 'retried')
                    THEN b.scheduled_at
                WHEN a.status = 'claimed' THEN NULL
                ELSE coalesce(a.submitted_at, a.claimed_at)
                     + make_interval(secs => s.max_runtime)
            END)
     FROM goatbeat_execution b
     JOIN goatbeat_schedule s ON s.id = b.schedule_id
     LEFT JOIN goatbeat_execution a ON a.id = s.active_execution_id
     WHERE b.status = 'buffered' AND (%(shards)s::int = 1 OR mod(('x' || left(encode(sha256(convert_to(s.name, 'UTF8')), 'hex'), 8))::bit(32)::bigint, %(shards)s::int) <> ALL(%(others)s::int[])))
) AS next_due_at;

-- name: buffered_runs
-- Buffered occurrences with the run each waits for (overlap buffer_one): the claim starts
-- those whose run has ended or expired.
SELECT b.id AS buffered_id, b.scheduled_at AS buffered_at, s.max_runtime,
       a.status AS run_status, a.submitted_at AS run_submitted_at,
       a.claimed_at AS run_claimed_at
FROM goatbeat_execution b
JOIN goatbeat_schedule s ON s.id = b.schedule_id
LEFT JOIN goatbeat_execution a ON a.id = s.active_execution_id
WHERE b.status = 'buffered' AND (%(shards)s::int = 1 OR mod(('x' || left(encode(sha256(convert_to(s.name, 'UTF8')), 'hex'), 8))::bit(32)::bigint, %(shards)s::int) <> ALL(%(others)s::int[]))
ORDER BY b.id;

-- name: promote_buffered
-- The buffered occurrences that start now become this claim's (token, scheduler) and the run
-- their schedule waits for next, counted as a run; returned as pending() returns rows.
WITH promoted AS (
    UPDATE goatbeat_execution SET
        status = 'claimed', fencing_token = %(token)s, scheduler_id = %(scheduler_id)s,
        claimed_at = now()
    WHERE id = ANY(%(ids)s::bigint[]) AND status = 'buffered'
    RETURNING id, schedule_id, schedule_name, scheduled_at, idempotency_key, kind,
              fencing_token, attempts, claimed_at
), started AS (
    UPDATE goatbeat_schedule AS s SET
        active_execution_id = p.id, total_run_count = s.total_run_count + 1,
        last_status = 'claimed'
    FROM promoted AS p WHERE s.id = p.schedule_id
)
SELECT p.id AS execution_id, p.schedule_id, p.schedule_name, p.scheduled_at, p.idempotency_key,
       p.kind, p.fencing_token, p.attempts, p.claimed_at, s.task, s.args, s.kwargs, s.queue,
       s.exchange, s.routing_key, s.priority, s.expires, s.headers, s.misfire_grace, s.jitter
FROM promoted AS p
JOIN goatbeat_schedule s ON s.id = p.schedule_id
ORDER BY p.id;

-- name: started_runs
-- The runs the schedules' overlap policies wait for from now on.
UPDATE goatbeat_schedule AS s SET active_execution_id = v.execution_id
FROM unnest(%(ids)b::bigint[], %(execution_ids)b::bigint[]) AS v(id, execution_id)
WHERE s.id = v.id;

-- name: lease_acquire
-- Succeeds when the row is absent, expired by the DATABASE clock, or ours already. The token
-- grows only when the holder changes, so a renewal keeps it.
INSERT INTO goatbeat_lease AS l (name, holder, token, expires_at, acquired_at)
VALUES (%(name)s, %(holder)s, 1, now() + %(ttl)s::interval, now())
ON CONFLICT (name) DO UPDATE SET
    holder = EXCLUDED.holder,
    token = CASE WHEN l.holder = EXCLUDED.holder THEN l.token ELSE l.token + 1 END,
    expires_at = EXCLUDED.expires_at,
    acquired_at = CASE WHEN l.holder = EXCLUDED.holder THEN l.acquired_at
                       ELSE EXCLUDED.acquired_at END
WHERE l.holder = EXCLUDED.holder OR l.expires_at <= now()
RETURNING name, holder, token, expires_at;

-- name: lease_release
-- One statement, notification included (it goes out at commit, with the change): nothing here
-- holds the lease row across a round trip to the client, so a process frozen while releasing
-- cannot keep a standby waiting.
WITH released AS (
    UPDATE goatbeat_lease SET expires_at = now()
    WHERE name = %(name)s AND holder = %(holder)s AND token = %(token)s AND expires_at > now()
    RETURNING name
)
SELECT name,
       CASE WHEN %(payload)s::text IS NOT NULL THEN pg_notify('goatbeat', %(payload)s::text) END
           AS notified
FROM released;

-- name: lease_read
SELECT holder, token, expires_at, expires_at <= now() AS expired
FROM goatbeat_lease
WHERE name = %(name)s;

-- name: claim_check_lease
-- FOR SHARE: a takeover (an UPDATE of this row) waits until this claim commits or rolls back,
-- so a claim that passed the check cannot overlap the next holder's (the fencing guarantee).
-- That wait must end even when the claimer freezes with the transaction open (GC pause,
-- SIGSTOP, VM migration, lost network): the server would otherwise keep its locks, and every
-- standby waiting, for the whole freeze. So the transaction caps itself at what is left of the
-- lease, by the database clock: every later statement (statement_timeout) and every silence of
-- the client between statements (idle_in_transaction_session_timeout, which ends the session)
-- may last at most that long (never less than a second, so a claim that starts late in its
-- lease is not cancelled for want of time). A frozen claimer is disconnected and rolled back,
-- and its locks go with it; a claimer that wakes up after that finds its transaction gone.
-- set_config(..., true) is SET LOCAL: it ends with the transaction. With own = false (the claim
-- runs inside a caller's transaction, as a savepoint) nothing is set: it would outlive the claim.
-- It also says whether any occurrence is buffered (overlap buffer_one), so the claim asks
-- for them only then: nearly always a probe of an empty index, and no extra round trip.
SELECT now() AS now,
       EXISTS (SELECT 1 FROM goatbeat_execution WHERE status = 'buffered') AS buffered,
       CASE WHEN %(own)s THEN set_config('statement_timeout', c.ms, true) END AS statement_ms,
       CASE WHEN %(own)s THEN set_config('idle_in_transaction_session_timeout', c.ms, true) END
           AS idle_ms
FROM goatbeat_lease AS l,
     LATERAL (SELECT greatest(1000, ceil(extract(epoch FROM l.expires_at - now()) * 1000))
                     ::bigint::text AS ms) AS c
WHERE l.name = %(name)s AND l.holder = %(holder)s AND l.token = %(token)s
  AND l.expires_at > now()
FOR SHARE OF l;

-- name: claim_select_due
-- Walks goatbeat_schedule_due_idx (paused rows are not in it); no row lock (admin edits never
-- wait for a claim: the compare-and-set below settles races). JSON comes back as text: the
-- store decodes it only for a (id, version) it has not seen yet. A schedule with an overlap
-- policy comes with the run it waits for and whether one of its occurrences is buffered.
SELECT s.id, s.name, s.source, s.task, s.trigger::text AS trigger, s.timezone,
       s.args::text AS args, s.kwargs::text AS kwargs, s.queue, s.exchange, s.routing_key,
       s.priority, s.expires, s.headers::text AS headers, s.misfire_policy, s.misfire_grace,
       s.catch_up_limit, s.one_off, s.enabled, s.start_at, s.end_at, s.next_run_at,
       s.last_run_at, s.last_status, s.total_run_count, s.missed_count, s.version,
       s.description, s.created_at, s.updated_at, s.jitter, s.overlap, s.max_runtime,
       s.pause_on_failure, s.paused, s.paused_at, s.paused_by, s.pause_note, s.skipped_count,
       a.status AS run_status, a.submitted_at AS run_submitted_at,
       a.claimed_at AS run_claimed_at,
       CASE WHEN s.overlap = 'buffer_one' THEN EXISTS (
           SELECT 1 FROM goatbeat_execution b WHERE b.schedule_id = s.id AND b.status = 'buffered'
       ) END AS has_buffered
FROM goatbeat_schedule s
LEFT JOIN goatbeat_execution a ON s.overlap <> 'allow' AND a.id = s.active_execution_id
WHERE s.enabled AND NOT s.paused AND s.next_run_at <= %(now)s
  -- The claiming lease's shard (every schedule with one shard): the hash is computed for the
  -- due rows the index walk meets, never for the table.
  AND (%(shards)s::int = 1 OR mod(('x' || left(encode(sha256(convert_to(s.name, 'UTF8')), 'hex'), 8))::bit(32)::bigint, %(shards)s::int) <> ALL(%(others)s::int[]))
ORDER BY s.next_run_at
LIMIT %(limit)s;

-- name: claim_advance
-- One compare-and-set for the whole batch. "id = ANY" makes the rows come from the primary
-- key (cost follows the batch, not the table) in id order, the same order for every claimer,
-- so racing claimers cannot deadlock. Arrays travel in binary (%(x)b placeholders): ten times
-- cheaper than text for timestamps. An array whose every value is the usual one (one run, no
-- miss, no skip, not disabled) comes empty, and unnest pads it with NULLs, read as that value
-- (dumping an array costs the client ~0.3 us a value); so does last_status when every
-- schedule gets the same one (%(last_status_all)s).
UPDATE goatbeat_schedule AS s SET
    next_run_at = CASE WHEN coalesce(v.disable, false) THEN NULL ELSE v.next_run_at END,
    last_run_at = coalesce(v.last_run_at, s.last_run_at),
    last_status = coalesce(%(last_status_all)s::text, v.last_status, s.last_status),
    total_run_count = s.total_run_count + coalesce(v.runs, 1),
    missed_count = s.missed_count + coalesce(v.missed, 0),
    skipped_count = s.skipped_count + coalesce(v.skipped, 0),
    enabled = s.enabled AND NOT coalesce(v.disable, false),
    version = s.version + 1
FROM unnest(%(ids)b::bigint[], %(versions)b::bigint[], %(next_run_at)b::timestamptz[],
            %(last_run_at)b::timestamptz[], %(last_status)b::text[], %(runs)b::bigint[],
            %(missed)b::bigint[], %(skipped)b::bigint[], %(disable)b::boolean[])
     AS v(id, version, next_run_at, last_run_at, last_status, runs, missed, skipped, disable)
WHERE s.id = ANY(%(ids)b::bigint[]) AND s.id = v.id AND s.version = v.version
RETURNING s.id;

-- name: claim_insert_executions
INSERT INTO goatbeat_execution (
    schedule_id, schedule_name, scheduled_at, idempotency_key, kind, status, fencing_token,
    scheduler_id, claimed_at, retry_at)
-- statuses and retry_at come empty when all are 'claimed' and NULL (see claim_advance).
SELECT v.schedule_id, v.schedule_name, v.scheduled_at, v.idempotency_key, 'scheduled',
       coalesce(v.status, 'claimed'), %(token)s, %(scheduler_id)s, now(), v.retry_at
FROM unnest(%(schedule_ids)b::bigint[], %(names)b::text[], %(scheduled_at)b::timestamptz[],
            %(keys)b::text[], %(statuses)b::text[], %(retry_at)b::timestamptz[])
     AS v(schedule_id, schedule_name, scheduled_at, idempotency_key, status, retry_at)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id, idempotency_key;

-- name: pending
-- Rows backing off from a failed submission (retry_at in the future) wait for their turn.
SELECT e.id AS execution_id, e.schedule_id, e.schedule_name, e.scheduled_at, e.idempotency_key,
       e.kind, e.fencing_token, e.attempts, e.claimed_at, s.task, s.args, s.kwargs, s.queue,
       s.exchange, s.routing_key, s.priority, s.expires, s.headers, s.misfire_grace, s.jitter
FROM goatbeat_execution e
JOIN goatbeat_schedule s ON s.id = e.schedule_id
WHERE e.status = 'claimed' AND e.id <> ALL(%(exclude)s::bigint[])
  AND (e.retry_at IS NULL OR e.retry_at <= now())
  -- Rows a live scheduler running another shard count claimed are its own to send (a rolling
  -- change of `shards`: the two generations' shards overlap). Its heartbeat's lease tells
  -- the generation; when it dies, its rows are resubmitted here as any dead leader's are.
  -- The heartbeat row is the process's (its id, '#', 8 hex digits: core/instance.py), the
  -- execution names the id: a live process under that id (or a row of an older version,
  -- keyed by the id alone).
  AND NOT EXISTS (
      SELECT 1 FROM goatbeat_scheduler h
      WHERE (h.scheduler_id = e.scheduler_id
             OR (length(h.scheduler_id) = length(e.scheduler_id) + 9
                 AND left(h.scheduler_id, length(e.scheduler_id) + 1) = e.scheduler_id || '#'))
        AND h.expires_at > now()
        AND CASE WHEN %(shards)s::int = 1 THEN h.lease LIKE 'scheduler/%%'
                 ELSE h.lease NOT LIKE ('scheduler/%%-of-' || %(shards)s::int) END)
  AND (%(shards)s::int = 1 OR mod(('x' || left(encode(sha256(convert_to(s.name, 'UTF8')), 'hex'), 8))::bit(32)::bigint, %(shards)s::int) <> ALL(%(others)s::int[]))
ORDER BY e.claimed_at, e.id
LIMIT %(limit)s;

-- name: next_retry_at
SELECT min(retry_at) AS at FROM goatbeat_execution
WHERE status = 'claimed' AND (%(shards)s::int = 1 OR mod(('x' || left(encode(sha256(convert_to(schedule_name, 'UTF8')), 'hex'), 8))::bit(32)::bigint, %(shards)s::int) <> ALL(%(others)s::int[]));

-- name: lease_read_many
SELECT name, holder, token, expires_at, expires_at <= now() AS expired
FROM goatbeat_lease
WHERE name = ANY(%(names)s::text[]);

-- name: leases_like
-- Every lease row of the scheduler (shards of any count), for status.
SELECT name, holder, token, expires_at, expires_at <= now() AS expired
FROM goatbeat_lease
WHERE name = 'scheduler' OR name LIKE 'scheduler/shard-%%'
ORDER BY name;

-- name: live_schedulers
-- The scheduler processes whose heartbeat is recent (database clock) and that run the same
-- shard count (their heartbeat's lease says it): the members a sharded scheduler shares the
-- shards with. Those of another count (a rolling change of `shards`) take none of these.
SELECT scheduler_id FROM goatbeat_scheduler
WHERE heartbeat_at > now() - %(within)s::interval AND expires_at > now()
  AND lease LIKE ('scheduler/%%-of-' || %(shards)s::int)
ORDER BY scheduler_id;

-- name: record_outcomes
-- Only rows still 'claimed' change; the schedules get the status of their latest occurrence
-- ('missed' for one whose grace ran out) and count the missed ones. A submission a worker
-- already reported on (it outran this bookkeeping) is recorded and keeps the worker's status.
-- An outcome with a key lands only on the execution with that id AND key: ids can repeat after
-- a promotion, and outcomes held across it must not change another occurrence's row.
WITH o AS (
    SELECT * FROM unnest(%(ids)b::bigint[], %(keys)b::text[], %(ok)b::boolean[],
                         %(final)b::boolean[], %(missed)b::boolean[], %(retry_in)b::float8[],
                         %(backend_task_ids)b::text[], %(errors)b::text[])
             AS o(id, key, ok, final, missed, retry_in, backend_task_id, error)
), changed AS (
    UPDATE goatbeat_execution AS e SET
        status = CASE WHEN e.status <> 'claimed' THEN e.status
                      WHEN o.ok THEN 'submitted' WHEN o.final THEN 'submit_failed'
                      ELSE 'claimed' END,
        submitted_at = CASE WHEN o.ok THEN now() ELSE e.submitted_at END,
        backend_task_id = CASE WHEN o.ok THEN o.backend_task_id ELSE e.backend_task_id END,
        error = CASE WHEN e.status <> 'claimed' THEN e.error WHEN o.ok THEN NULL
                     ELSE o.error END,
        attempts = e.attempts + 1,
        retry_at = CASE WHEN o.ok OR o.final OR o.retry_in IS NULL THEN NULL
                        ELSE now() + make_interval(secs => o.retry_in) END
    FROM o
    WHERE e.id = o.id AND (o.key IS NULL OR e.idempotency_key = o.key)
      AND (e.status = 'claimed' OR (o.ok AND e.status IN (
        'running', 'retried', 'succeeded', 'failed', 'lost', 'expired')))
    RETURNING e.schedule_id, e.scheduled_at,
              CASE WHEN o.final AND o.missed AND NOT o.ok THEN 'missed' ELSE e.status END
                  AS status,
              (o.final AND o.missed AND NOT o.ok) AS missed
), latest AS (
    SELECT DISTINCT ON (schedule_id) schedule_id, status
    FROM changed WHERE schedule_id IS NOT NULL
    ORDER BY schedule_id, scheduled_at DESC
), counts AS (
    SELECT schedule_id, count(*) FILTER (WHERE missed) AS missed
    FROM changed WHERE schedule_id IS NOT NULL GROUP BY schedule_id
)
UPDATE goatbeat_schedule AS s SET
    last_status = latest.status,
    missed_count = s.missed_count + counts.missed
FROM latest JOIN counts USING (schedule_id)
WHERE s.id = latest.schedule_id;

-- name: record_submitted
-- record_outcomes when every outcome is a success (nearly every batch): what record_outcomes
-- writes for ok rows, with two arrays instead of seven and no missed counts to add up (a
-- success is never missed). A schedule whose status is already the one it would get (two
-- occurrences of one batch, a repeated call) keeps its row as it is, unwritten. Matched by
-- id and key, as in record_outcomes.
WITH o AS (
    SELECT * FROM unnest(%(ids)b::bigint[], %(keys)b::text[], %(backend_task_ids)b::text[])
        AS o(id, key, backend_task_id)
), changed AS (
    UPDATE goatbeat_execution AS e SET
        status = CASE WHEN e.status = 'claimed' THEN 'submitted' ELSE e.status END,
        submitted_at = now(),
        backend_task_id = o.backend_task_id,
        error = CASE WHEN e.status = 'claimed' THEN NULL ELSE e.error END,
        attempts = e.attempts + 1,
        retry_at = NULL
    FROM o
    WHERE e.id = o.id AND (o.key IS NULL OR e.idempotency_key = o.key)
      AND e.status IN ('claimed', 'running', 'retried', 'succeeded', 'failed', 'lost', 'expired')
    RETURNING e.schedule_id, e.scheduled_at, e.status
), latest AS (
    SELECT DISTINCT ON (schedule_id) schedule_id, status
    FROM changed WHERE schedule_id IS NOT NULL
    ORDER BY schedule_id, scheduled_at DESC
)
UPDATE goatbeat_schedule AS s SET last_status = latest.status
FROM latest
WHERE s.id = latest.schedule_id AND s.last_status IS DISTINCT FROM latest.status;

-- name: claim_manual_runs
-- Run-now executions not yet claimed by a scheduler, claimed by the lease holder (its id and
-- fencing token; the lease checked and row-locked as a claim does), each counting as a run of
-- its schedule (last_run_at only moves forward). One statement: nothing if the lease is stale.
WITH lease AS (
    SELECT 1 FROM goatbeat_lease AS l
    WHERE l.name = %(name)s AND l.holder = %(holder)s AND l.token = %(token)s
      AND l.expires_at > now()
    FOR SHARE OF l
), claimed AS (
    UPDATE goatbeat_execution AS e SET
        scheduler_id = %(scheduler_id)s, fencing_token = %(token)s, claimed_at = now()
    WHERE e.id = ANY(%(ids)s::bigint[]) AND e.kind IN ('manual', 'backfill')
      AND e.status = 'claimed'
      AND e.fencing_token IS NULL AND EXISTS (SELECT 1 FROM lease)
      -- Only runs of the lease's shard (every run with one shard).
      AND (%(shards)s::int = 1 OR mod(('x' || left(encode(sha256(convert_to(e.schedule_name, 'UTF8')), 'hex'), 8))::bit(32)::bigint, %(shards)s::int) <> ALL(%(others)s::int[]))
    RETURNING e.id, e.schedule_id, e.scheduled_at
), runs AS (
    SELECT schedule_id, max(scheduled_at) AS at, count(*) AS n
    FROM claimed WHERE schedule_id IS NOT NULL GROUP BY schedule_id
), counted AS (
    UPDATE goatbeat_schedule AS s SET
        last_run_at = CASE WHEN s.last_run_at IS NULL OR s.last_run_at < runs.at THEN runs.at
                           ELSE s.last_run_at END,
        total_run_count = s.total_run_count + runs.n,
        last_status = 'claimed'
    FROM runs WHERE s.id = runs.schedule_id
    RETURNING s.id
)
SELECT id FROM claimed;

-- name: refuse
-- Only while the row still names the refused task: an edit that fixed it wins. A row not
-- declared in code leaves scheduling (once); a code row keeps its next run.
WITH target AS (
    SELECT id, source <> 'code' AND (next_run_at IS NOT NULL
                                      OR last_status IS DISTINCT FROM 'refused') AS park
    FROM goatbeat_schedule WHERE id = %(id)s AND task = %(task)s
    FOR UPDATE
), marked AS (
    UPDATE goatbeat_schedule AS s SET
        last_status = 'refused',
        next_run_at = CASE WHEN target.park THEN NULL ELSE s.next_run_at END,
        version = CASE WHEN target.park THEN s.version + 1 ELSE s.version END,
        updated_at = CASE WHEN target.park THEN now() ELSE s.updated_at END
    FROM target WHERE s.id = target.id
), ended AS (
    UPDATE goatbeat_execution AS e SET status = 'submit_failed', error = %(reason)s,
        retry_at = NULL
    FROM target WHERE e.schedule_id = target.id AND e.status = 'claimed'
)
SELECT count(*) AS matched FROM target;

-- name: request_run
-- The same request twice at one instant is one run (the key is unique).
WITH inserted AS (
    INSERT INTO goatbeat_execution (
        schedule_id, schedule_name, scheduled_at, idempotency_key, kind, status, claimed_at)
    VALUES (%(schedule_id)s, %(name)s, %(at)s, %(key)s, 'manual', 'claimed', now())
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING id, schedule_id, schedule_name, scheduled_at, idempotency_key, kind, status,
              fencing_token, scheduler_id, claimed_at, submitted_at, finished_at, attempts,
              backend_task_id, error, started_at, runtime, worker, retries
)
SELECT * FROM inserted
UNION ALL
SELECT id, schedule_id, schedule_name, scheduled_at, idempotency_key, kind, status,
       fencing_token, scheduler_id, claimed_at, submitted_at, finished_at, attempts,
       backend_task_id, error, started_at, runtime, worker, retries
FROM goatbeat_execution
WHERE idempotency_key = %(key)s AND NOT EXISTS (SELECT 1 FROM inserted);

-- Four spellings rather than "param IS NULL OR ..." so each one gets an index plan.
-- name: executions
SELECT id, schedule_id, schedule_name, scheduled_at, idempotency_key, kind, status,
       fencing_token, scheduler_id, claimed_at, submitted_at, finished_at, attempts,
       backend_task_id, error, started_at, runtime, worker, retries
FROM goatbeat_execution
ORDER BY scheduled_at DESC, id DESC
LIMIT %(limit)s;

-- name: executions_by_name
SELECT id, schedule_id, schedule_name, scheduled_at, idempotency_key, kind, status,
       fencing_token, scheduler_id, claimed_at, submitted_at, finished_at, attempts,
       backend_task_id, error, started_at, runtime, worker, retries
FROM goatbeat_execution
WHERE schedule_name = %(name)s
ORDER BY scheduled_at DESC, id DESC
LIMIT %(limit)s;

-- name: executions_by_status
SELECT id, schedule_id, schedule_name, scheduled_at, idempotency_key, kind, status,
       fencing_token, scheduler_id, claimed_at, submitted_at, finished_at, attempts,
       backend_task_id, error, started_at, runtime, worker, retries
FROM goatbeat_execution
WHERE status = %(status)s
ORDER BY scheduled_at DESC, id DESC
LIMIT %(limit)s;

-- name: executions_by_name_status
SELECT id, schedule_id, schedule_name, scheduled_at, idempotency_key, kind, status,
       fencing_token, scheduler_id, claimed_at, submitted_at, finished_at, attempts,
       backend_task_id, error, started_at, runtime, worker, retries
FROM goatbeat_execution
WHERE schedule_name = %(name)s AND status = %(status)s
ORDER BY scheduled_at DESC, id DESC
LIMIT %(limit)s;

-- name: notify
SELECT pg_notify('goatbeat', %(payload)s);

-- name: listen
LISTEN goatbeat;

-- name: migrate_lock
SELECT pg_advisory_xact_lock(7450411716450971648);

-- name: applied_versions
SELECT version FROM goatbeat_schema_version ORDER BY version;

-- Worker-side idempotency (goatbeat.idempotency): the ledger of guarded deliveries. Instants
-- come from the database clock, like the lease's.

-- name: delivery_begin
-- This delivery takes the key when nobody holds it: no row yet, the last run failed (the
-- backend retries failures), or a running claim past its expiry (its worker is presumed dead).
-- No row back: another delivery holds the key, or a run already succeeded.
INSERT INTO goatbeat_delivery AS d (
    idempotency_key, state, owner, attempts, duplicates, started_at, expires_at)
VALUES (%(key)s, 'running', %(owner)s, 1, 0, now(), now() + %(lease)s::interval)
ON CONFLICT (idempotency_key) DO UPDATE SET
    state = 'running', owner = EXCLUDED.owner, attempts = d.attempts + 1,
    started_at = EXCLUDED.started_at, expires_at = EXCLUDED.expires_at, finished_at = NULL
WHERE d.state = 'failed' OR (d.state = 'running' AND d.expires_at <= now())
RETURNING attempts;

-- name: delivery_duplicate
UPDATE goatbeat_delivery SET duplicates = duplicates + 1
WHERE idempotency_key = %(key)s
RETURNING state;

-- name: delivery_succeeded
-- Success is final whoever held the key. A success recorded earlier wins: this run was then
-- a duplicate that ran anyway (record="after", or a claim taken over after its expiry).
INSERT INTO goatbeat_delivery AS d (
    idempotency_key, state, owner, attempts, duplicates, started_at, expires_at, finished_at)
VALUES (%(key)s, 'succeeded', %(owner)s, 1, 0, now(), NULL, now())
ON CONFLICT (idempotency_key) DO UPDATE SET
    state = 'succeeded',
    owner = CASE WHEN d.state = 'succeeded' THEN d.owner ELSE EXCLUDED.owner END,
    -- counted: delivery_begin already counted this run (record="before").
    attempts = d.attempts + CASE WHEN %(counted)s THEN 0 ELSE 1 END,
    expires_at = NULL,
    finished_at = CASE WHEN d.state = 'succeeded' THEN d.finished_at ELSE now() END
RETURNING state;

-- name: delivery_failed
-- Only the holder's own claim turns failed, so the next delivery (the backend's retry) runs.
UPDATE goatbeat_delivery SET state = 'failed', finished_at = now(), expires_at = NULL
WHERE idempotency_key = %(key)s AND owner = %(owner)s AND state = 'running';

-- name: delivery_read
SELECT idempotency_key, state, owner, attempts, duplicates, started_at, expires_at, finished_at
FROM goatbeat_delivery
WHERE idempotency_key = %(key)s;

-- name: delivery_prune
WITH deliveries AS (
    DELETE FROM goatbeat_delivery WHERE finished_at < %(before)s RETURNING 1
), task_keys AS (
    DELETE FROM goatbeat_task_key WHERE created_at < %(before)s RETURNING 1
)
SELECT (SELECT count(*) FROM deliveries) + (SELECT count(*) FROM task_keys) AS deleted;

-- name: task_key_note
INSERT INTO goatbeat_task_key (backend_task_id, idempotency_key)
VALUES (%(task_id)s, %(key)s)
ON CONFLICT (backend_task_id) DO NOTHING;

-- name: task_key_find
SELECT idempotency_key FROM goatbeat_task_key WHERE backend_task_id = %(task_id)s;

-- name: claim_quarantine
-- Due rows the claim cannot decode (damaged behind goatbeat's back): out of scheduling until
-- repaired, so each is reported once and never stops the others. Compare-and-set on version
-- like claim_advance: a repair that landed meanwhile wins.
UPDATE goatbeat_schedule AS s SET
    next_run_at = NULL, last_status = %(status)s, version = s.version + 1
FROM unnest(%(ids)b::bigint[], %(versions)b::bigint[]) AS v(id, version)
WHERE s.id = ANY(%(ids)b::bigint[]) AND s.id = v.id AND s.version = v.version
RETURNING s.id;

-- name: abandon_damaged
-- Claimed executions whose schedule cannot be decoded: nothing can submit them.
UPDATE goatbeat_execution AS e SET status = 'submit_failed', error = v.error
FROM unnest(%(ids)b::bigint[], %(errors)b::text[]) AS v(id, error)
WHERE e.id = v.id AND e.status = 'claimed';

-- name: pause_withdraw
-- What a pause withdraws: buffered occurrences, and claimed ones never tried that wait for
-- their jittered instant.
UPDATE goatbeat_execution SET status = 'skipped', error = %(error)s, retry_at = NULL
WHERE schedule_id = %(id)s
  AND (status = 'buffered'
       OR (status = 'claimed' AND kind = 'scheduled' AND attempts = 0
           AND retry_at IS NOT NULL AND retry_at > now()));

-- name: pause
UPDATE goatbeat_schedule SET
    paused = true, paused_at = %(paused_at)s, paused_by = %(paused_by)s,
    pause_note = %(pause_note)s, skipped_count = skipped_count + %(withdrawn)s,
    version = version + 1, updated_at = now()
WHERE id = %(id)s
RETURNING id, name, source, task, trigger, timezone, args, kwargs, queue, exchange, routing_key,
          priority, expires, headers, misfire_policy, misfire_grace, catch_up_limit, one_off,
          enabled, start_at, end_at, next_run_at, last_run_at, last_status, total_run_count,
          missed_count, version, description, created_at, updated_at, jitter, overlap,
          max_runtime, pause_on_failure, paused, paused_at, paused_by, pause_note,
          skipped_count;

-- name: resume
UPDATE goatbeat_schedule SET
    paused = false, paused_at = NULL, paused_by = NULL, pause_note = '',
    next_run_at = %(next_run_at)s, skipped_count = %(skipped_count)s,
    version = version + 1, updated_at = now()
WHERE id = %(id)s AND version = %(version)s
RETURNING id, name, source, task, trigger, timezone, args, kwargs, queue, exchange, routing_key,
          priority, expires, headers, misfire_policy, misfire_grace, catch_up_limit, one_off,
          enabled, start_at, end_at, next_run_at, last_run_at, last_status, total_run_count,
          missed_count, version, description, created_at, updated_at, jitter, overlap,
          max_runtime, pause_on_failure, paused, paused_at, paused_by, pause_note,
          skipped_count;

-- name: statuses_by_keys
SELECT idempotency_key, status FROM goatbeat_execution
WHERE idempotency_key = ANY(%(keys)s::text[]);

-- name: backfill_insert
-- Unclaimed, like a run-now request: the leader claims them (claim_manual_runs) and submits
-- them through pending(). An instant that already has an execution is never written again.
INSERT INTO goatbeat_execution (
    schedule_id, schedule_name, scheduled_at, idempotency_key, kind, status, claimed_at)
SELECT %(schedule_id)s, %(name)s, v.at, v.key, 'backfill', 'claimed', now()
FROM unnest(%(instants)s::timestamptz[], %(keys)s::text[]) WITH ORDINALITY AS v(at, key, n)
ORDER BY v.n
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING scheduled_at;
-- Operations (schema version 5): completion reports from the workers, scheduler heartbeats,
-- the record of missed occurrences, and the reads behind `goatbeat status` and the metrics.

-- name: record_started
-- A worker started an attempt; the schedule shows it when this is its latest run.
WITH changed AS (
    UPDATE goatbeat_execution SET
        status = 'running', started_at = now(), worker = COALESCE(%(worker)s::text, worker)
    WHERE idempotency_key = %(key)s
    RETURNING schedule_id, scheduled_at
), touched AS (
    UPDATE goatbeat_schedule AS s SET last_status = 'running'
    FROM changed
    WHERE s.id = changed.schedule_id
      AND changed.scheduled_at >= COALESCE(s.last_run_at, changed.scheduled_at)
)
SELECT count(*) AS matched FROM changed;

-- name: record_completion
-- How an attempt ended. The row is locked first so that two reports of one key count a
-- failure once (the second sees the first's status).
WITH old AS (
    SELECT id, status FROM goatbeat_execution WHERE idempotency_key = %(key)s FOR UPDATE
), changed AS (
    UPDATE goatbeat_execution AS e SET
        status = %(outcome)s::text,
        finished_at = now(),
        error = %(error)s::text,
        runtime = COALESCE(%(runtime)s::double precision,
                           EXTRACT(EPOCH FROM now() - e.started_at)::double precision),
        worker = COALESCE(%(worker)s::text, e.worker),
        retries = e.retries + CASE WHEN %(outcome)s::text = 'retried' THEN 1 ELSE 0 END
    FROM old
    WHERE e.id = old.id
      -- The leader ending a run as lost or expired: only if no report ended it meanwhile.
      AND (NOT %(only_open)s::boolean OR old.status IN ('submitted', 'running', 'retried'))
    RETURNING e.schedule_id, e.scheduled_at, old.status AS previous
), touched AS (
    UPDATE goatbeat_schedule AS s SET
        last_status = CASE
            WHEN changed.scheduled_at >= COALESCE(s.last_run_at, changed.scheduled_at)
            THEN %(outcome)s::text ELSE s.last_status END,
        last_success_at = CASE WHEN %(outcome)s::text = 'succeeded' THEN now()
                               ELSE s.last_success_at END,
        last_failure_at = CASE WHEN %(outcome)s::text IN ('failed', 'lost') THEN now()
                               ELSE s.last_failure_at END,
        consecutive_failures = CASE
            WHEN %(outcome)s::text = 'succeeded' THEN 0
            WHEN %(outcome)s::text IN ('failed', 'lost')
                 AND changed.previous NOT IN ('failed', 'lost')
            THEN s.consecutive_failures + 1
            ELSE s.consecutive_failures END
    FROM changed
    WHERE s.id = changed.schedule_id
    RETURNING s.name, s.paused, s.pause_on_failure, s.consecutive_failures
), woken AS (
    -- A run that ends wakes the leader when an occurrence of its schedule is buffered
    -- behind it (overlap buffer_one).
    SELECT pg_notify('goatbeat', 'schedule:' || changed.schedule_id::text) FROM changed
    WHERE %(outcome)s::text IN ('succeeded', 'failed', 'lost', 'expired')
      AND EXISTS (SELECT 1 FROM goatbeat_execution b
                  WHERE b.schedule_id = changed.schedule_id AND b.status = 'buffered')
)
SELECT (SELECT count(*) FROM changed) AS matched,
       (SELECT count(*) FROM woken) AS woken,
       (SELECT name FROM touched
        WHERE %(outcome)s::text IN ('failed', 'lost') AND NOT paused
          AND pause_on_failure IS NOT NULL
          AND consecutive_failures >= pause_on_failure) AS pause_name,
       (SELECT consecutive_failures FROM touched) AS failures;

-- name: heartbeat
INSERT INTO goatbeat_scheduler AS s (
    scheduler_id, role, lease, fencing_token, hostname, pid, version, started_at,
    heartbeat_at, expires_at)
VALUES (%(scheduler_id)s, %(role)s, %(lease)s, %(fencing_token)s, %(hostname)s, %(pid)s,
        %(version)s, now(), now(), now() + %(ttl)s::interval)
ON CONFLICT (scheduler_id) DO UPDATE SET
    role = EXCLUDED.role, lease = EXCLUDED.lease, fencing_token = EXCLUDED.fencing_token,
    hostname = EXCLUDED.hostname, pid = EXCLUDED.pid, version = EXCLUDED.version,
    heartbeat_at = EXCLUDED.heartbeat_at, expires_at = EXCLUDED.expires_at;

-- name: scheduler_cleanup
DELETE FROM goatbeat_scheduler WHERE expires_at < now() - %(retention)s::interval;

-- name: scheduler_remove
DELETE FROM goatbeat_scheduler WHERE scheduler_id = %(scheduler_id)s;

-- name: schedulers
SELECT scheduler_id, role, lease, fencing_token, hostname, pid, version, started_at,
       heartbeat_at, expires_at, expires_at <= now() AS stale
FROM goatbeat_scheduler
ORDER BY role, scheduler_id;

-- name: record_miss
-- A schedule deleted meanwhile keeps its record, by name.
INSERT INTO goatbeat_miss (
    schedule_id, schedule_name, missed, first_at, last_at, scheduler_id, recorded_at)
VALUES ((SELECT s.id FROM goatbeat_schedule AS s WHERE s.id = %(schedule_id)s),
        %(schedule_name)s, %(missed)s, %(first_at)s::timestamptz, %(last_at)s::timestamptz,
        %(scheduler_id)s, now());

-- name: miss_prune
DELETE FROM goatbeat_miss WHERE recorded_at < now() - %(retention)s::interval;

-- name: status_counts
-- Each count walks an index: the due index, the pending index, recent misses, and the
-- status index for recent failures.
SELECT
    (SELECT count(*) FROM goatbeat_schedule
     WHERE enabled AND NOT paused AND next_run_at IS NOT NULL AND next_run_at <= %(now)s) AS due,
    (SELECT count(*) FROM goatbeat_execution
     WHERE status = 'claimed' AND scheduled_at <= %(now)s) AS pending,
    (SELECT COALESCE(sum(missed), 0) FROM goatbeat_miss
     WHERE recorded_at > %(since)s) AS missed,
    (SELECT count(*) FROM goatbeat_execution
     WHERE status IN ('failed', 'submit_failed', 'lost', 'expired')
       AND scheduled_at > %(since)s AND scheduled_at <= %(now)s) AS failed;

-- name: status_oldest
SELECT at, name FROM (
    (SELECT next_run_at AS at, name FROM goatbeat_schedule
     WHERE enabled AND NOT paused AND next_run_at IS NOT NULL AND next_run_at <= %(now)s
     ORDER BY next_run_at LIMIT 1)
    UNION ALL
    (SELECT scheduled_at AS at, schedule_name AS name FROM goatbeat_execution
     WHERE status = 'claimed' AND scheduled_at <= %(now)s
     ORDER BY scheduled_at LIMIT 1)
) AS oldest
ORDER BY at
LIMIT 1;

-- name: schedule_health
-- The overdue rule of goatbeat.core.health.is_overdue, in SQL.
SELECT name, enabled, last_status, last_run_at, next_run_at, last_success_at, last_failure_at,
       consecutive_failures, missed_count,
       (enabled AND NOT paused AND (
           (next_run_at IS NOT NULL AND next_run_at <= %(late)s)
           OR ((last_success_at IS NOT NULL OR last_failure_at IS NOT NULL)
               AND last_run_at IS NOT NULL AND last_run_at <= %(late)s
               AND (last_success_at IS NULL OR last_success_at < last_run_at)))) AS overdue
FROM goatbeat_schedule
WHERE last_success_at IS NOT NULL OR last_failure_at IS NOT NULL OR missed_count > 0
   OR (enabled AND NOT paused AND next_run_at IS NOT NULL AND next_run_at <= %(late)s)
ORDER BY overdue DESC, consecutive_failures DESC, name
LIMIT %(limit)s::bigint;

-- name: publication_current
-- The latest code publication (schema version 8): its generation, set fingerprint, release.
-- Read under publish_lock, so no other publication records one in between.
SELECT generation, fingerprint, release, schedules, published_at
FROM goatbeat_publication ORDER BY generation DESC LIMIT 1;

-- name: publication_generation_of
-- The latest generation that published this set fingerprint (NULL when never published).
SELECT max(generation) AS generation FROM goatbeat_publication
WHERE fingerprint = %(fingerprint)s;

-- name: publication_record
INSERT INTO goatbeat_publication (generation, fingerprint, release, schedules)
SELECT coalesce(max(generation), 0) + 1, %(fingerprint)s, %(release)s, %(schedules)s
FROM goatbeat_publication
RETURNING generation;

-- name: schedule_rename
-- A renamed declaration takes the row of its old name over: same id, phase and last run.
UPDATE goatbeat_schedule SET name = %(new_name)s, version = version + 1, updated_at = now()
WHERE id = %(id)s AND version = %(version)s;

-- name: schedule_rename_history
-- The runs and misses of a renamed schedule carry its new name (their keys stay as issued).
UPDATE goatbeat_execution SET schedule_name = %(new_name)s WHERE schedule_id = %(id)s;

-- name: schedule_rename_misses
UPDATE goatbeat_miss SET schedule_name = %(new_name)s WHERE schedule_id = %(id)s;

-- name: open_runs_started
-- Runs a worker started and did not end (running, retried), with what judges whether they
-- are lost: the open index holds only runs that have not ended.
SELECT e.id, e.idempotency_key, e.schedule_name, e.status, e.claimed_at, e.submitted_at,
       e.started_at, e.finished_at, s.max_runtime, s.expires
FROM goatbeat_execution AS e JOIN goatbeat_schedule AS s ON s.id = e.schedule_id
WHERE e.status IN ('running', 'retried')
ORDER BY e.id
LIMIT %(limit)s;

-- name: open_runs_submitted
-- Runs submitted since :since with no word from a worker, of schedules whose workers report
-- (a success or failure was recorded): the status index, from :since on.
SELECT e.id, e.idempotency_key, e.schedule_name, e.status, e.claimed_at, e.submitted_at,
       e.started_at, e.finished_at, s.max_runtime, s.expires
FROM goatbeat_execution AS e JOIN goatbeat_schedule AS s ON s.id = e.schedule_id
WHERE e.status = 'submitted' AND e.scheduled_at > %(since)s
  AND (s.last_success_at IS NOT NULL OR s.last_failure_at IS NOT NULL)
ORDER BY e.id
LIMIT %(limit)s;

-- name: longest_bound
SELECT max(GREATEST(COALESCE(max_runtime, 0), COALESCE(expires, 0))) AS seconds
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
UPDATE goatbeat_execution SET retry_at = now()
WHERE status = 'claimed' AND retry_at > now();

-- name: refusals
-- The schedules a scheduler refused and that stay refused: goatbeat.core.health.is_refused, in
-- SQL (a row not declared in code leaves scheduling when refused; a code row keeps its next
-- run and is refused at each occurrence until a scheduler that knows its task claims it).
-- One pass over the schedule table: an index on last_status would make every bookkeeping
-- write of a claim a non-HOT update (see 0007). Each refused row then walks its executions
-- by the schedule index: the reason of its latest refusal, and when the refusals began
-- (the first refused run after its latest run of any other outcome).
SELECT s.name, s.task, s.source, count(*) OVER () AS total,
       (SELECT e.error FROM goatbeat_execution AS e
        WHERE e.schedule_id = s.id AND e.status = 'submit_failed' AND e.error LIKE 'refused:%%'
        ORDER BY e.scheduled_at DESC, e.id DESC LIMIT 1) AS reason,
       COALESCE(
           (SELECT min(e.claimed_at) FROM goatbeat_execution AS e
            WHERE e.schedule_id = s.id AND e.status = 'submit_failed'
              AND e.error LIKE 'refused:%%'
              AND e.scheduled_at > COALESCE(
                  (SELECT x.scheduled_at FROM goatbeat_execution AS x
                   WHERE x.schedule_id = s.id AND x.status <> 'claimed'
                     AND NOT (x.status = 'submit_failed' AND COALESCE(x.error, '') LIKE 'refused:%%')
                   ORDER BY x.scheduled_at DESC LIMIT 1),
                  '-infinity'::timestamptz)),
           s.updated_at) AS refused_at
FROM goatbeat_schedule AS s
WHERE s.enabled AND NOT s.paused AND s.last_status = 'refused'
  AND (s.source = 'code' OR s.next_run_at IS NULL)
ORDER BY s.name
LIMIT %(limit)s::bigint;

-- name: refusal_named
-- One schedule's refusal, as refusals: the name index.
SELECT s.name, s.task, s.source, count(*) OVER () AS total,
       (SELECT e.error FROM goatbeat_execution AS e
        WHERE e.schedule_id = s.id AND e.status = 'submit_failed' AND e.error LIKE 'refused:%%'
        ORDER BY e.scheduled_at DESC, e.id DESC LIMIT 1) AS reason,
       COALESCE(
           (SELECT min(e.claimed_at) FROM goatbeat_execution AS e
            WHERE e.schedule_id = s.id AND e.status = 'submit_failed'
              AND e.error LIKE 'refused:%%'
              AND e.scheduled_at > COALESCE(
                  (SELECT x.scheduled_at FROM goatbeat_execution AS x
                   WHERE x.schedule_id = s.id AND x.status <> 'claimed'
                     AND NOT (x.status = 'submit_failed' AND COALESCE(x.error, '') LIKE 'refused:%%')
                   ORDER BY x.scheduled_at DESC LIMIT 1),
                  '-infinity'::timestamptz)),
           s.updated_at) AS refused_at
FROM goatbeat_schedule AS s
WHERE s.enabled AND NOT s.paused AND s.last_status = 'refused'
  AND (s.source = 'code' OR s.next_run_at IS NULL)
  AND s.name = %(name)s::text
ORDER BY s.name
LIMIT %(limit)s::bigint;
