"""plan and apply: the profile validated offline, the hosts it names, and then one host, a
rollout over a group, or a rollout drained behind a gateway (`plan` shows what each would do)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sgdeploy.cli.output import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    RefusedError,
    UsageError,
    connection_report,
    require_file,
)
from sgdeploy.cli.progress import Progress, emit
from sgdeploy.cli.targets import inventory_context

if TYPE_CHECKING:
    from sgdeploy.deploy.drained import DrainSettings
    from sgdeploy.deploy.early import EarlyStart
    from sgdeploy.deploy.transaction import ApplyOptions, ApplyResult
    from sgdeploy.profile.inventory import Inventory
    from sgdeploy.profile.model import LoadedProfile
    from sgdeploy.sglang.target import HostTarget


@dataclass(frozen=True)
class ProfileOnHosts:
    """A valid profile and the hosts of its target that the command acts on."""

    loaded: LoadedProfile
    targets: list[HostTarget]
    inventory: Inventory
    multinode: bool  # one launch over all of `targets`, the first of them rank 0
    serving: list[HostTarget]  # those whose server answers requests

    @property
    def behind_gateway(self) -> bool:
        return any(self.inventory.gateway_of(t.name) for t in self.serving)


def hosts_wanted(args: argparse.Namespace) -> list[str]:
    """The hosts given with --host (apply repeats it, plan takes one)."""
    return args.host if isinstance(args.host, list) else ([args.host] if args.host else [])


def run_apply(args: argparse.Namespace, dry_run: bool) -> int:
    """apply (or plan, with `dry_run`): one host, a rollout, or a rollout behind a gateway."""
    # imported first, before the validation's imports: its connection begins on a thread now
    from sgdeploy.deploy.early import EarlyStart

    begun = EarlyStart(args.profile, args.inventory, hosts_wanted(args),
                       getattr(args, "sglang", None),
                       sglang_check=not getattr(args, "no_sglang_check", False),
                       sglang_check_timeout_s=getattr(args, "sglang_check_timeout", 60.0))
    try:
        chosen = load_for_hosts(args, many=True)
        if chosen.behind_gateway:
            begun.close()
            return run_behind_gateway(args, chosen, dry_run)
        if dry_run:
            one_host_only(chosen.loaded, chosen.targets)
    except BaseException:
        begun.close()
        raise
    begun.validated()
    if len(chosen.targets) > 1:
        begun.close()
        return run_rollout(args, chosen)
    return _apply_one_host(args, chosen.loaded, chosen.targets[0], chosen.inventory, begun,
                           dry_run)


def _apply_one_host(args: argparse.Namespace, loaded: LoadedProfile, target: HostTarget,
                    inventory: Inventory, begun: EarlyStart, dry_run: bool) -> int:
    """apply (or plan) on one host, over the connection `begun` while the profile was validated."""
    # imported once the profile is valid: a refused one never loads the deploy core
    from sgdeploy.deploy.apply import apply_profile
    from sgdeploy.review import report

    progress = Progress(json_events=getattr(args, "json", False))
    entry = inventory.hosts[target.name]
    result = apply_profile(loaded, target.name, entry, target, apply_options(args, dry_run),
                           progress, begun=begun.take(target.name))
    if dry_run:
        result = dataclasses.replace(result, exit_code=plan_exit(result))
    args._port_in_use = any(d.rule == "SGD705" for d in result.diagnostics)
    plan = result.plan
    connection = connection_report(args, target.name, entry)
    emit(getattr(args, "json", False), lambda: connection.document(result.as_dict()), progress,
         lambda: connection.text + (report.plan_text(plan) if dry_run and plan is not None
                                    else report.apply_text(result)))
    return int(result.exit_code)


def load_for_hosts(args: argparse.Namespace, many: bool = False) -> ProfileOnHosts:
    """Offline validation, then the hosts to act on."""
    # imported when the command runs: start-up stays fast
    from sgdeploy.profile.model import is_multinode, load_profile, serving_hosts
    from sgdeploy.profile.validate import select_hosts, validate_loaded
    from sgdeploy.review import report

    require_file(args.profile, "profile", "*.toml")
    inventory = inventory_context(args.inventory)
    loaded = load_profile(args.profile)
    result = validate_loaded(loaded, inventory, getattr(args, "sglang", None))
    if not result.ok or loaded.model is None:
        sys.stderr.write(report.validation_text([result]))
        raise RefusedError(f"{args.profile} is not valid; nothing was changed")
    if inventory.inventory is None:
        raise UsageError(inventory.needed_to_reach_hosts())
    try:
        targets = select_hosts(loaded.model.deploy.host, inventory, hosts_wanted(args))
    except LookupError as exc:
        raise UsageError(str(exc)) from None
    if not many:
        one_host_only(loaded, targets)
    return ProfileOnHosts(loaded, targets, inventory.inventory, is_multinode(loaded.model),
                          serving_hosts(loaded.model, targets))


def one_host_only(loaded: LoadedProfile, targets: list[HostTarget]) -> None:
    """UsageError when the profile's target is a group and no --host chose one of it."""
    if len(targets) > 1:
        assert loaded.model is not None  # validated by load_for_hosts
        raise UsageError(f"'{loaded.model.deploy.host}' is a group of {len(targets)} hosts: "
                         "choose one with --host")


def apply_options(args: argparse.Namespace, dry_run: bool) -> ApplyOptions:
    """apply's options as given; plan has fewer of them (their defaults)."""
    # imported when the command runs: start-up stays fast
    from sgdeploy.deploy.transaction import ApplyOptions

    return ApplyOptions(rollback=not getattr(args, "no_rollback", False),
                        force=getattr(args, "force", False), dry_run=dry_run,
                        gpu_idle_timeout_s=getattr(args, "gpu_idle_timeout", 120.0),
                        settle_s=getattr(args, "settle", 5.0), keep=getattr(args, "keep", 20),
                        probe=getattr(args, "probe", False),
                        min_ratio=getattr(args, "min_ratio", None),
                        adopt=getattr(args, "adopt", False),
                        sglang_check=not getattr(args, "no_sglang_check", False),
                        read_ahead=not getattr(args, "no_read_ahead", False),
                        wait_for_gpus_s=getattr(args, "wait_for_gpus", None),
                        sglang_check_timeout_s=getattr(args, "sglang_check_timeout", 60.0))


def plan_exit(result: ApplyResult) -> int:
    """`plan`'s exit code for one host (docs/reference.md), also the `exit_code` of its JSON:
    0 would apply cleanly, 1 would refuse, 2 the host cannot be reached."""
    if result.unreachable or result.status == "connection_lost":
        return EXIT_USAGE
    planned = result.exit_code == 0 and result.plan is not None and not result.plan.refused
    return EXIT_OK if planned else EXIT_FAILED


def run_rollout(args: argparse.Namespace, chosen: ProfileOnHosts) -> int:
    """apply to a group: a canary, then batches of --parallel hosts (or a multi-node launch)."""
    # imported when the command runs: start-up stays fast
    from sgdeploy.deploy.fleet import FleetHost, rollout
    from sgdeploy.deploy.multinode import apply_multinode
    from sgdeploy.review import report

    loaded = chosen.loaded
    hosts = [FleetHost(t.name, chosen.inventory.hosts[t.name], t) for t in chosen.targets]
    progress = Progress(json_events=args.json)
    if chosen.multinode:
        fleet = apply_multinode(loaded, hosts, apply_options(args, False),
                                report_for=progress.for_host)
    else:
        fleet = rollout(loaded, hosts, apply_options(args, False), parallel=args.parallel,
                        canary=not args.no_canary, report_for=progress.for_host)
    emit(args.json, fleet.as_dict, progress, lambda: report.rollout_text(fleet))
    return fleet.exit_code


def run_behind_gateway(args: argparse.Namespace, chosen: ProfileOnHosts, dry_run: bool) -> int:
    """A rollout behind a gateway (sgdeploy.deploy.drained); `plan` shows it with each host's
    own plan."""
    # imported when the command runs: start-up stays fast
    from sgdeploy.deploy.apply import apply_profile
    from sgdeploy.deploy.drained import prepare, run_drained, run_drained_multinode
    from sgdeploy.deploy.fleet import FleetHost
    from sgdeploy.deploy.gateway import GatewayError
    from sgdeploy.deploy.multinode import node_profiles
    from sgdeploy.review import report

    loaded, inventory, multinode = chosen.loaded, chosen.inventory, chosen.multinode
    hosts = [FleetHost(t.name, inventory.hosts[t.name], t) for t in chosen.targets]
    settings = drain_settings(args)
    try:
        front, plan = prepare(loaded, hosts, inventory, settings, getattr(args, "parallel", 1),
                              not getattr(args, "no_canary", False))
    except GatewayError as exc:
        raise RefusedError(f"{exc}; nothing was changed") from None
    progress = Progress(json_events=args.json)
    if dry_run:
        each = node_profiles(loaded, hosts) if multinode else [loaded] * len(hosts)
        results = [apply_profile(node, h.name, h.entry, h.target, apply_options(args, True),
                                 progress.for_host(h.name))
                   for node, h in zip(each, hosts, strict=True)]
        results = [dataclasses.replace(r, exit_code=plan_exit(r)) for r in results]
        emit(args.json,
             lambda: {"rollout": plan.as_dict(), "hosts": [r.as_dict() for r in results]},
             progress, lambda: report.drained_plan_text(plan, results))
        return max(r.exit_code for r in results)
    execute = run_drained_multinode if multinode else run_drained
    fleet = execute(loaded, hosts, apply_options(args, False), front, plan,
                    report_for=progress.for_host)
    emit(args.json, fleet.as_dict, progress, lambda: report.rollout_text(fleet))
    return fleet.exit_code


def drain_settings(args: argparse.Namespace) -> DrainSettings:
    """--max-unavailable, --drain-timeout and --on-drain-timeout (apply and rollback)."""
    # imported when the command runs: start-up stays fast
    from sgdeploy.deploy.drained import DrainSettings

    settings = DrainSettings(getattr(args, "max_unavailable", 1),
                             getattr(args, "drain_timeout", None),
                             on_drain_timeout=getattr(args, "on_drain_timeout", None))
    if settings.max_unavailable < 1:
        raise UsageError("--max-unavailable must be at least 1")
    return settings
