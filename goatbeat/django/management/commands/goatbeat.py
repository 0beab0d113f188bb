"""``python manage.py goatbeat ...``: the standalone ``goatbeat`` command, on this project.

One implementation: the arguments go, untouched, to the click group :data:`goatbeat.cli.cli`
with the project's registry (:func:`goatbeat.django.cli_app`) as the app, so every subcommand
(``scheduler [--once]``, ``publish [--dry-run]``, ``schedule list --json``, ``schedule run
NAME``, ``schedule prune``, ``schedule delete NAME``, ``migrate``, ``import_celery_beat``,
``diff`` ...) behaves exactly as ``goatbeat`` does.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from typing import Any

import click
from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):  # type: ignore[misc]
    help = (
        "goatbeat on this project: scheduler [--once] | publish [--dry-run] | "
        "schedule list [--json] | schedule run NAME | schedule prune | schedule delete NAME | "
        "import_celery_beat | migrate "
        "(`manage.py goatbeat --help` lists every command)"
    )
    # The arguments belong to the click group, which prints its own help.
    requires_system_checks: list[str] = []

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, add_help=False, **kwargs)
        self._prog_name = f"{prog_name} {subcommand}"
        return parser

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("goatbeat_args", nargs=argparse.REMAINDER)

    def run_from_argv(self, argv: list[str]) -> None:
        """From the command line, click owns the arguments, the help and the exit status
        (2 for a usage mistake, printed as one ``goatbeat: error:`` line), as ``goatbeat``."""
        from django.db import connections

        from goatbeat.cli import CliContext, cli
        from goatbeat.django import cli_app

        prog = f"{os.path.basename(argv[0])} {argv[1]}"
        try:
            cli.main(args=argv[2:], obj=CliContext(app=cli_app()), prog_name=prog)
        finally:
            connections.close_all()

    def handle(self, *args: Any, **options: Any) -> None:
        from goatbeat.cli import CliContext, UserError, cli
        from goatbeat.django import cli_app

        argv = list(options.get("goatbeat_args") or []) + list(args)
        if not argv:
            argv = ["--help"]
        context = CliContext(app=cli_app())
        # click.echo writes to sys.stdout; call_command(stdout=...) expects self.stdout.
        with contextlib.redirect_stdout(self.stdout), contextlib.redirect_stderr(self.stderr):
            try:
                code = cli.main(
                    args=argv,
                    obj=context,
                    prog_name=getattr(self, "_prog_name", "manage.py goatbeat"),
                    standalone_mode=False,
                )
            except UserError as exc:
                raise CommandError(exc.format_message(), returncode=exc.exit_code) from None
            except click.ClickException as exc:
                raise CommandError(exc.format_message(), returncode=exc.exit_code) from None
            except click.exceptions.Abort:
                raise CommandError("aborted", returncode=1) from None
        if isinstance(code, int) and code != 0:
            raise CommandError(f"goatbeat exited with status {code}", returncode=code)
