"""Asking the host's SGLang about a launch, and reading its answer. Pure: no I/O.

    CheckRequest          what the unit would run: interpreter, argv, environment, user, folder
    check_command(req)    the sh command: `program.py` under `systemd-run` with the unit's
                          User=, WorkingDirectory=, Environment= and EnvironmentFile=, the hub
                          libraries offline, bounded by RuntimeMaxSec (its cgroup is killed)
    parse_verdict(...)    the command's output -> HostVerdict (accepted, refused, unavailable)
    predicted(...)        what SGLang will change on its own, in the shape apply reports after start
    differences(...)      predicted vs what the started server showed
    CheckReport.of(...)   the verdict with its summary, prediction and differences (`sglang_check`)
    disagreements(...)    the host's verdict vs the offline rules, for the deployment record
"""

from __future__ import annotations

import base64
import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sgdeploy.logs import settings_changed
from sgdeploy.logs.report import Adjustment
from sgdeploy.logs.settings import BEHAVIOUR_FIELDS
from sgdeploy.sglang import checksites

PROGRAM_PATH = Path(__file__).with_name("program.py")
MARKER = "@@sgdeploy:sglang-check@@"
DEFAULT_LIMIT_S = 60
# The hub libraries must not download anything while the old server serves.
OFFLINE_ENV = (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"), ("HF_DATASETS_OFFLINE", "1"))
# Defaults SGLang picks by itself that change how a server performs; shown in plan.
NOTABLE_DEFAULTS = (
    "attention_backend",
    "chunked_prefill_size",
    "mem_fraction_static",
    "cuda_graph_max_bs",
    "max_running_requests",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "context_length",
    "page_size",
    "sampling_backend",
)
ACCEPTED, REFUSED, UNAVAILABLE = "accepted", "refused", "unavailable"
SOURCE = "SGLang's check on the host"


@dataclass(frozen=True)
class CheckRequest:
    """What the unit would run, for SGLang to judge: `python -m sglang.launch_server ARGV`."""

    python: str
    argv: tuple[str, ...]
    environment: tuple[tuple[str, str], ...] = ()
    user: str | None = None
    working_directory: str | None = None
    env_file: str | None = None
    properties: tuple[str, ...] = ()  # further unit settings, `Key=value` (a strict unit's sandbox)


@dataclass(frozen=True)
class HostVerdict:
    """SGLang's own answer on the host: accepted, refused (its message), or unavailable (why)."""

    status: str
    sglang_version: str | None = None
    stage: str | None = None
    error_type: str | None = None
    error: str | None = None
    # field -> [argparse value, resolved]
    changed: dict[str, list[Any]] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    timings: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    reason: str = ""  # why it is unavailable
    gpu_memory_mib: int | None = None
    timed_out: bool = False  # killed at its time limit: SGLang hangs resolving this launch


    @property
    def refused(self) -> bool:
        return self.status == REFUSED

    @property
    def message(self) -> str:
        """SGLang's own words for a refusal: `ValueError: ...` (or the argparse error)."""
        return (f"{self.error_type}: "
                f"{self.error}") if self.error_type and self.error else (self.error or "")

    def resolved(self) -> dict[str, Any]:
        return {name: values[1] for name, values in self.changed.items() if len(values) == 2}

    def defaults(self) -> dict[str, Any]:
        """Notable settings the profile left open and SGLang chose (None -> value)."""
        return {
            n: v[1]
            for n, v in self.changed.items()
            if n in NOTABLE_DEFAULTS and len(v) == 2 and v[0] is None
        }

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "sglang_version": self.sglang_version, "stage": self.stage,
                "error_type": self.error_type, "error": self.error, "reason": self.reason or None,
                "changed": self.changed, "warnings": list(self.warnings), "timings": self.timings,
                "seconds": round(self.seconds, 3), "gpu_memory_mib": self.gpu_memory_mib,
                "timed_out": self.timed_out}


# --------------------------------------------------------------------------- the command
def _c_quoted(pair: tuple[str, str]) -> str:
    """One `Environment=` value for `systemd-run -p`, quoted as systemd unquotes it (C escapes;
    transient properties take no specifiers, so `%` stays as it is)."""
    text = f"{pair[0]}={pair[1]}"
    out = []
    for ch in text:
        if ch in '\\"':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def check_command(request: CheckRequest, limit_s: float = DEFAULT_LIMIT_S) -> str:
    """The sh command running the check; the program itself goes on stdin (`program_bytes`)."""
    props = [f"RuntimeMaxSec={int(limit_s)}", "TimeoutStopSec=5", "KillMode=control-group"]
    if request.user:
        props.append(f"User={request.user}")
    if request.working_directory:
        props.append(f"WorkingDirectory={request.working_directory}")
    props += list(request.properties)
    props += [f"Environment={_c_quoted(pair)}" for pair in request.environment]
    if request.env_file:
        props.append(f"EnvironmentFile={request.env_file}")
    # last: the unit cannot undo them
    props += [f"Environment={_c_quoted(pair)}" for pair in OFFLINE_ENV]
    payload = base64.b64encode(json.dumps({"argv": list(request.argv)}).encode()).decode()
    words = ["systemd-run", "--pipe", "--wait", "--collect", "--service-type=exec",
             *(f"--property={p}" for p in props), "--", request.python, "-", payload]
    return " ".join(shlex.quote(w) for w in words)


def program_bytes() -> bytes:
    return PROGRAM_PATH.read_bytes()


# --------------------------------------------------------------------------- the answer
def parse_verdict(stdout: str, stderr: str, exit_code: int, seconds: float = 0.0) -> HostVerdict:
    """The check's output -> its verdict. Anything but a parse, resolve or check refusal from
    SGLang itself (no SGLang, an import error, a timeout, no systemd-run) is `unavailable`."""
    answer = next(
        (line[len(MARKER) :] for line in stdout.splitlines() if line.startswith(MARKER)), None
    )
    data: dict[str, Any] | None = None
    if answer is not None:
        try:
            loaded = json.loads(answer)
            data = loaded if isinstance(loaded, dict) else None
        except ValueError:
            data = None
    if data is None:
        return HostVerdict(UNAVAILABLE, seconds=seconds, reason=_why_no_answer(stderr, exit_code),
                           timed_out="result: timeout" in stderr)
    accepted = data.get("accepted")
    common: dict[str, Any] = {
        "sglang_version": _text(data.get("sglang_version")),
        "stage": _text(data.get("stage")),
        "error_type": _text(data.get("error_type")),
        "error": _text(data.get("error")),
        "changed": {str(k): v for k, v in data.get("changed", {}).items() if isinstance(v, list)}
        if isinstance(data.get("changed"), dict)
        else {},
        "warnings": tuple(str(w) for w in data.get("warnings", []) if isinstance(w, str))
        if isinstance(data.get("warnings"), list)
        else (),
        "timings": {
            str(k): float(v)
            for k, v in data.get("timings", {}).items()
            if isinstance(v, int | float)
        }
        if isinstance(data.get("timings"), dict)
        else {},
        "seconds": seconds,
        "gpu_memory_mib": data.get("gpu_memory_mib")
        if isinstance(data.get("gpu_memory_mib"), int)
        else None,
    }
    if accepted is True:
        return HostVerdict(ACCEPTED, **common)
    if accepted is False:
        return HostVerdict(REFUSED, **common)
    what = (
        f"{common['error_type']}: {common['error']}"
        if common["error_type"]
        else (common["error"] or "no answer")
    )
    return HostVerdict(UNAVAILABLE, reason=f"SGLang cannot be imported there ({what})", **common)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _why_no_answer(stderr: str, exit_code: int) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    if any("result: timeout" in line for line in lines):
        return "it did not answer within its time limit and was killed"
    if exit_code == 127 and any("systemd-run" in line for line in lines):
        return "systemd-run is not available on the host"
    tail = [
        line
        for line in lines
        if not line.startswith(
            (
                "Running as unit",
                "Finished with result",
                "Main processes terminated",
                "Service runtime",
            )
        )
    ]
    return f"exit {exit_code}" + (f": {tail[-1][:300]}" if tail else "")


# --------------------------------------------------------------------------- what it means
def predicted(verdict: HostVerdict, server: dict[str, Any]) -> list[Adjustment]:
    """What SGLang will change on its own, as `apply` reports it after a start (field, value,
    reason)."""
    return settings_changed(server, verdict.resolved(), SOURCE)


def summary(verdict: HostVerdict, host: str, server: dict[str, Any]) -> str:
    """One line for `plan`: what SGLang on the host says and will change."""
    version = f"SGLang {verdict.sglang_version or '?'} on {host}"
    if verdict.status == UNAVAILABLE:
        return f"{version}: its own check could not run ({verdict.reason})"
    if verdict.refused:
        return f"{version} refuses the launch at {verdict.stage}: {verdict.message}"
    parts = []
    for name, values in verdict.changed.items():
        if name in server or (
            name in _behaviour_fields() and len(values) == 2 and values[0] is not None
        ):
            parts.append(f"`{name}` {_word(values[0])} -> {_word(values[1])}")
    chosen = [f"{n} {_word(v)}" for n, v in verdict.defaults().items() if n not in server]
    text = f"{version} accepts the launch"
    if parts:
        text += "; it will resolve " + ", ".join(parts)
    if chosen:
        text += "; it chooses " + ", ".join(chosen)
    return text + f" ({verdict.seconds:.1f} s)"


def _behaviour_fields() -> set[str]:
    return set(BEHAVIOUR_FIELDS)


def _word(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _norm(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        return repr(float(value))
    if isinstance(value, str):
        return value.strip().lower()
    return json.dumps(value, sort_keys=True, default=str).lower()


def differences(expected: Sequence[Adjustment], seen: Sequence[Adjustment]) -> list[str]:
    """Where the started server differs from SGLang's prediction, one sentence each."""
    want = {a.field: a.value for a in expected}
    got = {a.field: a.value for a in seen}
    out = []
    for name, value in want.items():
        if name not in got:
            out.append(f"predicted {name} = {_word(value)}, not seen after the start")
        elif _norm(got[name]) != _norm(value):
            out.append(f"predicted {name} = {_word(value)}, the server runs with "
                       f"{_word(got[name])}")
    out += [f"{name} = {_word(value)} after the start was not predicted"
            for name, value in got.items() if name not in want]
    return out


@dataclass(frozen=True)
class CheckReport:
    """`sglang_check` of a result or record: SGLang's verdict on the host, the line that says it,
    what it predicts SGLang will change on its own and, after a start, what differed from that."""

    verdict: HostVerdict
    summary: str
    predicted: tuple[Adjustment, ...] = ()
    differences: tuple[str, ...] | None = None  # None: not compared with a start

    def as_dict(self) -> dict[str, Any]:
        doc = {**self.verdict.as_dict(), "summary": self.summary,
               "predicted": [a.as_dict() for a in self.predicted]}
        if self.differences is not None:
            doc["differences"] = list(self.differences)
        return doc

    @classmethod
    def of(cls, verdict: HostVerdict, host: str, server: dict[str, Any],
           seen: Sequence[Adjustment] | None = None) -> CheckReport:
        """The verdict with its summary and prediction; with `seen` (what a start showed), the
        differences between the two."""
        expected = tuple(predicted(verdict, server)) if verdict.status == ACCEPTED else ()
        compared = (
            tuple(differences(expected, seen))
            if seen is not None and verdict.status == ACCEPTED
            else None
        )
        return cls(verdict, summary(verdict, host, server), expected, compared)


@dataclass(frozen=True)
class Disagreement:
    """Where the host's verdict and the offline rules disagree: SGLang refused what the rules
    passed (`host_refused`) or accepted what they refused (`host_accepted`)."""

    kind: str
    host: str  # SGLang's message, or "accepted"
    offline: str | tuple[str, ...]  # what the offline rules said: a word, or the rules that refused
    stage: str | None = None
    site: str | None = None
    rules: tuple[str, ...] = ()
    category: str | None = None

    def as_dict(self) -> dict[str, Any]:
        offline = self.offline if isinstance(self.offline, str) else list(self.offline)
        doc = {"kind": self.kind, "host": self.host, "stage": self.stage, "offline": offline,
               "site": self.site, "rules": list(self.rules), "category": self.category}
        if self.kind == "host_accepted":  # its records have always listed the stage after the rules
            doc = {
                key: doc[key]
                for key in ("kind", "host", "offline", "site", "rules", "stage", "category")
            }
        return doc


def disagreements(verdict: HostVerdict, offline_errors: list[str], offline_checked: bool,
                  covering: CoveringSite | None) -> list[Disagreement]:
    """The host's verdict against the offline rules, for the deployment record.

    `covering` is the check site SGLang's message matches and the rules that decide it
    (`site_for`); a refusal those rules did not flag means one of them is wrong for this version.
    """
    if verdict.refused and not offline_errors:
        return [Disagreement("host_refused", verdict.message,
                             "accepted" if offline_checked else "not checked (no catalog for this "
                                                                "version)",
                             stage=verdict.stage, site=covering.key if covering else None,
                             rules=covering.rules if covering else (),
                             category=covering.category if covering else None)]
    if verdict.status == ACCEPTED and offline_errors:
        return [
            Disagreement(
                "host_accepted", "accepted", tuple(offline_errors), rules=tuple(offline_errors)
            )
        ]
    return []


_PLACEHOLDER = re.compile(r"\\\{[^}]*\\\}")


@dataclass(frozen=True)
class CoveringSite:
    """The check site a refusal of SGLang's matches, and what decides it: the offline rules that
    should catch it, or the category that says why none can."""

    key: str
    category: str
    rules: tuple[str, ...] = ()
    reason: str = ""


def site_for(version: str, message: str) -> CoveringSite | None:
    """The check site of SGLang `version` whose message matches `message`, and what decides it."""
    if not message or version not in checksites.inventoried_versions():
        return None
    for site in checksites.refusal_sites(version):
        template = str(site.get("message") or "")
        if not template.strip():
            continue
        pattern = _PLACEHOLDER.sub(".*?", re.escape(" ".join(template.split())))
        if re.search(pattern, " ".join(message.split())):
            decision = checksites.decide(site["key"])
            if decision is None:
                return CoveringSite(site["key"], "unmapped")
            return CoveringSite(
                site["key"], decision.category, tuple(decision.rules), decision.reason
            )
    return None


def covering_text(covering: CoveringSite | None) -> str:
    """What the offline rules say about a refusal SGLang made, for the refusal message."""
    if covering is None:
        return ("no offline rule covers this refusal (it is not one of the check sites sgdeploy "
                "inventories)")
    if covering.rules:
        return (f"offline rule {', '.join(covering.rules)} should have caught it (check site "
                f"{covering.key})")
    if covering.category == "host":
        return f"no offline rule can decide it: {covering.reason}"
    return f"no offline rule decides it yet (check site {covering.key}: {covering.category})"
