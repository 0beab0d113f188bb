"""The SQL files: versioned schema migrations and named queries, per dialect.

Layout, procrastinate-style: ``sql/<dialect>/NNNN_<what>.sql`` are migrations (applied in
order, each once, recorded in ``goatbeat_schema_version``) and ``sql/<dialect>/queries.sql``
holds every query the store runs, each introduced by a ``-- name: <name>`` line.

:func:`postgres_migration_sql` is the bridge to Django: the Django app's migrations run the
exact text it returns with ``RunSQL``, so ``goatbeat migrate`` and ``manage.py migrate``
build the same schema and record the same version rows.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Literal

from goatbeat.core.errors import InvalidValue

__all__ = [
    "Dialect",
    "migration_versions",
    "migration_sql",
    "postgres_migration_sql",
    "sqlite_migration_sql",
    "queries",
    "split_statements",
    "latest_version",
]

Dialect = Literal["postgres", "sqlite"]

_MIGRATION_FILE = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
_QUERY_NAME = re.compile(r"^-- name: ([a-z0-9_]+)\s*$", re.MULTILINE)

_VERSION_TABLE = {
    "postgres": (
        "CREATE TABLE IF NOT EXISTS goatbeat_schema_version (\n"
        "    version    integer     PRIMARY KEY,\n"
        "    applied_at timestamptz NOT NULL DEFAULT now()\n"
        ");\n"
    ),
    "sqlite": (
        "CREATE TABLE IF NOT EXISTS goatbeat_schema_version (\n"
        "    version    integer NOT NULL PRIMARY KEY,\n"
        "    applied_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))\n"
        ");\n"
    ),
}

_RECORD_VERSION = {
    "postgres": (
        "INSERT INTO goatbeat_schema_version (version) VALUES ({version})\n"
        "    ON CONFLICT (version) DO NOTHING;\n"
    ),
    "sqlite": "INSERT OR IGNORE INTO goatbeat_schema_version (version) VALUES ({version});\n",
}


def version_table_sql(dialect: Dialect) -> str:
    """``CREATE TABLE IF NOT EXISTS goatbeat_schema_version`` for ``dialect``."""
    return _VERSION_TABLE[dialect]


@cache
def migration_versions(dialect: Dialect) -> dict[int, str]:
    """``{version: file name}`` of every migration shipped for ``dialect``."""
    found: dict[int, str] = {}
    for entry in (resources.files("goatbeat.stores") / "sql" / dialect).iterdir():
        match = _MIGRATION_FILE.match(entry.name)
        if match:
            found[int(match.group(1))] = entry.name
    return dict(sorted(found.items()))


def latest_version(dialect: Dialect) -> int:
    return max(migration_versions(dialect), default=0)


def _read(dialect: Dialect, file_name: str) -> str:
    return (resources.files("goatbeat.stores") / "sql" / dialect / file_name).read_text("utf-8")


def migration_sql(dialect: Dialect, version: int) -> str:
    """The exact SQL of one migration: create the version table if needed, the versioned DDL,
    then record the version. Running it twice fails on the DDL (the runner checks first)."""
    files = migration_versions(dialect)
    if version not in files:
        raise InvalidValue(
            "version", version, f"no {dialect} migration {version} (have {sorted(files)})"
        )
    return (
        _VERSION_TABLE[dialect]
        + "\n"
        + _read(dialect, files[version]).rstrip()
        + "\n\n"
        + _RECORD_VERSION[dialect].format(version=int(version))
    )


def postgres_migration_sql(version: int) -> str:
    """The PostgreSQL SQL for schema ``version``, including the version bookkeeping; the
    Django migrations run exactly this with ``RunSQL``."""
    return migration_sql("postgres", version)


def sqlite_migration_sql(version: int) -> str:
    return migration_sql("sqlite", version)


@cache
def queries(dialect: Dialect) -> dict[str, str]:
    """Every named query of ``dialect``'s ``queries.sql``."""
    text = _read(dialect, "queries.sql")
    parts = _QUERY_NAME.split(text)
    # parts = [preamble, name1, body1, name2, body2, ...]
    found: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = [line for line in body.strip().splitlines() if not line.lstrip().startswith("--")]
        sql = "\n".join(lines).strip().rstrip(";").strip()
        if name in found:
            raise RuntimeError(f"query {name!r} is defined twice in {dialect}/queries.sql")
        found[name] = sql
    return found


def split_statements(script: str) -> list[str]:
    """Split a SQL script into statements (for SQLite, whose ``executescript`` would commit
    the surrounding transaction). Understands quotes and ``--`` comments, which is all our
    DDL uses."""
    statements: list[str] = []
    current: list[str] = []
    quote: str | None = None
    i = 0
    while i < len(script):
        ch = script[i]
        if quote is not None:
            current.append(ch)
            if ch == quote:
                quote = None
        elif ch in ("'", '"'):
            quote = ch
            current.append(ch)
        elif ch == "-" and script.startswith("--", i):
            end = script.find("\n", i)
            i = len(script) if end < 0 else end
            continue
        elif ch == ";":
            statement = "".join(current).strip()
            if statement:
                statements.append(statement)
            current = []
        else:
            current.append(ch)
        i += 1
    tail = "".join(current).strip()
    if tail:
        statements.append(tail)
    return statements
