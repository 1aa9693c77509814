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
- `POST /workers {"url": ..., ...}` answers 202 and registers it in the background: it asks the
  worker's `/health`, `/v1/models`, `/server_info` and `/model_info` (with the registration's
  `api_key`, SGLang's own key of that worker), then lists it `ready`; until then it is not
  listed. A URL it lists, or is registering, is refused with 409.
- A registration is what the operator gave (`priority`, `cost`, `labels`, `models`, `health`,
  `resilience`, ...; `api_key` is taken but never shown) merged with what the gateway found out
  itself: labels from the worker's answers (the operator's win on the same key) and a model
  card named after its served model. `registration` tells the two apart to put a worker back
  as the operator had it.
- The worker routes take `Authorization: Bearer <key>` when the gateway runs with `--api-key`
  (or control-plane keys); 401 without it.

GatewayError
├── GatewayUnreachable   no answer: connection refused, timeout, name not resolved
└── GatewayRefused       an answer that is an error (401/403: the API key; any other 4xx/5xx)
"""

from __future__ import annotations

import dataclasses
import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sgdeploy.profile.inventory import GatewayEntry

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


def urllib_transport(
    method: str, url: str, headers: dict[str, str], body: bytes | None, timeout: float
) -> Reply:
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return Reply(response.status, response.read())
    except urllib.error.HTTPError as exc:
        return Reply(exc.code, exc.read())
    except urllib.error.URLError as exc:
        reason = exc.reason
        raise OSError(
            reason.strerror if isinstance(reason, OSError) and reason.strerror else str(reason)
        ) from exc


@dataclass(frozen=True)
class WorkerView:
    """What the gateway thinks of one worker, at one moment."""

    url: str
    state: str  # a status of the gateway's, or ABSENT
    worker_id: str | None = None
    load: int | None = None  # requests the gateway has in flight to it
    model_id: str | None = None
    # as GET /workers lists it
    spec: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def routed(self) -> bool:
        return self.state == ROUTED

    @property
    def listed(self) -> bool:
        return self.state != ABSENT

    def as_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "state": self.state,
            "healthy": self.routed,
            "worker_id": self.worker_id,
            "load": self.load,
            "model_id": self.model_id,
        }

    def describe(self) -> str:
        if not self.listed:
            return "absent (not routed to)"
        load = f", {self.load} in flight" if self.load else ""
        return f"{self.state}{'' if self.routed else ' (not routed to)'}{load}"


@dataclass(frozen=True)
class WorkerStatus:
    """What `status` learns of a host's worker from its gateway, or why the gateway could not
    tell."""

    gateway: str
    view: WorkerView
    problem: str | None = None  # the gateway did not answer

    def as_dict(self) -> dict[str, Any]:
        return {"gateway": self.gateway, **self.view.as_dict(), "problem": self.problem}


@dataclass
class RotationResult:
    """What happened to one host's worker at the gateway: filled in by a drained rollout
    (`sgdeploy.deploy.drained`) as it goes, then carried by `FleetResult.gateway` and
    `DrainedRollback.rotation`; its JSON is `as_dict`."""

    gateway: str
    worker_url: str  # where it is registered now (or was to be)
    before: str
    taken_out: bool = False
    # the URL taken out, when the server moved to another port (or is out)
    removed_url: str | None = None
    drained_s: float | None = None
    in_flight_left: int | None = None
    back: bool = False
    after: str | None = None
    restored: dict[str, Any] | None = None  # the operator's registration sent again (never the key)
    worker_api_key: bool = False  # the server's own API key went with the registration
    problem: str | None = None
    steps: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def same_url(a: str, b: str) -> bool:
    return normal_url(a) == normal_url(b)


def same_host(a: str, b: str) -> bool:
    """Two worker URLs on one scheme and host name (a server that moved to another port)."""
    return normal_url(a).rsplit(":", 1)[0] == normal_url(b).rsplit(":", 1)[0]


def normal_url(url: str) -> str:
    scheme, sep, rest = url.strip().partition("://")
    return f"{scheme.lower()}{sep}{rest.rstrip('/').lower()}"


def api_key(name: str, entry: GatewayEntry, environ: dict[str, str] | None = None) -> str | None:
    """The gateway's API key from where the inventory says it is; GatewayError when it is not
    there."""
    env = os.environ if environ is None else environ
    if entry.api_key_env:
        value = env.get(entry.api_key_env, "").strip()
        if not value:
            raise GatewayError(f"gateway '{name}': the environment variable {entry.api_key_env} "
                               "(api_key_env) is not set; export the gateway's API key in it")
        return value
    if entry.api_key_file:
        path = Path(entry.api_key_file).expanduser()
        try:
            value = path.read_text().strip()
        except OSError as exc:
            raise GatewayError(f"gateway '{name}': cannot read its API key from {path} "
                               f"(api_key_file): {exc.strerror or exc}") from None
        if not value:
            raise GatewayError(f"gateway '{name}': {path} (api_key_file) is empty")
        return value
    return None


class GatewayClient:
    """One gateway's worker API."""

    def __init__(
        self,
        name: str,
        url: str,
        key: str | None = None,
        transport: Transport = urllib_transport,
        timeout: float = TIMEOUT_S,
    ) -> None:
        self.name = name
        self.url = url.rstrip("/")
        self._key = key
        self._transport = transport
        self._timeout = timeout
        self.requests = 0

    @classmethod
    def for_entry(
        cls, name: str, entry: GatewayEntry, transport: Transport = urllib_transport
    ) -> GatewayClient:
        return cls(name, entry.url, api_key(name, entry), transport)

    def _call(
        self, method: str, path: str, payload: dict[str, Any] | None = None
    ) -> tuple[int, Any]:
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
            raise GatewayUnreachable(f"gateway '{self.name}' at {self.url} does not answer "
                                     f"({method} {path}): {exc.strerror or exc}") from None
        if reply.status in (401, 403):
            raise GatewayRefused(f"gateway '{self.name}' refused {method} {path} with HTTP "
                                 f"{reply.status}: check its API key (api_key_env or api_key_file "
                                 "in the inventory)")
        try:
            document = json.loads(reply.body) if reply.body else None
        except ValueError:
            document = None
        return reply.status, document

    def workers(self) -> list[WorkerView]:
        status, document = self._call("GET", "/workers")
        if (
            status != 200
            or not isinstance(document, dict)
            or not isinstance(document.get("workers"), list)
        ):
            raise GatewayRefused(f"gateway '{self.name}': GET /workers answered HTTP {status}"
                                 f"{_said(document)}; is {self.url} an smg gateway's admin URL?")
        return [
            _view(w)
            for w in document["workers"]
            if isinstance(w, dict) and isinstance(w.get("url"), str)
        ]

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
            raise GatewayRefused(f"gateway '{self.name}': removing {view.url} answered HTTP "
                                 f"{status}{_said(document)}")

    def add(
        self, url: str, registration: dict[str, Any] | None = None, worker_key: str | None = None
    ) -> None:
        """Register a worker (with `registration`'s settings, and SGLang's own API key of the
        worker when it has one); the gateway checks it in the background and then routes to it."""
        payload = {
            **(registration or {}),
            "url": url,
            **({"api_key": worker_key} if worker_key else {}),
        }
        status, document = self._call("POST", "/workers", payload)
        # 409: it lists that URL already, or is registering it
        if status not in (200, 201, 202, 409):
            raise GatewayRefused(f"gateway '{self.name}': adding {url} answered HTTP "
                                 f"{status}{_said(document)}")


def _view(worker: dict[str, Any]) -> WorkerView:
    load = worker.get("load")
    status = worker.get("status")
    if not isinstance(status, str):
        status = ROUTED if worker.get("is_healthy") else "not_ready"
    return WorkerView(
        url=worker["url"],
        state=status,
        worker_id=worker.get("id"),
        load=load if isinstance(load, int) else None,
        model_id=worker.get("model_id") if isinstance(worker.get("model_id"), str) else None,
        spec=worker,
    )


# What GET /workers shows of a worker besides its registration (smg 1.13's WorkerInfo around
# the WorkerSpec it flattens in), and the spec fields that are the gateway's own.
VIEW_ONLY = frozenset(
    {
        "id",
        "model_id",
        "url",
        "is_healthy",
        "status",
        "load",
        "http2",
        "engine_load",
        "pd_pairing",
        "stalled",
        "job_status",
        "api_key",
        "bootstrap_host",
    }
)
# Labels smg 1.13 makes itself from a worker's /server_info, /model_info and /v1/models answers.
DISCOVERED_LABELS = frozenset(
    {
        "model_id",
        "model_path",
        "served_model_name",
        "tp_size",
        "dp_size",
        "pp_size",
        "attn_dp_size",
        "load_balance_method",
        "disaggregation_mode",
        "version",
        "is_embedding",
        "enable_dp_attention",
        "context_length",
        "max_total_tokens",
        "max_running_requests",
        "weight_version",
        "tokenizer_path",
        "is_generation",
        "has_image_understanding",
        "has_audio_understanding",
        "model_type",
        "architectures",
        "max_model_len",
        "kv_transfer_params",
    }
)


def registration(view: WorkerView, said: dict[str, str] | None) -> dict[str, Any]:
    """The operator's part of a worker's registration, to register it again as it was.

    `said`: what the worker's server itself answers, as the gateway turns it into labels
    (`server_labels`), or None when it could not be asked. A label is the gateway's own when
    the server said that value under that key, or (keys smg discovers) when the server could
    not be asked; the model card is the gateway's own when it is the one model the server
    serves. The gateway makes both afresh from the new server; the rest is restored."""
    spec = {k: v for k, v in view.spec.items() if k not in VIEW_ONLY}
    labels = spec.get("labels")
    if isinstance(labels, dict):
        mine = {k: v for k, v in labels.items() if not _discovered(k, v, said)}
        spec["labels"] = mine
        if not mine:
            del spec["labels"]
    served = (said or {}).get("served_model_name") or (labels or {}).get("served_model_name")
    models = spec.get("models")
    if (
        isinstance(models, list)
        and len(models) == 1
        and isinstance(models[0], dict)
        and models[0].get("id") == served
    ):
        del spec["models"]
    return spec


def _discovered(key: str, value: Any, said: dict[str, str] | None) -> bool:
    if said is not None and key in said:
        return bool(said[key] == value)
    return key in DISCOVERED_LABELS


def server_labels(*answers: Any) -> dict[str, str]:
    """A server's /server_info and /model_info answers as smg makes labels of them (strings as
    they are, numbers but 0, booleans as true/false, non-empty lists as compact JSON)."""
    labels: dict[str, str] = {}
    for answer in answers:
        for key, value in (answer.items() if isinstance(answer, dict) else ()):
            if isinstance(value, bool):
                labels[key] = "true" if value else "false"
            elif isinstance(value, str) and value and value != "null":
                labels[key] = value
            elif isinstance(value, int | float) and value != 0:
                labels[key] = repr(value)  # 3, 0.88, 40960.0 as serde_json writes them
            elif isinstance(value, list) and value:
                labels[key] = json.dumps(value, separators=(",", ":"))
    return labels


def models_labels(answer: Any) -> dict[str, str]:
    """What smg takes from a worker's /v1/models when /server_info did not say it."""
    rows = answer.get("data") if isinstance(answer, dict) else None
    first = rows[0] if isinstance(rows, list) and rows and isinstance(rows[0], dict) else {}
    pairs = {"served_model_name": first.get("id"), "model_path": first.get("root"),
             "max_model_len": first.get("max_model_len")}
    return {k: str(v) for k, v in pairs.items() if v}


def _said(document: Any) -> str:
    if isinstance(document, dict):
        message = document.get("error") or document.get("message")
        if isinstance(message, dict):
            message = message.get("message")
        if message:
            return f" ({message})"
    return ""
