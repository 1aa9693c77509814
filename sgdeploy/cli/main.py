"""`sgdeploy`: the parser of every command and `main`, which parses, runs the command and turns
its errors into exit codes. The commands are the modules of commands/, listed in COMMANDS."""

from __future__ import annotations

import argparse
import atexit
import difflib
import gc
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from sgdeploy import __version__
from sgdeploy.cli.arguments import EXIT_CODES, Subparsers, exit_codes_epilog
from sgdeploy.cli.commands import (
    apply,
    completion,
    diff,
    export,
    history,
    import_,
    init,
    logcheck,
    plan,
    probe,
    render,
    rollback,
    schema,
    status,
    validate,
)
from sgdeploy.cli.output import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    RefusedError,
    UsageError,
    err,
)


class Command(Protocol):
    """A module of commands/: `register` adds its parser to `sub` with `func=run`."""

    def register(self, sub: Subparsers) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


# In the order `sgdeploy --help` lists them.
COMMANDS: tuple[Command, ...] = (
    init,
    validate,
    diff,
    render,
    export,
    plan,
    apply,
    rollback,
    history,
    status,
    probe,
    logcheck,
    import_,
    schema,
    completion,
)


class _Parser(argparse.ArgumentParser):
    """argparse, with a mistyped command answered by "did you mean" among the visible commands."""

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if isinstance(action, argparse._SubParsersAction) and value not in action.choices:
            raise argparse.ArgumentError(action, _unknown_command(value, _visible_commands(action)))
        super()._check_value(action, value)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="sgdeploy", description="Deploy SGLang to GPU hosts safely.",
                     epilog=exit_codes_epilog(EXIT_CODES) + "\n\n'sgdeploy COMMAND --help' shows "
                     "a command's options and exit codes;\ndocs/reference.md has them all.",
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"sgdeploy {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=argparse.ArgumentParser)
    for command in COMMANDS:
        command.register(sub)
    parser.set_defaults(parser=parser)  # `completion` makes its script from the whole parser
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = _parse(parser, argv)
    run: Callable[[argparse.Namespace], int] = args.func
    if argv is None:
        # A command-line run: the interpreter's final garbage collection walks every object the
        # imports made (~0.1 s after `apply`); frozen objects are left to the exit instead.
        atexit.register(gc.freeze)
    try:
        return run(args)
    except UsageError as exc:
        err(f"sgdeploy {args.command}: error: {exc}")
        return EXIT_USAGE
    except RefusedError as exc:
        err(f"sgdeploy {args.command}: refused: {exc}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        err("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_FAILED


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """parse_args, except that an unknown argument of a command is reported with that command's
    usage."""
    args, extras = parser.parse_known_args(argv)
    if extras:
        command = _subparsers(parser).choices[args.command]
        command.error(_unknown_arguments(command, extras))
    return args


def _subparsers(parser: argparse.ArgumentParser) -> Subparsers:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def _visible_commands(action: argparse._SubParsersAction[Any]) -> list[str]:
    """The commands that --help lists: not the hidden `__complete` of the completion scripts."""
    return [choice.dest for choice in action._choices_actions]


def _unknown_command(value: str, commands: list[str]) -> str:
    close = ([c for c in commands if c.startswith(value)]
             or difflib.get_close_matches(value, commands, n=3))
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return f"invalid choice: {value!r}{hint} (choose from {', '.join(commands)})"


def _unknown_arguments(parser: argparse.ArgumentParser, extras: list[str]) -> str:
    options = [s for a in parser._actions if a.help != argparse.SUPPRESS for s in a.option_strings]
    close = {o: difflib.get_close_matches(o.partition("=")[0], options, n=1)
             for o in extras if o.startswith("-")}
    hints = [(option, found[0]) for option, found in close.items() if found]
    if len(extras) == 1 and hints:
        return f"unrecognized arguments: {extras[0]}; did you mean {hints[0][1]}?"
    described = "; ".join(f"{option}: did you mean {found}?" for option, found in hints)
    return f"unrecognized arguments: {' '.join(extras)}" + (f" ({described})" if described else "")
