"""What `apply` will do on a host, decided as data before anything runs.

`Deployment` is what gets installed (unit text, profile, expectations); `Plan` is the ordered
steps with the reason for each, the unit diff, and whether preflight refuses. `plan` prints a
Plan; `apply` executes one. Pure: no I/O.
"""

from __future__ import annotations

import difflib
import enum
import getpass
import hashlib
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sgdeploy import __version__
from sgdeploy.core.diagnostics import Diagnostic
from sgdeploy.deploy.restart_kind import (
    Restart,
    as_the_swap_decides,
    compile_cache_restart,
    restart_for,
    restart_of,
)
from sgdeploy.deploy.weight_daemon import DaemonFiles, daemon_unit_name
from sgdeploy.host.facts import GpuHolder, HostFacts, state_dir
from sgdeploy.logs import expected_phases
from sgdeploy.sglang.check.verdict import CheckRequest, HostVerdict
from sgdeploy.sglang.rules import gpus_per_node
from sgdeploy.sglang.versions import parse_version

UNIT_DIR = "/etc/systemd/system"
# `/ready` exists from 0.5.20 (http_server.py); older: `/health`
READY_ENDPOINT_SINCE = (0, 5, 20, 0)

DEFAULT_PORT = 30000  # SGLang's own default --port
# torch.distributed rendezvous on rank 0 of a multi-node launch when the profile names none
DIST_INIT_PORT = 50000


class StepKind(enum.StrEnum):
    LOCK = "lock"
    SGLANG_CHECK = "sglang_check"
    WAIT_GPUS_FREE = "wait_gpus_free"
    STOP = "stop"
    WAIT_GPUS_IDLE = "wait_gpus_idle"
    INSTALL = "install"
    START = "start"
    WAIT_READY = "wait_ready"
    CHECK_HEALTH = "check_health"
    RECORD = "record"


@dataclass(frozen=True)
class Step:
    """One step and why it is there: a host's (`StepKind`), or a gateway's around it
    (drained.py)."""

    kind: enum.StrEnum
    why: str

    def as_dict(self) -> dict[str, str]:
        return {"step": self.kind.value, "why": self.why}


def unit_file(unit: str) -> str:
    return f"{UNIT_DIR}/{unit}.service"


def staged_unit_file(unit: str) -> str:
    """Where a unit's new text waits, beside the live one, until the swap renames it into place."""
    return f"{UNIT_DIR}/.{unit}.service.sgdeploy-staged"


@dataclass(frozen=True)
class Deployment:
    """One deployable thing: a rendered unit and what its server must show to be ready."""

    id: str
    unit: str
    unit_text: str
    profile_name: str
    profile_sha256: str
    profile_text: str
    sglang_version: str
    server: dict[str, Any]
    gpus: tuple[int | str, ...]
    ready_timeout_s: int
    rollback_of: str | None = None
    probe_settings: dict[str, Any] | None = None  # the profile's [probe], when it has one
    # readiness phases, when no profile says (a unit found on the host)
    expect: tuple[str, ...] | None = None
    check: CheckRequest | None = None  # what SGLang's own check on the host is asked about
    sandbox: str | None = None  # a strict unit: who runs it and what it may write (plan shows it)
    # the weight-cache daemon's unit, for a client of it (weight_daemon)
    daemon_text: str | None = None

    @property
    def unit_path(self) -> str:
        return unit_file(self.unit)

    @property
    def staged_unit_path(self) -> str:
        return staged_unit_file(self.unit)

    @property
    def daemon_files(self) -> DaemonFiles:
        daemon = daemon_unit_name(self.unit)
        return DaemonFiles(
            daemon, unit_file(daemon), staged_unit_file(daemon), self.daemon_text is not None
        )

    @property
    def state_dir(self) -> str:
        return state_dir(self.unit)

    @property
    def record_dir(self) -> str:
        return f"{self.state_dir}/{self.id}"

    @property
    def unit_sha256(self) -> str:
        return hashlib.sha256(self.unit_text.encode()).hexdigest()

    @property
    def port(self) -> int:
        return server_port(self.server)

    @property
    def expected_phases(self) -> list[str]:
        if self.expect is not None:
            return list(self.expect)
        return expected_phases(self.server, self.sglang_version)

    @property
    def health_path(self) -> str:
        return health_path(self.sglang_version, self.server)


def health_path(sglang_version: str | None, server: Mapping[str, Any] | None = None) -> str:
    """The endpoint that says a server is ready: `/ready` from SGLang 0.5.20 on
    (READY_ENDPOINT_SINCE), `/health` before (and when the version is unknown). A launch with
    `skip_server_warmup` says it is ready before any request has run, and `/ready` (or `/health`
    with SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION off) answers without one: `/health_generate`,
    which every release serves and which always runs one token through the scheduler, makes
    readiness count a request that succeeded."""
    if server and server.get("skip_server_warmup"):
        return "/health_generate"
    try:
        return (
            "/ready"
            if sglang_version and parse_version(sglang_version) >= READY_ENDPOINT_SINCE
            else "/health"
        )
    except ValueError:
        return "/health"


def server_port(server: dict[str, Any]) -> int:
    """The port a `[server]` table has SGLang listen on."""
    port = server.get("port", DEFAULT_PORT)
    return port if isinstance(port, int) else DEFAULT_PORT


def new_deployment_id(profile_sha256: str, now: datetime | None = None) -> str:
    """Sortable by time to the millisecond: `20261130T112614Z-042-8fc7671f` (profile hash last)."""
    moment = now or datetime.now(UTC)
    return (
        f"{moment.strftime('%Y%m%dT%H%M%SZ')}-{moment.microsecond // 1000:03d}-{profile_sha256[:8]}"
    )


def gpus_for(server: dict[str, Any], explicit: list[int | str] | None) -> tuple[int | str, ...]:
    """The GPUs a launch occupies: deploy.gpus, else the first tp x pp (x dp) indices."""
    if explicit:
        return tuple(explicit)
    return tuple(range(gpus_per_node(server)))


def who() -> str:
    """`user@machine` of whoever runs sgdeploy, for the deployment record and the lock."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


@dataclass(frozen=True)
class Takeover:
    """A server outside the profile's unit that `apply --adopt` stops: run by hand, or by another
    unit."""

    pid: int
    port: int
    unit: str | None = None  # the other unit that runs it (stopped and disabled)
    family: tuple[int, ...] = ()  # its child processes (killed if they outlive it)

    def describe(self) -> str:
        owner = f"{self.unit}.service" if self.unit else "outside systemd"
        return f"pid {self.pid} ({owner}) serves port {self.port}"


@dataclass(frozen=True)
class Plan:
    host: str
    deployment: Deployment
    steps: tuple[Step, ...]
    unit_diff: str
    refusals: tuple[Diagnostic, ...] = ()
    notes: tuple[Diagnostic, ...] = ()
    up_to_date: bool = False
    previous_active: bool = False
    last_good: str | None = None
    facts: HostFacts | None = field(default=None, repr=False)
    takeover: tuple[Takeover, ...] = ()
    sglang_check: HostVerdict | None = None  # SGLang's own verdict on the host (plan runs it too)
    # processes outside the unit on its GPUs (--wait-for-gpus)
    strangers: tuple[GpuHolder, ...] = ()
    restart: Restart | None = None  # weights kept, caches warm or cold

    @property
    def refused(self) -> bool:
        return bool(self.refusals)

    @property
    def diagnostics(self) -> list[Diagnostic]:
        return [*self.refusals, *self.notes]


def unit_diff(current: str | None, new: str, path: str) -> str:
    if current == new:
        return ""
    return "".join(
        difflib.unified_diff(
            (current or "").splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile=f"{path} (on host)" if current is not None else "/dev/null",
            tofile=f"{path} (new)",
        )
    )


@dataclass(frozen=True)
class BeforeStop:
    """What a plan does before it stops the running server: redeploy even when up to date
    (`force`), stop other servers on the port (`takeover`, --adopt), ask the host's SGLang first
    (`sglang_check`), and wait up to `wait_for_gpus_s` for processes outside the unit to leave
    its GPUs (`strangers`)."""

    force: bool = False
    takeover: tuple[Takeover, ...] = ()
    sglang_check: bool = False
    strangers: tuple[GpuHolder, ...] = ()
    wait_for_gpus_s: float | None = None
    daemon_text: str | None = None  # the weight-cache daemon's unit on the host now


def make_plan(host: str, deployment: Deployment, facts: HostFacts, current_unit_text: str | None,
              diagnostics: list[Diagnostic], before: BeforeStop = BeforeStop()) -> Plan:
    """Decide the steps of a deployment on a host from its facts."""
    force, takeover, strangers = before.force, before.takeover, before.strangers
    refusals = tuple(d for d in diagnostics if d.is_error)
    notes = tuple(d for d in diagnostics if not d.is_error)
    unit = facts.unit
    active = bool(unit and unit.active)
    same_unit = current_unit_text == deployment.unit_text
    up_to_date = same_unit and active and facts.last_good is not None and not force
    steps: list[Step] = [Step(StepKind.LOCK, f"one apply at a time on {deployment.unit}; up to "
                              "date is decided again under it")]
    if before.sglang_check:
        steps.append(Step(StepKind.SGLANG_CHECK, f"SGLang {deployment.sglang_version} on {host} "
                          "parses and resolves this launch as the unit would run it; a refusal "
                          "stops here"))
    if strangers:
        steps.append(Step(StepKind.WAIT_GPUS_FREE, "; ".join(h.describe() for h in strangers)
                          + f": wait up to {before.wait_for_gpus_s or 0:.0f} s for them to leave, "
                            "or stop nothing"))
    if active and unit is not None:
        steps.append(Step(StepKind.STOP, f"{deployment.unit}.service is {unit.active_state} "
                          f"(pid {unit.main_pid}); the new server needs its GPUs"))
    for other in takeover:
        steps.append(
            Step(
                StepKind.STOP,
                f"{other.describe()}: --adopt stops it"
                + (" and disables its unit" if other.unit else "")
                + f" so {deployment.unit} takes over",
            )
        )
    gpus = ", ".join(str(g) for g in deployment.gpus)
    restart = restart_of(
        as_the_swap_decides(
            restart_for(current_unit_text, deployment.unit_text, deployment.sglang_version),
            before.daemon_text, deployment.daemon_text),
        compile_cache_restart(current_unit_text, deployment.unit_text))
    steps += [
        Step(StepKind.WAIT_GPUS_IDLE, f"GPUs {gpus} must have no compute process and memory back "
                                      "at baseline"),
        Step(StepKind.INSTALL, f"write {deployment.unit_path} atomically, daemon-reload"
             + (f"; {deployment.sandbox}" if deployment.sandbox else "")),
        Step(StepKind.START, f"systemctl start {deployment.unit}.service"
             + f"; restart: {restart.kind} ({restart.why})"),
        Step(StepKind.WAIT_READY, "follow the journal until "
             f"{', '.join(deployment.expected_phases)} (deadline {deployment.ready_timeout_s} s)"),
        Step(StepKind.CHECK_HEALTH, f"GET {deployment.health_path} on 127.0.0.1:{deployment.port} "
                                    "returns 200"),
        Step(StepKind.RECORD, f"record {deployment.id} under {deployment.state_dir}; mark it last "
                              "good"),
    ]
    return Plan(
        host=host,
        deployment=deployment,
        steps=tuple(steps),
        unit_diff=unit_diff(current_unit_text, deployment.unit_text, deployment.unit_path),
        refusals=refusals,
        notes=notes,
        up_to_date=up_to_date,
        previous_active=active,
        last_good=facts.last_good,
        facts=facts,
        takeover=takeover,
        strangers=strangers,
        restart=restart,
    )


def deployment_meta(deployment: Deployment, outcome: str, **extra: Any) -> dict[str, Any]:
    """The `meta.json` of a deployment record (SPEC §5)."""
    meta: dict[str, Any] = {
        "id": deployment.id,
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "profile": deployment.profile_name,
        "profile_sha256": deployment.profile_sha256,
        "unit_sha256": deployment.unit_sha256,
        "sglang_version": deployment.sglang_version,
        "outcome": outcome,
        "deployed_by": who(),
        "sgdeploy_version": __version__,
        "rollback_of": deployment.rollback_of,
    }
    meta.update(extra)
    return meta
