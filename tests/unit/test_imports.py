"""Dependencies point inward: the core uses the standard library only; nothing below the CLI
and the Django app imports them; no module takes another module's private name; and neither
`import goatbeat` nor `goatbeat --help` loads an optional package. docs/architecture.md draws
the layers these tests hold."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import goatbeat

PACKAGE = Path(goatbeat.__file__).resolve().parent
CORE = PACKAGE / "core"

OPTIONAL = (
    "django",
    "celery",
    "kombu",
    "psycopg",
    "click",
    "redis",
    "rq",
    "dramatiq",
    "ephem",
    "croniter",
    "cronsim",
    "cron_descriptor",
    "prometheus_client",
)


def _module_name(path: Path, root: Path = PACKAGE.parent) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, root: Path = PACKAGE.parent) -> list[tuple[int, str]]:
    """Every module ``path`` imports, absolute, with its line (relative imports resolved
    against ``root``, the directory holding the ``goatbeat`` package)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = _module_name(path, root).split(".")
    if path.name != "__init__.py":
        package.pop()
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            found.append((node.lineno, name))
            # ``from goatbeat import core`` imports a module too.
            found.extend((node.lineno, f"{name}.{a.name}") for a in node.names if a.name != "*")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
            in ("import_module", "__import__")
        ):
            # A dynamic import is an import too; only literal names can be checked.
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.append((node.lineno, arg.value))
            else:
                found.append((node.lineno, "<dynamic import>"))
    return found


UPPER = ("goatbeat.cli", "goatbeat.django")
"""The top of the house: the CLI and the Django app. They may import everything below."""

BELOW_THE_TOP = ("core", "stores", "submitters", "importers", "compat", "metrics", "completion")
"""Packages that must never reach up to :data:`UPPER`, not even lazily inside a function."""

LAYERS: dict[str, int] = {
    "core": 0,
    "stores": 1,
    "submitters": 1,
    "conversion": 1,
    "metrics": 1,
    "declaring": 1,
    "publication": 1,
    "beat": 2,
    "importers": 2,
    "idempotency": 2,
    "completion": 2,
    "compat": 3,
    "diff": 3,
    "goatbeat": 3,  # the package's face: goatbeat/__init__.py
    "django": 4,
    "cli": 5,
    "__main__": 6,
}
"""The floors of docs/architecture.md: a part imports only parts on lower floors."""

ENTRY_POINTS = {"goatbeat/django/management/commands/goatbeat.py": "cli"}
"""The one import that runs up, on purpose: ``manage.py goatbeat`` is a way into the CLI (as
``python -m goatbeat`` is), and lives in the Django app only because Django looks there."""

_MODULE_STRING = re.compile(r"goatbeat(\.\w+)+(:[\w.]+)?")


def module_strings(path: Path) -> list[tuple[int, str]]:
    """String constants of ``path`` that name a goatbeat module (``"pkg.mod"`` or
    ``"pkg.mod:attr"``): what a lazy loader would import by name."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [
        (node.lineno, node.value.partition(":")[0])
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and _MODULE_STRING.fullmatch(node.value)
    ]


def private_imports(path: Path, root: Path = PACKAGE.parent) -> list[tuple[int, str, str]]:
    """``(line, name, owner)`` for every private name ``path`` imports (a module or attribute
    whose name starts with one underscore), ``owner`` being the module or package it is
    private to; one row per import and owner."""
    found: dict[tuple[int, str], str] = {}
    for line, name in imports_of(path, root):
        parts = name.split(".")
        for i, part in enumerate(parts):
            if part.startswith("_") and not part.startswith("__"):
                found.setdefault((line, ".".join(parts[:i])), name)
                break
    return [(line, name, owner) for (line, owner), name in found.items()]


def package_files(*packages: str) -> list[Path]:
    files = sorted(f for name in packages for f in (PACKAGE / name).rglob("*.py"))
    assert files, f"no sources found under {packages}"
    return files


def core_files() -> list[Path]:
    files = sorted(CORE.rglob("*.py"))
    assert files, f"no sources found under {CORE}"
    return files


def sample_module(tmp_path: Path, package: str, source: str) -> Path:
    """``goatbeat/<package>/sample.py`` under ``tmp_path``, holding ``source``."""
    pkg = tmp_path / "goatbeat" / package
    pkg.mkdir(parents=True)
    sample = pkg / "sample.py"
    sample.write_text(source)
    return sample


def test_the_walker_sees_relative_and_dynamic_imports(tmp_path: Path) -> None:
    # Guard the guard: a walker that saw nothing would let everything through.
    sample = sample_module(
        tmp_path,
        "core",
        "import json, os.path\n"
        "from . import errors\n"
        "from ..stores import memory\n"
        "from celery import Celery\n"
        "import importlib\n"
        "importlib.import_module('redis')\n"
        "def f():\n    import django\n",
    )
    names = {name for _, name in imports_of(sample, root=tmp_path)}
    assert {"json", "os.path", "goatbeat.core", "goatbeat.core.errors", "goatbeat.stores"} <= names
    assert {"goatbeat.stores.memory", "celery", "redis", "django"} <= names


@pytest.mark.parametrize("path", core_files(), ids=lambda p: p.name)
def test_core_imports_only_the_standard_library_and_goatbeat_core(path: Path) -> None:
    bad = []
    for line, name in imports_of(path):
        top = name.split(".")[0]
        if top == "goatbeat":
            # Dependencies point inward: the core never reaches out to adapters.
            if name != "goatbeat" and not name.startswith("goatbeat.core"):
                bad.append(f"{path.name}:{line}: {name} (outside goatbeat.core)")
        elif top not in sys.stdlib_module_names:
            bad.append(f"{path.name}:{line}: {name} (not in the standard library)")
    assert not bad, "\n".join(bad)


def test_the_layer_walker_sees_lazy_imports_module_strings_and_private_names(
    tmp_path: Path,
) -> None:
    # Guard the guard, as above: each way of reaching up or across must be seen.
    sample = sample_module(
        tmp_path,
        "importers",
        '"""Docstrings may name goatbeat.cli.migration freely."""\n'
        "from goatbeat.importers import _mine\n"
        "from goatbeat.stores._shared import helper\n"
        "def f():\n"
        "    from goatbeat.django.registry import get_store\n"
        "    from goatbeat.compat.beat import _redact\n"
        "    return 'goatbeat.cli.context:load_app'\n",
    )
    assert "goatbeat.django.registry" in {name for _, name in imports_of(sample, root=tmp_path)}
    assert [name for _, name in module_strings(sample)] == ["goatbeat.cli.context"]
    assert [(name, owner) for _, name, owner in private_imports(sample, root=tmp_path)] == [
        ("goatbeat.importers._mine", "goatbeat.importers"),
        ("goatbeat.stores._shared", "goatbeat.stores"),
        ("goatbeat.compat.beat._redact", "goatbeat.compat.beat"),
    ]


@pytest.mark.parametrize(
    "path",
    package_files(*BELOW_THE_TOP),
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_nothing_below_the_cli_and_the_django_app_imports_them(path: Path) -> None:
    reached = imports_of(path) + module_strings(path)
    bad = [
        f"{path.relative_to(PACKAGE)}:{line}: {name}"
        for line, name in reached
        if any(name == top or name.startswith(top + ".") for top in UPPER)
    ]
    assert not bad, "imports reaching up to the CLI or the Django app:\n" + "\n".join(bad)


DIALECT_MAY_IMPORT = (
    "goatbeat.core",
    "goatbeat.stores.dialect",  # the contract it answers
    "goatbeat.stores.dialects",
    "goatbeat.stores.definitions",
    "goatbeat.stores.rows",
    "goatbeat.stores.schema",  # the SQL files
)
"""What a dialect (goatbeat/stores/dialects/) may import of goatbeat: the core, the dialect
contract, and the stores' definition and row modules. What an operation means lives in the
one store (goatbeat/stores/store.py) and its planning modules, never in a dialect."""


def _within(name: str, modules: tuple[str, ...]) -> bool:
    return any(name == m or name.startswith(m + ".") for m in modules)


@pytest.mark.parametrize(
    "path", package_files("stores/dialects"), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_a_dialect_imports_only_the_core_the_contract_and_the_row_modules(path: Path) -> None:
    bad = [
        f"{path.relative_to(PACKAGE)}:{line}: {name}"
        for line, name in imports_of(path) + module_strings(path)
        if name.split(".")[0] == "goatbeat"
        # ``from goatbeat.stores import schema`` names the package too; its modules count.
        and name not in ("goatbeat", "goatbeat.stores")
        and not _within(name, DIALECT_MAY_IMPORT)
    ]
    assert not bad, "a dialect reaching into the store's meaning:\n" + "\n".join(bad)


def test_nothing_outside_the_stores_imports_a_dialect() -> None:
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.is_relative_to(PACKAGE / "stores"):
            continue
        for line, name in imports_of(path) + module_strings(path):
            if _within(name, ("goatbeat.stores.dialects", "goatbeat.stores.dialect")):
                bad.append(f"{path.relative_to(PACKAGE)}:{line}: {name}")
    assert not bad, "dialects are the stores' own:\n" + "\n".join(bad)


def test_the_dialect_rules_see_a_dialect_reaching_up(tmp_path: Path) -> None:
    # Guard the guard: the rule must tell the allowed imports from the others.
    sample = sample_module(
        tmp_path,
        "stores/dialects",
        "from goatbeat.core.model import Schedule\n"
        "from goatbeat.stores.rows import read_schedule\n"
        "from goatbeat.stores.claims import plan_batch\n"
        "import psycopg\n",
    )
    names = [n for _, n in imports_of(sample, root=tmp_path) if n.startswith("goatbeat.")]
    assert [n for n in names if not _within(n, DIALECT_MAY_IMPORT)] == [
        "goatbeat.stores.claims",
        "goatbeat.stores.claims.plan_batch",
    ]


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_every_import_points_down_the_layers() -> None:
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(PACKAGE.parent))
        part = _part(_module_name(path))
        assert part in LAYERS, f"{where}: which layer is {part!r}? Add it to LAYERS and the doc"
        for line, name in imports_of(path):
            if name.split(".")[0] != "goatbeat" or _part(name) == part:
                continue
            target = _part(name)
            if ENTRY_POINTS.get(where) == target:
                continue
            if LAYERS.get(target, -1) >= LAYERS[part]:
                bad.append(f"{where}:{line}: {part} (floor {LAYERS[part]}) imports {name}")
    assert not bad, "imports that do not point down:\n" + "\n".join(bad)


def test_no_module_imports_a_private_name_of_another_module() -> None:
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        importer = _module_name(path)
        for line, name, owner in private_imports(path):
            # A package may share private modules among its own modules (submitters._celery_app),
            # its __init__ included (which may re-export a name publicly).
            inside = importer == owner or importer.startswith(owner + ".")
            if owner.startswith("goatbeat") and not inside:
                bad.append(f"{path.relative_to(PACKAGE)}:{line}: {name} (private to {owner})")
    assert not bad, "\n".join(bad)


def optional_modules_loaded_by(code: str) -> list[str]:
    """Run ``code`` in a fresh interpreter; the modules of optional packages it left loaded."""
    probe = (
        f"{code}\nimport json, sys\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {list(OPTIONAL)!r})))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=False,
        cwd=PACKAGE.parent,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    loaded: list[str] = json.loads(result.stdout)
    return loaded


def test_import_goatbeat_loads_no_optional_package() -> None:
    loaded = optional_modules_loaded_by(
        "import goatbeat, goatbeat.core.triggers, goatbeat.core.misfire, goatbeat.core.config"
    )
    assert loaded == [], f"import goatbeat loaded optional packages: {loaded}"


def test_goatbeat_help_loads_no_optional_package_but_click() -> None:
    code = (
        "import contextlib, io\n"
        "from goatbeat.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main(['--help'])"
    )
    loaded = [m for m in optional_modules_loaded_by(code) if m.split(".")[0] != "click"]
    assert loaded == [], f"goatbeat --help loaded optional packages: {loaded}"


def test_the_command_line_loads_the_migration_toolkit_only_for_its_commands() -> None:
    # The scheduler starts sooner without them (goatbeat scheduler's start-up is timed).
    code = (
        "import sys\n"
        "import goatbeat.cli\n"
        "print(sorted(m for m in sys.modules if m.startswith(('goatbeat.importers',"
        " 'goatbeat.diff', 'goatbeat.django.beat_sources'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PACKAGE.parent
    )
    assert out.stdout.strip() == "[]"


def test_every_core_module_imports_alone_without_optional_packages() -> None:
    modules = [_module_name(p) for p in core_files()]
    code = f"import importlib\nfor name in {modules!r}:\n    importlib.import_module(name)"
    assert optional_modules_loaded_by(code) == []


def test_public_api_is_curated() -> None:
    assert sorted(goatbeat.__all__) == sorted(set(goatbeat.__all__))
    for name in goatbeat.__all__:
        assert hasattr(goatbeat, name), name


@pytest.mark.parametrize("dialect", ["postgres", "sqlite"])
def test_a_dialects_primitives_do_not_import_the_connections_that_import_them(dialect: str) -> None:
    # dialects/<name>.py opens connections and imports dialects/<name>_tx.py for the
    # primitives; the primitives name what they need of it in a Protocol, so the two are
    # not a circle (not even under TYPE_CHECKING).
    path = PACKAGE / "stores" / "dialects" / f"{dialect}_tx.py"
    back = [
        (line, name)
        for line, name in imports_of(path)
        if name == f"goatbeat.stores.dialects.{dialect}"
    ]
    assert not back, f"{path.name} imports its dialect's connections: {back}"
