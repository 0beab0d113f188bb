"""The settings for a database behind a transaction-pooling proxy (PgBouncer):
``listen_database``, ``pooled``, ``poll_interval``."""

from __future__ import annotations

from datetime import timedelta

import pytest

from goatbeat.core.config import parse_settings
from goatbeat.core.errors import ConfigError


def test_by_default_nothing_is_pooled_and_polling_would_be_every_second() -> None:
    settings = parse_settings({})
    assert (settings.listen_database, settings.pooled) == (None, False)
    assert settings.poll_interval == timedelta(seconds=1)


def test_a_listen_database_implies_pooled() -> None:
    settings = parse_settings({"listen_database": " postgresql://u@db-primary:5432/app "})
    assert settings.listen_database == "postgresql://u@db-primary:5432/app"
    assert settings.pooled is True
    assert parse_settings({"listen_database": "postgres://h/x", "pooled": False}).pooled is True
    assert parse_settings({"listen_database": "direct"}).listen_database == "direct"  # an alias


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ({"listen_database": "mysql://h/db"}, ["listen_database:", "'mysql://h/db'", "direct"]),
        ({"listen_database": "not an alias"}, ["listen_database:", "'not an alias'"]),
        ({"listen_database": ""}, ["listen_database:", "''"]),
        ({"listen_database": 5432}, ["listen_database:", "5432"]),
        ({"pooled": "yes"}, ["pooled:", "'yes'", "True or False"]),
        ({"poll_interval": "10ms"}, ["poll_interval:", "'10ms'", "shorter than 0.1s"]),
        ({"poll_interval": "1h"}, ["poll_interval:", "'1h'", "longer than 600s"]),
    ],
)
def test_bad_values_are_named_with_the_field_and_the_value(
    raw: dict[str, object], words: list[str]
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_settings(raw)
    (problem,) = info.value.problems
    assert all(word in problem for word in words), problem


def test_open_store_takes_the_pooling_options_for_postgresql_only(tmp_path: object) -> None:
    from goatbeat.core.errors import InvalidValue
    from goatbeat.stores import open_store
    from goatbeat.stores.postgres import PostgresStore

    store = open_store("postgresql://u@pgbouncer:6432/app", listen_database="postgresql://u@db/app")
    assert isinstance(store, PostgresStore) and store.pooled  # nothing connects yet
    assert open_store("postgresql://u@pgbouncer:6432/app", pooled=True).pooled  # type: ignore[attr-defined]
    with pytest.raises(InvalidValue, match="listen_database.*'direct'.*Django"):
        open_store("postgresql://u@pgbouncer:6432/app", listen_database="direct")
    with pytest.raises(InvalidValue, match="pooled.*only a PostgreSQL database"):
        open_store("memory://", pooled=True)
    with pytest.raises(InvalidValue, match="listen_database.*only a PostgreSQL database"):
        open_store("sqlite:///x.db", listen_database="postgresql://u@db/app")


def test_a_refused_listen_database_never_shows_its_password() -> None:
    with pytest.raises(ConfigError) as info:
        parse_settings({"listen_database": "mysql://app:s3cret@db/app"})
    assert "s3cret" not in str(info.value) and "mysql://app:***@db/app" in str(info.value)
