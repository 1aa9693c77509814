"""The argparse pieces that commands share: a command's parser, whose --help ends with its exit
codes, and the options several commands take (--json and --format, a unit's host and unit, the
checks before apply stops anything, the drain behind a gateway)."""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Sequence
from typing import Any, TypeAlias

from sgdeploy.cli.output import UsageError

# What a command's register(sub) gets: the top-level parser's subparsers.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

WAIT_FOR_GPUS_S = 600.0  # `--wait-for-gpus` without a number
INVENTORY_HELP = "the inventory (default: $SGDEPLOY_INVENTORY, else ./inventory.toml)"
HELP_WIDTH = 78

# The exit codes of every command, as the table in docs/reference.md says (tests/test_cli_help.py
# holds the two together); each command's --help lists its own, as docs/reference.md's sections do.
EXIT_CODES = {0: "done: valid, ready, healthy",
              1: "the check failed: a profile has an error, the deployment failed and the previous "
                 "one was restored, the server is not healthy",
              2: "usage, unreadable input, an unreachable host, or refused before anything was "
                 "touched",
              3: "apply/rollback: failed and nothing healthy is running",
              130: "interrupted (Ctrl-C)"}


def exit_codes_epilog(codes: dict[int, str]) -> str:
    """The "exit codes:" section that ends a --help."""
    lines = ["exit codes:"]
    for code, meaning in codes.items():
        lines += textwrap.wrap(meaning, HELP_WIDTH, initial_indent=f"  {code:<4}",
                               subsequent_indent=" " * 6, break_on_hyphens=False,
                               break_long_words=False)
    return "\n".join(lines)


def add_command(sub: Subparsers, name: str, summary: str, description: str,
                exit_codes: dict[int, str]) -> argparse.ArgumentParser:
    """A command whose --help says what it does and its exit codes (those of docs/reference.md)."""
    return sub.add_parser(name, help=summary, epilog=exit_codes_epilog(exit_codes),
                          description=textwrap.fill(description, HELP_WIDTH,
                                                    break_on_hyphens=False),
                          formatter_class=argparse.RawDescriptionHelpFormatter)


class _FormatAlias(argparse.Action):
    """`--format text|json` on a command whose convention is `--json`: the same as `--json` or
    not."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        namespace.json = values == "json"


def add_json_argument(parser: argparse.ArgumentParser,
                      help_text: str = "one JSON document on stdout") -> None:
    parser.add_argument("--json", action="store_true", help=help_text)
    # undocumented: `--format json` as validate and diff spell it, so either spelling works
    # everywhere
    parser.add_argument("--format", choices=["text", "json"], action=_FormatAlias,
                        default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def add_format_arguments(parser: argparse.ArgumentParser, choices: list[str],
                         help_text: str) -> None:
    """validate's and diff's `--format`, with `--json` (the convention) for `--format json`."""
    parser.add_argument("--format", choices=choices, default="text", help=help_text)
    parser.add_argument("--json", dest="format", action="store_const", const="json",
                        help="one JSON document on stdout (the same as --format json)")


def add_unit_arguments(parser: argparse.ArgumentParser) -> None:
    """`PROFILE | --host H --unit U`, `--inventory` and `--json`: what history, status, probe and
    rollback act on."""
    parser.add_argument("profile", metavar="PROFILE", nargs="?",
                        help="the profile (or give --host and --unit)")
    parser.add_argument("--host", metavar="H",
                        help="the host (with a profile: one host of its group)")
    parser.add_argument("--unit", metavar="U", help="the systemd unit, without a profile")
    parser.add_argument("--inventory", metavar="FILE", help=INVENTORY_HELP)
    add_json_argument(parser)


def add_pre_stop_arguments(parser: argparse.ArgumentParser) -> None:
    """What apply and plan decide before anything stops: SGLang's own check, GPUs others hold."""
    parser.add_argument("--no-sglang-check", action="store_true",
                        help="skip SGLang's own check of the launch on the host (saves its "
                        "seconds; a launch SGLang refuses is then found only after the old server "
                        "stopped)")
    parser.add_argument("--no-read-ahead", action="store_true",
                        help="do not read the model's weights into the host's page cache before "
                        "the stop (done only when they fit in half of the available memory)")
    parser.add_argument("--wait-for-gpus", type=float, nargs="?", const=WAIT_FOR_GPUS_S,
                        metavar="SECONDS",
                        help="processes outside the unit on its GPUs: wait for them to leave (up "
                        f"to SECONDS, {WAIT_FOR_GPUS_S:.0f} without a number) before stopping "
                        "anything, instead of refusing")
    parser.add_argument("--sglang-check-timeout", type=float, default=60.0, metavar="S",
                        help="SGLang's own check is killed after this long (default 60)")


def add_gateway_arguments(parser: argparse.ArgumentParser) -> None:
    """How apply and rollback drain a worker behind a gateway (docs/fleets.md)."""
    parser.add_argument("--max-unavailable", type=int, default=1, metavar="N",
                        help="behind a gateway: at most N of the rollout's workers out of rotation "
                        "at once (default 1)")
    parser.add_argument("--drain-timeout", type=float, metavar="S",
                        help="behind a gateway: wait at most S for a worker's requests to finish "
                        "before its stop (default: the gateway's drain_timeout_s, 120)")
    parser.add_argument("--on-drain-timeout", choices=["refuse", "stop"],
                        help="behind a gateway, requests still running at the drain timeout: "
                        "refuse the host and put its worker back (default, or the gateway's "
                        "on_drain_timeout), or stop it anyway")


def check_sglang_version(version: str) -> None:
    """`--sglang VERSION` names a release sgdeploy has a catalog for, else UsageError."""
    # imported when a command checks a version: the catalogs are not needed to start
    from sgdeploy.sglang.catalog import UnknownVersionError, load_catalog

    try:
        load_catalog(version)
    except (UnknownVersionError, ValueError) as exc:
        raise UsageError(str(exc)) from None
