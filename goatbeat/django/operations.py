"""RunGoatbeatSQL: the migration operation that runs one goatbeat schema version's SQL.

It runs exactly :func:`goatbeat.stores.schema.postgres_migration_sql` (the file
``goatbeat migrate`` runs, version bookkeeping included), so both paths build one schema. Two
cases are skipped on purpose:

- a database that is not PostgreSQL (a project whose default database is SQLite and whose
  goatbeat database is another alias runs ``migrate`` on both);
- a database where ``goatbeat migrate`` already recorded this version (a project that started
  with the plain-Python command and then added the Django app).
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

from goatbeat.stores.schema import postgres_migration_sql

__all__ = ["RunGoatbeatSQL"]

_REVERSE = {
    1: (
        "DROP TABLE IF EXISTS goatbeat_execution;"
        "DROP TABLE IF EXISTS goatbeat_schedule;"
        "DROP TABLE IF EXISTS goatbeat_lease;"
        "DROP TABLE IF EXISTS goatbeat_schema_version;"
    ),
    2: (
        "DROP TABLE IF EXISTS goatbeat_task_key;"
        "DROP TABLE IF EXISTS goatbeat_delivery;"
        "DELETE FROM goatbeat_schema_version WHERE version = 2;"
    ),
    3: (
        "ALTER TABLE goatbeat_schedule DROP COLUMN IF EXISTS published_fingerprint;"
        "DELETE FROM goatbeat_schema_version WHERE version = 3;"
    ),
    4: (
        "ALTER TABLE goatbeat_execution DROP COLUMN IF EXISTS retry_at;"
        "DELETE FROM goatbeat_schema_version WHERE version = 4;"
    ),
    5: (
        "DROP TABLE IF EXISTS goatbeat_miss;"
        "DROP TABLE IF EXISTS goatbeat_scheduler;"
        "ALTER TABLE goatbeat_schedule DROP COLUMN IF EXISTS last_success_at,"
        " DROP COLUMN IF EXISTS last_failure_at, DROP COLUMN IF EXISTS consecutive_failures;"
        # The statuses only workers write fall back to what version 3 knew.
        "UPDATE goatbeat_execution SET status = 'submitted'"
        " WHERE status IN ('running', 'retried');"
        "ALTER TABLE goatbeat_execution DROP CONSTRAINT goatbeat_execution_status_check;"
        "ALTER TABLE goatbeat_execution ADD CONSTRAINT goatbeat_execution_status_check"
        " CHECK (status IN ('claimed', 'submitted', 'submit_failed', 'succeeded', 'failed'));"
        "ALTER TABLE goatbeat_execution DROP COLUMN IF EXISTS started_at,"
        " DROP COLUMN IF EXISTS runtime, DROP COLUMN IF EXISTS worker,"
        " DROP COLUMN IF EXISTS retries;"
        "DELETE FROM goatbeat_schema_version WHERE version = 5;"
    ),
    # The statuses and kinds of version 6 cannot outlive it: their rows go back to what the
    # earlier constraints accept (skipped and buffered occurrences never ran: submit_failed;
    # a backfill is a manual run), then the constraints are those of schema 5.
    6: (
        "DROP INDEX IF EXISTS goatbeat_execution_buffered_idx;"
        "UPDATE goatbeat_execution SET status = 'submit_failed', retry_at = NULL "
        "WHERE status IN ('skipped', 'buffered');"
        "UPDATE goatbeat_execution SET kind = 'manual' WHERE kind = 'backfill';"
        "ALTER TABLE goatbeat_execution DROP CONSTRAINT goatbeat_execution_status_check;"
        "ALTER TABLE goatbeat_execution ADD CONSTRAINT goatbeat_execution_status_check "
        "CHECK (status IN ('claimed', 'submitted', 'submit_failed', 'running', 'retried', "
        "'succeeded', 'failed'));"
        "ALTER TABLE goatbeat_execution DROP CONSTRAINT goatbeat_execution_kind_check;"
        "ALTER TABLE goatbeat_execution ADD CONSTRAINT goatbeat_execution_kind_check "
        "CHECK (kind IN ('scheduled', 'manual'));"
        "DROP INDEX IF EXISTS goatbeat_schedule_due_idx;"
        "CREATE INDEX goatbeat_schedule_due_idx ON goatbeat_schedule (next_run_at) "
        "WHERE enabled AND next_run_at IS NOT NULL;"
        "ALTER TABLE goatbeat_schedule DROP CONSTRAINT IF EXISTS goatbeat_schedule_overlap_check,"
        " DROP COLUMN IF EXISTS jitter, DROP COLUMN IF EXISTS overlap,"
        " DROP COLUMN IF EXISTS max_runtime, DROP COLUMN IF EXISTS pause_on_failure,"
        " DROP COLUMN IF EXISTS paused, DROP COLUMN IF EXISTS paused_at,"
        " DROP COLUMN IF EXISTS paused_by, DROP COLUMN IF EXISTS pause_note,"
        " DROP COLUMN IF EXISTS skipped_count, DROP COLUMN IF EXISTS active_execution_id;"
        "DELETE FROM goatbeat_schema_version WHERE version = 6;"
    ),
    # Back to the default packing for pages filled from now on (no rewrite, like the forward).
    7: (
        "ALTER TABLE goatbeat_schedule RESET (fillfactor);"
        "DELETE FROM goatbeat_schema_version WHERE version = 7;"
    ),
    # The record of publications goes; the schedules keep what the last one wrote.
    8: (
        "DROP TABLE IF EXISTS goatbeat_publication;"
        "DELETE FROM goatbeat_schema_version WHERE version = 8;"
    ),
    # Lost and expired runs fall back to what schema 7 knew: a run that ended badly with no
    # word from its worker is 'failed', one dropped unrun 'submit_failed'.
    9: (
        "DROP INDEX IF EXISTS goatbeat_execution_open_idx;"
        "UPDATE goatbeat_execution SET status = 'failed' WHERE status = 'lost';"
        "UPDATE goatbeat_execution SET status = 'submit_failed' WHERE status = 'expired';"
        "ALTER TABLE goatbeat_execution DROP CONSTRAINT goatbeat_execution_status_check;"
        "ALTER TABLE goatbeat_execution ADD CONSTRAINT goatbeat_execution_status_check "
        "CHECK (status IN ('claimed', 'submitted', 'submit_failed', 'running', 'retried', "
        "'succeeded', 'failed', 'skipped', 'buffered'));"
        "DELETE FROM goatbeat_schema_version WHERE version = 9;"
    ),
}


class RunGoatbeatSQL(migrations.RunSQL):  # type: ignore[misc]  # Django is untyped here
    def __init__(self, version: int) -> None:
        self.version = version
        super().__init__(sql=postgres_migration_sql(version), reverse_sql=_REVERSE.get(version))

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        return (self.__class__.__qualname__, [], {"version": self.version})

    def describe(self) -> str:
        return f"goatbeat schema version {self.version}"

    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        connection = schema_editor.connection
        if connection.vendor != "postgresql" or _recorded(connection, self.version):
            return
        super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return
        super().database_backwards(app_label, schema_editor, from_state, to_state)


def _recorded(connection: Any, version: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass('goatbeat_schema_version') IS NOT NULL")
        (exists,) = cursor.fetchone()
        if not exists:
            return False
        cursor.execute("SELECT 1 FROM goatbeat_schema_version WHERE version = %s", [version])
        return cursor.fetchone() is not None
