"""Apply's progress as it happens (plan, apply, rollback and rollouts), and the end of those
commands: one JSON document with the progress events, or text."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from sgdeploy.cli.output import out


class Progress:
    """Apply's progress: a live status line on a terminal, plain lines otherwise, or JSON events."""

    def __init__(self, json_events: bool) -> None:
        self.json_events = json_events
        self.events: list[dict[str, object]] = []
        self.live = sys.stderr.isatty() and not json_events
        self.started = time.monotonic()
        self._last_wait = 0.0
        self._lock = threading.Lock()
        self._expected_s: float | None = None  # the last good deployment's time from start to ready
        self._waiting_since: float | None = None  # when apply began to wait for ready

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
        if kind == "step":
            self._waiting_since = time.monotonic() if data.get("step") == "wait_ready" else None
        if kind == "expected":
            self._expected_s = float(str(data.get("seconds")))
        if kind == "log":
            if self.live and text:
                self._status_line(f"[{elapsed:6.1f}s]{self._remaining()} {text}")
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

    @staticmethod
    def _status_line(text: str) -> None:
        """`text` over the terminal's last line, cut to its width."""
        # imported for a live status line only: most runs never draw one
        import shutil

        width = shutil.get_terminal_size((100, 20)).columns
        sys.stderr.write("\r\x1b[2K" + text[: width - 1])
        sys.stderr.flush()

    def _text(self, kind: str, data: dict[str, object]) -> str:
        if kind == "expected":
            return (f"expected: ready about {float(str(data.get('seconds'))):.0f} s after the "
                    f"start, as the last good deployment ({data.get('deployment')}) was")
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
            return self._waiting_text(data)
        if kind == "page_cache":
            return str(data.get("text", ""))
        if kind in ("warning", "failed"):
            return f"{kind}: {data.get('text') or data.get('reason')}"
        if kind == "log":
            return str(data.get("text", "")).strip()
        return ""

    def _remaining(self) -> str:
        """` ~12 s left` while waiting for ready, counted down from the last good deployment's
        time."""
        if self._expected_s is None or self._waiting_since is None:
            return ""
        left = self._expected_s - (time.monotonic() - self._waiting_since)
        return f" ~{left:.0f} s left" if left >= 1 else " (past the last good deployment's time)"

    def _waiting_text(self, data: dict[str, object]) -> str:
        """What apply waits for, at most once in 5 seconds."""
        now = time.monotonic()
        if now - self._last_wait < 5:
            return ""
        self._last_wait = now
        return f"waiting for {data.get('what')}: {data.get('detail')}"


def emit(as_json: bool, document: Callable[[], dict[str, Any]], progress: Progress,
         text: Callable[[], str]) -> None:
    """The end of apply, rollback or a rollout: one JSON document with the events, or text."""
    if as_json:
        out(json.dumps({**document(), "events": progress.events}, indent=2, default=str) + "\n")
    else:
        out(text())
