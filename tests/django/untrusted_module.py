"""A module the admin tests name in a schedule's task: the web process must never import it
(a form that imported what it was given could run any module's import-time code)."""

IMPORTED = True


def run() -> None:
    return None
