"""The command line: parse arguments, call one core function, print, map to an exit code.

Heavy dependencies (Jinja, Fabric) are imported inside the commands that need them, so that
`sgdeploy validate` starts fast.
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import difflib
import gc
import glob
import json
import os
import shutil
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sgdeploy import __version__

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Bad arguments or unreadable input: exit code 2."""


def _out(text: str) -> None:
    sys.stdout.write(text)


def _err(text: str) -> None:
    sys.stderr.write(text if text.endswith("\n") else text + "\n")


# --------------------------------------------------------------------------- validate
def cmd_validate(args: argparse.Namespace) -> int:
    from sgdeploy.review import report
    from sgdeploy.profile.inventory_file import INVENTORY_ENV, inventory_path
    from sgdeploy.core.tomlfile import RULE_UNREADABLE
    from sgdeploy.profile.validate import InventoryContext, validate_paths

    every = sorted(glob.glob("profiles/*.toml"))
    if args.changed:
        from sgdeploy.review.changes import profiles_to_check

        paths = profiles_to_check(args.profiles, inventory_path(args.inventory), every)
    else:
        paths = args.profiles or every
        if not paths:
            raise UsageError("no profiles given and none found in profiles/*.toml")
    missing = [p for p in paths if not Path(p).is_file()]
    if missing:
        raise UsageError(f"no such profile: {', '.join(missing)}")
    inv_path = inventory_path(args.inventory)
    if (args.inventory or os.environ.get(INVENTORY_ENV)) and not inv_path.is_file():
        raise UsageError(f"no such inventory: {inv_path}")
    if args.sglang:
        _check_version(args.sglang)
    if args.model_config and not Path(args.model_config).exists():
        raise UsageError(f"no such model config: {args.model_config}")
    results = validate_paths(paths, InventoryContext.load(inv_path), args.sglang, args.model_config)
    formatter = {"text": report.validation_text, "json": report.validation_json,
                 "github": report.validation_github}[args.format]
    _out(formatter(results))
    if any(d.rule == RULE_UNREADABLE for r in results for d in r.diagnostics):
        return EXIT_USAGE
    return EXIT_OK if all(r.ok for r in results) else EXIT_FAILED


def _check_version(version: str) -> None:
    from sgdeploy.sglang.catalog import UnknownVersionError, load_catalog

    try:
        load_catalog(version)
    except (UnknownVersionError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def cmd_schema(args: argparse.Namespace) -> int:
    from sgdeploy.profile.schema import profile_schema

    if args.sglang:
        _check_version(args.sglang)
    _out(json.dumps(profile_schema(args.sglang), indent=2) + "\n")
    return EXIT_OK


# --------------------------------------------------------------------------- diff
def cmd_diff(args: argparse.Namespace) -> int:
    from sgdeploy.review import revisions
    from sgdeploy.review.diff import diff_snapshots
    from sgdeploy.review.diff_report import FORMATTERS
    from sgdeploy.profile.inventory_file import inventory_path

    inventory = str(inventory_path(args.inventory))
    try:
        before, after = _diff_sides(args.revisions, inventory)
    except revisions.RevisionError as exc:
        raise UsageError(str(exc)) from None
    _out(FORMATTERS[args.format](diff_snapshots(before, after)))
    return EXIT_OK


def _diff_sides(names: list[str], inventory: str) -> tuple[Any, Any]:
    """BASE (vs the working tree), BASE HEAD (two git refs), or OLD.toml NEW.toml."""
    from sgdeploy.review import revisions

    if len(names) > 2:
        raise UsageError("give at most two revisions (BASE [HEAD]) or two profile files")
    if len(names) == 2 and all(Path(n).is_file() for n in names):
        return revisions.one_file(names[0], inventory, key=names[1]), revisions.one_file(names[1], inventory)
    base = names[0] if names else "HEAD"
    head = revisions.at_ref(names[1], inventory) if len(names) == 2 else revisions.working_tree(inventory)
    return revisions.at_ref(base, inventory), head


# --------------------------------------------------------------------------- render
def cmd_render(args: argparse.Namespace) -> int:
    from sgdeploy.review import report
    from sgdeploy.profile.inventory_file import inventory_path
    from sgdeploy.profile.model import load_profile
    from sgdeploy.deploy.render import render_unit
    from sgdeploy.sglang.catalog import load_catalog, nearest_version
    from sgdeploy.profile.validate import InventoryContext, select_host, validate_loaded

    if not Path(args.profile).is_file():
        raise UsageError(f"no such profile: {args.profile}")
    inventory = InventoryContext.load(inventory_path(args.inventory))
    loaded = load_profile(args.profile)
    result = validate_loaded(loaded, inventory, args.sglang)
    if not result.ok or loaded.model is None:
        sys.stderr.write(report.validation_text([result]))
        return EXIT_FAILED
    try:
        host = select_host(loaded.model.deploy.host, inventory, args.host)
    except LookupError as exc:
        raise UsageError(str(exc)) from None
    version = args.sglang or (host.sglang_version if host and host.sglang_version else result.sglang_versions[0])
    try:
        unit = render_unit(loaded, load_catalog(nearest_version(version)), host.name if host else None)
    except KeyError as exc:  # SGLang without a catalog: a flag the closest older catalog lacks
        _err(f"sgdeploy render: {exc.args[0] if exc.args else exc} (no catalog of SGLang {version} is bundled)\n")
        return EXIT_FAILED
    _out(unit.text)
    return EXIT_OK


# --------------------------------------------------------------------------- plan / apply
class Progress:
    """Apply's progress: a live status line on a terminal, plain lines otherwise, or JSON events."""

    def __init__(self, json_events: bool) -> None:
        self.json_events = json_events
        self.events: list[dict[str, object]] = []
        self.live = sys.stderr.isatty() and not json_events
        self.started = time.monotonic()
        self._last_wait = 0.0
        self._lock = threading.Lock()

    def __call__(self, kind: str, **data: object) -> None:
        elapsed = time.monotonic() - self.started
        if self.json_events:
            if kind != "log":
                self.events.append({"event": kind, "elapsed_s": round(elapsed, 3), **data})
            return
        target = data.pop("target", None)
        text = self._text(kind, data)
        if target and text:
            text = f"{target}: {text}"
        if kind == "log":
            if self.live and text:
                width = shutil.get_terminal_size((100, 20)).columns
                sys.stderr.write("\r\x1b[2K" + f"[{elapsed:6.1f}s] {text}"[: width - 1])
                sys.stderr.flush()
            return
        if text:
            sys.stderr.write(("\r\x1b[2K" if self.live else "") + f"[{elapsed:6.1f}s] {text}\n")
            sys.stderr.flush()

    def for_host(self, host: str) -> Callable[..., None]:
        """A reporter for one host of a rollout: every event carries the host name."""
        lock = self._lock

        def report(kind: str, **data: object) -> None:
            with lock:
                self(kind, target=host, **data)

        return report

    def _text(self, kind: str, data: dict[str, object]) -> str:
        if kind == "step":
            rest = " ".join(f"{k}={v}" for k, v in data.items() if k != "step")
            return f"{data.get('step')} {rest}".strip()
        if kind == "phase":
            return f"phase {data.get('name')} (log line {data.get('line')})"
        if kind == "progress":
            return f"{data.get('name')}"
        if kind == "adjusted":
            return f"SGLang changed {data.get('name')} on its own"
        if kind == "failure":
            return f"failure detected: {data.get('name')} at log line {data.get('line')}"
        if kind == "waiting":
            now = time.monotonic()
            if now - self._last_wait < 5:
                return ""
            self._last_wait = now
            return f"waiting for {data.get('what')}: {data.get('detail')}"
        if kind in ("warning", "failed"):
            return f"{kind}: {data.get('text') or data.get('reason')}"
        if kind == "log":
            return str(data.get("text", "")).strip()
        return ""


def _load_for_hosts(args: argparse.Namespace, many: bool = False) -> tuple[Any, list[Any], Any]:
    """Offline validation, then the hosts to act on: (loaded profile, [HostTarget], inventory)."""
    from sgdeploy.review import report
    from sgdeploy.profile.inventory_file import inventory_path
    from sgdeploy.profile.model import load_profile
    from sgdeploy.profile.validate import InventoryContext, select_hosts, validate_loaded

    if not Path(args.profile).is_file():
        raise UsageError(f"no such profile: {args.profile}")
    inventory = InventoryContext.load(inventory_path(args.inventory))
    loaded = load_profile(args.profile)
    result = validate_loaded(loaded, inventory, getattr(args, "sglang", None))
    if not result.ok or loaded.model is None:
        sys.stderr.write(report.validation_text([result]))
        raise RefusedError(f"{args.profile} is not valid; nothing was changed")
    if inventory.inventory is None:
        raise UsageError(f"{inventory.path}: an inventory is needed to reach the host")
    wanted = args.host if isinstance(args.host, list) else ([args.host] if args.host else [])
    try:
        targets = select_hosts(loaded.model.deploy.host, inventory, wanted)
    except LookupError as exc:
        raise UsageError(str(exc)) from None
    if not many:
        _one_host_only(loaded, targets)
    return loaded, targets, inventory.inventory


def _one_host_only(loaded: Any, targets: list[Any]) -> None:
    if len(targets) > 1:
        raise UsageError(f"'{loaded.model.deploy.host}' is a group of {len(targets)} hosts: choose one with --host")


class RefusedError(Exception):
    """Refused before touching anything: exit code 2."""


def _apply_options(args: argparse.Namespace, dry_run: bool) -> Any:
    from sgdeploy.deploy.transaction import ApplyOptions

    return ApplyOptions(rollback=not getattr(args, "no_rollback", False), force=getattr(args, "force", False),
                        dry_run=dry_run, gpu_idle_timeout_s=getattr(args, "gpu_idle_timeout", 120.0),
                        settle_s=getattr(args, "settle", 5.0), keep=getattr(args, "keep", 20),
                        probe=getattr(args, "probe", False), min_ratio=getattr(args, "min_ratio", None),
                        adopt=getattr(args, "adopt", False), sglang_check=not getattr(args, "no_sglang_check", False),
                        wait_for_gpus_s=getattr(args, "wait_for_gpus", None),
                        sglang_check_timeout_s=getattr(args, "sglang_check_timeout", 60.0))


def _run_apply(args: argparse.Namespace, dry_run: bool) -> int:
    from sgdeploy.deploy.early import EarlyStart

    wanted = args.host if isinstance(args.host, list) else ([args.host] if args.host else [])
    # first: its imports and connection come before the validation's imports
    begun = EarlyStart(args.profile, args.inventory, wanted, getattr(args, "sglang", None),
                       sglang_check=not getattr(args, "no_sglang_check", False),
                       sglang_check_timeout_s=getattr(args, "sglang_check_timeout", 60.0))
    from sgdeploy.review import report

    try:
        loaded, targets, inventory = _load_for_hosts(args, many=True)
        from sgdeploy.deploy.apply import apply_profile
        from sgdeploy.deploy.multinode import is_multinode

        workers = targets[:1] if is_multinode(loaded) else targets  # multi-node: rank 0 alone serves
        if any(inventory.gateway_of(t.name) for t in workers):
            begun.close()
            return _run_drained(args, loaded, targets, inventory, dry_run)
        if dry_run:
            _one_host_only(loaded, targets)
    except BaseException:
        begun.close()
        raise
    begun.validated()
    if len(targets) > 1:
        begun.close()
        return _run_rollout(args, loaded, targets, inventory)
    target = targets[0]
    progress = Progress(json_events=getattr(args, "json", False))
    result = apply_profile(loaded, target.name, inventory.hosts[target.name], target,
                           _apply_options(args, dry_run), progress, begun=begun.take(target.name))
    if dry_run:
        result.exit_code = _plan_exit(result)
    args._port_in_use = any(d.rule == "SGD705" for d in result.diagnostics)
    plan = result.plan
    connection = _connection(args, target.name, inventory.hosts[target.name])
    _emit(getattr(args, "json", False), lambda: connection.document(result.as_dict()), progress,
          lambda: connection.text + (report.plan_text(plan) if dry_run and plan is not None
                                     else report.apply_text(result)))
    return int(result.exit_code)


def _plan_exit(result: Any) -> int:
    """`plan`'s exit code for one host (docs/reference.md), also the `exit_code` of its JSON: 0 would
    apply cleanly, 1 would refuse, 2 the host cannot be reached."""
    if result.unreachable or result.status == "connection_lost":
        return EXIT_USAGE
    planned = result.exit_code == 0 and result.plan is not None and not result.plan.refused
    return EXIT_OK if planned else EXIT_FAILED


def _run_rollout(args: argparse.Namespace, loaded: Any, targets: list[Any], inventory: Any) -> int:
    from sgdeploy.review import report
    from sgdeploy.deploy.fleet import FleetHost, rollout
    from sgdeploy.deploy.multinode import apply_multinode, is_multinode

    hosts = [FleetHost(t.name, inventory.hosts[t.name], t) for t in targets]
    progress = Progress(json_events=args.json)
    if is_multinode(loaded):
        fleet = apply_multinode(loaded, hosts, _apply_options(args, False), report_for=progress.for_host)
    else:
        fleet = rollout(loaded, hosts, _apply_options(args, False), parallel=args.parallel,
                        canary=not args.no_canary, report_for=progress.for_host)
    _emit(args.json, fleet.as_dict, progress, lambda: report.rollout_text(fleet))
    return fleet.exit_code


def _run_drained(args: argparse.Namespace, loaded: Any, targets: list[Any], inventory: Any, dry_run: bool) -> int:
    """A rollout behind a gateway (sgdeploy.deploy.drained); `plan` shows it with each host's own plan."""
    from sgdeploy.review import report
    from sgdeploy.deploy.apply import apply_profile
    from sgdeploy.deploy.drained import prepare, run_drained, run_drained_multinode
    from sgdeploy.deploy.fleet import FleetHost
    from sgdeploy.deploy.gateway import GatewayError
    from sgdeploy.deploy.multinode import is_multinode, node_profiles

    hosts = [FleetHost(t.name, inventory.hosts[t.name], t) for t in targets]
    settings = _drain_settings(args)
    try:
        front, plan = prepare(loaded, hosts, inventory, settings, getattr(args, "parallel", 1),
                              not getattr(args, "no_canary", False))
    except GatewayError as exc:
        raise RefusedError(f"{exc}; nothing was changed") from None
    progress = Progress(json_events=args.json)
    multinode = is_multinode(loaded)
    if dry_run:
        each = node_profiles(loaded, hosts) if multinode else [loaded] * len(hosts)
        results = [apply_profile(node, h.name, h.entry, h.target, _apply_options(args, True),
                                 progress.for_host(h.name)) for node, h in zip(each, hosts, strict=True)]
        for result in results:
            result.exit_code = _plan_exit(result)
        _emit(args.json, lambda: {"rollout": plan.as_dict(), "hosts": [r.as_dict() for r in results]}, progress,
              lambda: report.drained_plan_text(plan, results))
        return max(r.exit_code for r in results)
    execute = run_drained_multinode if multinode else run_drained
    fleet = execute(loaded, hosts, _apply_options(args, False), front, plan, report_for=progress.for_host)
    _emit(args.json, fleet.as_dict, progress, lambda: report.rollout_text(fleet))
    return fleet.exit_code


def _drain_settings(args: argparse.Namespace) -> Any:
    from sgdeploy.deploy.drained import DrainSettings

    settings = DrainSettings(getattr(args, "max_unavailable", 1), getattr(args, "drain_timeout", None),
                             on_drain_timeout=getattr(args, "on_drain_timeout", None))
    if settings.max_unavailable < 1:
        raise UsageError("--max-unavailable must be at least 1")
    return settings


def _emit(as_json: bool, document: Callable[[], dict[str, Any]], progress: Progress, text: Callable[[], str]) -> None:
    """The end of apply, rollback or a rollout: one JSON document with the events, or text."""
    if as_json:
        _out(json.dumps({**document(), "events": progress.events}, indent=2, default=str) + "\n")
    else:
        _out(text())


def cmd_apply(args: argparse.Namespace) -> int:
    code = _run_apply(args, dry_run=False)
    if code == EXIT_USAGE and _ask_to_adopt(args):
        args.adopt = True
        return _run_apply(args, dry_run=False)
    return code


def _ask_to_adopt(args: argparse.Namespace) -> bool:
    """After a refusal because a server outside the unit holds the port: ask (on a terminal) to adopt it."""
    refused_for_port = getattr(args, "_port_in_use", False)
    if args.adopt or args.json or not refused_for_port or not sys.stdin.isatty():
        return False
    _err("another SGLang server may hold the port; stop it and let the unit take over (like --adopt)? [y/N] ")
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def cmd_plan(args: argparse.Namespace) -> int:
    try:
        return _run_apply(args, dry_run=True)
    except RefusedError as exc:
        _err(f"sgdeploy plan: would refuse: {exc}")
        return EXIT_FAILED


# --------------------------------------------------------------------------- operate
def cmd_logcheck(args: argparse.Namespace) -> int:
    from sgdeploy.review import report
    from sgdeploy.logs import read_log

    server, version = _logcheck_profile(args)
    if args.logfile == "-":
        log = read_log(sys.stdin, server, version)
    else:
        if not Path(args.logfile).is_file():
            raise UsageError(f"no such log file: {args.logfile}")
        with open(args.logfile, encoding="utf-8", errors="replace") as handle:
            log = read_log(handle, server, version)
    if args.json:
        _out(json.dumps(log.as_json(), indent=2, default=str) + "\n")
    else:
        _out(report.logcheck_text(log, "<stdin>" if args.logfile == "-" else args.logfile))
    return EXIT_OK if log.ready else EXIT_FAILED


def _logcheck_profile(args: argparse.Namespace) -> tuple[dict[str, object] | None, str | None]:
    """The profile's [server] and, when its host is in the inventory, that host's SGLang version."""
    from sgdeploy.profile.inventory_file import inventory_path
    from sgdeploy.profile.model import load_profile
    from sgdeploy.profile.validate import InventoryContext, select_host

    if not args.profile:
        return None, None
    if not Path(args.profile).is_file():
        raise UsageError(f"no such profile: {args.profile}")
    loaded = load_profile(args.profile)
    if loaded.model is None:
        raise UsageError(f"{args.profile} is not a valid profile (see `sgdeploy validate {args.profile}`)")
    try:
        host = select_host(loaded.model.deploy.host, InventoryContext.load(inventory_path(args.inventory)), None)
    except LookupError:
        host = None
    return dict(loaded.model.server), (host.sglang_version if host else None)


UnitTarget = tuple[str, Any, str, Any, str | None]


def _unit_target(args: argparse.Namespace) -> UnitTarget:
    """`PROFILE | --host H --unit U` naming one host: (host name, inventory entry, unit, loaded
    profile or None, the inventory's SGLang version of the host)."""
    targets = _unit_targets(args)
    if len(targets) > 1:
        raise UsageError(f"the profile's target is a group of {len(targets)} hosts: choose one with --host")
    return targets[0]


def _unit_targets(args: argparse.Namespace) -> list[UnitTarget]:
    """`PROFILE | --host H --unit U`: every host meant (all hosts of a profile's group)."""
    from sgdeploy.host.facts import check_unit_name
    from sgdeploy.profile.inventory_file import inventory_path
    from sgdeploy.profile.model import load_profile
    from sgdeploy.profile.validate import InventoryContext, select_hosts

    inventory = InventoryContext.load(inventory_path(args.inventory))
    if inventory.inventory is None:
        raise UsageError(f"{inventory.path}: an inventory is needed to reach the host")
    loaded = None
    if args.profile:
        if not Path(args.profile).is_file():
            raise UsageError(f"no such profile: {args.profile}")
        loaded = load_profile(args.profile)
        if loaded.model is None:
            raise UsageError(f"{args.profile} is not a valid profile (see `sgdeploy validate {args.profile}`)")
        if args.unit and args.unit != loaded.model.deploy.unit:
            raise UsageError(f"--unit {args.unit} differs from the profile's unit {loaded.model.deploy.unit}")
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
    return [(name, hosts[name], unit.removesuffix(".service"), loaded, hosts[name].sglang_version) for name in names]


def _per_host(args: argparse.Namespace, gather: Callable[[UnitTarget], Any], text: Callable[[Any], str],
              exit_code: Callable[[Any], int]) -> int:
    """history/status for one host, or for every host of a group (then `{"hosts": [...]}`)."""
    from sgdeploy.deploy.operate import OperateError

    targets = _unit_targets(args)
    results: list[tuple[str, Any, str | None]] = []
    connections = {name: _connection(args, name, entry) for name, entry, *_ in targets}
    for target in targets:
        try:
            results.append((target[0], gather(target), None))
        except OperateError as exc:
            if len(targets) == 1:
                _out("" if args.json else connections[target[0]].text)
                raise UsageError(str(exc)) from None
            results.append((target[0], None, str(exc)))
    if args.json:
        docs = [connections[name].document(r.as_dict() if r is not None else {"host": name, "error": error})
                for name, r, error in results]
        _out(json.dumps(docs[0] if len(docs) == 1 else {"hosts": docs}, indent=2) + "\n")
    else:
        _out("".join(connections[name].text + (text(r) if r is not None else f"{name}: unreachable: {error}\n")
                     for name, r, error in results))
    codes = [exit_code(r) if r is not None else EXIT_USAGE for _, r, _ in results]
    return max(codes)


class _Connection:
    """`--verbose`: a host's connection settings and their sources, as text and in JSON."""

    def __init__(self, text: str = "", settings: Any = None) -> None:
        self.text = text
        self.settings = settings

    def document(self, document: dict[str, Any]) -> dict[str, Any]:
        return document if self.settings is None else {**document, "connection": self.settings}


def _connection(args: argparse.Namespace, name: str, entry: Any) -> _Connection:
    from sgdeploy.review import report

    from sgdeploy.host import sshconfig
    if not getattr(args, "verbose", False):
        return _Connection()
    try:
        chain = sshconfig.for_host(name, entry)
    except sshconfig.SshConfigError as exc:
        return _Connection(f"{name}: connection: {exc}\n", {"error": str(exc)})
    return _Connection(report.connection_text(name, chain), {"route": [hop.alias for hop in chain],
                                                             **chain[-1].as_dict(),
                                                             "through": [hop.as_dict() for hop in chain[:-1]]})


def cmd_history(args: argparse.Namespace) -> int:
    from sgdeploy.review import report
    from sgdeploy.deploy.operate import gather_history

    return _per_host(args, lambda t: gather_history(t[0], t[1], t[2]), report.history_text, lambda _: EXIT_OK)


def cmd_status(args: argparse.Namespace) -> int:
    from sgdeploy.review import report
    from sgdeploy.deploy.operate import gather_status

    states = _worker_states(args)
    return _per_host(args, lambda t: _with_gateway(gather_status(*t), states.get(t[0])), report.status_text,
                     lambda s: int(s.exit_code))


def _worker_states(args: argparse.Namespace) -> dict[str, Any]:
    """What the gateways in front of status's hosts think of their workers (one request each)."""
    from sgdeploy.deploy.drained import profile_port, worker_states
    from sgdeploy.profile.inventory import load_inventory
    from sgdeploy.profile.inventory_file import inventory_path

    inventory = load_inventory(inventory_path(args.inventory)).model
    if inventory is None or not inventory.gateways:
        return {}
    targets = _unit_targets(args)
    loaded = targets[0][3]
    from sgdeploy.deploy.plan import DEFAULT_PORT

    port = profile_port(loaded) if loaded is not None else DEFAULT_PORT
    return worker_states(inventory, [t[0] for t in targets], port)


def _with_gateway(status: Any, state: dict[str, Any] | None) -> Any:
    from sgdeploy.deploy.drained import rotation_problem

    if state is None:
        return status
    problem = rotation_problem(state)
    problems = (*status.problems, problem) if problem else status.problems
    return dataclasses.replace(status, gateway=state, problems=problems, healthy=status.healthy and not problem)


def cmd_rollback(args: argparse.Namespace) -> int:
    from sgdeploy.review import report
    from sgdeploy.deploy.rollback import rollback_unit
    from sgdeploy.deploy.transaction import ApplyOptions, Exit

    name, entry, unit, _, _ = _unit_target(args)
    options = ApplyOptions(gpu_idle_timeout_s=args.gpu_idle_timeout, settle_s=args.settle,
                           wait_for_gpus_s=args.wait_for_gpus)
    progress = Progress(json_events=args.json)
    drained = _rollback_gateway(args, name)
    if drained is not None:
        from sgdeploy.deploy.drained import rollback_drained

        front, plan = drained
        result, rotation = rollback_drained(name, entry, unit, args.to, options, front, plan, progress)
        _emit(args.json, lambda: {**result.as_dict(), "gateway": rotation}, progress,
              lambda: report.apply_text(result) + "\n".join(report.rotation_lines({name: rotation})) + "\n")
        out_of_rotation = result.exit_code == Exit.READY and rotation["problem"]
        return int(Exit.ROLLED_BACK) if out_of_rotation else int(result.exit_code)
    result = rollback_unit(name, entry, unit, args.to, options, progress)
    _emit(args.json, result.as_dict, progress, lambda: report.apply_text(result))
    return int(result.exit_code)


def _rollback_gateway(args: argparse.Namespace, name: str) -> Any:
    """(gateways, plan) when a gateway fronts the host of a rollback; None when none does."""
    from sgdeploy.deploy.drained import prepare_rollback
    from sgdeploy.deploy.fleet import FleetHost
    from sgdeploy.deploy.gateway import GatewayError
    from sgdeploy.profile.inventory import HostTarget, load_inventory
    from sgdeploy.profile.inventory_file import inventory_path

    inventory = load_inventory(inventory_path(args.inventory)).model
    if inventory is None or not inventory.gateway_of(name):
        return None
    try:
        return prepare_rollback(inventory, FleetHost(name, inventory.hosts[name], HostTarget(name)),
                                _drain_settings(args))
    except GatewayError as exc:
        raise RefusedError(f"{exc}; nothing was changed") from None


def cmd_probe(args: argparse.Namespace) -> int:
    from sgdeploy.deploy.apply import probe_unit

    name, entry, unit, _, _ = _unit_target(args)
    code, document = probe_unit(name, entry, unit, args.min_ratio)
    if args.json:
        _out(json.dumps(document, indent=2, default=str) + "\n")
    else:
        _out(f"{document['host']} {document['unit']}: {document['message']}\n")
    return code


def cmd_import(args: argparse.Namespace) -> int:
    from sgdeploy.deploy.adopt import LaunchError, import_from_command, import_from_host, import_text
    from sgdeploy.profile.inventory_file import inventory_path
    from sgdeploy.host.remote import RemoteError
    from sgdeploy.profile.validate import InventoryContext

    inventory = InventoryContext.load(inventory_path(args.inventory))
    try:
        if args.command_text is not None or args.command_file:
            text = args.command_text if args.command_text is not None else _read_text(args.command_file)
            outcome = import_from_command(text, args.host, args.name, args.sglang, inventory)
        else:
            if not args.host:
                raise UsageError("give HOST (an inventory host), or --command/--command-file")
            if inventory.inventory is None or args.host not in inventory.inventory.hosts:
                raise UsageError(f"{args.host} is not a host of {inventory.path}")
            outcome = import_from_host(args.host, args.pid, args.unit, args.name, args.sglang, inventory)
    except LaunchError as exc:
        raise UsageError(str(exc)) from None
    except RemoteError as exc:
        _err(f"sgdeploy import: {exc}")
        return EXIT_USAGE
    result = outcome.result
    if args.output:
        if Path(args.output).exists() and not args.force:
            raise UsageError(f"{args.output} exists; choose another --output or give --force")
        Path(args.output).write_text(result.imported.text, encoding="utf-8")
    else:
        _out(result.imported.text)
    _err(import_text(result, args.output or "the profile").rstrip("\n"))
    for line in ([outcome.inventory_note] if outcome.inventory_note else []) + [
            f"also running, not imported: {other}" for other in outcome.others]:
        _err(line)
    return EXIT_OK if result.validation.ok and result.imported.parsed.ok else EXIT_FAILED


def _read_text(path: str) -> str:
    try:
        return sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None


def cmd_completion(args: argparse.Namespace) -> int:
    from sgdeploy.cli import completion
    from sgdeploy.sglang.catalog import available_versions

    script = completion.bash_script if args.shell == "bash" else completion.zsh_script
    _out(script(build_parser(), available_versions()))
    return EXIT_OK


def cmd_complete(args: argparse.Namespace) -> int:
    """Hidden: inventory names for the completion scripts, one a line."""
    from sgdeploy.cli.completion import names

    _out("".join(f"{name}\n" for name in names(args.kind, args.inventory, args.profile)))
    return EXIT_OK


# --------------------------------------------------------------------------- parser
WAIT_FOR_GPUS_S = 600.0  # `--wait-for-gpus` without a number
INVENTORY_HELP = "the inventory (default: $SGDEPLOY_INVENTORY, else ./inventory.toml)"
HELP_WIDTH = 78

# The exit codes of every command, as the table in docs/reference.md says (tests/test_cli_help.py
# holds the two together); each command's --help lists its own, as docs/reference.md's sections do.
EXIT_CODES = {0: "done: valid, ready, healthy",
              1: "the check failed: a profile has an error, the deployment failed and the previous one was "
                 "restored, the server is not healthy",
              2: "usage, unreadable input, an unreachable host, or refused before anything was touched",
              3: "apply/rollback: failed and nothing healthy is running",
              130: "interrupted (Ctrl-C)"}


class _Parser(argparse.ArgumentParser):
    """argparse, with a mistyped command answered by "did you mean" among the visible commands."""

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if isinstance(action, argparse._SubParsersAction) and value not in action.choices:
            raise argparse.ArgumentError(action, _unknown_command(value, _visible_commands(action)))
        super()._check_value(action, value)


def _visible_commands(action: argparse._SubParsersAction[Any]) -> list[str]:
    """The commands that --help lists: not the hidden `__complete` of the completion scripts."""
    return [choice.dest for choice in action._choices_actions]


def _unknown_command(value: str, commands: list[str]) -> str:
    close = [c for c in commands if c.startswith(value)] or difflib.get_close_matches(value, commands, n=3)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return f"invalid choice: {value!r}{hint} (choose from {', '.join(commands)})"


def _unknown_arguments(parser: argparse.ArgumentParser, extras: list[str]) -> str:
    options = [s for a in parser._actions if a.help != argparse.SUPPRESS for s in a.option_strings]
    close = {o: difflib.get_close_matches(o.partition("=")[0], options, n=1) for o in extras if o.startswith("-")}
    hints = [(option, found[0]) for option, found in close.items() if found]
    if len(extras) == 1 and hints:
        return f"unrecognized arguments: {extras[0]}; did you mean {hints[0][1]}?"
    described = "; ".join(f"{option}: did you mean {found}?" for option, found in hints)
    return f"unrecognized arguments: {' '.join(extras)}" + (f" ({described})" if described else "")


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[Any]:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def _exit_codes_epilog(codes: dict[int, str]) -> str:
    lines = ["exit codes:"]
    for code, meaning in codes.items():
        lines += textwrap.wrap(meaning, HELP_WIDTH, initial_indent=f"  {code:<4}", subsequent_indent=" " * 6,
                               break_on_hyphens=False, break_long_words=False)
    return "\n".join(lines)


def _command(sub: argparse._SubParsersAction[Any], name: str, summary: str, description: str,
             exit_codes: dict[int, str]) -> argparse.ArgumentParser:
    """A command whose --help says what it does and its exit codes (those of docs/reference.md)."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=summary, epilog=_exit_codes_epilog(exit_codes),
        description=textwrap.fill(description, HELP_WIDTH, break_on_hyphens=False),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    return parser


class _FormatAlias(argparse.Action):
    """`--format text|json` on a command whose convention is `--json`: the same as `--json` or not."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        namespace.json = values == "json"


def _json_argument(parser: argparse.ArgumentParser, help_text: str = "one JSON document on stdout") -> None:
    parser.add_argument("--json", action="store_true", help=help_text)
    # undocumented: `--format json` as validate and diff spell it, so either spelling works everywhere
    parser.add_argument("--format", choices=["text", "json"], action=_FormatAlias, default=argparse.SUPPRESS,
                        help=argparse.SUPPRESS)


def _formats_argument(parser: argparse.ArgumentParser, choices: list[str], help_text: str) -> None:
    """validate's and diff's `--format`, with `--json` (the convention) for `--format json`."""
    parser.add_argument("--format", choices=choices, default="text", help=help_text)
    parser.add_argument("--json", dest="format", action="store_const", const="json",
                        help="one JSON document on stdout (the same as --format json)")


def _unit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("profile", metavar="PROFILE", nargs="?", help="the profile (or give --host and --unit)")
    parser.add_argument("--host", metavar="H", help="the host (with a profile: one host of its group)")
    parser.add_argument("--unit", metavar="U", help="the systemd unit, without a profile")
    parser.add_argument("--inventory", metavar="FILE", help=INVENTORY_HELP)
    _json_argument(parser)


def _pre_stop_arguments(parser: argparse.ArgumentParser) -> None:
    """What apply and plan decide before anything stops: SGLang's own check, GPUs others hold."""
    parser.add_argument("--no-sglang-check", action="store_true",
                        help="skip SGLang's own check of the launch on the host (saves its seconds; a launch "
                        "SGLang refuses is then found only after the old server stopped)")
    parser.add_argument("--wait-for-gpus", type=float, nargs="?", const=WAIT_FOR_GPUS_S, metavar="SECONDS",
                        help="processes outside the unit on its GPUs: wait for them to leave (up to SECONDS, "
                        f"{WAIT_FOR_GPUS_S:.0f} without a number) before stopping anything, instead of refusing")
    parser.add_argument("--sglang-check-timeout", type=float, default=60.0, metavar="S",
                        help="SGLang's own check is killed after this long (default 60)")


def _gateway_arguments(parser: argparse.ArgumentParser) -> None:
    """How apply and rollback drain a worker behind a gateway (docs/fleets.md)."""
    parser.add_argument("--max-unavailable", type=int, default=1, metavar="N",
                        help="behind a gateway: at most N of the rollout's workers out of rotation at once (default 1)")
    parser.add_argument("--drain-timeout", type=float, metavar="S",
                        help="behind a gateway: wait at most S for a worker's requests to finish before its stop "
                        "(default: the gateway's drain_timeout_s, 120)")
    parser.add_argument("--on-drain-timeout", choices=["refuse", "stop"],
                        help="behind a gateway, requests still running at the drain timeout: refuse the host and "
                        "put its worker back (default, or the gateway's on_drain_timeout), or stop it anyway")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="sgdeploy", description="Deploy SGLang to GPU hosts safely.",
                     epilog=_exit_codes_epilog(EXIT_CODES) + "\n\n'sgdeploy COMMAND --help' shows a command's "
                     "options and exit codes;\ndocs/reference.md has them all.",
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"sgdeploy {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    validate = _command(sub, "validate", "validate profiles offline against inventory facts",
                        "Validate launch profiles offline against the inventory's facts (default: profiles/*.toml).",
                        {0: "all valid (warnings allowed)", 1: "a profile has an error",
                         2: "usage or unreadable input"})
    validate.add_argument("profiles", nargs="*", metavar="PROFILE", help="the profiles (default: profiles/*.toml)")
    validate.add_argument("--inventory", metavar="FILE", help=INVENTORY_HELP + "; a missing file named here is exit 2")
    _formats_argument(validate, ["text", "json", "github"],
                      "findings as file:line: lines and a count (text), one JSON document (json), or GitHub "
                      "Actions workflow commands (github); default text")
    validate.add_argument("--sglang", metavar="VERSION", help="validate against this SGLang version")
    validate.add_argument("--model-config", metavar="DIR",
                          help="the model's folder (or config.json) for the checks that read it; "
                          "wins over deploy.model_config")
    validate.add_argument("--changed", action="store_true",
                          help="the files given are those a change touched: validate the profiles among them, "
                          "and every profile when the inventory is one (deleted files are skipped)")
    validate.set_defaults(func=cmd_validate)

    diff = _command(sub, "diff", "what a change does to each server: flags, env, findings, unit diff",
                    "What a change does to each server: flags, environment, findings and the unit diff. "
                    "REV is BASE (compared with the working tree; default HEAD), BASE HEAD (two git refs), "
                    "or OLD.toml NEW.toml.",
                    {0: "the comparison was made (whatever it found)",
                     2: "usage (unknown ref, no git repository, more than two revisions)"})
    diff.add_argument("revisions", nargs="*", metavar="REV",
                      help="BASE (compared with the working tree; default HEAD), BASE HEAD, or OLD.toml NEW.toml")
    diff.add_argument("--inventory", metavar="FILE", help=INVENTORY_HELP + ", read from each revision")
    _formats_argument(diff, ["text", "json", "markdown"],
                      "text, one JSON document, or GitHub-flavoured markdown for a comment or a job summary; "
                      "default text")
    diff.set_defaults(func=cmd_diff)

    render = _command(sub, "render", "print the systemd unit of a profile", "Print the systemd unit of a profile.",
                      {0: "the unit printed", 1: "invalid profile (its findings on stderr)", 2: "usage"})
    render.add_argument("profile", metavar="PROFILE", help="the profile")
    render.add_argument("--host", metavar="H", help="the host to render for (a member of a group)")
    render.add_argument("--inventory", metavar="FILE", help=INVENTORY_HELP)
    render.add_argument("--sglang", metavar="VERSION", help=argparse.SUPPRESS)
    render.set_defaults(func=cmd_render)

    plan = _command(sub, "plan", "show what apply would do on the host; changes nothing",
                    "Connect, gather the host's facts, validate against them and show the unit diff and the "
                    "steps apply would take; changes nothing.",
                    {0: "would apply cleanly", 1: "would refuse", 2: "usage or unreachable host"})
    plan.add_argument("profile", metavar="PROFILE", help="the profile")
    plan.add_argument("--host", metavar="H", help="the host, when the profile's target is a group")
    plan.add_argument("--inventory", metavar="FILE", help=INVENTORY_HELP)
    _json_argument(plan, "the plan as one JSON document (apply's shape, status planned)")
    plan.add_argument("--adopt", action="store_true", help="plan to take over a server outside the unit on its port")
    _pre_stop_arguments(plan)
    plan.add_argument("--verbose", "-v", action="store_true",
                      help="also show each connection setting and where it came from")
    plan.set_defaults(func=cmd_plan)

    apply = _command(sub, "apply", "deploy a profile: validate, stop, install, start, wait ready",
                     "Deploy a profile: validate, gather facts and validate again, lock, stop, wait for idle GPUs, "
                     "install and start, wait until ready, record; roll back on failure. A group target is a "
                     "rollout: a canary first, then one host at a time, stopping at the first failure.",
                     {0: "ready (or already up to date)", 1: "failed and the previous deployment restored",
                      2: "refused before touching anything, or the host cannot be reached",
                      3: "failed and nothing healthy is running"})
    apply.add_argument("profile", metavar="PROFILE", help="the profile")
    apply.add_argument("--host", metavar="H", action="append",
                       help="apply to this host of the profile's group (repeat for several)")
    apply.add_argument("--parallel", type=int, default=1, metavar="N",
                       help="after the canary, deploy N hosts at a time (default 1: rolling)")
    apply.add_argument("--no-canary", action="store_true", help="no lone first host in a rollout")
    _gateway_arguments(apply)
    apply.add_argument("--inventory", metavar="FILE", help=INVENTORY_HELP)
    apply.add_argument("--no-rollback", action="store_true", help="leave a failed deployment stopped (exit 3)")
    apply.add_argument("--force", action="store_true", help="redeploy even when the host runs this unit")
    apply.add_argument("--gpu-idle-timeout", type=float, default=120.0, metavar="S",
                       help="how long to wait for the GPUs to be idle after the stop (default 120)")
    apply.add_argument("--settle", type=float, default=5.0, metavar="S",
                       help="after ready, the server must stay up and healthy this long (default 5)")
    apply.add_argument("--probe", action="store_true",
                       help="after ready, measure throughput and record it with the deployment")
    apply.add_argument("--min-ratio", type=float, metavar="R",
                       help="with the probe: roll back below R x the last good deployment's tokens/s")
    apply.add_argument("--keep", type=int, default=20, metavar="N",
                       help="deployment records to keep on the host (never the last good one; default 20)")
    _json_argument(apply, "one JSON document with the result and events")
    _pre_stop_arguments(apply)
    apply.add_argument("--adopt", action="store_true",
                       help="stop an SGLang server outside the unit on the profile's port (run by hand or by "
                       "another unit) and take over; without it, a terminal is asked")
    apply.set_defaults(func=cmd_apply)

    rollback = _command(sub, "rollback", "redeploy the last good (or the given) deployment",
                        "Redeploy the last good (or the given) deployment, with apply's steps. Give a PROFILE, "
                        "or --host H and --unit U.",
                        {0: "ready", 1: "failed and the previous deployment restored, or the restored server is "
                         "ready but the gateway does not route to it",
                         2: "refused before anything was stopped: as for apply, or no last good deployment and "
                         "no --to, an unknown id, the recorded profile's [secrets] file missing or unusable on the "
                         "host (SGD709), the unit or its record cannot be written, the gateway in front of the host "
                         "does not answer, the worker is the last one it routes to, or its requests outlast the "
                         "drain timeout",
                         3: "failed and nothing healthy is running"})
    _unit_arguments(rollback)
    rollback.add_argument("--to", metavar="ID", help="the recorded deployment to restore (see history)")
    rollback.add_argument("--gpu-idle-timeout", type=float, default=120.0, metavar="S",
                          help="how long to wait for the GPUs to be idle after the stop (default 120)")
    rollback.add_argument("--wait-for-gpus", type=float, nargs="?", const=WAIT_FOR_GPUS_S, metavar="SECONDS",
                          help="wait (before stopping anything) for processes outside the unit to leave its GPUs")
    rollback.add_argument("--settle", type=float, default=5.0, metavar="S",
                          help="after ready, the server must stay up and healthy this long (default 5)")
    _gateway_arguments(rollback)
    rollback.set_defaults(func=cmd_rollback)

    history = _command(sub, "history", "the deployments recorded on the host, newest first",
                       "The deployments recorded on the host, newest first. Give a PROFILE, or --host H and --unit U.",
                       {0: "the deployments listed", 2: "usage or unreachable host"})
    _unit_arguments(history)
    history.set_defaults(func=cmd_history)

    status = _command(sub, "status", "unit state, running deployment, drift, GPUs, health",
                      "Unit state, the running deployment, drift from what was deployed, GPU use and health. Give a "
                      "PROFILE, or --host H and --unit U; a group target reports every host.",
                      {0: "healthy", 1: "not healthy", 2: "usage or unreachable host"})
    _unit_arguments(status)
    status.add_argument("--verbose", "-v", action="store_true",
                        help="also show each connection setting and where it came from")
    status.set_defaults(func=cmd_status)

    probe = _command(sub, "probe", "measure the running deployment's throughput on its host",
                     "Measure the running deployment's throughput and TTFT and compare them with the figures "
                     "recorded when it was deployed. Give a PROFILE, or --host H and --unit U.",
                     {0: "measured (and at or above R)", 1: "requests failed or below R",
                      2: "unreachable, no record, or the connection dropped (nothing was measured)"})
    _unit_arguments(probe)
    probe.add_argument("--min-ratio", type=float, metavar="R",
                       help="exit 1 below R x the figure recorded when it was deployed")
    probe.set_defaults(func=cmd_probe)

    logcheck = _command(sub, "logcheck", "read an SGLang server log: phases, readiness, failure",
                        "Read an SGLang server log: startup phases and their times, readiness, the failure and its "
                        "cause, settings SGLang changed on its own.",
                        {0: "reached ready", 1: "failed or not ready", 2: "usage (no such file)"})
    logcheck.add_argument("logfile", metavar="LOGFILE", help="a log file, or - for stdin")
    logcheck.add_argument("--profile", metavar="P", help="the profile the server was launched from")
    logcheck.add_argument("--inventory", metavar="FILE", help=INVENTORY_HELP + ", for the profile's host")
    _json_argument(logcheck, "one JSON document (see docs/reference.md)")
    logcheck.set_defaults(func=cmd_logcheck)

    imp = _command(sub, "import", "write a profile that reproduces a running SGLang server",
                   "Write a profile that reproduces an SGLang server already running on HOST, read the way that "
                   "SGLang version's argparse reads its command line.",
                   {0: "written and valid", 1: "written with findings",
                    2: "usage, nothing found, or unreachable host"})
    imp.add_argument("host", metavar="HOST", nargs="?", help="the inventory host to read (or, with --command, "
                     "the profile's deploy.host)")
    imp.add_argument("--pid", type=int, metavar="N", help="the server to import, when several run")
    imp.add_argument("--unit", metavar="U", help="import the server that this systemd unit runs")
    imp.add_argument("--command", dest="command_text", metavar="TEXT",
                     help="import this command line; no host is contacted")
    imp.add_argument("--command-file", metavar="FILE", help="import the launch in this file (- for stdin)")
    imp.add_argument("--name", metavar="UNIT", help="the profile's unit name (default: the owning unit or sglang)")
    imp.add_argument("--sglang", metavar="VERSION", help="read the flags as this SGLang version does")
    imp.add_argument("--output", "-o", metavar="FILE", help="write the profile here instead of stdout")
    imp.add_argument("--force", action="store_true", help="overwrite --output")
    imp.add_argument("--inventory", metavar="FILE", help=INVENTORY_HELP)
    imp.set_defaults(func=cmd_import)

    schema = _command(sub, "schema", "print the JSON Schema of a profile", "Print the JSON Schema of a profile.",
                      {0: "printed", 2: "unknown version"})
    schema.add_argument("--sglang", metavar="VERSION", help="spell out [server] for this version")
    schema.set_defaults(func=cmd_schema)

    completion = _command(sub, "completion", "print a shell completion script (see the README)",
                          "Print a shell completion script: commands, options, formats, SGLang versions, profile "
                          "files, and inventory host and group names (read from the inventory when you press Tab).",
                          {0: "printed"})
    completion.add_argument("shell", choices=["bash", "zsh"], help="the shell")
    completion.set_defaults(func=cmd_completion)
    complete = sub.add_parser("__complete")  # no help: hidden; the completion scripts call it
    complete.add_argument("kind", choices=["hosts", "targets"], help="host names, or host and group names")
    complete.add_argument("--inventory", help=INVENTORY_HELP)
    complete.add_argument("--profile", help="with hosts: only the hosts of this profile's target")
    complete.set_defaults(func=cmd_complete)
    return parser


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """parse_args, except that an unknown argument of a command is reported with that command's usage."""
    args, extras = parser.parse_known_args(argv)
    if extras:
        command: argparse.ArgumentParser = _subparsers(parser).choices[args.command]
        command.error(_unknown_arguments(command, extras))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = _parse(parser, argv)
    func: Callable[[argparse.Namespace], int] = args.func
    if argv is None:
        # A command-line run: the interpreter's final garbage collection walks every object the
        # imports made (~0.1 s after `apply`); frozen objects are left to the exit instead.
        atexit.register(gc.freeze)
    try:
        return func(args)
    except UsageError as exc:
        _err(f"sgdeploy {args.command}: error: {exc}")
        return EXIT_USAGE
    except RefusedError as exc:
        _err(f"sgdeploy {args.command}: refused: {exc}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        _err("interrupted")
        return 130
    except BrokenPipeError:
        return EXIT_FAILED
