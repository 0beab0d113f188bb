"""How the ``goatbeat`` command reports a failure: ONE line, ``goatbeat: error: ...``.

:class:`UserError` is a mistake the user can fix (exit status 2); :class:`OperationalError` is
not their mistake, a store that is down (exit status 1). :func:`translate` maps goatbeat's own
errors onto them, so a command may simply let a ``GoatbeatError`` propagate.
"""

from __future__ import annotations

from typing import IO, Any

import click

from goatbeat.core.errors import ConfigError, GoatbeatError, InvalidValue, NotFound

__all__ = ["OperationalError", "UserError", "translate"]


class UserError(click.ClickException):
    """A mistake the user can fix: printed as one line, exit status 2."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"goatbeat: error: {self.format_message()}", file=file, err=True)


class OperationalError(UserError):
    """Not the user's mistake (the store is unreachable...): one line too, exit status 1."""

    exit_code = 1


_USER_MISTAKES: tuple[type[BaseException], ...] = (InvalidValue, ConfigError, NotFound)


def translate(exc: BaseException) -> UserError | None:
    """The one-line error ``exc`` becomes; None for an exception that is a bug (it keeps its
    traceback)."""
    if isinstance(exc, UserError):
        return exc
    if isinstance(exc, _USER_MISTAKES):
        return UserError(str(exc))
    if isinstance(exc, GoatbeatError):
        return OperationalError(f"{type(exc).__name__}: {exc}")
    return None
