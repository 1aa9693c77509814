"""`sgdeploy probe (PROFILE | --host H --unit U)`: the running deployment's throughput, against
the figures recorded when it was deployed."""

from __future__ import annotations

import argparse
import json

from sgdeploy.cli.arguments import Subparsers, add_command, add_unit_arguments
from sgdeploy.cli.output import out
from sgdeploy.cli.targets import unit_target


def register(sub: Subparsers) -> None:
    probe = add_command(sub, "probe", "measure the running deployment's throughput on its host",
                        "Measure the running deployment's throughput and TTFT and compare them "
                        "with the figures recorded when it was deployed. Give a PROFILE, or --host "
                        "H and --unit U.",
                        {0: "measured (and at or above R)", 1: "requests failed or below R",
                         2: "unreachable, no record, or the connection dropped (nothing was "
                         "measured)"})
    add_unit_arguments(probe)
    probe.add_argument("--min-ratio", type=float, metavar="R",
                       help="exit 1 below R x the figure recorded when it was deployed")
    probe.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # imported when the command runs: Fabric loads only for a command that connects
    from sgdeploy.deploy.apply import probe_unit

    target = unit_target(args)
    found = probe_unit(target.name, target.entry, target.unit, args.min_ratio)
    if args.json:
        out(json.dumps(found.as_dict(), indent=2, default=str) + "\n")
    else:
        out(f"{found.host} {found.unit}: {found.message}\n")
    return int(found.exit_code)
