"""SGLang's gateway (the Shepherd Model Gateway, `smg`): the part of its worker API sgdeploy uses.

Like `remote.py` for hosts, this is the one module that talks to a gateway; it does so through
a `Transport` (a function from a request to a reply), so tests hand it a fake one. What the
gateway does, as smg 1.13 does it:

- `GET /workers` lists the workers it knows: `id`, `url`, `status` (`pending`, `ready`,
  `not_ready`, `failed`, `draining`), `is_healthy` (status is ready), `load` (the requests it
  has in flight to that worker) and `model_id`. Only `ready` workers are routed to.
- `DELETE /workers/{id}` answers 202 and removes the worker in the background: it turns
  `draining` at once (no new requests), stays listed for the worker's `drain_settle_secs`
  (5 s by default) while what is in flight finishes, then is gone.
- `POST /workers {"url": ...}` answers 202 and registers it in the background: it asks the
  worker's `/health`, `/v1/models`, `/server_info` and `/model_info`, then lists it `ready`. A
  URL it already lists is refused with 409.
- The worker routes take `Authorization: Bearer <key>` when the gateway runs with `--api-key`
  (or control-plane keys); 401 without it.

GatewayError
├── GatewayUnreachable   no answer: connection refused, timeout, name not resolved
└── GatewayRefused       an answer that is an error (401/403: the API key; any other 4xx/5xx)
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sgdeploy.inventory import GatewayEntry

TIMEOUT_S = 10.0
ROUTED = "ready"  # the one status smg routes requests to
ABSENT = "absent"  # not listed by the gateway at all


class GatewayError(Exception):
    """Base of everything that goes wrong talking to a gateway (see the module's tree)."""


class GatewayUnreachable(GatewayError):
    pass


class GatewayRefused(GatewayError):
    pass


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes


# (method, url, headers, body, timeout) -> Reply; raises OSError when nothing answers
Transport = Callable[[str, str, dict[str, str], bytes | None, float], Reply]


def urllib_transport(method: str, url: str, headers: dict[str, str], body: bytes | None, timeout: float) -> Reply:
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return Reply(response.status, response.read())
    except urllib.error.HTTPError as exc:
        return Reply(exc.code, exc.read())
    except urllib.error.URLError as exc:
        reason = exc.reason
        raise OSError(reason.strerror if isinstance(reason, OSError) and reason.strerror else str(reason)) from exc


@dataclass(frozen=True)
class WorkerView:
    """What the gateway thinks of one worker, at one moment."""

    url: str
    state: str  # a status of the gateway's, or ABSENT
    worker_id: str | None = None
    load: int | None = None  # requests the gateway has in flight to it
    model_id: str | None = None

    @property
    def routed(self) -> bool:
        return self.state == ROUTED

    @property
    def listed(self) -> bool:
        return self.state != ABSENT

    def as_dict(self) -> dict[str, Any]:
        return {"url": self.url, "state": self.state, "healthy": self.routed, "worker_id": self.worker_id,
                "load": self.load, "model_id": self.model_id}

    def describe(self) -> str:
        if not self.listed:
            return "absent (not routed to)"
        load = f", {self.load} in flight" if self.load else ""
        return f"{self.state}{'' if self.routed else ' (not routed to)'}{load}"


def same_url(a: str, b: str) -> bool:
    return normal_url(a) == normal_url(b)


def normal_url(url: str) -> str:
    scheme, sep, rest = url.strip().partition("://")
    return f"{scheme.lower()}{sep}{rest.rstrip('/').lower()}"


def api_key(name: str, entry: GatewayEntry, environ: dict[str, str] | None = None) -> str | None:
    """The gateway's API key from where the inventory says it is; GatewayError when it is not there."""
    env = os.environ if environ is None else environ
    if entry.api_key_env:
        value = env.get(entry.api_key_env, "").strip()
        if not value:
            raise GatewayError(f"gateway '{name}': the environment variable {entry.api_key_env} (api_key_env) "
                               "is not set; export the gateway's API key in it")
        return value
    if entry.api_key_file:
        path = Path(entry.api_key_file).expanduser()
        try:
            value = path.read_text().strip()
        except OSError as exc:
            raise GatewayError(f"gateway '{name}': cannot read its API key from {path} (api_key_file): "
                               f"{exc.strerror or exc}") from None
        if not value:
            raise GatewayError(f"gateway '{name}': {path} (api_key_file) is empty")
        return value
    return None


class GatewayClient:
    """One gateway's worker API."""

    def __init__(self, name: str, url: str, key: str | None = None, transport: Transport = urllib_transport,
                 timeout: float = TIMEOUT_S) -> None:
        self.name = name
        self.url = url.rstrip("/")
        self._key = key
        self._transport = transport
        self._timeout = timeout
        self.requests = 0

    @classmethod
    def for_entry(cls, name: str, entry: GatewayEntry, transport: Transport = urllib_transport) -> GatewayClient:
        return cls(name, entry.url, api_key(name, entry), transport)

    def _call(self, method: str, path: str, payload: dict[str, Any] | None = None) -> tuple[int, Any]:
        headers = {"Accept": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        body = None
        if payload is not None:
            body = json.dumps(payload).encode()
            headers["Content-Type"] = "application/json"
        self.requests += 1
        try:
            reply = self._transport(method, self.url + path, headers, body, self._timeout)
        except OSError as exc:
            raise GatewayUnreachable(f"gateway '{self.name}' at {self.url} does not answer ({method} {path}): "
                                     f"{exc.strerror or exc}") from None
        if reply.status in (401, 403):
            raise GatewayRefused(f"gateway '{self.name}' refused {method} {path} with HTTP {reply.status}: check "
                                 "its API key (api_key_env or api_key_file in the inventory)")
        try:
            document = json.loads(reply.body) if reply.body else None
        except ValueError:
            document = None
        return reply.status, document

    def workers(self) -> list[WorkerView]:
        status, document = self._call("GET", "/workers")
        if status != 200 or not isinstance(document, dict) or not isinstance(document.get("workers"), list):
            raise GatewayRefused(f"gateway '{self.name}': GET /workers answered HTTP {status}"
                                 f"{_said(document)}; is {self.url} an smg gateway's admin URL?")
        return [_view(w) for w in document["workers"] if isinstance(w, dict) and isinstance(w.get("url"), str)]

    def worker(self, url: str, listed: list[WorkerView] | None = None) -> WorkerView:
        """The gateway's view of the worker at `url` (ABSENT when it does not list it)."""
        for view in self.workers() if listed is None else listed:
            if same_url(view.url, url):
                return view
        return WorkerView(url, ABSENT)

    def remove(self, view: WorkerView) -> None:
        """Take a worker out: the gateway drains it (no new requests), then forgets it."""
        if view.worker_id is None:
            return
        status, document = self._call("DELETE", f"/workers/{view.worker_id}")
        if status not in (200, 202, 404):  # 404: gone already
            raise GatewayRefused(f"gateway '{self.name}': removing {view.url} answered HTTP {status}{_said(document)}")

    def add(self, url: str) -> None:
        """Register a worker; the gateway checks it in the background and then routes to it."""
        status, document = self._call("POST", "/workers", {"url": url})
        if status not in (200, 201, 202, 409):  # 409: it lists that URL already
            raise GatewayRefused(f"gateway '{self.name}': adding {url} answered HTTP {status}{_said(document)}")


def _view(worker: dict[str, Any]) -> WorkerView:
    load = worker.get("load")
    status = worker.get("status")
    if not isinstance(status, str):
        status = ROUTED if worker.get("is_healthy") else "not_ready"
    return WorkerView(url=worker["url"], state=status, worker_id=worker.get("id"),
                      load=load if isinstance(load, int) else None,
                      model_id=worker.get("model_id") if isinstance(worker.get("model_id"), str) else None)


def _said(document: Any) -> str:
    if isinstance(document, dict):
        message = document.get("error") or document.get("message")
        if isinstance(message, dict):
            message = message.get("message")
        if message:
            return f" ({message})"
    return ""
