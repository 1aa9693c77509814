"""Fault injection helpers for tests/test_faults.py and tests/test_hostile_input.py.

    CutProxy        a TCP proxy on 127.0.0.1 in front of a test host's sshd: cut every live
                    connection at a chosen moment, refuse new ones, or freeze (stop forwarding
                    but keep the sockets open, like a network partition)
    observe(...)    note what a fault did, for docs/reliability.md (`scripts/reliability`)
    inventory_via   a copy of an inventory with one host's address/port (or anything) replaced
    HealthPoller    GET /health of a server every 0.1 s while a command runs: how many failed

Everything here addresses loopback only.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

__all__ = ["CutProxy", "HealthPoller", "inventory_via", "observe", "toml_inventory"]


def observe(request: pytest.FixtureRequest, text: str) -> None:
    """Record what happened under a fault; shown in docs/reliability.md.

    Stored in the test's `user_properties` (pytest's own channel to reports), so the suite runs
    the same with or without the report plugin (tests/faults/report.py).
    """
    request.node.user_properties.append(("observed", text))


class CutProxy:
    """A loopback TCP proxy: 127.0.0.1:<port> -> 127.0.0.1:<target_port>.

    `cut()` closes every connection it carries (both sides, at once), as when a link drops.
    `refuse = True` makes it accept and immediately close new connections (an sshd that is not
    answering). `freeze()` stops forwarding bytes without closing anything (a partition).
    """

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port: int = self._listener.getsockname()[1]
        self.refuse = False
        self.frozen = False
        self.cuts = 0
        self.accepted = 0
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True, name=f"cutproxy-{self.port}")
        self._thread.start()

    # -- control
    def cut(self) -> int:
        """Close every live connection now; returns how many were cut."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for a, b in pairs:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    s.close()
        self.cuts += len(pairs)
        return len(pairs)

    def freeze(self) -> None:
        self.frozen = True

    def live(self) -> int:
        with self._lock:
            return len(self._pairs)

    def close(self) -> None:
        self.cut()  # first: a frozen pump forgets its pair once it sees _closed
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        self.cut()

    def __enter__(self) -> CutProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing
    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.refuse:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            self.accepted += 1
            with self._lock:
                self._pairs.append((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peer = {a: b, b: a}
        try:
            while True:
                if self.frozen:
                    # a partition: nothing moves, nothing closes
                    threading.Event().wait(0.2)
                    if self._closed:
                        return
                    continue
                ready, _, _ = select.select([a, b], [], [], 0.2)
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        raise OSError("closed")
                    peer[s].sendall(data)
        except (OSError, ValueError):
            pass
        finally:
            if self.frozen and not self._closed:
                # a partition: the far side must keep seeing an open connection until cut()
                return  # noqa: B012 (nothing to propagate: the pump only ever ends by closing)
            with self._lock:
                if (a, b) in self._pairs:
                    self._pairs.remove((a, b))
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.close()


def _toml_value(value: Any) -> str:
    import json

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(value)


def toml_inventory(data: dict[str, Any]) -> str:
    """An inventory's text from its data (host names quoted, so any name round-trips)."""
    import json

    parts = []
    for name, entry in data.get("hosts", {}).items():
        parts.append(f"[hosts.{json.dumps(name, ensure_ascii=False)}]")
        parts += [f"{k} = {_toml_value(v)}" for k, v in entry.items()]
        parts.append("")
    if data.get("groups"):
        parts.append("[groups]")
        parts += [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in data["groups"].items()]
    text = "\n".join(parts) + "\n"
    assert tomllib.loads(text) == {k: v for k, v in data.items() if v}, "inventory writer lost a value"
    return text


def inventory_via(source: Path, dest: Path, host: str, rename: str | None = None, **changes: Any) -> Path:
    """Copy an inventory to `dest` with `host`'s entry changed (e.g. port=proxy.port), optionally
    under another name. Keys given as None are removed."""
    data = tomllib.loads(source.read_text())
    entry = dict(data["hosts"][host])
    for key, value in changes.items():
        if value is None:
            entry.pop(key, None)
        else:
            entry[key] = value
    hosts = {(rename or host) if name == host else name: (entry if name == host else e)
             for name, e in data["hosts"].items()}
    groups = {g: [(rename or host) if m == host else m for m in members] for g, members in
              data.get("groups", {}).items()}
    dest.write_text(toml_inventory({"hosts": hosts, "groups": groups}))
    return dest


class HealthPoller:
    """Poll `GET http://127.0.0.1:<port>/health` every `every_s` in a thread (test hosts share this
    machine's network), to show that a server stayed up while something ran:

        with HealthPoller(port) as poll:
            ...
        assert poll.checks > 0 and poll.failed == 0, poll.failures
    """

    def __init__(self, port: int, every_s: float = 0.1, path: str = "/health", host: str = "127.0.0.1") -> None:
        self.url = f"http://{host}:{port}{path}"
        self.every_s = every_s
        self.checks = 0
        self.failures: list[str] = []
        self.samples: list[tuple[float, int]] = []  # (time.monotonic(), HTTP status or 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"health-{port}")

    @property
    def failed(self) -> int:
        return len(self.failures)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with urllib.request.urlopen(self.url, timeout=3) as response:
                    status = response.status
            except urllib.error.HTTPError as exc:
                status = exc.code
            except OSError as exc:
                status, detail = 0, str(exc)
            self.checks += 1
            self.samples.append((time.monotonic(), status))
            if status != 200:
                self.failures.append(f"{time.strftime('%H:%M:%S')} {status or detail}")
            self._stop.wait(self.every_s)

    def last_before(self, moment: float) -> int | None:
        """The status last seen at or before `moment` (None: no sample yet)."""
        seen = [status for at, status in self.samples if at <= moment]
        return seen[-1] if seen else None

    def __enter__(self) -> HealthPoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
