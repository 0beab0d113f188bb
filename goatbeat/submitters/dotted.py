"""Finding the object a task path names (``"pkg.module.func"`` or ``"pkg.module:Class.method"``).

Shared by the inline and Django Tasks submitters and by the Django router, so one task path
resolves to the same object, with the same error, whichever of them reads it.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["import_dotted"]


def import_dotted(path: str) -> Any:
    """The object named by ``path``. Raises ``LookupError`` naming what is missing."""
    module_name, _, attrs = path.partition(":")
    if attrs:
        candidates = [(module_name, attrs)]
    else:
        parts = path.split(".")
        # The longest importable module prefix wins: "a.b.func" is module "a.b", attr "func".
        candidates = [
            (".".join(parts[:i]), ".".join(parts[i:])) for i in range(len(parts) - 1, 0, -1)
        ]
    problem = f"cannot import any module of {path!r}"
    for module_name, attr_path in candidates:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name != module_name and not module_name.startswith(exc.name + "."):
                # The module exists but imports something missing: say that, not "not found".
                raise LookupError(f"importing {module_name!r} failed: {exc}") from None
            problem = f"no module named {module_name!r}"
            continue
        # The longest module that imports is the one the path means: name the first piece
        # missing from it ("module 'reports.tasks' has no attribute 'heartbeet'"), rather than
        # trying shorter modules, whose error would name the wrong module and attribute.
        obj: Any = module
        owner = f"module {module_name!r}"
        walked = module_name
        for attr in attr_path.split("."):
            found = getattr(obj, attr, _MISSING)
            if found is _MISSING:
                raise LookupError(f"{owner} has no attribute {attr!r}")
            obj = found
            walked = f"{walked}.{attr}"
            owner = repr(walked)
        return obj
    raise LookupError(problem)


_MISSING = object()
