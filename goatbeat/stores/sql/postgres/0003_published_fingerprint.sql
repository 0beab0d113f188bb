-- goatbeat schema, version 3 (PostgreSQL): the fingerprint of each schedule's published
-- definition. (Version 3 is another change; the versions are applied by number, each once.)
-- Like 0001, `goatbeat migrate` and the Django app's migration 0003 run this very file.

-- What the last publish (code, `celery beat -S goatbeat`, `import_celery_beat`) wrote: a hash
-- of the definition. An edit made since (admin, API) changes the definition but not this, so
-- `import_celery_beat` can tell an operator's edit from its own earlier import and refuses to
-- overwrite it silently. NULL: created in the admin, or not published since this version.
-- Adding a nullable column rewrites nothing: every row keeps its next_run_at and its phase.
ALTER TABLE goatbeat_schedule ADD COLUMN published_fingerprint varchar(64) NULL;
