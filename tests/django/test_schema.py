"""``manage.py migrate`` and ``goatbeat migrate`` build the very same schema."""

from __future__ import annotations

from io import StringIO
from typing import Any

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection

from goatbeat.stores.postgres import PostgresStore
from goatbeat.stores.schema import migration_versions
from tests.django.conftest import manage

_CATALOG = {
    "columns": """
        SELECT table_name, column_name, ordinal_position, data_type, character_maximum_length,
               numeric_precision, is_nullable, column_default, is_identity, identity_generation
        FROM information_schema.columns
        WHERE table_schema = 'public' AND table_name LIKE 'goatbeat%%'
        ORDER BY table_name, ordinal_position""",
    "constraints": """
        SELECT t.relname, c.conname, c.contype, pg_get_constraintdef(c.oid), c.condeferrable,
               c.condeferred
        FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid
        WHERE t.relname LIKE 'goatbeat%%'
        ORDER BY t.relname, c.conname""",
    "indexes": """
        SELECT tablename, indexname, indexdef FROM pg_indexes
        WHERE schemaname = 'public' AND tablename LIKE 'goatbeat%%'
        ORDER BY tablename, indexname""",
    "tables": """
        SELECT relname, relkind, reloptions FROM pg_class
        WHERE relname LIKE 'goatbeat%%' AND relnamespace = 'public'::regnamespace
        ORDER BY relname""",
    "versions": "SELECT version FROM goatbeat_schema_version ORDER BY version",
}


def _catalog_of_cursor(cursor: Any) -> dict[str, list[tuple[Any, ...]]]:
    result = {}
    for name, sql in _CATALOG.items():
        cursor.execute(sql)
        result[name] = [tuple(row) for row in cursor.fetchall()]
    return result


def _catalog_of_dsn(dsn: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(dsn) as conn, conn.cursor() as cursor:
        return _catalog_of_cursor(cursor)


@pytest.mark.django_db
def test_django_migrate_and_goatbeat_migrate_build_identical_schemas(pg_dsn: str) -> None:
    with connection.cursor() as cursor:
        from_django = _catalog_of_cursor(cursor)
    store = PostgresStore(pg_dsn)
    store.migrate()
    store.close()
    from_goatbeat = _catalog_of_dsn(pg_dsn)

    assert {t for t, *_ in from_django["tables"]} >= {
        "goatbeat_schedule",
        "goatbeat_execution",
        "goatbeat_lease",
        "goatbeat_schema_version",
    }
    for part in _CATALOG:
        assert from_django[part] == from_goatbeat[part], part
    assert from_django["versions"] == [(v,) for v in migration_versions("postgres")]


def test_django_migrate_after_goatbeat_migrate_keeps_the_schema(pg_dsn: str) -> None:
    """A project that started on the plain-Python command and then adds the Django app."""
    store = PostgresStore(pg_dsn)
    store.migrate()
    store.close()
    before = _catalog_of_dsn(pg_dsn)

    done = manage("migrate", "goatbeat", env={"GOATBEAT_TEST_DB_NAME": pg_dsn.rsplit("/", 1)[1]})
    assert done.returncode == 0, done.stderr

    assert _catalog_of_dsn(pg_dsn) == before
    with psycopg.connect(pg_dsn) as conn:
        applied = conn.execute(
            "SELECT name FROM django_migrations WHERE app = 'goatbeat' ORDER BY name"
        ).fetchall()
    assert applied == [
        ("0001_initial",),
        ("0002_worker_idempotency",),
        ("0003_published_fingerprint",),
        ("0004_submit_retry",),
        ("0005_operations",),
        ("0006_schedule_control",),
        ("0007_schedule_fillfactor",),
        ("0008_publication",),
        ("0009_run_states",),
    ]


@pytest.mark.django_db
def test_models_match_the_migrations() -> None:
    out = StringIO()
    call_command("makemigrations", "goatbeat", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


def test_the_operations_migration_goes_back_and_forth(pg_dsn: str) -> None:
    """Django's reverse of schema version 5 leaves version 3's schema; applying it again
    gives the same schema as the first time."""
    env = {"GOATBEAT_TEST_DB_NAME": pg_dsn.rsplit("/", 1)[1]}
    done = manage("migrate", "goatbeat", env=env)
    assert done.returncode == 0, done.stderr
    forward = _catalog_of_dsn(pg_dsn)

    back = manage("migrate", "goatbeat", "0003_published_fingerprint", env=env)
    assert back.returncode == 0, back.stderr
    catalog = _catalog_of_dsn(pg_dsn)
    tables = {name for name, *_ in catalog["tables"]}
    assert not tables & {"goatbeat_scheduler", "goatbeat_miss"}
    assert catalog["versions"] == [(1,), (2,), (3,)]
    columns = {(t, c) for t, c, *_ in catalog["columns"]}
    assert ("goatbeat_execution", "runtime") not in columns
    assert ("goatbeat_schedule", "consecutive_failures") not in columns

    again = manage("migrate", "goatbeat", env=env)
    assert again.returncode == 0, again.stderr
    redone = _catalog_of_dsn(pg_dsn)
    # Columns dropped and added again come last (PostgreSQL never reuses a position).
    for catalog in (forward, redone):
        catalog["columns"] = sorted(row[:2] + row[3:] for row in catalog["columns"])
    assert redone == forward


def _schedule_options(catalog: dict[str, list[tuple[Any, ...]]]) -> Any:
    [options] = [opts for name, _, opts in catalog["tables"] if name == "goatbeat_schedule"]
    return options


def test_the_fillfactor_migration_goes_back_and_forth(pg_dsn: str) -> None:
    """Schema version 7 only sets a storage parameter: Django's reverse resets it and forgets
    the version, applying it again gives the same schema as the first time."""
    env = {"GOATBEAT_TEST_DB_NAME": pg_dsn.rsplit("/", 1)[1]}
    done = manage("migrate", "goatbeat", "0007_schedule_fillfactor", env=env)
    assert done.returncode == 0, done.stderr
    forward = _catalog_of_dsn(pg_dsn)
    assert _schedule_options(forward) == ["fillfactor=50"]

    back = manage("migrate", "goatbeat", "0006_schedule_control", env=env)
    assert back.returncode == 0, back.stderr
    catalog = _catalog_of_dsn(pg_dsn)
    assert _schedule_options(catalog) is None
    assert catalog["versions"] == [(v,) for v in range(1, 7)]
    for part in ("columns", "constraints", "indexes"):
        # Going back to 6 also takes version 8's table away.
        kept = [row for row in forward[part] if "goatbeat_publication" not in row[:2]]
        assert catalog[part] == kept, part

    again = manage("migrate", "goatbeat", "0007_schedule_fillfactor", env=env)
    assert again.returncode == 0, again.stderr
    assert _catalog_of_dsn(pg_dsn) == forward


def test_the_run_states_migration_goes_back_and_forth(pg_dsn: str) -> None:
    """Schema version 9 widens the statuses with ``lost`` and ``expired``: Django's reverse
    turns such runs into what version 8 knew (``failed``, ``submit_failed``) and narrows the
    constraint again; applying it again gives the same schema as the first time."""
    env = {"GOATBEAT_TEST_DB_NAME": pg_dsn.rsplit("/", 1)[1]}
    done = manage("migrate", "goatbeat", env=env)
    assert done.returncode == 0, done.stderr
    forward = _catalog_of_dsn(pg_dsn)
    with psycopg.connect(pg_dsn) as conn:
        conn.execute(
            "INSERT INTO goatbeat_execution (schedule_name, scheduled_at, idempotency_key, "
            "status, claimed_at) VALUES ('a', now(), 'a:1', 'lost', now()), "
            "('a', now(), 'a:2', 'expired', now())"
        )

    back = manage("migrate", "goatbeat", "0008_publication", env=env)
    assert back.returncode == 0, back.stderr
    catalog = _catalog_of_dsn(pg_dsn)
    assert catalog["versions"] == [(v,) for v in range(1, 9)]
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute(
            "SELECT idempotency_key, status FROM goatbeat_execution ORDER BY idempotency_key"
        ).fetchall()
    assert rows == [("a:1", "failed"), ("a:2", "submit_failed")]

    again = manage("migrate", "goatbeat", env=env)
    assert again.returncode == 0, again.stderr
    assert _catalog_of_dsn(pg_dsn) == forward


def test_the_guide_names_every_table_migrate_creates(store: Any) -> None:
    import re
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[2] / "docs/django.md").read_text()
    sentence = guide[guide.index("`migrate` creates goatbeat's ") :].split("They are exactly")[0]
    words = {"eight": 8, "nine": 9, "ten": 10}
    count = words[sentence.split()[3]]
    named = set(re.findall(r"`(goatbeat_[a-z_]+)`", sentence))
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname FROM pg_class WHERE relkind = 'r' AND relname LIKE 'goatbeat%%' "
            "AND relnamespace = 'public'::regnamespace"
        )
        tables = {row[0] for row in cursor.fetchall()}
    assert named == tables and len(tables) == count


def test_the_publication_migration_goes_back_and_forth(pg_dsn: str) -> None:
    """Schema version 8 only adds goatbeat_publication: Django's reverse drops it and forgets
    the version, and applying it again gives the same schema as the first time."""
    env = {"GOATBEAT_TEST_DB_NAME": pg_dsn.rsplit("/", 1)[1]}
    done = manage("migrate", "goatbeat", env=env)
    assert done.returncode == 0, done.stderr
    forward = _catalog_of_dsn(pg_dsn)
    assert "goatbeat_publication" in {name for name, *_ in forward["tables"]}

    back = manage("migrate", "goatbeat", "0007_schedule_fillfactor", env=env)
    assert back.returncode == 0, back.stderr
    catalog = _catalog_of_dsn(pg_dsn)
    assert "goatbeat_publication" not in {name for name, *_ in catalog["tables"]}
    assert catalog["versions"] == [(v,) for v in range(1, 8)]

    again = manage("migrate", "goatbeat", env=env)
    assert again.returncode == 0, again.stderr
    assert _catalog_of_dsn(pg_dsn) == forward
