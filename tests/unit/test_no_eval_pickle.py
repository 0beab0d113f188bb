"""No code path in goatbeat deserialises or evaluates untrusted text.

Schedules, args and settings come from databases, admin forms and config files: JSON only.
Nothing is allow-listed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import goatbeat

PACKAGE = Path(goatbeat.__file__).resolve().parent

FORBIDDEN_MODULES = frozenset({"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill"})
FORBIDDEN_CALLS = frozenset({"eval", "exec"})


def violations(source: str, filename: str) -> list[str]:
    tree = ast.parse(source, filename=filename)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in FORBIDDEN_MODULES:
                    found.append(f"{filename}:{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            module = (node.module or "").split(".")[0]
            if module in FORBIDDEN_MODULES:
                found.append(f"{filename}:{node.lineno}: from {node.module} import ...")
            for alias in node.names:
                if alias.name in FORBIDDEN_MODULES | FORBIDDEN_CALLS:
                    found.append(
                        f"{filename}:{node.lineno}: from {node.module} import {alias.name}"
                    )
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in FORBIDDEN_CALLS | {"__import__"}:
                if func.id != "__import__" or _names_forbidden_module(node):
                    found.append(f"{filename}:{node.lineno}: {func.id}(...)")
            elif isinstance(func, ast.Attribute) and func.attr in FORBIDDEN_CALLS:
                # builtins.eval(...), getattr-free spellings of the same thing
                found.append(f"{filename}:{node.lineno}: .{func.attr}(...)")
            elif (
                isinstance(func, ast.Attribute)
                and func.attr == "import_module"
                and _names_forbidden_module(node)
            ):
                found.append(f"{filename}:{node.lineno}: import_module of a forbidden module")
        elif isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_MODULES:
            # e.g. ``kombu.serialization.pickle`` reached through another module
            found.append(f"{filename}:{node.lineno}: attribute .{node.attr}")
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_MODULES | FORBIDDEN_CALLS:
            # ``run = eval`` then ``run(text)``
            found.append(f"{filename}:{node.lineno}: name {node.id}")
    return found


def _names_forbidden_module(call: ast.Call) -> bool:
    arg = call.args[0] if call.args else None
    return (
        isinstance(arg, ast.Constant)
        and isinstance(arg.value, str)
        and arg.value.split(".")[0] in FORBIDDEN_MODULES
    )


@pytest.mark.parametrize(
    "snippet",
    [
        "import pickle",
        "import marshal as m",
        "from shelve import open",
        "from pickle import loads",
        "eval('1')",
        "exec(code)",
        "import builtins\nbuiltins.eval('1')",
        "run = eval",
        "import importlib\nimportlib.import_module('pickle')",
        "__import__('marshal')",
        "import kombu\nkombu.serialization.pickle.loads(b'')",
    ],
)
def test_the_checker_catches_each_spelling(snippet: str) -> None:
    assert violations(snippet, "sample.py"), snippet


def test_the_checker_leaves_ordinary_code_alone() -> None:
    assert violations("import json\njson.loads('{}')\nevaluate = 1\n", "ok.py") == []


def test_no_pickle_eval_exec_marshal_or_shelve_anywhere_in_goatbeat() -> None:
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 5, f"suspiciously few sources under {PACKAGE}"
    found: list[str] = []
    for path in files:
        found.extend(violations(path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE))))
    assert not found, "\n".join(found)
