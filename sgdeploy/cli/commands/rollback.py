"""`sgdeploy rollback (PROFILE | --host H --unit U)`: redeploy the last good (or the given)
deployment, drained first when a gateway fronts the host."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from sgdeploy.cli.arguments import (
    WAIT_FOR_GPUS_S,
    Subparsers,
    add_command,
    add_gateway_arguments,
    add_unit_arguments,
)
from sgdeploy.cli.deploying import drain_settings
from sgdeploy.cli.output import RefusedError
from sgdeploy.cli.progress import Progress, emit
from sgdeploy.cli.targets import unit_target

if TYPE_CHECKING:
    from sgdeploy.deploy.drained import PreparedRollout


def register(sub: Subparsers) -> None:
    rollback = add_command(
        sub, "rollback", "redeploy the last good (or the given) deployment",
        "Redeploy the last good (or the given) deployment, with apply's steps. Give a PROFILE, "
        "or --host H and --unit U.",
        {0: "ready", 1: "failed and the previous deployment restored, or the restored server is "
         "ready but the gateway does not route to it",
         2: "refused before anything was stopped: as for apply, or no last good deployment and "
         "no --to, an unknown id, the recorded profile's [secrets] file missing or unusable on "
         "the host (SGD709), the unit or its record cannot be written, the gateway in front of "
         "the host does not answer, the worker is the last one it routes to, or its requests "
         "outlast the drain timeout",
         3: "failed and nothing healthy is running"})
    add_unit_arguments(rollback)
    rollback.add_argument("--to", metavar="ID",
                          help="the recorded deployment to restore (see history)")
    rollback.add_argument("--gpu-idle-timeout", type=float, default=120.0, metavar="S",
                          help="how long to wait for the GPUs to be idle after the stop "
                          "(default 120)")
    rollback.add_argument("--wait-for-gpus", type=float, nargs="?", const=WAIT_FOR_GPUS_S,
                          metavar="SECONDS",
                          help="wait (before stopping anything) for processes outside the unit "
                          "to leave its GPUs")
    rollback.add_argument("--settle", type=float, default=5.0, metavar="S",
                          help="after ready, the server must stay up and healthy this long "
                          "(default 5)")
    add_gateway_arguments(rollback)
    rollback.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # imported when the command runs: Fabric loads only for a command that connects
    from sgdeploy.deploy.drained import rollback_drained
    from sgdeploy.deploy.rollback import rollback_unit
    from sgdeploy.deploy.transaction import ApplyOptions, Exit
    from sgdeploy.review import report

    target = unit_target(args)
    options = ApplyOptions(gpu_idle_timeout_s=args.gpu_idle_timeout, settle_s=args.settle,
                           wait_for_gpus_s=args.wait_for_gpus)
    progress = Progress(json_events=args.json)
    gateway = _gateway_in_front(args, target.name)
    if gateway is None:
        result = rollback_unit(target.name, target.entry, target.unit, args.to, options, progress)
        emit(args.json, result.as_dict, progress, lambda: report.apply_text(result))
        return int(result.exit_code)
    # behind a gateway: drained before the stop, back in rotation once ready
    result, rotation = rollback_drained(target.name, target.entry, target.unit, args.to, options,
                                        gateway, progress)
    emit(args.json, lambda: {**result.as_dict(), "gateway": rotation.as_dict()}, progress,
         lambda: report.apply_text(result)
         + "\n".join(report.rotation_lines({target.name: rotation})) + "\n")
    out_of_rotation = result.exit_code == Exit.READY and rotation.problem
    return int(Exit.ROLLED_BACK) if out_of_rotation else int(result.exit_code)


def _gateway_in_front(args: argparse.Namespace,
                      name: str) -> PreparedRollout | None:
    """(gateways, plan) when a gateway fronts the host of a rollback; None when none does."""
    # imported when the command runs: Fabric loads only for a command that connects
    from sgdeploy.deploy.drained import prepare_rollback
    from sgdeploy.deploy.fleet import FleetHost
    from sgdeploy.deploy.gateway import GatewayError
    from sgdeploy.profile.inventory import load_inventory
    from sgdeploy.profile.inventory_file import inventory_path
    from sgdeploy.sglang.target import HostTarget

    inventory = load_inventory(inventory_path(args.inventory)).model
    if inventory is None or not inventory.gateway_of(name):
        return None
    try:
        return prepare_rollback(inventory, FleetHost(name, inventory.hosts[name], HostTarget(name)),
                                drain_settings(args))
    except GatewayError as exc:
        raise RefusedError(f"{exc}; nothing was changed") from None
