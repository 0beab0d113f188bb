"""The GOATBEAT setting is validated at startup, every problem reported at once."""

from __future__ import annotations

import django
import pytest
from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from goatbeat.django import conf
from goatbeat.django.versions import HAS_DJANGO_TASKS
from tests.django.conftest import manage


def _ready() -> None:
    apps.get_app_config("goatbeat").ready()


def test_project_settings_are_parsed_with_time_zone_as_default_timezone() -> None:
    parsed = conf.load()
    assert parsed.database == "default"
    assert parsed.core.timezone == "Europe/Paris"  # from TIME_ZONE: GOATBEAT names none
    assert parsed.core.scheduler_id == "test-scheduler"
    assert parsed.core.lease_ttl.total_seconds() == 5


def test_explicit_timezone_wins_over_time_zone() -> None:
    assert conf.load({"timezone": "Asia/Tokyo"}).core.timezone == "Asia/Tokyo"


def test_several_bad_values_are_reported_together_at_startup() -> None:
    bad = {
        "lease_ttl": "abc",
        "batch_size": 0,
        "timezone": "Mars/Olympus",
        "max_sleep": -1,
        "colour": "blue",
    }
    with override_settings(GOATBEAT=bad), pytest.raises(ImproperlyConfigured) as caught:
        _ready()
    message = str(caught.value)
    for expected in (
        "lease_ttl",
        "'abc'",
        "batch_size",
        "timezone",
        "Mars/Olympus",
        "max_sleep",
        "colour",
    ):
        assert expected in message
    # One line per problem, all in the same error.
    assert message.count("\n  - ") == 5
    _ready()  # the real settings are valid again once the override is gone


def test_a_non_postgresql_alias_is_rejected_with_a_clear_error() -> None:
    with pytest.raises(ImproperlyConfigured) as caught:
        conf.load({"database": "legacy"})
    message = str(caught.value)
    assert "'legacy'" in message and "sqlite3" in message and "PostgreSQL" in message


def test_an_unknown_alias_is_rejected_naming_the_known_ones() -> None:
    with pytest.raises(ImproperlyConfigured) as caught:
        conf.load({"database": "nope", "batch_size": "many"})
    message = str(caught.value)
    assert "'nope' is not a DATABASES alias (known: default, legacy)" in message
    assert "batch_size" in message


def test_lease_renewal_must_be_shorter_than_the_ttl() -> None:
    with pytest.raises(ImproperlyConfigured, match="lease_renew_interval"):
        conf.load({"lease_ttl": "10s", "lease_renew_interval": "10s"})


def test_a_pinned_submitter_must_be_a_known_backend() -> None:
    assert conf.load({"submitter": "celery"}).submitter == "celery"
    with pytest.raises(ImproperlyConfigured, match="submitter: 'carrier-pigeon'"):
        conf.load({"submitter": "carrier-pigeon"})


def test_goatbeat_must_be_a_dict() -> None:
    with pytest.raises(ImproperlyConfigured, match="must be a dict"):
        conf.load(["database", "default"])


def test_the_shards_setting_goes_through_the_core_settings() -> None:
    assert conf.load({"shards": 4}).core.shards == 4
    assert conf.load({}).core.shards == 1
    with pytest.raises(ImproperlyConfigured) as caught:
        conf.load({"shards": 0})
    assert "shards: 0 is out of range 1..256" in str(caught.value)


def test_a_project_without_a_goatbeat_setting_is_not_told_its_setting_is_invalid() -> None:
    # No GOATBEAT, and the default alias on SQLite: what a new project meets first.
    done = manage(
        "check", env={"DJANGO_SETTINGS_MODULE": "tests.django.project.settings_no_goatbeat"}
    )
    assert done.returncode != 0
    assert "GOATBEAT setting is invalid" not in done.stderr
    assert (
        "goatbeat.django cannot start: there is no GOATBEAT setting, and its defaults do not "
        "fit this project:\n  - database (GOATBEAT['database'], by default 'default'): "
        "'default' uses django.db.backends.sqlite3; goatbeat needs PostgreSQL"
    ) in done.stderr


@pytest.mark.skipif(not HAS_DJANGO_TASKS, reason="Django 5.2: see the test below")
def test_django_tasks_can_be_pinned_where_django_has_them() -> None:
    assert conf.load({"submitter": "django_tasks"}).submitter == "django_tasks"


@pytest.mark.skipif(HAS_DJANGO_TASKS, reason="this Django has Django Tasks")
def test_django_tasks_are_refused_by_name_on_django_5_2() -> None:
    with pytest.raises(ImproperlyConfigured) as caught:
        conf.load({"submitter": "django_tasks", "submitter_options": {"django_tasks": {}}})
    message = str(caught.value)
    version = django.get_version()
    assert (
        f"  - submitter: 'django_tasks' needs Django 6.0 or later (Django Tasks, django.tasks); "
        f"this project runs Django {version}"
    ) in message
    assert "  - submitter_options: 'django_tasks' needs Django 6.0 or later" in message
    # Nothing else is refused: the other backends work on 5.2.
    assert conf.load({"submitter": "celery"}).submitter == "celery"


@pytest.mark.skipif(HAS_DJANGO_TASKS, reason="this Django has Django Tasks")
def test_a_django_tasks_route_is_refused_by_name_on_django_5_2() -> None:
    from goatbeat.django.submitter import DjangoRoutingSubmitter

    with pytest.raises(LookupError, match="the django_tasks backend needs Django 6.0 or later"):
        DjangoRoutingSubmitter().submitter_for("django_tasks")
