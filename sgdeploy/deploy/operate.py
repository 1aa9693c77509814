"""Operating a deployment: its history, its status and the retention of its records.

    history_command(state_dir)        sh: `last_good` and every record's meta.json, one round trip
    parse_history(output)             pure -> History; an unusable meta.json is a `corrupt` record
    status_files_command(unit)        sh: the history, the unit file, the last good record's files,
                                      the hash of every record's unit, systemd's view of the file
    parse_status_files(output)        pure -> StatusFiles
    status_verdict(unit, state, ...)  pure: healthy or not, and why
    find_drift(files, rendered)       pure: how the host differs from its records and the profile
    prune_command(state, keep, lg)    sh: delete the oldest records beyond the newest `keep`
    gather_history / gather_status    the round trips over one RemoteHost (the only I/O here)

Everything the host prints is base64 between `@@sgdeploy:...@@` marker lines, so no file content
can be mistaken for a marker. Nothing here prints.
"""

from __future__ import annotations

import base64
import binascii
import difflib
import hashlib
import json
import shlex
import signal
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sgdeploy.deploy.plan import DEFAULT_PORT, health_path
from sgdeploy.deploy.records import WEIGHTS_FILE
from sgdeploy.deploy.render import RenderedUnit, render_unit
from sgdeploy.deploy.weight_daemon import daemon_unit_name
from sgdeploy.host.facts import (
    LAST_GOOD_NAME,
    UNIT_DIR,
    UNIT_PROPERTIES,
    FactParseError,
    GpuInfo,
    GpuProcess,
    HostFacts,
    SystemdUnitState,
    check_unit_name,
    facts_command,
    parse_facts,
    parse_key_values,
    parse_unit_state,
    state_dir,
)
from sgdeploy.host.remote import CommandTimeout, ConnectError, RemoteError, RemoteHost
from sgdeploy.sglang.catalog import UnknownVersionError, load_catalog
from sgdeploy.sglang.secrets import redact_document

if TYPE_CHECKING:
    from sgdeploy.deploy.gateway import WorkerStatus
    from sgdeploy.host.remote import RemoteHost
    from sgdeploy.profile.inventory import HostEntry
    from sgdeploy.profile.model import LoadedProfile

DEFAULT_KEEP = 20
MARK = "@@sgdeploy:"
# `20261130T112614Z-8fc7671f` (plan.new_deployment_id) as a shell pattern: retention only ever
# touches folders named like a deployment.
_ID_GLOB = "[0-9]" * 8 + "T" + "[0-9]" * 6 + "Z-*"
_DIFF_LINES = 60


class OperateError(Exception):
    """The host cannot be reached or answered something unusable: exit code 2.

    OperateError
    └── Unreachable    connecting failed or the connection dropped
    """


class Unreachable(OperateError):
    pass


# --------------------------------------------------------------------------- wire format
def _sections(output: str) -> Iterator[tuple[str, str, list[str]]]:
    """Yield (kind, argument, lines) for each `@@sgdeploy:KIND ARG@@` marker and its lines."""
    kind: str | None = None
    arg = ""
    lines: list[str] = []
    for line in output.splitlines():
        if line.startswith(MARK) and line.endswith("@@") and len(line) > len(MARK) + 2:
            if kind is not None:
                yield kind, arg, lines
            kind, _, arg = line[len(MARK) : -2].partition(" ")
            lines = []
        elif kind is not None:
            lines.append(line)
    if kind is not None:
        yield kind, arg, lines


def _decode(lines: list[str]) -> str | None:
    """A file as `base64` printed it; None when it was missing or does not decode."""
    if lines and lines[0].startswith("!"):
        return None
    try:
        return base64.b64decode("".join(line.strip() for line in lines), validate=True).decode(
            "utf-8"
        )
    except (binascii.Error, ValueError):
        return None


def _b64_file(path: str) -> str:
    """sh printing a file as base64, or `!missing`; `path` is a shell word (`$r/meta.json`)."""
    return (
        f'if [ -f "{path}" ]; then base64 "{path}" 2>/dev/null || echo "!unreadable"; '
        'else echo "!missing"; fi'
    )


def _last_good_sh() -> str:
    # A file holding the id, or a link to the deployment's folder (facts reads both the same way).
    return (
        f'lg=; if [ -L "$d/{LAST_GOOD_NAME}" ]; then lg=$(readlink "$d/{LAST_GOOD_NAME}"); '
        f'elif [ -f "$d/{LAST_GOOD_NAME}" ]; then lg=$(head -n 1 "$d/{LAST_GOOD_NAME}"); fi; '
        "lg=${lg%/}; lg=${lg##*/}; "
        f'printf "{MARK}last_good %s@@\\n" "$lg"'
    )


# --------------------------------------------------------------------------- history
@dataclass(frozen=True)
class Record:
    """One deployment folder on the host; `meta` is None when its meta.json is unusable."""

    id: str
    meta: dict[str, Any] | None
    problem: str | None = None
    last_good: bool = False

    def _get(self, key: str) -> Any:
        return self.meta.get(key) if self.meta else None

    @property
    def outcome(self) -> str:
        value = self._get("outcome")
        return value if isinstance(value, str) and value else "corrupt"

    @property
    def short_hash(self) -> str | None:
        value = self._get("profile_sha256")
        return value[:8] if isinstance(value, str) and value else None

    @property
    def failure_kind(self) -> str | None:
        failure = self._get("failure")
        return failure.get("kind") if isinstance(failure, dict) else None

    @property
    def tokens_per_s(self) -> float | None:
        """The single-stream figure of the throughput probe, when one was recorded."""
        probe = self._get("probe")
        value = probe.get("single_stream_tps") if isinstance(probe, dict) else None
        return (
            float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
        )

    def as_dict(self) -> dict[str, Any]:
        """The record as `history` and `status` show it: a secret in it is `<redacted>`."""
        return redact_document({
            "id": self.id,
            "time": self._get("time"),
            "profile": self._get("profile"),
            "profile_sha256": self._get("profile_sha256"),
            "sglang_version": self._get("sglang_version"),
            "outcome": self.outcome,
            "startup_s": self._get("startup_s"),
            "downtime": self._get("downtime") or {},
            "engine_timings": self._get("engine_timings") or {},
            "read_ahead": self._get("read_ahead"),
            "deployed_by": self._get("deployed_by"),
            "rollback_of": self._get("rollback_of"),
            "failure": self._get("failure"),
            "probe": self._get("probe"),
            "sglang_check": self._get("sglang_check"),
            "disagreements": self._get("disagreements") or [],
            "last_good": self.last_good,
            "problem": self.problem,
        })


@dataclass(frozen=True)
class History:
    """The records of one unit on one host, newest first."""

    host: str
    unit: str
    last_good: str | None
    records: tuple[Record, ...]
    state_present: bool = True

    def get(self, deployment_id: str) -> Record | None:
        return next((r for r in self.records if r.id == deployment_id), None)

    def as_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "unit": self.unit,
            "last_good": self.last_good,
            "deployments": [r.as_dict() for r in self.records],
        }


def _history_sh(state: str) -> str:
    # Leaves `$d` (the state folder) and `$lg` (the last good id) set for what follows.
    return (
        f"d={shlex.quote(state)}; lg=; "
        f'if [ -d "$d" ]; then {_last_good_sh()}; '
        'for r in "$d"/*/; do [ -d "$r" ] || continue; r=${r%/}; '
        f'printf "{MARK}record %s@@\\n" "${{r##*/}}"; {_b64_file("$r/meta.json")}; done; '
        f'else echo "{MARK}nostate@@"; fi; '
    )


def history_command(state: str) -> str:
    """The sh command printing `last_good` and every record's meta.json (base64), one round trip."""
    return _history_sh(state) + f'echo "{MARK}end@@"'


def _record(deployment_id: str, lines: list[str]) -> Record:
    if lines and lines[0].startswith("!"):
        why = "meta.json is missing" if lines[0] == "!missing" else "meta.json is unreadable"
        return Record(deployment_id, None, why)
    text = _decode(lines)
    if text is None:
        return Record(deployment_id, None, "meta.json is cut off or not UTF-8")
    try:
        meta = json.loads(text)
    except ValueError as exc:
        return Record(deployment_id, None, f"meta.json is not JSON ({exc})")
    if not isinstance(meta, dict):
        return Record(deployment_id, None, "meta.json is not a JSON object")
    return Record(deployment_id, meta)


def parse_history(output: str, host: str = "", unit: str = "") -> History:
    """Build the History from `history_command`'s output. Newest first (ids sort by time)."""
    last_good: str | None = None
    records: list[Record] = []
    present = True
    for kind, arg, lines in _sections(output):
        if kind == "nostate":
            present = False
        elif kind == "last_good":
            last_good = arg.strip() or None
        elif kind == "record" and arg:
            records.append(_record(arg, lines))
    records.sort(key=lambda r: r.id, reverse=True)
    marked = tuple(Record(r.id, r.meta, r.problem, r.id == last_good) for r in records)
    return History(host, unit, last_good, marked, present)


# --------------------------------------------------------------------------- status: files
@dataclass(frozen=True)
class StatusFiles:
    """What the files round trip of `status` found."""

    history: History
    unit_text: str | None  # /etc/systemd/system/<unit>.service, None when absent
    record_unit: str | None  # the last good record's unit.service
    record_profile: str | None  # ... and its profile.toml
    unit_hashes: dict[str, str] = field(default_factory=dict)  # record id -> sha256 of unit.service
    need_daemon_reload: bool | None = None
    # the weight-cache daemon's unit (`<unit>-weights.service`): as installed, as the last good
    # record has it, and its state
    daemon_text: str | None = None
    record_daemon: str | None = None
    daemon_state: SystemdUnitState | None = None

    def installed(self) -> str | None:
        """The record whose unit is the one installed on the host (last good preferred)."""
        if self.unit_text is None:
            return None
        digest = hashlib.sha256(self.unit_text.encode()).hexdigest()
        matching = sorted((i for i, h in self.unit_hashes.items() if h == digest), reverse=True)
        if self.history.last_good in matching:
            return self.history.last_good
        return matching[0] if matching else None

    def recorded_daemon(self) -> str | None:
        """The daemon unit of the installed deployment, when it is the last good one and has one."""
        last_good = self.history.last_good
        return self.record_daemon if last_good and self.installed() == last_good else None

    def has_daemon(self) -> bool:
        """Whether the deployment runs with a weight-cache daemon: its unit is installed (apply
        removes it with a launch that has none) or the installed deployment records one."""
        return self.daemon_text is not None or self.recorded_daemon() is not None


def unit_path(unit: str) -> str:
    return f"{UNIT_DIR}/{unit.removesuffix('.service')}.service"


def status_files_command(unit: str) -> str:
    """The sh command printing what `status` reads from files, one round trip."""
    check_unit_name(unit)
    service = f"{unit.removesuffix('.service')}.service"
    daemon = daemon_unit_name(unit)
    return (
        f"{_history_sh(state_dir(unit))}"
        f"u={shlex.quote(unit_path(unit))}; w={shlex.quote(unit_path(daemon))}; "
        f'echo "{MARK}file unit@@"; {_b64_file("$u")}; echo "{MARK}file daemon@@"; '
        f'{_b64_file("$w")}; if [ -n "$lg" ]; then for f in unit.service profile.toml '
        f'{WEIGHTS_FILE}; do printf "{MARK}file record/%s@@\\n" "$f"; {_b64_file("$d/$lg/$f")}; '
        f'done; fi; echo "{MARK}sums@@"; for f in "$d"/*/unit.service; do [ -f "$f" ] && sha256sum '
        f'"$f"; done; echo "{MARK}systemd@@"; '
        f"systemctl show -p NeedDaemonReload --no-pager {shlex.quote(service)} 2>/dev/null; "
        f'echo "{MARK}daemon_state@@"; systemctl show -p {",".join(UNIT_PROPERTIES)} --no-pager '
        f"{shlex.quote(daemon + '.service')} 2>/dev/null; "
        f'echo "{MARK}end@@"'
    )


def parse_status_files(output: str, host: str = "", unit: str = "") -> StatusFiles:
    history = parse_history(output, host, unit)
    files: dict[str, str | None] = {}
    hashes: dict[str, str] = {}
    reload: bool | None = None
    daemon_state: SystemdUnitState | None = None
    for kind, arg, lines in _sections(output):
        if kind == "file":
            files[arg] = _decode(lines)
        elif kind == "sums":
            for line in lines:
                digest, _, path = line.partition("  ")
                parts = path.strip().split("/")
                if len(digest) == 64 and len(parts) >= 2:
                    hashes[parts[-2]] = digest
        elif kind == "systemd":
            value = parse_key_values("\n".join(lines)).get("NeedDaemonReload")
            reload = {"yes": True, "no": False}.get(value or "")
        elif kind == "daemon_state":
            try:
                daemon_state = parse_unit_state("\n".join(lines))
            except FactParseError:
                daemon_state = None
    return StatusFiles(
        history,
        files.get("unit"),
        files.get("record/unit.service"),
        files.get("record/profile.toml"),
        hashes,
        reload,
        files.get("daemon"),
        files.get(f"record/{WEIGHTS_FILE}"),
        daemon_state,
    )


# --------------------------------------------------------------------------- status: verdict
@dataclass(frozen=True)
class HealthCheck:
    """The answer of the server's health endpoint; status 0 when nothing answered."""

    path: str
    port: int
    status: int
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == 200

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "port": self.port,
            "status": self.status,
            "ok": self.ok,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class Drift:
    """One way the host differs from what sgdeploy recorded or from the profile in the repo."""

    # unit_edited, not_last_good, unit_missing, unmanaged, daemon_reload, profile; of the
    # weight-cache daemon's unit: weights_unit_missing, weights_unit_edited
    kind: str
    message: str
    diff: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "diff": self.diff}


@dataclass(frozen=True)
class WeightDaemonStatus:
    """The weight-cache daemon's unit of a deployment that runs with one."""

    service: str  # `<unit>-weights.service`
    state: SystemdUnitState | None  # None: could not be read

    def as_dict(self) -> dict[str, Any]:
        u = self.state
        return {"unit": self.service, "unit_state": None if u is None else _unit_state_dict(u)}


def _unit_state_dict(u: SystemdUnitState) -> dict[str, Any]:
    return {
        "load_state": u.load_state,
        "active_state": u.active_state,
        "sub_state": u.sub_state,
        "main_pid": u.main_pid,
        "n_restarts": u.n_restarts,
        "exec_main_status": u.exec_main_status,
    }


# ExecMainCode: how the main process ended (the CLD_* codes of waitid(2))
_KILLED, _DUMPED = 2, 3


def _how_it_ended(unit: SystemdUnitState) -> str:
    """`, exit status 1`, or the signal that ended the main process. SGLang ends every stop by
    SIGKILLing its own processes, so a unit stopped by hand reads failed, killed by SIGKILL."""
    status = unit.exec_main_status
    if not status:
        return ""
    if unit.exec_main_code not in (_KILLED, _DUMPED):
        return f", exit status {status}"
    name = _signal_name(status)
    if status == 9:
        return (f", killed by {name}: SGLang ends itself that way when stopped, so a `systemctl "
                "stop` outside sgdeploy leaves the unit failed; if nobody stopped it, look for the "
                "kernel's OOM killer (journalctl -k)")
    return f", killed by {name}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def status_verdict(
    unit_name: str,
    unit: SystemdUnitState | None,
    health: HealthCheck | None,
    daemon: WeightDaemonStatus | None = None,
) -> tuple[bool, list[str]]:
    """Healthy means: the unit is active and running and its health endpoint answers 200; and
    its weight-cache daemon, when it has one, is active and running too."""
    service = f"{unit_name.removesuffix('.service')}.service"
    problems = [p for p in [_unit_problem(service, unit)] if p]
    if daemon is not None:
        trouble = _unit_problem(daemon.service, daemon.state)
        if trouble:
            problems.append(f"{trouble}: the server maps its weights from it, and a restart of "
                            f"{service} fails until it runs again")
    if health is None:
        if not problems:
            problems.append("the health endpoint was not checked")
    elif not health.ok:
        answer = f"HTTP {health.status}" if health.status else (health.detail or "no answer")
        problems.append(f"GET {health.path} on port {health.port}: {answer}")
    return not problems, problems


def _unit_problem(service: str, unit: SystemdUnitState | None) -> str | None:
    if unit is None:
        return f"the state of {service} could not be read"
    if not unit.exists:
        return f"{service} is not installed"
    if (unit.active_state, unit.sub_state) == ("active", "running"):
        return None
    state = f"{unit.active_state}/{unit.sub_state}"
    if unit.active_state == "activating":
        return f"{service} is still starting ({state})"
    return f"{service} is not running ({state}{_how_it_ended(unit)})"


def short_diff(old: str, new: str, old_name: str, new_name: str, limit: int = _DIFF_LINES) -> str:
    lines = list(
        difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile=old_name,
            tofile=new_name,
            n=1,
        )
    )
    if len(lines) > limit:
        lines = [*lines[:limit], f"... ({len(lines) - limit} more diff lines)\n"]
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def _directives(unit_text: str) -> list[str]:
    return [line for line in unit_text.splitlines() if not line.lstrip().startswith(("#", ";"))]


def find_drift(
    files: StatusFiles, rendered: str | None = None, rendered_from: str = ""
) -> list[Drift]:
    """How the installed unit differs from its record, and from the profile's rendering."""
    drift: list[Drift] = []
    history = files.history
    path = unit_path(history.unit or "sglang")
    installed = files.installed()
    if files.unit_text is None:
        if history.records:
            drift.append(
                Drift(
                    "unit_missing",
                    f"{path} is missing although {len(history.records)} deployment(s) are recorded",
                )
            )
    elif not history.records:
        drift.append(
            Drift("unmanaged", f"{path} was not installed by sgdeploy (no deployment is recorded)")
        )
    elif installed is None:
        base = files.record_unit
        against = (
            f"last good {history.last_good}" if base is not None else "any recorded deployment"
        )
        drift.append(
            Drift(
                "unit_edited",
                f"{path} differs from {against}: edited by hand?",
                short_diff(
                    base,
                    files.unit_text,
                    f"{history.last_good}/unit.service (recorded)",
                    f"{path} (on host)",
                )
                if base is not None
                else "",
            )
        )
    elif installed != history.last_good:
        record = history.get(installed)
        outcome = record.outcome if record else "?"
        drift.append(
            Drift(
                "not_last_good",
                f"{path} is deployment {installed} ({outcome}), "
                f"not the last good {history.last_good or '(none)'}",
            )
        )
    if files.need_daemon_reload:
        drift.append(
            Drift(
                "daemon_reload",
                f"{path} changed on disk since systemd loaded it "
                "(the running server uses the older file; daemon-reload pending)",
            )
        )
    drift.extend(_daemon_drift(files))
    deployed = files.unit_text if files.unit_text is not None else files.record_unit
    if rendered is not None and deployed is not None and rendered != deployed:
        drift.append(
            Drift(
                "profile",
                f"{rendered_from or 'the profile'} renders a different unit than the one deployed"
                + (
                    ""
                    if _directives(rendered) != _directives(deployed)
                    else " (only comments differ: the profile file changed, the launch did not)"
                ),
                short_diff(
                    deployed,
                    rendered,
                    f"{path} (deployed)",
                    f"{path} ({rendered_from or 'profile'})",
                ),
            )
        )
    return drift


def _daemon_drift(files: StatusFiles) -> list[Drift]:
    """How the installed daemon unit differs from the last good deployment's record of it."""
    recorded = files.recorded_daemon()
    if recorded is None:
        return []
    path = unit_path(daemon_unit_name(files.history.unit or "sglang"))
    last_good = files.history.last_good
    if files.daemon_text is None:
        return [Drift("weights_unit_missing",
                      f"{path} is missing although deployment {last_good} runs with it")]
    if files.daemon_text == recorded:
        return []
    diff = short_diff(recorded, files.daemon_text, f"{last_good}/{WEIGHTS_FILE} (recorded)",
                      f"{path} (on host)")
    return [Drift("weights_unit_edited",
                  f"{path} differs from last good {last_good}: edited by hand?", diff)]


def _profile_daemon_drift(files: StatusFiles, rendered: RenderedUnit, from_: str) -> list[Drift]:
    """The profile's daemon unit against the installed one (the server unit: find_drift)."""
    wanted = rendered.daemon.text if rendered.daemon is not None else None
    if wanted == files.daemon_text:
        return []
    path = unit_path(daemon_unit_name(rendered.unit))
    if wanted is None:
        return [Drift("profile", f"{from_} renders no weight-cache daemon; {path} is installed")]
    if files.daemon_text is None:
        return [Drift("profile", f"{from_} renders a weight-cache daemon, {path}; none is "
                      "installed")]
    return [Drift("profile", f"{from_} renders a different weight-cache daemon unit than the "
                  "one deployed", short_diff(files.daemon_text, wanted, f"{path} (deployed)",
                                             f"{path} ({from_})"))]


# --------------------------------------------------------------------------- status: result
@dataclass(frozen=True)
class Status:
    host: str
    unit: str
    healthy: bool
    problems: tuple[str, ...]
    unit_state: SystemdUnitState | None
    last_good: str | None
    installed: str | None
    installed_record: Record | None
    drift: tuple[Drift, ...]
    gpus: tuple[GpuInfo, ...]
    gpu_processes: tuple[GpuProcess, ...]
    health: HealthCheck | None
    sglang_version: str | None  # installed on the host
    notes: tuple[str, ...] = ()
    # what the host's gateway thinks of its worker (sgdeploy.deploy.drained)
    gateway: WorkerStatus | None = None
    daemon: WeightDaemonStatus | None = None  # None: the deployment runs without one

    @property
    def exit_code(self) -> int:
        return 0 if self.healthy else 1

    def as_dict(self) -> dict[str, Any]:
        """The status as JSON: the unit's diffs and notes with every secret `<redacted>`."""
        return redact_document(self._document())

    def _document(self) -> dict[str, Any]:
        u = self.unit_state
        gpu_index = {g.uuid: g.index for g in self.gpus}
        return {
            "host": self.host,
            "unit": self.unit,
            "healthy": self.healthy,
            "problems": list(self.problems),
            "unit_state": None if u is None else _unit_state_dict(u),
            "weight_daemon": self.daemon.as_dict() if self.daemon is not None else None,
            "deployment": {
                "last_good": self.last_good,
                "installed": self.installed,
                "installed_is_last_good": self.installed is not None
                and self.installed == self.last_good,
                "record": self.installed_record.as_dict() if self.installed_record else None,
            },
            "drift": [d.as_dict() for d in self.drift],
            "gpus": [
                {
                    "index": g.index,
                    "name": g.name,
                    "uuid": g.uuid,
                    "memory_used_mib": g.memory_used_mib,
                    "memory_total_mib": g.memory_total_mib,
                }
                for g in self.gpus
            ],
            "gpu_processes": [
                {
                    "pid": p.pid,
                    "process_name": p.process_name,
                    "used_memory_mib": p.used_memory_mib,
                    "gpu_index": gpu_index.get(p.gpu_uuid),
                    "gpu_uuid": p.gpu_uuid,
                }
                for p in self.gpu_processes
            ],
            "health": self.health.as_dict() if self.health else None,
            **({"gateway": self.gateway.as_dict()} if self.gateway is not None else {}),
            "sglang_version": self.sglang_version,
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class _Launch:
    """Where the deployed server lives: interpreter, model, port (from its record or profile)."""

    python: str
    model_path: str
    port: int


def _launch(loaded: LoadedProfile | None, record_profile: str | None) -> _Launch:
    deploy: dict[str, Any] = {}
    server: dict[str, Any] = {}
    if record_profile:
        try:
            data = tomllib.loads(record_profile)
        except tomllib.TOMLDecodeError:
            data = {}
        found_deploy, found_server = data.get("deploy"), data.get("server")
        deploy = found_deploy if isinstance(found_deploy, dict) else {}
        server = found_server if isinstance(found_server, dict) else {}
    if loaded is not None and loaded.model is not None:
        # The record says what runs; the profile fills in what the record cannot.
        deploy = {"python": loaded.model.deploy.python, **deploy}
        server = {**dict(loaded.model.server), **server}
    python = deploy.get("python")
    port = server.get("port", DEFAULT_PORT)
    return _Launch(
        python if isinstance(python, str) and python else "/bin/false",
        str(server.get("model_path") or "/nonexistent"),
        port if isinstance(port, int) and 0 < port < 65536 else DEFAULT_PORT,
    )


def _render(
    loaded: LoadedProfile, host: str, version: str | None
) -> tuple[RenderedUnit | None, str]:
    """The unit the profile renders for this host, or None and why not."""
    if version is None:
        return None, "the host's SGLang version is unknown"
    try:
        return render_unit(loaded, load_catalog(version), host), ""
    except (UnknownVersionError, ValueError, KeyError) as exc:
        return None, f"cannot render {loaded.path} for SGLang {version}: {exc}"


def _check_health(remote: RemoteHost, port: int, path: str) -> HealthCheck:
    try:
        response = remote.http_get(port, path, timeout=10.0)
        if response.status == 404 and path == "/ready":  # a build without /ready: /health stands in
            path = "/health"
            response = remote.http_get(port, path, timeout=10.0)
    except ConnectionRefusedError:
        return HealthCheck(path, port, 0, "nothing listens on the port")
    except CommandTimeout:
        return HealthCheck(path, port, 0, "no answer within 10 s")
    return HealthCheck(
        path, port, response.status, response.body[:200].decode("utf-8", "replace").strip()
    )


def read_status(
    remote: RemoteHost,
    unit: str,
    loaded: LoadedProfile | None = None,
    inventory_version: str | None = None,
) -> Status:
    """`status` over a connected host: files, facts, one HTTP request."""
    host = remote.name
    files = parse_status_files(remote.run(status_files_command(unit)).stdout, host, unit)
    launch = _launch(loaded, files.record_profile)
    script = facts_command(unit, launch.python, launch.model_path, launch.port)
    facts: HostFacts = parse_facts(
        remote.run(
            f"sh -c {shlex.quote(script)}",
            timeout=180,
        ).stdout
    )
    installed = files.installed()
    record = files.history.get(installed) if installed else None
    running_version = record.meta.get("sglang_version") if record and record.meta else None
    host_version = facts.sglang_version or inventory_version
    # Another server may answer on the port while this unit is down: ask only a running unit.
    running = facts.unit is not None and facts.unit.active
    health = (
        _check_health(remote, launch.port, health_path(running_version or host_version))
        if running
        else None
    )
    rendered, why_not = (
        _render(loaded, host, host_version or running_version) if loaded is not None else (None, "")
    )
    rendered_from = loaded.path if loaded is not None else ""
    drift = find_drift(files, rendered.text if rendered else None, rendered_from)
    if rendered is not None:
        drift += _profile_daemon_drift(files, rendered, rendered_from)
    daemon = (WeightDaemonStatus(f"{daemon_unit_name(unit)}.service", files.daemon_state)
              if files.has_daemon() else None)
    healthy, problems = status_verdict(unit, facts.unit, health, daemon)
    notes = [why_not] if why_not else []
    if facts.unit and facts.unit.n_restarts:
        notes.append(f"systemd restarted the unit {facts.unit.n_restarts} time(s)")
    notes += [
        f"facts: {e.section}: {e.message}"
        for e in facts.errors
        if e.section in ("gpus", "gpu_apps", "unit")
    ]
    return Status(
        host,
        unit,
        healthy,
        tuple(problems),
        facts.unit,
        files.history.last_good,
        installed,
        record,
        tuple(drift),
        facts.gpus,
        facts.gpu_processes,
        health,
        facts.sglang_version,
        tuple(notes),
        daemon=daemon,
    )


# --------------------------------------------------------------------------- entry points
def _connect(name: str, entry: HostEntry) -> RemoteHost:
    try:
        return RemoteHost(name, entry).connect()
    except ConnectError as exc:
        raise Unreachable(str(exc)) from exc


def gather_history(name: str, entry: HostEntry, unit: str) -> History:
    """`sgdeploy history`: the records of `unit` on host `name`, in one round trip."""
    check_unit_name(unit)
    with _connect(name, entry) as remote:
        try:
            return parse_history(remote.run(history_command(state_dir(unit))).stdout, name, unit)
        except RemoteError as exc:
            raise Unreachable(str(exc)) from exc


def gather_status(
    name: str,
    entry: HostEntry,
    unit: str,
    loaded: LoadedProfile | None = None,
    inventory_version: str | None = None,
) -> Status:
    """`sgdeploy status`: two round trips (files, facts) and one HTTP request."""
    check_unit_name(unit)
    with _connect(name, entry) as remote:
        try:
            return read_status(remote, unit, loaded, inventory_version)
        except RemoteError as exc:
            raise Unreachable(str(exc)) from exc


# --------------------------------------------------------------------------- retention
def prune_command(state: str, keep: int = DEFAULT_KEEP, last_good: str | None = None) -> str:
    """The sh command deleting a unit's oldest deployment folders beyond the newest `keep`.

    Only folders named like a deployment id are counted or deleted. The newest is always kept
    (keep >= 1), and so is the last good one: `last_good` as given and as the host's
    `last_good` file names it at the time the command runs. Prints each deleted id.
    """
    if keep < 1:
        raise ValueError(f"keep must be at least 1, not {keep}")
    given = last_good or ""
    if "/" in given or "\n" in given:
        raise ValueError(f"not a deployment id: {last_good!r}")
    return (
        f"d={shlex.quote(state)}; keep_lg={shlex.quote(given)}; "
        'cd "$d" 2>/dev/null || exit 0; '
        f"file_lg=; [ ! -f {LAST_GOOD_NAME} ] || file_lg=$(head -n 1 {LAST_GOOD_NAME}); "
        f"[ ! -L {LAST_GOOD_NAME} ] || file_lg=$(readlink {LAST_GOOD_NAME}); "
        "file_lg=${file_lg%/}; file_lg=${file_lg##*/}; "
        f'for r in {_ID_GLOB}/; do [ -d "$r" ] && printf "%s\\n" "${{r%/}}"; done '
        f"| LC_ALL=C sort -r | tail -n +{keep + 1} | "
        "while IFS= read -r id; do "
        '[ -n "$id" ] && [ "$id" != "$keep_lg" ] && [ "$id" != "$file_lg" ] || continue; '
        'rm -rf -- "./$id" && printf "%s\\n" "$id"; done'
    )
