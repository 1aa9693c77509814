"""The transaction: one start of a deployment on a host whose unit lock is held, and the
results of apply and rollback.

`Transaction.start` stages the unit and its record, runs the pre-stop gate, swaps the server
(install, stop, wait for idle GPUs, start: `HostSession.swap`), follows the journal until ready
and checks health; `record` writes the outcome. `on_host` runs a piece of work over one host's
connection and turns connection problems into results; an exit 3 ("nothing healthy runs") is
checked against the host before it is reported (`confirmed`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sgdeploy.core.diagnostics import Diagnostic
from sgdeploy.deploy.downtime import downtime
from sgdeploy.deploy.journal import Reporter, StartupResult
from sgdeploy.deploy.plan import Deployment, Plan, Takeover, deployment_meta
from sgdeploy.deploy.prestop import BeforeStop
from sgdeploy.deploy.probe import ProbeOutcome, compare, probe_remote
from sgdeploy.deploy.secret_args import api_key_for
from sgdeploy.deploy.session import SWAP_WINDOW_S, HostSession, Watched, healthy_now
from sgdeploy.host.pagecache import PageCacheWarmth
from sgdeploy.host.remote import (
    CommandResult,
    ConnectError,
    ConnectionLost,
    RemoteError,
    RemoteHost,
)
from sgdeploy.logs import LogReport, settings_changed
from sgdeploy.logs.report import Adjustment
from sgdeploy.profile.inventory import HostEntry
from sgdeploy.profile.model import ProbeSettings
from sgdeploy.sglang.check.verdict import CheckReport, Disagreement
from sgdeploy.sglang.secrets import redact_document


class Exit(enum.IntEnum):
    READY = 0
    ROLLED_BACK = 1
    REFUSED = 2
    NOTHING_HEALTHY = 3


@dataclass
class ApplyOptions:
    rollback: bool = True
    force: bool = False
    dry_run: bool = False
    gpu_idle_timeout_s: float = 120.0
    health_timeout_s: float = 60.0
    settle_s: float = 5.0  # after ready: the unit must keep running and healthy this long
    keep: int = 20  # deployment records kept per unit on the host (the last good one always)
    probe: bool = False  # measure throughput after ready and record it
    min_ratio: float | None = None  # fail (and roll back) below this share of the last good figure
    sglang: str | None = None
    # stop an SGLang server on the profile's port outside its unit, then take over
    adopt: bool = False
    sglang_check: bool = True  # ask the host's own SGLang about the launch before anything stops
    sglang_check_timeout_s: float = 60.0
    # wait (bounded) for processes outside the unit to leave its GPUs
    wait_for_gpus_s: float | None = None
    # read the weights into the page cache before the stop (sgdeploy.host.pagecache)
    read_ahead: bool = True
    # Run last before the stop (a gateway drains the server): a sentence refuses the start, nothing
    # stopped
    before_stop: BeforeStop | None = None
    # Run once the result is known, over the host's connection still open (a gateway puts the worker
    # back)
    after_host: Callable[[HostSession, ApplyResult], None] | None = None




@dataclass(frozen=True)
class StartFailure:
    """Why a start failed: the kind the journal's reader named, the reason, the log line and, when
    the log was read, how sure the reader is and the later errors it set aside."""

    kind: str
    reason: str
    line: int | None = None
    confidence: str | None = None  # high | medium | low, from the log reader
    consequences: tuple[tuple[int, str], ...] | None = None

    def as_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {"kind": self.kind, "reason": self.reason, "line": self.line}
        if self.confidence is not None:
            found["confidence"] = self.confidence
        if self.consequences is not None:
            found["consequences"] = [list(c) for c in self.consequences]
        return found


@dataclass(frozen=True)
class RollbackOutcome:
    """What a failed deployment's rollback restored: the recorded deployment it started again (None
    when it could not start one), whether that became ready, and why not."""

    restored: str | None
    ready: bool
    reason: str | None = None
    deployment_id: str | None = None
    startup_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"deployment_id": self.deployment_id, "restored": self.restored, "ready": self.ready,
                "reason": self.reason, "startup_s": self.startup_s}


@dataclass(frozen=True)
class ApplyResult:
    """What an apply or rollback of one host ended in; a later stage that changes it (the
    rollback, the check again before reporting, `plan`'s exit code) returns a new one."""

    exit_code: int
    status: str
    host: str
    unit: str
    message: str
    deployment_id: str | None = None
    phase_times: dict[str, float | None] = field(default_factory=dict)
    kv_cache_tokens: int | None = None
    auto_adjusted: list[Adjustment] = field(default_factory=list)
    failure: StartFailure | None = None
    explain: list[str] = field(default_factory=list)
    rollback: RollbackOutcome | None = None
    probe: ProbeOutcome | None = None
    diagnostics: list[Diagnostic] = field(default_factory=list)
    plan: Plan | None = None
    timings: dict[str, float] = field(default_factory=dict)
    # where the downtime went, on the host's clock (`downtime`): stop_s, gpu_release_s,
    # unit_start_s, to_first_line_s, to_ready_s, downtime_s; the spans that are known
    downtime: dict[str, float] = field(default_factory=dict)
    # SGLang's own seconds per phase of the start, where its log says them (0.5.17+)
    engine_timings: dict[str, Any] = field(default_factory=dict)
    # the weights read into the page cache before the stop: wall time the downtime did not pay
    read_ahead: PageCacheWarmth | None = None
    stats: dict[str, int] = field(default_factory=dict)
    # SGLang's own verdict on the host, its prediction and what differed
    sglang_check: CheckReport | None = None
    disagreements: tuple[Disagreement, ...] = ()  # host verdict vs offline rules
    # could not connect: `plan` exits 2 for it, not 1 (would refuse); not in the JSON
    unreachable: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The result as JSON, with every secret in it (a log line, a finding) `<redacted>`."""
        return redact_document({
            "exit_code": self.exit_code,
            "status": self.status,
            "host": self.host,
            "unit": self.unit,
            "message": self.message,
            "deployment_id": self.deployment_id,
            "phase_times": self.phase_times,
            "kv_cache_tokens": self.kv_cache_tokens,
            "auto_adjusted": [a.as_dict() for a in self.auto_adjusted],
            "failure": self.failure.as_dict() if self.failure else None,
            "explain": self.explain,
            "rollback": self.rollback.as_dict() if self.rollback else None,
            "probe": self.probe.as_dict() if self.probe else None,
            "diagnostics": [d.as_dict() for d in self.diagnostics],
            "steps": [s.as_dict() for s in self.plan.steps] if self.plan else [],
            "timings": self.timings,
            "downtime": self.downtime,
            "engine_timings": self.engine_timings,
            "read_ahead": self.read_ahead.as_dict() if self.read_ahead else None,
            "ssh": self.stats,
            "sglang_check": self.sglang_check.as_dict() if self.sglang_check else None,
            "disagreements": [d.as_dict() for d in self.disagreements],
        })


# --------------------------------------------------------------------------- the transaction
class Transaction:
    """One apply or rollback on one host, holding the unit's lock throughout."""

    def __init__(self, session: HostSession, host: str, options: ApplyOptions) -> None:
        self.session = session
        self.host = host
        self.options = options

    def start(self, deployment: Deployment, stop_first: bool, best_effort_idle: bool = False,
              takeover: tuple[Takeover, ...] = (),
              gate: Callable[[], StartupResult | None] | None = None,
              staged: CommandResult | None = None) -> StartupResult:
        """Stop what runs, wait for the GPUs, install and start `deployment`, wait until healthy.

        `gate` runs after staging and before the stop; a result from it ends the start there,
        nothing stopped (SGLang refused the launch, strangers kept the GPUs). `best_effort_idle`
        is a restore (rollback): GPUs still busy at the deadline then leave the unit installed
        but stopped, never started into GPUs that are not free.
        """
        began = time.monotonic()
        staged = staged or self.session.stage(deployment)  # done already when taking the lock
        if not staged.ok:
            return StartupResult(False, reason=f"cannot write {deployment.unit_path} or the record "
                                 "(nothing was stopped): "
                                 f"{staged.stderr.strip() or 'exit ' + str(staged.exit_code)}",
                                 failure_kind="stage_failed", seconds=time.monotonic() - began)
        refused = gate() if gate is not None else None
        if refused is not None:
            refused.seconds = time.monotonic() - began
            return refused
        if takeover:
            result, invocation, busy = self._stop_and_start_adopting(
                deployment, stop_first, takeover, best_effort_idle
            )
            host_times: dict[str, float] = {}
        else:
            result, invocation, busy, host_times = self._swap(deployment, stop_first)
        if busy is not None:
            busy.seconds = time.monotonic() - began
            return busy
        if not result.ok or not invocation:
            return StartupResult(
                False,
                reason="installing or starting the unit failed: "
                + (result.stderr.strip() or f"exit {result.exit_code}"),
                failure_kind="start_failed",
                explain=result.stderr.strip().splitlines()[-10:],
                seconds=time.monotonic() - began,
            )
        startup = self.session.follow(deployment, invocation, deployment.expected_phases)
        startup.host_times = host_times
        if startup.ready:
            info: list[dict[str, Any] | None] = []  # /server_info, asked beside the health check
            asking = threading.Thread(
                target=self._server_info,
                args=(deployment, info),
                daemon=True,
                name="sgdeploy-server-info",
            )
            asking.start()
            healthy, why = self.serving(deployment)
            if not healthy:
                startup.ready, startup.reason, startup.failure_kind = False, why, "unhealthy"
                startup.explain = self.session.journal_tail(deployment.unit)
            else:
                asking.join()
                startup.auto_adjusted = adjustments(
                    startup.report, info[0] if info else None, deployment.server
                )
        startup.seconds = time.monotonic() - began
        return startup

    def serving(self, deployment: Deployment) -> Watched:
        """A ready server's health: answering, then still up and healthy after the settle time."""
        answered = self.session.check_health(deployment, self.options.health_timeout_s)
        return self.session.settle(deployment, self.options.settle_s) if answered.ok else answered

    def _server_info(self, deployment: Deployment, into: list[dict[str, Any] | None]) -> None:
        with contextlib.suppress(RemoteError):  # none: the adjustments come from the log alone
            into.append(self.session.server_info(deployment))

    def _swap(
        self, deployment: Deployment, stop_first: bool
    ) -> tuple[CommandResult, str | None, StartupResult | None, dict[str, float]]:
        """Install, stop, start in one round trip when the GPUs free at once; else wait for them.
        The last item: the host's clock at the swap's steps (`Swapped.times`)."""
        swap = self.session.swap(
            deployment, stop_first, min(SWAP_WINDOW_S, self.options.gpu_idle_timeout_s)
        )
        if not swap.installed:
            return (
                swap.result,
                None,
                StartupResult(
                    False,
                    reason=f"cannot install {deployment.unit_path} (nothing was stopped): "
                    f"{swap.result.stderr.strip() or 'exit ' + str(swap.result.exit_code)}",
                    failure_kind="stage_failed",
                ),
                {},
            )
        if swap.started:
            return swap.result, swap.invocation, None, swap.times
        left = max(self.options.gpu_idle_timeout_s - SWAP_WINDOW_S, 0.0)
        verdict = (
            self.session.wait_gpus_idle(deployment.gpus, left, swap.kept_pids)
            if left
            else swap.verdict
        )
        if verdict is None or not verdict.idle:
            # Started into held GPUs it would crash and restart in a loop: installed, left stopped.
            detail = (f"GPUs still busy after {self.options.gpu_idle_timeout_s:.0f} s: "
                      f"{verdict.describe() if verdict else 'unknown'}; {deployment.unit}.service "
                      "is installed but left stopped")
            busy = StartupResult(False, reason=detail, failure_kind="gpus_busy")
            return swap.result, None, busy, {}
        result, invocation = self.session.start_installed(deployment)
        return result, invocation, None, {}  # the GPUs freed late: no single swap to time

    def _stop_and_start_adopting(
        self,
        deployment: Deployment,
        stop_first: bool,
        takeover: tuple[Takeover, ...],
        best_effort_idle: bool,
    ) -> tuple[CommandResult, str | None, StartupResult | None]:
        """`--adopt`: stop the unit and the servers outside it, wait for the GPUs, install,
        start."""
        if stop_first:
            self.session.stop(deployment.unit)
        self.session.take_over(takeover)
        verdict = self.session.wait_gpus_idle(deployment.gpus, self.options.gpu_idle_timeout_s)
        if not verdict.idle:
            detail = (f"GPUs still busy after {self.options.gpu_idle_timeout_s:.0f} s: "
                      f"{verdict.describe()}")
            if best_effort_idle:
                self.session.install_and_start(deployment, start=False)
                detail += f"; {deployment.unit}.service is installed but left stopped"
            return (
                CommandResult("", 1, "", ""),
                None,
                StartupResult(False, reason=detail, failure_kind="gpus_busy"),
            )
        result, invocation = self.session.install_and_start(deployment)
        return result, invocation, None

    def measure(
        self, deployment: Deployment, startup: StartupResult, baseline: dict[str, Any] | None
    ) -> None:
        """Run the throughput probe on a ready server; below --min-ratio the start counts as
        failed."""
        settings = ProbeSettings.model_validate(deployment.probe_settings or {})
        self.session.report(
            "step", step="probe", endpoint=settings.endpoint, concurrency=settings.concurrency
        )
        measured = probe_remote(self.session.remote, deployment.port, settings,
                                api_key_for(self.session.remote, deployment))
        verdict = compare(measured, baseline, self.options.min_ratio or 0.0)
        startup.probe = ProbeOutcome(measured, verdict)
        self.session.report("probe", summary=measured.summary(), verdict=verdict.message)
        if self.options.min_ratio is not None and not verdict.ok:
            startup.ready, startup.failure_kind, startup.reason = (
                False,
                "throughput_regression",
                verdict.message,
            )

    def record(self, deployment: Deployment, startup: StartupResult, outcome: str,
               check: CheckReport | None = None, disagreements: Sequence[Disagreement] = (),
               unstage: bool = False) -> None:
        """Write the outcome's record, with SGLang's own check and its disagreements when there
        are."""
        report = startup.report
        meta = deployment_meta(
            deployment,
            outcome,
            host=self.host,
            startup_s=round(startup.seconds, 2),
            downtime=downtime(startup),
            engine_timings=startup.engine_timings,
            phases=[p.as_dict() for p in report.phases] if report else [],
            phase_times=report.phase_times() if report else {},
            kv_cache_tokens=report.kv_cache_tokens if report else None,
            auto_adjusted=[a.as_dict() for a in startup.auto_adjusted],
            failure={"kind": startup.failure_kind, "reason": startup.reason}
            if not startup.ready
            else None,
            probe=startup.probe.as_dict() if startup.probe else None,
            **({"read_ahead": startup.read_ahead.as_dict()} if startup.read_ahead else {}),
            **({"sglang_check": check.as_dict()} if check else {}),
            **({"disagreements": [d.as_dict() for d in disagreements]} if disagreements else {}),
        )
        self.session.record(
            deployment, meta, last_good=outcome == "ready", keep=self.options.keep, unstage=unstage
        )


def adjustments(
    report: LogReport | None, info: dict[str, Any] | None, server: dict[str, Any]
) -> list[Adjustment]:
    """What SGLang changed on its own: from the log, confirmed or completed by /server_info."""
    found = {a.field: a for a in report.auto_adjusted} if report else {}
    if info:
        for adjustment in settings_changed(server, info, "/server_info"):
            found.setdefault(adjustment.field, adjustment)
    return list(found.values())


def result_from(startup: StartupResult, result: ApplyResult) -> ApplyResult:
    """`result` with what the start showed: its phase times, KV cache, what SGLang changed on its
    own, the failure and the log lines that explain it, the probe."""
    report = startup.report
    failure: StartFailure | None = None
    if not startup.ready:
        f = report.failure if report else None
        failure = StartFailure(
            startup.failure_kind or (f.kind if f else "failed"),
            startup.reason,
            f.line if f else None,
            # what the log reader weighed: how sure, and the later errors it set aside
            confidence=f.confidence if f else None,
            consequences=tuple((n, text) for n, text in f.consequences) if f else None,
        )
    return dataclasses.replace(
        result,
        phase_times=report.phase_times() if report and startup.ready else {},
        kv_cache_tokens=report.kv_cache_tokens if report else None,
        auto_adjusted=startup.auto_adjusted,
        failure=failure,
        explain=startup.explain,
        probe=startup.probe,
        downtime=downtime(startup),
        engine_timings=startup.engine_timings,
        read_ahead=startup.read_ahead,
    )


def timings(startup: StartupResult, began: float) -> dict[str, float]:
    total = time.monotonic() - began
    return {"total_s": round(total, 3), "startup_s": round(startup.seconds, 3)}


def connect(name: str, entry: HostEntry) -> RemoteHost:
    return RemoteHost(name, entry).connect()


def on_host(
    name: str,
    entry: HostEntry,
    unit: str,
    report: Reporter,
    what: str,
    work: Callable[[HostSession], ApplyResult],
    after: Callable[[HostSession, ApplyResult], None] | None = None,
    begun: HostSession | ConnectError | None = None,
) -> ApplyResult:
    """Connect (or take over `begun`, the session opened already or why none could be), run
    `work` over it, then `after`; connection problems become results."""
    try:
        if isinstance(begun, ConnectError):
            raise begun
        remote = begun.remote if begun is not None else connect(name, entry)
    except ConnectError as exc:
        return ApplyResult(Exit.REFUSED, "refused", name, unit, str(exc), unreachable=True)
    with remote:
        if remote.privileges.refusal:
            return ApplyResult(Exit.REFUSED, "refused", name, unit,
                               f"{remote.privileges.refusal}; nothing was "
                               "changed", stats=remote.stats.as_dict())
        session = begun or HostSession(remote, report)
        session.report = report
        try:
            result = confirmed(session, work(session))
            if after is not None:
                after(session, result)
            return result
        except ConnectionLost as exc:
            return connection_lost(name, entry, unit, what, exc, remote.stats.as_dict())
        finally:
            report("ssh", **remote.stats.as_dict())


def confirmed(session: HostSession, result: ApplyResult) -> ApplyResult:
    """`result`, checked against the host when it says that nothing healthy is running (exit 3):
    a healthy server found makes it exit 1, saying what runs."""
    if result.exit_code != Exit.NOTHING_HEALTHY:
        return result
    try:
        healthy = healthy_now(session, result.unit)
    except RemoteError as exc:
        return dataclasses.replace(result, message=f"{result.message} (the host could not be "
                                           f"checked again: {exc})")
    if healthy is None:
        return result
    return dataclasses.replace(result, exit_code=Exit.ROLLED_BACK, message=f"{result.message}; "
                               f"checked again before reporting: {healthy}, so a healthy server "
                               "does run")


def connection_lost(name: str, entry: HostEntry, unit: str, what: str, exc: ConnectionLost,
                    stats: dict[str, int]) -> ApplyResult:
    """The result of a connection lost mid-way, after connecting again to see what runs now:
    exit 3 only when nothing healthy does (or the host cannot be reached to tell)."""
    result = ApplyResult(Exit.NOTHING_HEALTHY, "connection_lost", name, unit,
                         f"{exc}; the host may be mid-deployment: re-run {what} (it converges) or "
                         "`sgdeploy status`", stats=stats)
    try:
        with RemoteHost(name, entry, connect_timeout=5.0).connect() as again:
            return confirmed(HostSession(again), result)
    except RemoteError as error:
        return dataclasses.replace(
            result, message=f"{result.message} (the host could not be reached again to check what "
                    f"runs: {error})")

