"""`sgdeploy status (PROFILE | --host H --unit U)`: unit state, the running deployment, drift,
GPUs, health, and what a gateway in front of the host thinks of it."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, NamedTuple

from sgdeploy.cli.arguments import Subparsers, add_command, add_unit_arguments
from sgdeploy.cli.targets import per_host, unit_targets

if TYPE_CHECKING:
    from sgdeploy.deploy.gateway import WorkerStatus
    from sgdeploy.deploy.operate import Status


class WorkerState(NamedTuple):
    """What a host's gateway thinks of its worker, and the problem that is (None: routed to)."""

    state: WorkerStatus
    problem: str | None


def register(sub: Subparsers) -> None:
    status = add_command(sub, "status", "unit state, running deployment, drift, GPUs, health",
                         "Unit state, the running deployment, drift from what was deployed, GPU "
                         "use and health. Give a PROFILE, or --host H and --unit U; a group target "
                         "reports every host.",
                         {0: "healthy", 1: "not healthy", 2: "usage or unreachable host"})
    add_unit_arguments(status)
    status.add_argument("--verbose", "-v", action="store_true",
                        help="also show each connection setting and where it came from")
    status.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # imported when the command runs: Fabric loads only for a command that connects
    from sgdeploy.deploy.operate import gather_status
    from sgdeploy.review import report

    states = _worker_states(args)
    return per_host(args, lambda t: _with_gateway(gather_status(*t), states.get(t.name)),
                    report.status_text, lambda s: int(s.exit_code))


def _worker_states(args: argparse.Namespace) -> dict[str, WorkerState]:
    """What the gateways in front of status's hosts think of their workers (one request each),
    and the problem that makes, by host."""
    # imported when the command runs: Fabric loads only for a command that connects
    from sgdeploy.deploy.drained import profile_port, rotation_problem, worker_states
    from sgdeploy.deploy.plan import DEFAULT_PORT
    from sgdeploy.profile.inventory import load_inventory
    from sgdeploy.profile.inventory_file import inventory_path

    inventory = load_inventory(inventory_path(args.inventory)).model
    if inventory is None or not inventory.gateways:
        return {}
    targets = unit_targets(args)
    loaded = targets[0].loaded
    port = profile_port(loaded) if loaded is not None else DEFAULT_PORT
    states = worker_states(inventory, [t.name for t in targets], port)
    return {name: WorkerState(state, rotation_problem(state)) for name, state in states.items()}


def _with_gateway(status: Status, worker: WorkerState | None) -> Status:
    """`status` with its gateway's view of the worker; out of rotation is a problem."""
    # imported when the command runs: dataclasses (with inspect) would slow every start-up
    import dataclasses

    if worker is None:
        return status
    problems = (*status.problems, worker.problem) if worker.problem else status.problems
    return dataclasses.replace(status, gateway=worker.state, problems=problems,
                               healthy=status.healthy and not worker.problem)
