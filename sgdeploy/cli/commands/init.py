"""`sgdeploy init HOST`: the host's inventory entry read from the host, and a starting profile."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from sgdeploy.cli.arguments import INVENTORY_HELP, Subparsers, add_command
from sgdeploy.cli.output import EXIT_FAILED, EXIT_OK, UsageError, err, out

if TYPE_CHECKING:  # for the annotations only: the command imports it when it runs
    from sgdeploy.deploy.onboard import HostReading


def register(sub: Subparsers) -> None:
    init = add_command(sub, "init", "describe a new host in the inventory, read from the host",
                       "Connect to a host, read what its inventory entry needs (GPU model, compute "
                       "capability, count and memory, the SGLang release of its interpreter) and "
                       "add [hosts.HOST] to the inventory; with --model-path, also write a "
                       "starting profile for that model and validate it on the spot.",
                       {0: "written and valid", 1: "written, with facts that could not be read or "
                        "findings in the profile; or the host is already in the inventory",
                        2: "usage or unreachable host"})
    init.add_argument("host", metavar="HOST", help="the name for the inventory; also the address "
                      "to connect to unless --address is given")
    init.add_argument("--address", metavar="ADDR",
                      help="a DNS name, an IP address or a Host alias of ~/.ssh/config")
    init.add_argument("--user", metavar="U",
                      help="the SSH login (default: the SSH configuration's)")
    init.add_argument("--port", type=int, metavar="N", help="the SSH port")
    init.add_argument("--identity-file", metavar="FILE", help="the SSH key to log in with")
    init.add_argument("--ssh-config", metavar="FILE", help="an SSH configuration file to read")
    init.add_argument("--python", metavar="PATH", help="the interpreter with SGLang on the host "
                      "(default: that of a running SGLang server, else python3)")
    init.add_argument("--model-path", metavar="PATH",
                      help="also write a starting profile serving this model (a path on the host)")
    init.add_argument("--output", "-o", metavar="FILE",
                      help="where the starting profile goes (default: profiles/HOST.toml)")
    init.add_argument("--inventory", metavar="FILE", help=INVENTORY_HELP)
    init.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # imported when the command runs: the SSH connection and pydantic load only for it
    from sgdeploy.deploy.onboard import append_entry, entry_text, host_in_inventory, read_new_host
    from sgdeploy.host.remote import RemoteError
    from sgdeploy.profile.inventory import HostEntry
    from sgdeploy.profile.inventory_file import inventory_path

    inventory = inventory_path(args.inventory)
    settings = {"address": args.address or args.host, "user": args.user, "port": args.port,
                "identity_file": args.identity_file, "ssh_config": args.ssh_config}
    try:
        entry = HostEntry(**{key: value for key, value in settings.items() if value is not None})
    except ValueError as exc:  # pydantic's: an address or port no host can have
        raise UsageError(f"{args.host}: {_first_error(exc)}") from None
    try:
        reading = read_new_host(args.host, entry, args.python)
    except RemoteError as exc:  # its message names the host already
        raise UsageError(str(exc)) from None
    found = {**{k: v for k, v in settings.items() if v is not None and k != "address"},
             **reading.inventory_entry()}
    for problem in reading.problems:
        err(f"{args.host}: {problem}")
    if host_in_inventory(inventory, args.host):
        out(entry_text(args.host, found))
        err(f"{inventory} already has [hosts.{args.host}]: nothing was written; the host's facts "
            "are above, to compare or copy in")
        return EXIT_FAILED
    append_entry(inventory, args.host, found)
    err(f"added [hosts.{args.host}] to {inventory}")
    valid = _write_profile(args, reading, inventory) if args.model_path else True
    return EXIT_OK if valid and not reading.problems else EXIT_FAILED


def _first_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    first = errors()[0] if callable(errors) and errors() else None
    if first is None:
        return str(exc)
    return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"


def _write_profile(args: argparse.Namespace, reading: HostReading, inventory: Path) -> bool:
    """Write the starting profile (never over a file) and validate it against the new entry."""
    # imported when a profile is asked for
    from sgdeploy.deploy.onboard import starting_profile
    from sgdeploy.profile.validate import InventoryContext, validate_file
    from sgdeploy.review.report import validation_text

    path = Path(args.output or f"profiles/{args.host}.toml")
    if path.exists():
        raise UsageError(f"{path} exists: choose another --output")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(starting_profile(reading, args.model_path), encoding="utf-8")
    result = validate_file(str(path), InventoryContext.load(inventory))
    err(f"wrote {path}\n" + validation_text([result]).rstrip("\n"))
    if result.ok:
        err(f"next: sgdeploy plan {path}  (then sgdeploy apply {path})")
    return result.ok
