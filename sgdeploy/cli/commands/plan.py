"""`sgdeploy plan PROFILE`: what apply would do on the host; changes nothing."""

from __future__ import annotations

import argparse

from sgdeploy.cli.arguments import (
    INVENTORY_HELP,
    Subparsers,
    add_command,
    add_json_argument,
    add_pre_stop_arguments,
)
from sgdeploy.cli.deploying import run_apply
from sgdeploy.cli.output import EXIT_FAILED, RefusedError, err


def register(sub: Subparsers) -> None:
    plan = add_command(sub, "plan", "show what apply would do on the host; changes nothing",
                       "Connect, gather the host's facts, validate against them and show the unit "
                       "diff and the steps apply would take; changes nothing.",
                       {0: "would apply cleanly", 1: "would refuse",
                        2: "usage or unreachable host"})
    plan.add_argument("profile", metavar="PROFILE", help="the profile")
    plan.add_argument("--host", metavar="H", help="the host, when the profile's target is a group")
    plan.add_argument("--inventory", metavar="FILE", help=INVENTORY_HELP)
    add_json_argument(plan, "the plan as one JSON document (apply's shape, status planned)")
    plan.add_argument("--adopt", action="store_true",
                      help="plan to take over a server outside the unit on its port")
    add_pre_stop_arguments(plan)
    plan.add_argument("--verbose", "-v", action="store_true",
                      help="also show each connection setting and where it came from")
    plan.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        return run_apply(args, dry_run=True)
    except RefusedError as exc:
        err(f"sgdeploy plan: would refuse: {exc}")
        return EXIT_FAILED
