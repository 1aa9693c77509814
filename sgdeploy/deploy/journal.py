"""Following a started unit's journal until its server is ready, fails or runs out of time.

The follower is one remote loop per start, reading the journal of the unit's invocation by
cursor and fed, line by line, to the log reader (`sgdeploy.logs`); what it found is a
`StartupResult`. The lines go through `RemoteHost.stream_lines`, the only channel it uses.
"""

from __future__ import annotations

import json
import shlex
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sgdeploy.deploy.plan import Deployment
from sgdeploy.deploy.probe import ProbeOutcome
from sgdeploy.host.pagecache import PageCacheWarmth
from sgdeploy.host.remote import RemoteError, RemoteHost
from sgdeploy.logs import LogReader, LogReport
from sgdeploy.logs.report import Adjustment
from sgdeploy.logs.settings import parse_server_args
from sgdeploy.sglang.secrets import redact_known, secret_values

Reporter = Callable[..., None]

EXITED_MARKER = "@@sgdeploy:exited@@"
FOLLOWER_MARKER = "@@sgdeploy:follower@@"
# After the first error, read on this long (or until the unit exits): the other ranks' tracebacks
# and the native lines behind them belong to the explanation.
FAILURE_SETTLE_S = 1.5


@dataclass
class StartupResult:
    """How one start of a unit went."""

    ready: bool
    report: LogReport | None = None
    reason: str = ""
    failure_kind: str | None = None
    explain: list[str] = field(default_factory=list)
    seconds: float = 0.0
    ready_seen_at: float | None = None
    auto_adjusted: list[Adjustment] = field(default_factory=list)
    probe: ProbeOutcome | None = None
    # on the host's clock (seconds since the epoch): the swap's steps (HostSession.swap: stop,
    # stopped, gpus_idle, started), the server's first journal line, the line that made it ready
    host_times: dict[str, float] = field(default_factory=dict)
    first_line_at: float | None = None
    ready_at: float | None = None
    # the new launch's weights read into the page cache before the stop (wall time, not downtime)
    read_ahead: PageCacheWarmth | None = None

    @property
    def engine_timings(self) -> dict[str, Any]:
        """SGLang's own seconds per phase of this start, where its log says them (0.5.17+)."""
        return dict(self.report.engine_timings or {}) if self.report else {}


def follower_command(unit: str, invocation: str) -> str:
    """The host's side of the follower: the invocation's journal lines as JSON, then, once the
    unit stops running, EXITED_MARKER and systemd's view of how it ended."""
    unit_q = shlex.quote(f"{unit}.service")
    # journalctl --follow is woken by journald at most every 250 ms; reading by cursor every
    # 50 ms sees a line sooner. The cursor file makes every line come exactly once.
    # --all: without it journalctl writes a field over 4096 bytes as null in JSON, and SGLang's
    # server_args= line is ~11 KB (0.5.11 on an H200): its settings would never be read.
    read = (f'journalctl --no-pager -q -o json --all --output-fields=MESSAGE --cursor-file="$c" '
            f"_SYSTEMD_INVOCATION_ID={shlex.quote(invocation)}")
    # The loop ends by itself when the unit stops, when a `stop` file appears in its folder
    # (how sgdeploy ends it: the channel then closes from the host's side, never mid-stream),
    # or when a heartbeat finds the channel gone (sgdeploy died).
    return (
        'd=$(mktemp -d) || exit 1; c="$d/cursor"; trap \'rm -rf "$d"\' EXIT; trap \'exit 0\' PIPE '
        f'HUP TERM; echo "{FOLLOWER_MARKER}$d"; i=0; while :; do [ ! -e "$d/stop" ] || exit 0; '
        f'{read} || :; i=$((i + 1)); if [ $((i % 10)) -eq 0 ] && [ "$(systemctl show -p SubState '
        f'--value {unit_q})" != running ]; then '
        f"sleep 0.5; {read}; echo {EXITED_MARKER}; systemctl show -p "
        f"ActiveState,SubState,ExecMainStatus,ExecMainCode,NRestarts --no-pager {unit_q} | tr "
        "'\\n' ' '; echo; exit 0; fi; [ $((i % 20)) -ne 0 ] || printf '\\n' || exit 0; sleep 0.05; "
        "done"
    )


class JournalFollower:
    """One follow of one started unit over `remote`."""

    def __init__(self, remote: RemoteHost, report: Reporter) -> None:
        self.remote = remote
        self.report = report

    def follow(self, deployment: Deployment, invocation: str, expected: list[str] | None,
               stop: threading.Event | None = None) -> StartupResult:
        """Read the unit's journal for this invocation until ready, a failure, or the deadline.

        With `expected=None` the unit is only watched for failures (a non-zero multi-node rank)
        until `stop` is set; `stop` also ends a normal follow early (another node failed).
        """
        self.report(
            "step", step="wait_ready" if expected is not None else "watch", expected=expected
        )
        reader = LogReader(deployment.server, deployment.sglang_version)
        started = time.monotonic()
        known: tuple[str, ...] = ()  # secret values the server's dump named
        deadline = started + deployment.ready_timeout_s
        exited: str | None = None
        failed_at: float | None = None
        first_line_at: float | None = None  # the host's clock, as journald stamped the line
        folder: str | None = None
        lines = self.remote.stream_lines(follower_command(deployment.unit, invocation))
        try:
            for line in lines:
                if time.monotonic() > deadline:
                    break
                if failed_at is not None and time.monotonic() - failed_at > FAILURE_SETTLE_S:
                    return _failed(reader, started, "the server logged a failure")
                if stop is not None and stop.is_set():
                    return StartupResult(
                        expected is None,
                        reader.report(),
                        "stopped: another node failed",
                        None if expected is None else "peer_failed",
                        seconds=time.monotonic() - started,
                    )
                if not line:
                    continue
                if folder is None and line.startswith(FOLLOWER_MARKER):
                    folder = line[len(FOLLOWER_MARKER):]
                    continue
                if exited is not None:
                    exited += line
                    continue
                if line == EXITED_MARKER:
                    exited = ""
                    continue
                entry = journal_entry(line)
                if entry is None:
                    continue
                message, logged_at = entry
                first_line_at = first_line_at or logged_at
                # SGLang logs its api_key in the dump; once read there, the bare value goes anywhere
                if (at := message.find("server_args=")) >= 0:
                    known = secret_values(parse_server_args(message[at:])) or known
                message = redact_known(message, known)
                if self._feed(reader, message, started) and failed_at is None:
                    failed_at = time.monotonic()
                report = reader.report()
                if expected is not None and report.ready and not report.missing(expected):
                    # The health check goes first: the follower is ended beside it.
                    threading.Thread(target=self._end, args=(folder, lines), daemon=True,
                                     name="sgdeploy-end-follower").start()
                    folder, lines = None, iter(())
                    return StartupResult(True, report, seconds=time.monotonic() - started,
                                         ready_seen_at=time.monotonic(),
                                         first_line_at=first_line_at, ready_at=logged_at)
        finally:
            self._end(folder, lines)
        if exited is not None:
            return _failed(reader, started, f"the unit stopped before ready ({exited.strip()})")
        missing = ", ".join(reader.report().missing(expected or []))
        result = _failed(reader, started, f"not ready within {deployment.ready_timeout_s} s "
                         f"(still waiting for: {missing})")
        result.failure_kind = (
            result.failure_kind if result.failure_kind != "incomplete" else "timeout"
        )
        return result

    def _feed(self, reader: LogReader, message: str, started: float) -> bool:
        """One journal message to the log reader and the reporter; whether it logged a failure."""
        failed = False
        for event in reader.feed(message):
            self.report(event.kind, name=event.name, line=event.line, t=event.t,
                        elapsed=round(time.monotonic() - started, 2), data=dict(event.data))
            failed = failed or event.kind == "failure"
        self.report("log", text=message)
        return failed

    def _end(self, folder: str | None, lines: Iterator[str | None]) -> None:
        """Ask the follower loop to exit and read its channel to the end before closing it."""
        try:
            if folder is not None:
                self.remote.run(f"touch {shlex.quote(folder + '/stop')} 2>/dev/null || true")
                drain_until = time.monotonic() + 3
                for _ in lines:
                    if time.monotonic() > drain_until:
                        break
        except RemoteError:
            pass  # the connection is gone: so is the loop (its heartbeat fails)
        finally:
            close = getattr(lines, "close", None)
            if close:
                close()


def _failed(reader: LogReader, started: float, reason: str) -> StartupResult:
    reader.finish()
    report = reader.report()
    failure = report.failure
    explain = [text for _, text in failure.context] if failure else []
    if failure and failure.kind != "incomplete":
        reason = f"{failure.kind}: {failure.message}"
    return StartupResult(False, report, reason, failure.kind if failure else None, explain,
                         time.monotonic() - started)


def journal_entry(line: str) -> tuple[str, float | None] | None:
    """The MESSAGE of one `journalctl -o json` line and when journald received it (the host's
    clock, seconds since the epoch; journalctl always prints __REALTIME_TIMESTAMP); None for
    anything else."""
    if not line.startswith("{"):
        return None
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    message = entry.get("MESSAGE")
    if isinstance(message, list):  # journald stores non-UTF-8 messages as byte arrays
        message = bytes(v for v in message if isinstance(v, int) and 0 <= v < 256).decode(
            "utf-8", "replace"
        )
    if not isinstance(message, str):
        return None
    stamp = entry.get("__REALTIME_TIMESTAMP")
    return message, int(stamp) / 1e6 if isinstance(stamp, str) and stamp.isdigit() else None

