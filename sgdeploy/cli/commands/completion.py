"""`sgdeploy completion bash|zsh|fish`, and the hidden `sgdeploy __complete` that its scripts call
for inventory names. The scripts themselves are made in cli/completion.py."""

from __future__ import annotations

import argparse

from sgdeploy.cli.arguments import INVENTORY_HELP, Subparsers, add_command
from sgdeploy.cli.output import EXIT_OK, out


def register(sub: Subparsers) -> None:
    completion = add_command(sub, "completion", "print a shell completion script (see the README)",
                             "Print a shell completion script: commands, options, formats, SGLang "
                             "versions, profile files, and inventory host and group names (read "
                             "from the inventory when you press Tab).",
                             {0: "printed"})
    completion.add_argument("shell", choices=["bash", "zsh", "fish"], help="the shell")
    completion.set_defaults(func=run)
    complete = sub.add_parser("__complete")  # no help: hidden; the completion scripts call it
    complete.add_argument("kind", choices=["hosts", "targets"],
                          help="host names, or host and group names")
    complete.add_argument("--inventory", help=INVENTORY_HELP)
    complete.add_argument("--profile", help="with hosts: only the hosts of this profile's target")
    complete.set_defaults(func=run_complete)


def run(args: argparse.Namespace) -> int:
    # imported when the command runs: the script generator is not needed to start
    from sgdeploy.cli.completion import bash_script, fish_script, zsh_script
    from sgdeploy.sglang.catalog import available_versions

    script = {"bash": bash_script, "zsh": zsh_script, "fish": fish_script}[args.shell]
    out(script(args.parser, available_versions()))
    return EXIT_OK


def run_complete(args: argparse.Namespace) -> int:
    """Hidden: inventory names for the completion scripts, one a line."""
    # imported when the completion scripts ask: it reads the TOML without pydantic
    from sgdeploy.cli.completion import names

    out("".join(f"{name}\n" for name in names(args.kind, args.inventory, args.profile)))
    return EXIT_OK
