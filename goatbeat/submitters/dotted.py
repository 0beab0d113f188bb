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
            continue
        obj: Any = module
        for attr in attr_path.split("."):
            obj = getattr(obj, attr, _MISSING)
            if obj is _MISSING:
                problem = f"module {module_name!r} has no attribute {attr_path!r}"
                break
        else:
            return obj
    raise LookupError(problem)


_MISSING = object()
