"""`sgdeploy history (PROFILE | --host H --unit U)`: the deployments recorded on the host."""

from __future__ import annotations

import argparse

from sgdeploy.cli.arguments import Subparsers, add_command, add_unit_arguments
from sgdeploy.cli.output import EXIT_OK
from sgdeploy.cli.targets import per_host


def register(sub: Subparsers) -> None:
    history = add_command(sub, "history", "the deployments recorded on the host, newest first",
                          "The deployments recorded on the host, newest first. Give a PROFILE, or "
                          "--host H and --unit U.",
                          {0: "the deployments listed", 2: "usage or unreachable host"})
    add_unit_arguments(history)
    history.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # imported when the command runs: Fabric loads only for a command that connects
    from sgdeploy.deploy.operate import gather_history
    from sgdeploy.review import report

    return per_host(args, lambda t: gather_history(t.name, t.entry, t.unit), report.history_text,
                    lambda _: EXIT_OK)
