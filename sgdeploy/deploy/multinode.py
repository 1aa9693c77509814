"""Multi-node SGLang (`nnodes > 1`): one unit per host of the profile's group, started together.

Each node gets its own rendering of the profile (`node_rank` from the group's order, and
`dist_init_addr` from rank 0's inventory address unless the profile sets it). All nodes are
stopped, their GPUs checked idle, and started at once; readiness is judged on rank 0, which
alone serves the API, while any node's journal can fail the launch. Rollback is all or
nothing: every node goes back to its previous deployment.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import TypeVar

from sgdeploy.deploy.apply import decide
from sgdeploy.deploy.fleet import FleetHost, FleetResult
from sgdeploy.deploy.journal import Reporter, StartupResult
from sgdeploy.deploy.plan import (
    DIST_INIT_PORT,
    Deployment,
    Plan,
    deployment_meta,
    new_deployment_id,
)
from sgdeploy.deploy.prestop import (
    REFUSED_BEFORE_STOP,
    Handover,
    before_stop_gate,
    pre_stop,
    start_check,
)
from sgdeploy.deploy.records import running_port
from sgdeploy.deploy.rollback import previous_deployment, unrestorable
from sgdeploy.deploy.session import BackgroundCheck, HostSession
from sgdeploy.deploy.transaction import (
    ApplyOptions,
    ApplyResult,
    Exit,
    RollbackOutcome,
    StartFailure,
    Transaction,
    confirmed,
    connection_lost,
    result_from,
)
from sgdeploy.host.remote import ConnectError, ConnectionLost, RemoteHost
from sgdeploy.profile.model import LoadedProfile

T = TypeVar("T")
R = TypeVar("R")


def node_profiles(loaded: LoadedProfile, hosts: Sequence[FleetHost]) -> list[LoadedProfile]:
    """The profile as each node runs it: its node_rank, and rank 0's dist_init_addr."""
    profile = loaded.model
    assert profile is not None
    address = (
        profile.server.get("dist_init_addr")
        or f"{_host_port(hosts[0].entry.address)}:{DIST_INIT_PORT}"
    )
    out = []
    for rank, _ in enumerate(hosts):
        server = {**profile.server, "node_rank": rank, "dist_init_addr": address}
        out.append(replace(loaded, model=profile.model_copy(update={"server": server}),
                                       diagnostics=list(loaded.diagnostics)))
    return out


def _host_port(address: str) -> str:
    return f"[{address}]" if ":" in address else address


@dataclass
class Node:
    host: FleetHost
    rank: int
    loaded: LoadedProfile
    session: HostSession
    plan: Plan | None = None
    current_unit: str | None = None
    previous: Deployment | None = None
    check: BackgroundCheck | None = None  # SGLang's own check of this node's launch


def _each(items: Sequence[T], work: Callable[[T], R]) -> list[R]:
    """`work` on every item at once (one thread each), results in the items' order."""
    with ThreadPoolExecutor(max_workers=len(items)) as pool:
        return list(pool.map(work, items))


def apply_multinode(
    loaded: LoadedProfile,
    hosts: Sequence[FleetHost],
    options: ApplyOptions,
    report_for: Callable[[str], Reporter] | None = None,
) -> FleetResult:
    fleet = FleetResult([h.name for h in hosts])
    reporter: Callable[[str], Reporter] = report_for or (lambda _name: (lambda *a, **k: None))
    with ExitStack() as stack:
        nodes = []
        for rank, (host, node_loaded) in enumerate(
            zip(hosts, node_profiles(loaded, hosts), strict=True)
        ):
            try:
                remote = stack.enter_context(RemoteHost(host.name, host.entry).connect())
            except ConnectError as exc:
                fleet.results[host.name] = ApplyResult(
                    Exit.REFUSED,
                    "refused",
                    host.name,
                    loaded.model.deploy.unit if loaded.model else "",
                    str(exc),
                )
                fleet.stopped_at = host.name
                return fleet
            if remote.privileges.refusal:
                fleet.results[host.name] = ApplyResult(
                    Exit.REFUSED,
                    "refused",
                    host.name,
                    loaded.model.deploy.unit if loaded.model else "",
                    f"{remote.privileges.refusal}; no node was changed",
                )
                fleet.stopped_at = host.name
                return fleet
            nodes.append(Node(host, rank, node_loaded, HostSession(remote, reporter(host.name))))
        unit = loaded.model.deploy.unit if loaded.model else ""
        try:
            fleet = _confirmed(nodes, _apply_nodes(nodes, options, fleet))
            first = fleet.results.get(hosts[0].name)
            if options.after_host is not None and first is not None:
                options.after_host(nodes[0].session, first)  # rank 0 alone is a gateway's worker
            return fleet
        except ConnectionLost as exc:
            # rank 0 alone serves: what it runs now says whether anything healthy does
            lost = connection_lost(hosts[0].name, hosts[0].entry, unit, "apply", exc, {})
            for host in hosts:
                fleet.results[host.name] = replace(lost, host=host.name)
            fleet.stopped_at = fleet.stopped_at or hosts[0].name
            return fleet


def _confirmed(nodes: list[Node], fleet: FleetResult) -> FleetResult:
    """Exit 3 only after rank 0 (the node that serves) was checked and runs nothing healthy."""
    first = fleet.results.get(nodes[0].host.name)
    if first is None or first.exit_code != Exit.NOTHING_HEALTHY:
        return fleet
    fleet.results[nodes[0].host.name] = checked = confirmed(nodes[0].session, first)
    for name, result in list(fleet.results.items()):
        if result.exit_code == Exit.NOTHING_HEALTHY:
            fleet.results[name] = replace(result, exit_code=checked.exit_code)
    return fleet


def _apply_nodes(nodes: list[Node], options: ApplyOptions, fleet: FleetResult) -> FleetResult:
    # a multi-node launch takes over no server outside its units
    single = replace(options, adopt=False)

    def prepare(node: Node) -> ApplyResult | None:
        """Each node decided as a single host is (`apply.decide`): facts, preflight with the host's
        own checks, its [secrets] file, GPU holders (SGD710), the plan; its refusal, or None."""
        decided = decide(node.session, node.loaded, node.host.name, node.host.target, single)
        if isinstance(decided, ApplyResult):
            return decided
        node.plan, node.current_unit = decided
        return None

    refusals = _each(nodes, prepare)
    unit = nodes[0].loaded.model.deploy.unit if nodes[0].loaded.model else ""
    if any(refusals):
        for node, refused in zip(nodes, refusals, strict=True):
            fleet.results[node.host.name] = (
                replace(
                    refused, message=f"node {node.rank}: {refused.message}; no node was changed"
                )
                if refused
                else ApplyResult(
                    Exit.REFUSED,
                    "refused",
                    node.host.name,
                    unit,
                    "not changed: another node refused",
                )
            )
        fleet.stopped_at = next(n.host.name for n, p in zip(nodes, refusals, strict=True) if p)
        return fleet
    plans = [n.plan for n in nodes if n.plan is not None]
    if options.dry_run or all(p.up_to_date for p in plans):
        status = "planned" if options.dry_run else "up_to_date"
        for node in nodes:
            fleet.results[node.host.name] = ApplyResult(Exit.READY, status, node.host.name, unit,
                                                        f"node {node.rank}: "
                                                        f"{status}", plan=node.plan)
        return fleet
    deployment_id = new_deployment_id(nodes[0].loaded.sha256)
    for node in nodes:
        assert node.plan is not None
        node.plan = replace(node.plan, deployment=replace(node.plan.deployment, id=deployment_id))
    # SGLang's own check on every node (its argv, install and files), beside the locks
    for node in nodes:
        assert node.plan is not None
        node.check = start_check(
            node.session, node.plan, options.sglang_check_timeout_s, options.sglang_check
        )
    locks = []
    try:
        for node in nodes:  # in rank order, so two multi-node applies cannot deadlock
            lock = node.session.lock(node.plan.deployment.state_dir)  # type: ignore[union-attr]
            if lock.holder is None:
                for n in nodes:
                    fleet.results[n.host.name] = ApplyResult(
                        Exit.REFUSED, "refused", n.host.name, unit,
                        f"{node.host.name}: {lock.refusal}; nothing was changed")
                fleet.stopped_at = node.host.name
                return fleet
            for text in lock.warnings:
                node.session.report("warning", text=text)
            locks.append(lock)
        return _deploy_all_nodes(nodes, options, fleet, unit)
    finally:
        for lock in locks:
            lock.release()


def _start_all(nodes: Sequence[Node], deployments: Sequence[Deployment], options: ApplyOptions,
               stop_first: bool, best_effort_idle: bool,
               gate: Callable[[], list[StartupResult | None]] | None = None) -> list[StartupResult]:
    """Stop, wait idle, install and start every node; follow rank 0 to ready, watch the rest.

    `gate` runs after staging and before any node stops; a refusal from it for any node ends
    the start there on every node. `best_effort_idle` is a restore: GPUs still busy on any node
    leave every node's unit installed and stopped, never started into GPUs that are not free.
    """
    transactions = [Transaction(n.session, n.host.name, options) for n in nodes]

    def stop_and_wait(i: int) -> StartupResult | None:
        if stop_first:
            nodes[i].session.stop(deployments[i].unit)
        verdict = nodes[i].session.wait_gpus_idle(deployments[i].gpus, options.gpu_idle_timeout_s)
        if verdict.idle:
            return None
        return StartupResult(False, reason="GPUs still busy after "
                             f"{options.gpu_idle_timeout_s:.0f} s on {nodes[i].host.name}: "
                             f"{verdict.describe()}", failure_kind="gpus_busy")

    indices = list(range(len(nodes)))
    staged = _each(indices, lambda i: nodes[i].session.stage(deployments[i]))
    if not all(s.ok for s in staged):
        return [StartupResult(s.ok, reason="" if s.ok else "cannot write the unit: "
                                                           f"{s.stderr.strip()}",
                              failure_kind=None if s.ok else "stage_failed") for s in staged]
    refused = gate() if gate is not None else []
    if any(refused):
        return [
            r
            or StartupResult(
                False,
                reason="not started: another node refused before the stop",
                failure_kind=next(x for x in refused if x).failure_kind,
            )
            for r in refused
        ]
    busy = _each(indices, stop_and_wait)
    if any(busy):
        if best_effort_idle:
            _each(
                indices, lambda i: nodes[i].session.install_and_start(deployments[i], start=False)
            )
        return [b or StartupResult(False, reason="not started: another node's GPUs were busy",
                                   failure_kind="gpus_busy") for b in busy]
    started = _each(indices, lambda i: nodes[i].session.install_and_start(deployments[i]))
    failed = threading.Event()

    def follow(i: int) -> StartupResult:
        result, invocation = started[i]
        if not result.ok or not invocation:
            failed.set()
            return StartupResult(False, reason=f"starting the unit failed: {result.stderr.strip()}",
                                 failure_kind="start_failed")
        expected = deployments[i].expected_phases if i == 0 else None
        outcome = nodes[i].session.follow(deployments[i], invocation, expected, stop=failed)
        if i == 0 or not outcome.ready:
            failed.set()  # rank 0 is done (either way), or a rank failed: stop watching
        return outcome

    results = _each(indices, follow)
    if results[0].ready and all(r.ready for r in results[1:]):
        healthy, why = transactions[0].serving(deployments[0])
        if not healthy:
            results[0].ready, results[0].reason, results[0].failure_kind = False, why, "unhealthy"
    elif results[0].ready:
        bad = next(r for r in results[1:] if not r.ready)
        results[0].ready, results[0].failure_kind = False, "peer_failed"
        results[0].reason = f"another node failed: {bad.reason}"
    for transaction, deployment, result in zip(transactions, deployments, results, strict=True):
        transaction.record(
            deployment, result, "ready" if all(r.ready for r in results) else "failed"
        )
    return results


def _before_stop(
    rank0: Node, deployment: Deployment, options: ApplyOptions
) -> StartupResult | None:
    """`options.before_stop` for rank 0, the node that serves (a gateway drains it): a refusal, or
    None."""
    running = running_port(
        rank0.current_unit, rank0.plan is not None and rank0.plan.previous_active
    )
    return before_stop_gate(
        rank0.session, options.before_stop, Handover(deployment, rank0.previous, running)
    )


def _deploy_all_nodes(
    nodes: list[Node], options: ApplyOptions, fleet: FleetResult, unit: str
) -> FleetResult:
    """Every node's deployment started together, recorded, and rolled back as one when any fails."""
    deployments = [n.plan.deployment for n in nodes if n.plan is not None]
    for node in nodes:
        assert node.plan is not None
        node.previous = previous_deployment(node.session, node.plan, node.current_unit)

    def gate() -> list[StartupResult | None]:
        """Every node's pre-stop guarantees, as a single host has them (`prestop.pre_stop`)."""
        def one(node: Node) -> StartupResult | None:
            assert node.plan is not None
            node.plan, refused = pre_stop(
                node.session, node.plan, node.check, node.loaded, options.wait_for_gpus_s
            )
            return refused
        refused = _each(nodes, one)
        drain = None if any(refused) else _before_stop(nodes[0], deployments[0], options)
        return [drain, *refused[1:]] if drain else refused

    results = _start_all(
        nodes,
        deployments,
        options,
        stop_first=any(n.plan.previous_active for n in nodes if n.plan),
        best_effort_idle=False,
        gate=gate,
    )
    if any(r.failure_kind in REFUSED_BEFORE_STOP for r in results):
        return _refused_before_stop(nodes, deployments, results, options, fleet, unit)
    if any(r.failure_kind == "stage_failed" for r in results):
        for node, result in zip(nodes, results, strict=True):
            fleet.results[node.host.name] = ApplyResult(
                Exit.REFUSED, "refused", node.host.name, unit,
                f"node {node.rank}: "
                f"{result.reason or 'not changed: another node could not write its unit'}; no node "
                "was stopped", plan=node.plan)
        fleet.stopped_at = nodes[0].host.name
        return fleet
    ready = all(r.ready for r in results)
    for node, result in zip(nodes, results, strict=True):
        fleet.results[node.host.name] = result_from(
            result,
            ApplyResult(
                Exit.READY if ready else Exit.NOTHING_HEALTHY,
                "ready" if ready else "failed",
                node.host.name,
                unit,
                f"node {node.rank}: "
                + ("ready" if result.ready and ready else result.reason or "failed"),
                deployment_id=deployments[0].id,
                plan=node.plan,
            ),
        )
    if ready:
        return fleet
    fleet.stopped_at = next(
        (
            n.host.name
            for n, r in zip(nodes, results, strict=True)
            if not r.ready and r.failure_kind != "peer_failed"
        ),
        nodes[0].host.name,
    )
    previous = [n.previous for n in nodes]
    if not options.rollback or any(p is None for p in previous):
        for node, deployment in zip(nodes, deployments, strict=True):
            node.session.stop(deployment.unit)
        why = (
            "--no-rollback was given"
            if not options.rollback
            else "a node has no previous deployment"
        )
        for name, outcome in list(fleet.results.items()):
            fleet.results[name] = replace(outcome, message=f"{outcome.message}; {why}, so nothing "
                                                   "healthy is running")
        return fleet
    unusable = _unrestorable(nodes)
    if unusable is not None:  # checked before any node starts its previous deployment again
        for node, deployment in zip(nodes, deployments, strict=True):
            node.session.stop(deployment.unit)
        for name, outcome in list(fleet.results.items()):
            fleet.results[name] = replace(
                outcome,
                rollback=RollbackOutcome(None, False, unusable),
                message=(
                    f"{outcome.message}; the rollback was not started ({unusable}); every node is "
                    "stopped"
                ),
            )
        return fleet
    restored = _start_all(nodes, [p for p in previous if p is not None], options, stop_first=True,
                          best_effort_idle=True)
    back = all(r.ready for r in restored)
    for node, (name, outcome), again in zip(
        nodes, list(fleet.results.items()), restored, strict=True
    ):
        rollback = RollbackOutcome(
            node.previous.rollback_of if node.previous else None, again.ready, again.reason
        )
        if back:
            fleet.results[name] = replace(
                outcome, rollback=rollback, exit_code=Exit.ROLLED_BACK, status="rolled_back",
                message=f"{outcome.message}; every node was rolled back to its previous deployment")
        else:
            fleet.results[name] = replace(outcome, rollback=rollback, message=(
                f"{outcome.message}; the rollback failed too: "
                f"{again.reason or 'another node failed'}"))
    return fleet


def _refused_before_stop(
    nodes: list[Node],
    deployments: list[Deployment],
    results: list[StartupResult],
    options: ApplyOptions,
    fleet: FleetResult,
    unit: str,
) -> FleetResult:
    """A node refused before the stop (SGLang's check, GPUs held): recorded on every node, none
    stopped."""
    for node, deployment, result in zip(nodes, deployments, results, strict=True):
        failure = {"kind": result.failure_kind, "reason": result.reason}
        node.session.record(
            deployment,
            {**deployment_meta(deployment, "refused"), "host": node.host.name, "failure": failure},
            last_good=False,
            keep=options.keep,
            unstage=True,
        )
        fleet.results[node.host.name] = ApplyResult(
            Exit.REFUSED, "refused", node.host.name, unit, f"node {node.rank}: {result.reason}; no "
                                                           "node was stopped",
            deployment_id=deployment.id, plan=node.plan,
            failure=StartFailure(result.failure_kind or "refused", result.reason),
            diagnostics=list(node.plan.diagnostics) if node.plan else [])
    fleet.stopped_at = next(n.host.name for n, r in zip(nodes, results, strict=True)
                            if not r.reason.startswith("not started"))
    return fleet


def _unrestorable(nodes: list[Node]) -> str | None:
    """Why some node's previous deployment cannot be started again (its [secrets] file)."""
    for node in nodes:
        why = unrestorable(node.session, node.previous, node.host.name) if node.previous else None
        if why is not None:
            return f"{node.host.name}: {why}"
    return None
