"""``python manage.py goatbeat ...``: the standalone ``goatbeat`` command, on this project.

One implementation: the arguments go to the click group :data:`goatbeat.cli.cli` with a
context that says the app is this Django project, so every subcommand (``scheduler
[--once]``, ``publish [--dry-run]``, ``schedule list --json``, ``schedule run NAME``,
``schedule prune``, ``schedule delete NAME``, ``migrate``, ``import_celery_beat``, ``diff``,
``cutover`` ...) behaves exactly as ``goatbeat`` does.

Django's standard options are taken out of the line first, wherever they stand, and honoured:
``--settings`` and ``--pythonpath`` (applied by Django before the command runs),
``-v/--verbosity`` (goatbeat's log level: 0 errors, 1 the command's default, 2 INFO, 3 DEBUG),
``--no-color``/``--force-color``, ``--traceback`` (an error keeps its traceback) and
``--skip-checks`` (Django's system checks run first otherwise, as for Django's own commands;
never for the probe ``status --check``, which answers in one line).
The group hides and refuses ``--app`` and ``demo``, which make no sense here; ``--database``
is the target, as for the standalone command (instead of ``GOATBEAT["database"]``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import click
from django.core.management.base import BaseCommand, CommandError, CommandParser

__all__ = ["Command", "split_django_options"]

_FLAGS = {
    "--traceback": "traceback",
    "--no-color": "no_color",
    "--force-color": "force_color",
    "--skip-checks": "skip_checks",
}
_VALUED = {
    "--settings": "settings",
    "--pythonpath": "pythonpath",
    "--verbosity": "verbosity",
    "-v": "verbosity",
}
_VERBOSITIES = (0, 1, 2, 3)
_GROUP_VALUED = frozenset(
    {"--app", "--database", "--listen-database", "--log-format", "--log-level"}
)
"""The goatbeat group's options that take a value as the next word."""


def split_django_options(tokens: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """Django's standard options found in ``tokens`` (anywhere before a ``--``), and the
    rest, in order, for the click group. Raises :class:`goatbeat.cli.UserError` for a
    verbosity that is not 0-3 or an option missing its value."""
    from goatbeat.cli import UserError

    options: dict[str, Any] = {}
    rest: list[str] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if token == "--":
            rest.extend(tokens[index - 1 :])
            break
        name, eq, value = token.partition("=")
        if name in _FLAGS and not eq:
            options[_FLAGS[name]] = True
        elif name in _VALUED:
            if not eq:
                if index >= len(tokens):
                    raise UserError(f"{name} needs a value")
                value = tokens[index]
                index += 1
            options[_VALUED[name]] = value
        elif token.startswith("-v") and token[2:].isdigit():
            options["verbosity"] = token[2:]
        else:
            rest.append(token)
    if "verbosity" in options:
        raw = options["verbosity"]
        if not str(raw).isdigit() or int(raw) not in _VERBOSITIES:
            raise UserError(f"-v/--verbosity: {str(raw)!r} is not one of 0, 1, 2, 3")
        options["verbosity"] = int(raw)
    return options, rest


class _Parser(CommandParser):  # type: ignore[misc]
    """Django's parser for ``call_command``: Django's options are taken from anywhere on the
    line, everything else goes to the click group untouched."""

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        from goatbeat.cli import UserError

        try:
            options, rest = split_django_options([str(a) for a in (args or [])])
        except UserError as exc:
            raise CommandError(exc.format_message(), returncode=exc.exit_code) from None
        parsed = super().parse_args([], namespace)
        for key, value in options.items():
            setattr(parsed, key, value)
        parsed.goatbeat_args = rest
        return parsed


class Command(BaseCommand):  # type: ignore[misc]
    help = (
        "goatbeat on this project: scheduler [--once] | publish [--dry-run] | "
        "schedule list [--json] | schedule run NAME | schedule prune | schedule delete NAME | "
        "import_celery_beat | migrate "
        "(`manage.py goatbeat --help` lists every command)"
    )

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        self._prog_name = f"{prog_name} {subcommand}"
        parser = super().create_parser(prog_name, subcommand, add_help=False, **kwargs)
        # Django builds a CommandParser; its parse_args is the one part this command changes.
        parser.__class__ = _Parser
        return parser

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("goatbeat_args", nargs=argparse.REMAINDER)

    def print_help(self, prog_name: str, subcommand: str) -> None:
        """``manage.py help goatbeat``: goatbeat's own help, as this project offers it."""
        self._click(["--help"], {}, prog=f"{os.path.basename(prog_name)} {subcommand}")

    def run_from_argv(self, argv: list[str]) -> None:
        """From the command line, click owns the arguments, the help and the exit status
        (2 for a usage mistake, printed as one ``goatbeat: error:`` line), as ``goatbeat``."""
        from django.db import connections

        from goatbeat.cli import UserError

        self._called_from_command_line = True
        prog = f"{os.path.basename(argv[0])} {argv[1]}"
        try:
            options, rest = split_django_options(argv[2:])
        except UserError as exc:
            exc.show()
            sys.exit(exc.exit_code)
        try:
            self._django_options(options)
            if not options.get("skip_checks") and not _wants_help(rest) and not _is_probe(rest):
                self.check()
        except CommandError as exc:
            self._fail(exc, options)
        try:
            self._click(rest, options, prog=prog, standalone=True)
        finally:
            connections.close_all()

    def handle(self, *args: Any, **options: Any) -> None:
        argv = list(options.get("goatbeat_args") or []) + list(args)
        if not argv:
            argv = ["--help"]
        # click.echo writes to sys.stdout; call_command(stdout=...) expects self.stdout.
        with contextlib.redirect_stdout(self.stdout), contextlib.redirect_stderr(self.stderr):
            try:
                code = self._click(argv, options, prog=getattr(self, "_prog_name", None))
            except click.ClickException as exc:  # UserError included
                raise CommandError(exc.format_message(), returncode=exc.exit_code) from None
            except click.exceptions.Abort:
                raise CommandError("aborted", returncode=1) from None
        if isinstance(code, int) and code != 0:
            raise CommandError(f"goatbeat exited with status {code}", returncode=code)

    # -- helpers -------------------------------------------------------------------------------

    def _click(
        self,
        argv: list[str],
        options: dict[str, Any],
        *,
        prog: str | None,
        standalone: bool = False,
    ) -> Any:
        from goatbeat.cli import CliContext, cli

        verbosity = options.get("verbosity")
        context = CliContext(
            django=True,
            verbosity=None if verbosity is None else int(verbosity),
            traceback=bool(options.get("traceback")),
        )
        color: bool | None = None
        if options.get("no_color"):
            color = False
        elif options.get("force_color"):
            color = True
        return cli.main(
            args=argv,
            obj=context,
            prog_name=prog or "manage.py goatbeat",
            standalone_mode=standalone,
            color=color,
        )

    def _django_options(self, options: dict[str, Any]) -> None:
        """What BaseCommand.execute does with the options, for the command line path."""
        from django.core.management.base import handle_default_options
        from django.core.management.color import color_style, no_style

        if options.get("no_color") and options.get("force_color"):
            raise CommandError("The --no-color and --force-color options can't be used together.")
        # --settings and --pythonpath were applied by Django before it found this command;
        # applying them again is what every Django command does, and harmless.
        handle_default_options(
            argparse.Namespace(
                settings=options.get("settings"), pythonpath=options.get("pythonpath")
            )
        )
        if options.get("no_color"):
            self.style = no_style()
            self.stderr.style_func = None
        elif options.get("force_color"):
            self.style = color_style(force_color=True)

    def _fail(self, exc: CommandError, options: dict[str, Any]) -> NoReturn:
        """As Django's own run_from_argv reports a CommandError."""
        from django.core.management.base import SystemCheckError

        if options.get("traceback"):
            raise exc
        if isinstance(exc, SystemCheckError):
            self.stderr.write(str(exc), lambda x: x)
        else:
            self.stderr.write(f"{type(exc).__name__}: {exc}")
        sys.exit(exc.returncode)


def _wants_help(argv: Sequence[str]) -> bool:
    return not argv or "--help" in argv or "-h" in argv


def _is_probe(argv: Sequence[str]) -> bool:
    """``status --check``: a probe answers in one line, exactly as ``goatbeat status --check``
    does (0, 1, or 2 for "cannot tell"), so Django's multi-line system check report (exit 1,
    which would read as "unhealthy") is left out; a project whose ``schedules.py`` has
    problems still gets its one ``goatbeat: error:`` line and exit 2 from the command."""
    tokens = iter(argv)
    for token in tokens:
        if token in _GROUP_VALUED:
            next(tokens, None)  # its value
        elif not token.startswith("-"):
            return token == "status" and "--check" in argv
    return False
