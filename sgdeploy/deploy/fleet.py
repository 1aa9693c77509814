"""Applying one profile to many hosts: a canary first, then rolling batches.

Each host gets the full single-host transaction of `sgdeploy.deploy.apply` (its own connection, lock
and rollback). The rollout stops at the first host that fails: that host has rolled itself
back, the hosts already done keep their new deployment, and the rest are not touched.

Fabric's `ThreadingGroup` runs one command on many hosts at once; a deployment is a
conversation with each host (facts, lock, journal, health) that must stop between batches, so
the batches are plain worker threads, one `RemoteHost` each.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from sgdeploy.deploy.apply import apply_profile
from sgdeploy.deploy.gateway import RotationResult
from sgdeploy.deploy.journal import Reporter
from sgdeploy.deploy.transaction import ApplyOptions, ApplyResult, Exit
from sgdeploy.profile.inventory import HostEntry
from sgdeploy.profile.model import LoadedProfile
from sgdeploy.sglang.target import HostTarget


@dataclass(frozen=True)
class FleetHost:
    name: str
    entry: HostEntry
    target: HostTarget


@dataclass
class FleetResult:
    """Per-host results in rollout order; hosts never reached have no result."""

    hosts: list[str]
    results: dict[str, ApplyResult] = field(default_factory=dict)
    stopped_at: str | None = None
    # per host: its worker at the gateway (sgdeploy.deploy.drained)
    gateway: dict[str, RotationResult] | None = None

    @property
    def exit_code(self) -> int:
        codes = [r.exit_code for r in self.results.values()]
        if not codes:
            return int(Exit.REFUSED)
        for code in (Exit.NOTHING_HEALTHY, Exit.ROLLED_BACK):
            if code in codes:
                return int(code)
        if self.stopped_at is not None:
            # A host refused before touching anything: nothing changed anywhere (2), or the
            # hosts before it keep their new deployment and the rollout is incomplete (1).
            return int(Exit.ROLLED_BACK if Exit.READY in codes else Exit.REFUSED)
        return int(Exit.READY)

    def rows(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for name in self.hosts:
            result = self.results.get(name)
            if result is None:
                rows.append(
                    {
                        "host": name,
                        "status": "not started",
                        "exit_code": None,
                        "startup_s": None,
                        "sglang_version": None,
                        "deployment_id": None,
                        "message": "rollout stopped earlier",
                    }
                )
                continue
            plan = result.plan
            rows.append({
                "host": name,
                "status": result.status,
                "exit_code": int(result.exit_code),
                "startup_s": result.timings.get("startup_s"),
                "sglang_version": plan.deployment.sglang_version if plan else None,
                "deployment_id": result.deployment_id,
                "message": result.message,
            })
        if self.gateway is not None:
            for row in rows:
                rotation = self.gateway.get(row["host"])
                row["gateway"] = rotation.as_dict() if rotation is not None else None
        return rows

    def as_dict(self) -> dict[str, Any]:
        return {
            "exit_code": self.exit_code,
            "stopped_at": self.stopped_at,
            "hosts": self.rows(),
            **({"gateway": {host: r.as_dict() for host, r in self.gateway.items()}}
               if self.gateway is not None else {}),
            "results": {name: result.as_dict() for name, result in self.results.items()},
        }


def batches(hosts: Sequence[FleetHost], parallel: int, canary: bool) -> list[list[FleetHost]]:
    """The rollout order: the canary alone, then groups of `parallel`."""
    remaining = list(hosts)
    out: list[list[FleetHost]] = []
    if canary and remaining:
        out.append([remaining.pop(0)])
    step = max(parallel, 1)
    out.extend(remaining[i : i + step] for i in range(0, len(remaining), step))
    return out


def _ok(result: ApplyResult) -> bool:
    return result.exit_code == Exit.READY


def rollout(
    loaded: LoadedProfile,
    hosts: Sequence[FleetHost],
    options: ApplyOptions,
    parallel: int = 1,
    canary: bool = True,
    report_for: Callable[[str], Reporter] | None = None,
) -> FleetResult:
    """Apply `loaded` to every host, batch by batch, stopping at the first failure."""
    fleet = FleetResult([h.name for h in hosts])

    def one(host: FleetHost) -> ApplyResult:
        reporter = report_for(host.name) if report_for else (lambda *a, **k: None)
        return apply_profile(loaded, host.name, host.entry, host.target, options, reporter)

    for batch in batches(hosts, parallel, canary):
        with ThreadPoolExecutor(max_workers=len(batch)) as pool:
            results = list(pool.map(one, batch))
        for host, result in zip(batch, results, strict=True):
            fleet.results[host.name] = result
        failed = [h.name for h, r in zip(batch, results, strict=True) if not _ok(r)]
        if failed:
            fleet.stopped_at = failed[0]
            break
    return fleet
