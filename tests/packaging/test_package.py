"""The package as PyPI would get it: ``python -m build`` makes an sdist and a wheel that
``twine check --strict`` passes; the sdist carries the changelog, the license and the docs;
the metadata has the license, the classifiers and the project URLs; every link of the long
description (the README) is absolute, into the repository, and points at something that
exists; the wheel installs into a fresh venv, whose ``goatbeat`` runs ``--help``, ``migrate``
and one scheduler pass on a real PostgreSQL; pip on an older Python refuses it naming 3.12."""

from __future__ import annotations

import email
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.message import Message
from pathlib import Path
from typing import Any

import pytest

import goatbeat

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
REPOSITORY = "https://github.com/goatbeat/goatbeat"
"""The project's address, as pyproject.toml's [project.urls] give it."""
RAW = "https://raw.githubusercontent.com/goatbeat/goatbeat/main/"
VERSION = goatbeat.__version__


def run(*cmd: str | Path, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, check=False, **kwargs
    )
    assert done.returncode == 0, f"{cmd}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--outdir", out, ROOT)
    return out


def wheel_of(dist: Path) -> Path:
    return dist / f"goatbeat-{VERSION}-py3-none-any.whl"


def metadata(dist: Path) -> Message:
    with zipfile.ZipFile(wheel_of(dist)) as whl:
        return email.message_from_bytes(whl.read(f"goatbeat-{VERSION}.dist-info/METADATA"))


def test_build_makes_an_sdist_and_a_wheel_that_twine_check_strict_passes(dist: Path) -> None:
    sdist = dist / f"goatbeat-{VERSION}.tar.gz"
    assert sdist.exists() and wheel_of(dist).exists()
    checked = run(sys.executable, "-m", "twine", "check", "--strict", sdist, wheel_of(dist))
    assert checked.stdout.count("PASSED") == 2, checked.stdout


def test_the_sdist_carries_the_changelog_the_license_and_the_docs(dist: Path) -> None:
    with tarfile.open(dist / f"goatbeat-{VERSION}.tar.gz") as sdist:
        names = {n.partition("/")[2] for n in sdist.getnames()}
    for path in ("README.md", "CHANGELOG.md", "LICENSE", "pyproject.toml",
                 "docs/django.md", "docs/operations.md", "docs/migration/README.md",
                 "docs/admin-schedules.png", "goatbeat/stores/sql/postgres/0001_initial.sql",
                 "goatbeat/django/templates/admin/goatbeat/schedule/pause.html"):  # fmt: skip
        assert path in names, path
    assert not any(n.startswith(("tests/", "bench/")) for n in names)


def test_the_wheel_has_the_license_classifiers_urls_and_its_data(dist: Path) -> None:
    meta = metadata(dist)
    assert meta["Version"] == VERSION
    assert meta["License-Expression"] == "MIT"
    assert meta["Requires-Python"] == ">=3.12"
    classifiers = meta.get_all("Classifier") or []
    for wanted in ("Framework :: Django :: 5.2", "Framework :: Django :: 6.1",
                   "Programming Language :: Python :: 3.12", "Typing :: Typed"):  # fmt: skip
        assert wanted in classifiers
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
    assert urls["Homepage"] == REPOSITORY
    assert set(urls) >= {"Documentation", "Changelog", "Issues"}
    with zipfile.ZipFile(wheel_of(dist)) as whl:
        names = set(whl.namelist())
    assert f"goatbeat-{VERSION}.dist-info/licenses/LICENSE" in names
    for path in ("goatbeat/py.typed", "goatbeat/stores/sql/postgres/0007_schedule_fillfactor.sql",
                 "goatbeat/stores/sql/sqlite/queries.sql", "goatbeat/django/static/goatbeat/admin.css",
                 "goatbeat/django/migrations/0007_schedule_fillfactor.py"):  # fmt: skip
        assert path in names, path


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_every_link_of_the_long_description_is_absolute_and_points_at_something(
    dist: Path,
) -> None:
    description = metadata(dist).get_payload()
    assert isinstance(description, str) and description.startswith("# goatbeat")
    links = re.findall(r"!?\[[^\]]*\]\(([^)\s]+)\)", description)
    assert len(links) > 20
    anchors = {_slug(h) for h in re.findall(r"^#+ (.+)$", description, re.MULTILINE)}
    for link in links:
        assert link.startswith(("https://", "http://")), f"relative link {link!r}"
        if link.startswith(RAW):
            assert (ROOT / link[len(RAW) :]).is_file(), link
        elif link.startswith(REPOSITORY + "#"):
            assert link.partition("#")[2] in anchors, link
        elif link.startswith(REPOSITORY + "/"):
            found = re.fullmatch(re.escape(REPOSITORY) + r"/(blob|tree)/main/([^#]+)(#.*)?", link)
            assert found, link
            target = ROOT / found.group(2)
            assert target.is_file() if found.group(1) == "blob" else target.is_dir(), link


@pytest.mark.postgres
def test_the_wheel_installs_into_a_fresh_venv_and_runs_a_scheduler_pass(
    dist: Path, tmp_path: Path, pg_dsn: str
) -> None:
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv)
    python, command = venv / "bin/python", venv / "bin/goatbeat"
    run(python, "-m", "pip", "install", "-q", f"{wheel_of(dist)}[postgres]")
    project = tmp_path / "project"
    project.mkdir()
    (project / "probeapp.py").write_text(
        "import os\nfrom pathlib import Path\n\nfrom goatbeat.beat import Beat\n\n"
        "beat = Beat(os.environ['PROBE_DB'], submitter='inline')\n\n\n"
        "def tick() -> None:\n    Path(os.environ['PROBE_TRACE']).write_text('ran')\n\n\n"
        "beat.schedule(name='tick', task=tick, every='1h')\n"
    )
    trace = tmp_path / "trace"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOATBEAT", "DJANGO"))}
    env.pop("PYTHONPATH", None)
    env.update(PROBE_DB=pg_dsn, PROBE_TRACE=str(trace))

    def goatbeat_cmd(*args: str) -> subprocess.CompletedProcess[str]:
        return run(command, *args, cwd=project, env=env)

    where = run(python, "-c", "import goatbeat; print(goatbeat.__file__)", cwd=project, env=env)
    assert where.stdout.startswith(str(venv)), where.stdout  # not the checkout
    assert "scheduler" in goatbeat_cmd("--help").stdout
    assert goatbeat_cmd("--version").stdout.startswith(f"goatbeat {VERSION} (schema ")
    migrated = goatbeat_cmd("--app", "probeapp:beat", "migrate")
    assert "schema up to date" in migrated.stdout
    goatbeat_cmd("--app", "probeapp:beat", "publish")
    goatbeat_cmd("--app", "probeapp:beat", "schedule", "run", "tick")
    once = goatbeat_cmd("--app", "probeapp:beat", "scheduler", "--once")
    result = json.loads(once.stdout.strip().splitlines()[-1])
    assert result["leader"] is True and result["submitted"] == 1, result
    assert trace.read_text() == "ran"


def _older_python() -> str | None:
    for name in ("python3.11", "python3.10"):
        found = shutil.which(name)
        if found and subprocess.run([found, "-m", "pip", "--version"], capture_output=True,
                                    check=False).returncode == 0:  # fmt: skip
            return found
    return None


def test_pip_on_an_older_python_refuses_the_wheel_naming_python_3_12(
    dist: Path, tmp_path: Path
) -> None:
    older = _older_python()
    if older is None:
        pytest.skip("no Python older than 3.12 with pip on this machine")
    done = subprocess.run(
        [older, "-m", "pip", "install", "--no-deps", "--dry-run", "--target", str(tmp_path),
         str(wheel_of(dist))],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "requires a different Python" in done.stderr and "'>=3.12'" in done.stderr, done.stderr
