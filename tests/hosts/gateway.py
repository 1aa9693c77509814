"""SGLang's real gateway (`smg`, installed by scripts/setup) on this machine, in front of test hosts.

    gw = start_gateway(api_key="k")          # smg launch on 127.0.0.1:<free port>
    gw.url, gw.workers(), gw.stop()
    load = ClientLoad(gw.url, rate=20.0, api_key="k")   # a bounded client load through it
    load.start(); ...; summary = load.stop()

The gateway listens on loopback only; the workers it routes to are the private-network test
hosts, which this machine reaches over the run's bridge. It is ended by its pid, never by name.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .machine import free_port

MODEL = "/root/models/Qwen3-8B"


def smg_missing() -> str | None:
    """Why the gateway cannot run here, or None."""
    if importlib.util.find_spec("smg") is None:
        return "smg (SGLang's gateway) is not installed: run scripts/setup"
    return None


@dataclass
class Gateway:
    url: str
    process: subprocess.Popen[bytes]
    log: Path
    api_key: str | None = None

    def request(self, method: str, path: str, body: dict[str, Any] | None = None, timeout: float = 10.0
                ) -> tuple[int, Any]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                raw = response.read()
                status = response.status
        except urllib.error.HTTPError as exc:
            raw, status = exc.read(), exc.code
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw.decode(errors="replace")

    def workers(self) -> dict[str, dict[str, Any]]:
        """url -> the gateway's record of that worker."""
        _, document = self.request("GET", "/workers")
        return {w["url"]: w for w in document["workers"]}

    def add(self, url: str) -> None:
        self.request("POST", "/workers", {"url": url})

    def wait_ready(self, urls: list[str], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            known = self.workers()
            if all(known.get(u, {}).get("status") == "ready" for u in urls):
                return
            time.sleep(0.2)
        raise RuntimeError(f"workers not ready at the gateway after {timeout:.0f} s: {self.workers()}")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(10)


def start_gateway(folder: Path, api_key: str | None = None, port: int | None = None, *extra: str) -> Gateway:
    """`smg launch` on 127.0.0.1, waited for until it answers; its log in `folder`."""
    port = port or free_port()
    log = folder / f"smg-{port}.log"
    # smg's metrics server binds 0.0.0.0:29000 unless told otherwise: two gateways on one machine collide
    argv = [sys.executable, "-m", "smg", "launch", "--host", "127.0.0.1", "--port", str(port),
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()),
            "--log-level", "info", *(["--api-key", api_key] if api_key else []), *extra]
    with log.open("ab") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    gateway = Gateway(f"http://127.0.0.1:{port}", process, log, api_key)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"smg exited {process.returncode}: {log.read_text()[-2000:]}")
        with contextlib.suppress(OSError):
            if gateway.request("GET", "/liveness", timeout=2)[0] == 200:
                return gateway
        time.sleep(0.1)
    gateway.stop()
    raise RuntimeError(f"smg did not answer within 30 s: {log.read_text()[-2000:]}")


@dataclass
class LoadSummary:
    sent: int
    failed: int
    latencies_s: list[float]
    failures: list[str] = field(default_factory=list)

    def p(self, q: float) -> float:
        ordered = sorted(self.latencies_s)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


class ClientLoad:
    """`rate` requests a second through the gateway (each on its own thread, a generation of
    `tokens` tokens, streamed every other time), until stopped: counts failures and latency."""

    def __init__(self, url: str, rate: float = 20.0, tokens: int = 16, timeout: float = 30.0,
                 api_key: str | None = None) -> None:
        self.url, self.rate, self.tokens, self.timeout = url, rate, tokens, timeout
        self.headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {api_key}"}
                                                                 if api_key else {})}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.summary = LoadSummary(0, 0, [])
        self._pacer = threading.Thread(target=self._pace, daemon=True)

    def start(self) -> ClientLoad:
        self._pacer.start()
        return self

    def _pace(self) -> None:
        began, n = time.monotonic(), 0
        while not self._stop.is_set():
            thread = threading.Thread(target=self._one, args=(n % 2 == 1,), daemon=True)
            thread.start()
            self._threads.append(thread)
            n += 1
            self._stop.wait(max(0.0, began + n / self.rate - time.monotonic()))

    def _one(self, stream: bool) -> None:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": self.tokens,
                "stream": stream}
        request = urllib.request.Request(self.url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                         method="POST", headers=self.headers)
        began = time.monotonic()
        error = None
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                raw = response.read().decode(errors="replace")
            if stream and "[DONE]" not in raw:
                error = f"stream cut: {raw[-120:]!r}"
            elif not stream and '"choices"' not in raw:
                error = f"no completion: {raw[:120]!r}"
        except urllib.error.HTTPError as exc:
            error = f"HTTP {exc.code}: {exc.read()[:160]!r}"
        except (OSError, ValueError) as exc:
            error = f"{type(exc).__name__}: {exc}"
        with self._lock:
            self.summary.sent += 1
            if error:
                self.summary.failed += 1
                self.summary.failures.append(error)
            else:
                self.summary.latencies_s.append(time.monotonic() - began)

    def stop(self) -> LoadSummary:
        self._stop.set()
        self._pacer.join()
        for thread in self._threads:
            thread.join(self.timeout + 5)
        return self.summary
