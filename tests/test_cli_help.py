"""The command line explains itself: every command's --help says what it does, what each option
means and its exit codes, the same codes as its section of docs/reference.md (and the top-level
--help the table there). Each command is a module of its own under sgdeploy/cli/commands/ that
imports nothing heavy at its top (docs/architecture.md)."""

from __future__ import annotations

import argparse
import ast
import keyword
import re
import sys
from pathlib import Path

import pytest

from sgdeploy.cli import build_parser
from sgdeploy.cli.arguments import EXIT_CODES
from sgdeploy.cli.main import COMMANDS

REPO = Path(__file__).resolve().parents[1]
CLI = REPO / "sgdeploy" / "cli"
REFERENCE = (REPO / "docs" / "reference.md").read_text(encoding="utf-8")
PARSER = build_parser()
SUBPARSERS = next(a for a in PARSER._actions if isinstance(a, argparse._SubParsersAction))
VISIBLE = [action.dest for action in SUBPARSERS._choices_actions]


def words(text: str) -> str:
    """Text as both places write it: code spans unquoted, whitespace collapsed."""
    return " ".join(text.replace("`", "").split())


def help_exit_codes(help_text: str) -> dict[int, str]:
    """The "exit codes:" section that ends a --help: {code: meaning}."""
    section = help_text.partition("\nexit codes:\n")[2].partition("\n\n")[0]
    codes: dict[int, str] = {}
    for code, meaning in re.findall(r"^  (\d+) +(.*(?:\n {6}.*)*)", section, re.M):
        codes[int(code)] = words(meaning)
    return codes


def reference_section(command: str) -> str:
    """The command's section of docs/reference.md, up to the next heading."""
    heading = f"\n### `sgdeploy {command}"
    assert heading in REFERENCE, f"docs/reference.md has no section for {command}"
    return re.split(r"\n#{1,3} ", REFERENCE.partition(heading)[2], maxsplit=1)[0]


def reference_exit_codes(command: str) -> dict[int, str]:
    """The "Exit codes: 0 ..., 1 ..., 2 ...." sentence of the command's section."""
    found = re.search(r"Exit codes:\s*(.*?)\.(?:\s|$)", reference_section(command), re.S)
    assert found, f"docs/reference.md: the section of {command} has no 'Exit codes:' sentence"
    items = re.split(r",\s+(?=\d+\s)", words(found.group(1)))
    return {int(code): meaning for code, _, meaning in (item.partition(" ") for item in items)}


def reference_exit_table() -> dict[int, str]:
    """The table of exit codes under "## Commands" in docs/reference.md."""
    table = REFERENCE.partition("| exit code | meaning")[2].partition("\n\n")[0]
    rows = re.findall(r"^\| (\d+) \| (.*) \|$", table, re.M)
    return {int(code): words(meaning) for code, meaning in rows}


def command_parser(name: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = SUBPARSERS.choices[name]
    return parser


def module_name(command: str) -> str:
    """The module of a command: its name, with a `_` after a Python keyword (import_)."""
    return f"sgdeploy.cli.commands.{command}{'_' if keyword.iskeyword(command) else ''}"


@pytest.mark.parametrize("command", VISIBLE)
def test_help_says_what_the_command_does_and_its_exit_codes(command: str) -> None:
    parser = command_parser(command)
    summary = next(a.help for a in SUBPARSERS._choices_actions if a.dest == command)
    assert summary and parser.description, f"{command}: no summary or description"
    help_text = parser.format_help()
    assert words(parser.description) in words(help_text)
    assert "\nexit codes:\n" in help_text and help_exit_codes(help_text), help_text


@pytest.mark.parametrize("command", VISIBLE)
def test_help_lists_the_exit_codes_of_the_reference(command: str) -> None:
    in_help = help_exit_codes(command_parser(command).format_help())
    in_reference = reference_exit_codes(command)
    assert sorted(in_help) == sorted(in_reference), f"{command}: other exit codes than the docs'"
    assert in_help == in_reference, f"{command}: other exit code meanings than the docs'"


def test_top_level_help_lists_the_exit_codes_of_the_reference_table() -> None:
    assert help_exit_codes(PARSER.format_help()) == reference_exit_table()
    assert {code: words(meaning) for code, meaning in EXIT_CODES.items()} == reference_exit_table()


@pytest.mark.parametrize("command", VISIBLE)
def test_every_option_has_help(command: str) -> None:
    silent = [action.option_strings or action.dest for action in command_parser(command)._actions
              if action.help != argparse.SUPPRESS and not (action.help or "").strip()]
    assert not silent, f"{command}: no help text for {silent}"


def test_the_hidden_command_stays_hidden() -> None:
    assert "__complete" in SUBPARSERS.choices and "__complete" not in VISIBLE
    assert "__complete" not in PARSER.format_help()


@pytest.mark.parametrize("command", VISIBLE)
def test_each_command_lives_in_its_own_module(command: str) -> None:
    run = command_parser(command).get_default("func")
    assert run.__module__ == module_name(command) and run.__name__ == "run"
    module = sys.modules[module_name(command)]
    assert callable(getattr(module, "register", None))


def test_the_command_modules_are_the_commands_in_help_order() -> None:
    files = {p.stem for p in (CLI / "commands").glob("*.py") if p.stem != "__init__"}
    modules = {module_name(c).rpartition(".")[2] for c in VISIBLE}
    assert not files - modules, f"not listed in COMMANDS of sgdeploy/cli/main.py: {files - modules}"
    assert not modules - files, f"commands outside sgdeploy/cli/commands/: {modules - files}"
    assert list(COMMANDS) == [sys.modules[module_name(c)] for c in VISIBLE]
    assert command_parser("__complete").get_default("func").__module__ == module_name("completion")


def _top_level_imports(path: Path) -> list[tuple[int, str]]:
    """What a file imports when it is imported (not inside functions or TYPE_CHECKING): module
    names, and `module.name` for `from module import name`."""
    found = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


@pytest.mark.parametrize("path", sorted(CLI.rglob("*.py")), ids=lambda p: str(p.relative_to(CLI)))
def test_the_command_line_imports_nothing_heavy_at_start(path: Path) -> None:
    """`sgdeploy --help` imports every command module: at their top only the standard library,
    `sgdeploy` itself (its version) and the command line's own modules; the rest is imported
    when a command runs."""
    heavy = [f"{path.name}:{line} imports {module}" for line, module in _top_level_imports(path)
             if module.partition(".")[0] not in sys.stdlib_module_names
             and module != "sgdeploy.__version__" and not module.startswith("sgdeploy.cli.")]
    assert not heavy, "\n".join(heavy)
