"""What the ``troupe`` commands share: the group class, option sections, errors, value types.

Every command returns its exit status (an ``int``); :class:`Commands` ends the process
with it. Errors that are the user's (a bad configuration, a missing file) are printed as
``troupe COMMAND: message`` on stderr by :func:`fail`, with status 2 for usage and
configuration errors, as click does for bad options.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NoReturn

import click

__all__ = ["Commands", "JsonObject", "Numbers", "SectionedCommand", "fail", "usage_unless_command"]


class Commands(click.Group):
    """A group whose commands are listed in the order they were added, and whose
    command's return value is the process exit status."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)

    def invoke(self, ctx: click.Context) -> Any:
        status = super().invoke(ctx)
        ctx.exit(int(status or 0))


def usage_unless_command(ctx: click.Context) -> None:
    """A group's callback: without a command, print the help (on stdout) and exit with status 2."""
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())
        ctx.exit(2)


class SectionedCommand(click.Command):
    """A command whose ``--help`` lists its options under headings.

    Args:
        sections: heading -> the names of its parameters (as in the callback); options not
            named anywhere (``--help``) come last, under "Other options".
    """

    def __init__(self, *args: Any, sections: dict[str, Sequence[str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sections = sections

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        section_of = {name: title for title, names in self.sections.items() for name in names}
        rows: dict[str, list[tuple[str, str]]] = {title: [] for title in [*self.sections, "Other options"]}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                rows[section_of.get(param.name or "", "Other options")].append(record)
        for title, records in rows.items():
            if records:
                with formatter.section(title):
                    formatter.write_dl(records)


def fail(command: str, message: str, status: int = 1) -> NoReturn:
    """Print ``troupe COMMAND: message`` on stderr and end the command with ``status``."""
    click.echo(f"troupe {command}: {message}", err=True)
    raise click.exceptions.Exit(status)


class Numbers(click.ParamType):
    """Comma-separated positive numbers (``1,16,64``), as a tuple of ``int`` or ``float``."""

    def __init__(self, kind: type[int] | type[float]) -> None:
        self.kind = kind
        self.name = "integers" if kind is int else "numbers"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[Any, ...]:
        if isinstance(value, tuple):
            return value
        try:
            values = tuple(self.kind(v) for v in str(value).split(",") if v.strip())
        except ValueError:
            self.fail(f"expected comma-separated {self.name}, got {value!r}", param, ctx)
        if not values or any(v <= 0 for v in values):
            self.fail(f"expected positive {self.name}, got {value!r}", param, ctx)
        return values


class JsonObject(click.ParamType):
    """A JSON object, given inline or as ``@file.json``."""

    name = "json"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> dict[str, Any]:
        if isinstance(value, dict):
            return value
        text = str(value)
        if text.startswith("@"):
            try:
                with open(text[1:], encoding="utf-8") as f:
                    text = f.read()
            except OSError as exc:
                self.fail(f"cannot read {text[1:]!r}: {exc.strerror}", param, ctx)
        try:
            parsed = json.loads(text)
        except ValueError as exc:
            self.fail(f"not valid JSON: {exc}", param, ctx)
        if not isinstance(parsed, dict):
            self.fail("must be a JSON object", param, ctx)
        return parsed
