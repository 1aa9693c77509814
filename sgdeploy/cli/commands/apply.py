"""`sgdeploy apply PROFILE`: deploy a profile to its host, or roll it out over its group."""

from __future__ import annotations

import argparse
import sys

from sgdeploy.cli.arguments import (
    INVENTORY_HELP,
    Subparsers,
    add_command,
    add_gateway_arguments,
    add_json_argument,
    add_pre_stop_arguments,
)
from sgdeploy.cli.deploying import run_apply
from sgdeploy.cli.output import EXIT_USAGE, err


def register(sub: Subparsers) -> None:
    apply = add_command(sub, "apply",
                        "deploy a profile: validate, stop, install, start, wait ready",
                        "Deploy a profile: validate, gather facts and validate again, lock, stop, "
                        "wait for idle GPUs, install and start, wait until ready, record; roll "
                        "back on failure. A group target is a rollout: a canary first, then one "
                        "host at a time, stopping at the first failure.",
                        {0: "ready (or already up to date)",
                         1: "failed and the previous deployment restored",
                         2: "refused before touching anything, or the host cannot be reached",
                         3: "failed and nothing healthy is running"})
    apply.add_argument("profile", metavar="PROFILE", help="the profile")
    _rollout_arguments(apply)
    add_gateway_arguments(apply)
    apply.add_argument("--inventory", metavar="FILE", help=INVENTORY_HELP)
    _deployment_arguments(apply)
    add_json_argument(apply, "one JSON document with the result and events")
    add_pre_stop_arguments(apply)
    apply.add_argument("--adopt", action="store_true",
                       help="stop an SGLang server outside the unit on the profile's port (run by "
                       "hand or by another unit) and take over; without it, a terminal is asked")
    apply.set_defaults(func=run)


def _rollout_arguments(apply: argparse.ArgumentParser) -> None:
    """Which hosts of the profile's group, and how many at a time."""
    apply.add_argument("--host", metavar="H", action="append",
                       help="apply to this host of the profile's group (repeat for several)")
    apply.add_argument("--parallel", type=int, default=1, metavar="N",
                       help="after the canary, deploy N hosts at a time (default 1: rolling)")
    apply.add_argument("--no-canary", action="store_true", help="no lone first host in a rollout")


def _deployment_arguments(apply: argparse.ArgumentParser) -> None:
    """How one host's deployment goes: rollback, force, waits, probe, records kept."""
    apply.add_argument("--no-rollback", action="store_true",
                       help="leave a failed deployment stopped (exit 3)")
    apply.add_argument("--force", action="store_true",
                       help="redeploy even when the host runs this unit")
    apply.add_argument("--gpu-idle-timeout", type=float, default=120.0, metavar="S",
                       help="how long to wait for the GPUs to be idle after the stop (default 120)")
    apply.add_argument("--settle", type=float, default=5.0, metavar="S",
                       help="after ready, the server must stay up and healthy this long "
                       "(default 5)")
    apply.add_argument("--probe", action="store_true",
                       help="after ready, measure throughput and record it with the deployment")
    apply.add_argument("--min-ratio", type=float, metavar="R",
                       help="with the probe: roll back below R x the last good deployment's "
                       "tokens/s")
    apply.add_argument("--keep", type=int, default=20, metavar="N",
                       help="deployment records to keep on the host (never the last good one; "
                       "default 20)")


def run(args: argparse.Namespace) -> int:
    code = run_apply(args, dry_run=False)
    if code == EXIT_USAGE and _ask_to_adopt(args):
        args.adopt = True
        return run_apply(args, dry_run=False)
    return code


def _ask_to_adopt(args: argparse.Namespace) -> bool:
    """After a refusal because a server outside the unit holds the port: ask (on a terminal) to
    adopt it."""
    refused_for_port = getattr(args, "_port_in_use", False)
    if args.adopt or args.json or not refused_for_port or not sys.stdin.isatty():
        return False
    err("another SGLang server may hold the port; stop it and let the unit take over "
        "(like --adopt)? [y/N] ")
    return sys.stdin.readline().strip().lower() in ("y", "yes")
