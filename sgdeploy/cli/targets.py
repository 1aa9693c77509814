"""What a command acts on: the inventory, a valid profile, and `PROFILE | --host H --unit U`
(history, status, probe, rollback), with history's and status's output for one host or for
every host of a group."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

from sgdeploy.cli.output import EXIT_USAGE, UsageError, connection_report, out, require_file

if TYPE_CHECKING:
    from sgdeploy.profile.inventory import HostEntry
    from sgdeploy.profile.model import LoadedProfile
    from sgdeploy.profile.validate import InventoryContext


class UnitTarget(NamedTuple):
    """One host a unit command acts on (the arguments of deploy.operate.gather_status)."""

    name: str
    entry: HostEntry
    unit: str
    loaded: LoadedProfile | None  # None: given as --host H --unit U
    sglang_version: str | None  # the inventory's SGLang version of the host


class HostResult(Protocol):
    """What a command found on one host (deploy.operate's History, Status)."""

    def as_dict(self) -> dict[str, Any]: ...


Found = TypeVar("Found", bound=HostResult)


def inventory_context(inventory: str | None) -> InventoryContext:
    """The inventory of `--inventory` (default: $SGDEPLOY_INVENTORY, else ./inventory.toml), as
    loaded once for the command; it may be absent or broken."""
    # imported when a command runs: `sgdeploy --help` stays fast
    from sgdeploy.profile.inventory_file import inventory_path
    from sgdeploy.profile.validate import InventoryContext

    return InventoryContext.load(inventory_path(inventory))


def load_valid_profile(path: str) -> LoadedProfile:
    """The profile at `path`, which must exist and be valid (else UsageError)."""
    # imported when a command runs: pydantic loads only with a profile
    from sgdeploy.profile.model import load_profile

    require_file(path, "profile", "*.toml")
    loaded = load_profile(path)
    if loaded.model is None:
        raise UsageError(f"{path} is not a valid profile (see `sgdeploy validate {path}`)")
    return loaded


def unit_target(args: argparse.Namespace) -> UnitTarget:
    """`PROFILE | --host H --unit U` naming one host."""
    targets = unit_targets(args)
    if len(targets) > 1:
        raise UsageError(f"the profile's target is a group of {len(targets)} hosts: "
                         "choose one with --host")
    return targets[0]


def unit_targets(args: argparse.Namespace) -> list[UnitTarget]:
    """`PROFILE | --host H --unit U`: every host meant (all hosts of a profile's group)."""
    # imported when a command runs: `sgdeploy --help` stays fast
    from sgdeploy.host.facts import check_unit_name
    from sgdeploy.profile.validate import select_hosts

    inventory = inventory_context(args.inventory)
    if inventory.inventory is None:
        raise UsageError(inventory.needed_to_reach_hosts())
    loaded = None
    if args.profile:
        loaded = load_valid_profile(args.profile)
        assert loaded.model is not None  # load_valid_profile refuses an invalid one
        if args.unit and args.unit != loaded.model.deploy.unit:
            raise UsageError(f"--unit {args.unit} differs from the profile's unit "
                             f"{loaded.model.deploy.unit}")
        unit = loaded.model.deploy.unit
        try:
            names = [t.name for t in select_hosts(loaded.model.deploy.host, inventory,
                                                  [args.host] if args.host else [])]
        except LookupError as exc:
            raise UsageError(str(exc)) from None
    else:
        if not args.host or not args.unit:
            raise UsageError("give a PROFILE, or both --host H and --unit U")
        if args.host not in inventory.inventory.hosts:
            raise UsageError(f"--host {args.host} is not a host of {inventory.path}")
        names, unit = [args.host], args.unit
    try:
        check_unit_name(unit)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    hosts = inventory.inventory.hosts
    return [UnitTarget(name, hosts[name], unit.removesuffix(".service"), loaded,
                       hosts[name].sglang_version) for name in names]


def per_host(args: argparse.Namespace, gather: Callable[[UnitTarget], Found],
             text: Callable[[Found], str], exit_code: Callable[[Found], int]) -> int:
    """history/status for one host, or for every host of a group (then `{"hosts": [...]}`)."""
    # imported when a command runs: Fabric loads only for a command that connects
    from sgdeploy.deploy.operate import OperateError

    targets = unit_targets(args)
    results: list[tuple[str, Found | None, str | None]] = []
    connections = {t.name: connection_report(args, t.name, t.entry) for t in targets}
    for target in targets:
        try:
            results.append((target.name, gather(target), None))
        except OperateError as exc:
            if len(targets) == 1:
                out("" if args.json else connections[target.name].text)
                raise UsageError(str(exc)) from None
            results.append((target.name, None, str(exc)))
    if args.json:
        docs = [connections[name].document(found.as_dict() if found is not None
                                           else {"host": name, "error": error})
                for name, found, error in results]
        out(json.dumps(docs[0] if len(docs) == 1 else {"hosts": docs}, indent=2) + "\n")
    else:
        out("".join(connections[name].text
                    + (text(found) if found is not None else f"{name}: unreachable: {error}\n")
                    for name, found, error in results))
    return max(exit_code(found) if found is not None else EXIT_USAGE for _, found, _ in results)
