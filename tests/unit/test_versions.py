"""Versions that mean something: goatbeat 0.MINOR.PATCH needs schema version MINOR (the SQL
migrations of both dialects and the Django migrations all stop there), the changelog has a
section for the release saying what it needs, and ``goatbeat --version`` says both."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

import goatbeat
from goatbeat.cli import cli
from goatbeat.stores import schema

ROOT = Path(__file__).resolve().parents[2]
RELEASE = re.compile(r"^## \[(\d+)\.(\d+)\.(\d+)\] - \d{4}-\d{2}-\d{2}$", re.MULTILINE)


def test_the_minor_version_is_the_schema_version_the_release_needs() -> None:
    major, minor, patch = (int(n) for n in goatbeat.__version__.split("."))
    assert major == 0  # from 1.0 on, docs and this test say otherwise
    assert schema.latest_version("postgres") == schema.latest_version("sqlite") == minor
    django_migrations = sorted(p.name for p in (ROOT / "goatbeat/django/migrations").glob("0*.py"))
    assert django_migrations[-1].startswith(f"{minor:04d}_")
    assert len(django_migrations) == minor


def test_every_release_in_the_changelog_says_which_schema_it_needs() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    releases = list(RELEASE.finditer(text))
    assert releases, "no release section"
    assert releases[0].group(0).startswith(f"## [{goatbeat.__version__}] - ")
    ends = [m.start() for m in releases[1:]] + [len(text)]
    for match, end in zip(releases, ends, strict=True):
        body = text[match.end() : end]
        needs = re.search(r"\*\*Needs\*\*: schema version (\d+)", body)
        assert needs, f"{match.group(0)} has no **Needs**: schema version line"
        assert int(needs.group(1)) == int(match.group(2)), match.group(0)
    assert text.index("## [Unreleased]") < releases[0].start()


def test_goatbeat_version_names_the_release_and_its_schema() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.output == (
        f"goatbeat {goatbeat.__version__} (schema {schema.latest_version('postgres')})\n"
    )
