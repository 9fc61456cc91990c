"""Every ``troupe`` command explains itself: ``--help`` works, describes the command, shows examples.

The commands are found by walking the click tree, so a new command is covered without
touching this file; the walk is checked against the expected list so that it cannot pass
on an empty tree. Nothing here starts Ray or a server.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from troupe.cli import cli, main


def walk(command: click.Command, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], click.Command]]:
    found = [(path, command)]
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            found += walk(sub, (*path, name))
    return found


COMMANDS = walk(cli, ("troupe",))
EXPECTED = {
    "troupe", "troupe serve", "troupe sql", "troupe sim", "troupe bench", "troupe eval", "troupe eval run",
    "troupe eval report", "troupe eval compare", "troupe eval export", "troupe eval list", "troupe trace",
    "troupe vacuum",
}  # fmt: skip


def test_the_walk_finds_every_command() -> None:
    assert {" ".join(path) for path, _ in COMMANDS} == EXPECTED


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_help_describes_the_command_with_examples(path: tuple[str, ...], command: click.Command) -> None:
    result = CliRunner().invoke(cli, [*path[1:], "--help"])
    assert result.exit_code == 0, result.output
    text = result.output
    assert text.startswith(f"Usage: {' '.join(path)} ")
    description = (command.help or "").strip()
    assert len(description) > 40, "no description"
    assert " ".join(description.split()[:4]) in " ".join(text.split())
    assert command is cli or command.short_help, "no one-line summary for the list of commands"
    # The epilog's examples: a preformatted block of command lines.
    examples = text.split("Examples:", 1)[1].splitlines() if "Examples:" in text else []
    assert any(line.strip().startswith(" ".join(path[:1])) for line in examples), "no example"
    # A positional argument has no help line of its own in click: the description names it.
    for param in command.params:
        if isinstance(param, click.Argument):
            assert param.make_metavar(click.Context(command)) in description, param.name
    # -h is --help, as it was.
    assert CliRunner().invoke(cli, [*path[1:], "-h"]).output == text


def test_a_group_without_a_command_prints_its_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval"]) == 2
    assert "Commands:" in capsys.readouterr().out


def test_a_usage_error_has_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--concurrency", "0"]) == 2
    assert "expected positive integers" in capsys.readouterr().err
    assert main(["nope"]) == 2


def test_a_config_error_has_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "troupe.toml"
    config.write_text("[runtime]\nno_such_key = 1\n")
    assert main(["sql", "SHOW TABLES", "--config", str(config)]) == 2
    assert capsys.readouterr().err.startswith("troupe sql: ")


def test_sql_prints_a_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from troupe.storage.duckdb_store import DuckDBStore

    DuckDBStore(str(tmp_path / "t.duckdb")).close()
    assert main(["sql", "SELECT 12 AS n, NULL AS x", "--db", str(tmp_path / "t.duckdb")]) == 0
    assert capsys.readouterr().out == " n | x\n---+-----\n12 | NULL\n(1 row)\n"
    assert main(["sql", "SHOW TABLES", "--db", str(tmp_path / "missing.duckdb")]) == 1
    assert "no database at" in capsys.readouterr().err


def test_help_imports_nothing_heavy() -> None:
    code = (
        "import sys; from troupe.cli import main; main(['--help']); "
        "print(sorted(m for m in ('ray', 'uvicorn', 'duckdb', 'httpx', 'rich', 'matplotlib', 'fastapi') "
        "if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "[]"


def test_the_console_script_is_troupe_cli_main() -> None:
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    module, _, name = pyproject["project"]["scripts"]["troupe"].partition(":")
    assert getattr(importlib.import_module(module), name) is main


@pytest.mark.parametrize("name", ["troupe.cli", "troupe.cli._common", "troupe.cli.serve", "troupe.cli.sql",
                                  "troupe.cli.sim", "troupe.cli.bench", "troupe.cli.eval", "troupe.cli.eval_run"])
def test_every_cli_module_exports_what_it_names(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__doc__
    assert [n for n in module.__all__ if not hasattr(module, n)] == []
