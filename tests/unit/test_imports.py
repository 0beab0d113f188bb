"""Dependencies point inward: the core uses the standard library only, and `import goatbeat`
loads no optional package."""

from __future__ import annotations

import ast
import json
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


def core_files() -> list[Path]:
    files = sorted(CORE.rglob("*.py"))
    assert files, f"no sources found under {CORE}"
    return files


def test_the_walker_sees_relative_and_dynamic_imports(tmp_path: Path) -> None:
    # Guard the guard: a walker that saw nothing would let everything through.
    pkg = tmp_path / "goatbeat" / "core"
    pkg.mkdir(parents=True)
    sample = pkg / "sample.py"
    sample.write_text(
        "import json, os.path\n"
        "from . import errors\n"
        "from ..stores import memory\n"
        "from celery import Celery\n"
        "import importlib\n"
        "importlib.import_module('redis')\n"
        "def f():\n    import django\n"
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


def test_every_core_module_imports_alone_without_optional_packages() -> None:
    modules = [_module_name(p) for p in core_files()]
    code = f"import importlib\nfor name in {modules!r}:\n    importlib.import_module(name)"
    assert optional_modules_loaded_by(code) == []


def test_public_api_is_curated() -> None:
    assert sorted(goatbeat.__all__) == sorted(set(goatbeat.__all__))
    for name in goatbeat.__all__:
        assert hasattr(goatbeat, name), name
