"""`sgdeploy import [HOST]`: a profile written from an SGLang server already running (or from
its command line), read the way that SGLang version reads it. The module is `import_`:
`import` is a keyword."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from sgdeploy.cli.arguments import INVENTORY_HELP, Subparsers, add_command
from sgdeploy.cli.output import EXIT_FAILED, EXIT_OK, EXIT_USAGE, UsageError, err, out
from sgdeploy.cli.targets import inventory_context

if TYPE_CHECKING:
    from sgdeploy.deploy.adopt import ImportOutcome
    from sgdeploy.profile.validate import InventoryContext


def register(sub: Subparsers) -> None:
    imp = add_command(sub, "import", "write a profile that reproduces a running SGLang server",
                      "Write a profile that reproduces an SGLang server already running on HOST, "
                      "read the way that SGLang version's argparse reads its command line.",
                      {0: "written and valid", 1: "written with findings",
                       2: "usage, nothing found, or unreachable host"})
    imp.add_argument("host", metavar="HOST", nargs="?",
                     help="the inventory host to read (or, with --command, the profile's "
                     "deploy.host)")
    imp.add_argument("--pid", type=int, metavar="N", help="the server to import, when several run")
    imp.add_argument("--unit", metavar="U", help="import the server that this systemd unit runs")
    imp.add_argument("--command", dest="command_text", metavar="TEXT",
                     help="import this command line; no host is contacted")
    imp.add_argument("--command-file", metavar="FILE",
                     help="import the launch in this file (- for stdin)")
    imp.add_argument("--name", metavar="UNIT",
                     help="the profile's unit name (default: the owning unit or sglang)")
    imp.add_argument("--sglang", metavar="VERSION",
                     help="read the flags as this SGLang version does")
    imp.add_argument("--output", "-o", metavar="FILE",
                     help="write the profile here instead of stdout")
    imp.add_argument("--force", action="store_true", help="overwrite --output")
    imp.add_argument("--inventory", metavar="FILE", help=INVENTORY_HELP)
    imp.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # imported when the command runs: Fabric loads only for a command that connects
    from sgdeploy.deploy.adopt import LaunchError, import_from_command, import_from_host
    from sgdeploy.host.remote import RemoteError

    inventory = inventory_context(args.inventory)
    shown = args.output or "<stdout>"  # what the findings name: the file the profile goes to
    try:
        if args.command_text is not None or args.command_file:
            text = (args.command_text if args.command_text is not None
                    else _read_text(args.command_file))
            outcome = import_from_command(text, args.host, args.name, args.sglang, inventory, shown)
        else:
            _check_host(args.host, inventory)
            outcome = import_from_host(args.host, args.pid, args.unit, args.name, args.sglang,
                                       inventory, shown)
    except LaunchError as exc:
        raise UsageError(str(exc)) from None
    except RemoteError as exc:
        err(f"sgdeploy import: {exc}")
        return EXIT_USAGE
    return _write(args, outcome)


def _check_host(host: str | None, inventory: InventoryContext) -> None:
    """HOST is given and is a host of the inventory, else UsageError."""
    if not host:
        raise UsageError("give HOST (an inventory host), or --command/--command-file")
    if inventory.inventory is None or host not in inventory.inventory.hosts:
        raise UsageError(f"{host} is not a host of {inventory.path}")


def _write(args: argparse.Namespace, outcome: ImportOutcome) -> int:
    """The profile to --output or stdout, the import's report on stderr."""
    # imported when the command runs: start-up stays fast
    from sgdeploy.deploy.adopt import import_text

    result = outcome.result
    if args.output:
        if Path(args.output).exists() and not args.force:
            raise UsageError(f"{args.output} exists; choose another --output or give --force")
        Path(args.output).write_text(result.imported.text, encoding="utf-8")
    else:
        out(result.imported.text)
    err(import_text(result, args.output or "the profile").rstrip("\n"))
    notes = [outcome.inventory_note] if outcome.inventory_note else []
    for line in notes + [f"also running, not imported: {other}" for other in outcome.others]:
        err(line)
    return EXIT_OK if result.validation.ok and result.imported.parsed.ok else EXIT_FAILED


def _read_text(path: str) -> str:
    try:
        return sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
