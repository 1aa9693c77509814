"""Rollouts behind SGLang's gateway: each worker out of rotation before its server stops, and
back in rotation before the next host.

For every host a rollout reaches, as `host_steps` decides from the gateway's view of its worker:
take the worker out (`DELETE /workers/{id}`: the gateway marks it `draining` and routes nothing
new to it), wait until nothing is in flight (the gateway's count for it and the server's own
`/v1/loads` or `/get_load`, asked on the host), bounded by the drain timeout; then the host's
own transaction (`sgdeploy.apply`: stop, idle GPUs, start, ready, rolled back on failure); then
add the worker back (`POST /workers`) and wait until the gateway lists it `ready`, the one state
it routes to. A worker the gateway does not route to already
(absent after an interrupted rollout, or never added) is not taken out, only added back, and
such hosts go first: they cost no capacity. Before a worker is taken out, `may_take_out` checks
that no more than `max_unavailable` of the rollout's workers would be out of rotation and that
another worker still serves; this is asked again, under a lock, right before each removal.

`plan_rollout` decides all of this as data (what `sgdeploy plan` shows); `run_drained` is the one
place that executes it, through `GatewayClient` (the gateway) and `apply_profile` (the hosts).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from sgdeploy.apply import ApplyOptions, ApplyResult, Exit, HostSession, Reporter, apply_profile
from sgdeploy.fleet import FleetHost, FleetResult
from sgdeploy.gateway import ABSENT, GatewayClient, GatewayError, WorkerView, same_url
from sgdeploy.inventory import Inventory, worker_url
from sgdeploy.plan import Deployment
from sgdeploy.profile import LoadedProfile

POLL_S = 0.25


class GatewayStepKind(enum.StrEnum):
    REMOVE = "gateway_remove"
    WAIT_DRAINED = "wait_drained"
    DEPLOY = "deploy"
    ADD = "gateway_add"
    WAIT_ROUTED = "wait_routed"


@dataclass(frozen=True)
class GatewayStep:
    kind: GatewayStepKind
    why: str


@dataclass(frozen=True)
class Rotation:
    """One host of a rollout behind a gateway: its worker, the gateway's view of it, the steps."""

    host: str
    gateway: str
    worker_url: str
    before: WorkerView
    steps: tuple[GatewayStep, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"host": self.host, "gateway": self.gateway, "worker_url": self.worker_url,
                "before": self.before.as_dict(), "steps": [{"step": s.kind.value, "why": s.why} for s in self.steps]}


@dataclass(frozen=True)
class RolloutPlan:
    order: tuple[str, ...]
    rotations: dict[str, Rotation]
    max_unavailable: int
    batches: tuple[tuple[str, ...], ...]

    def as_dict(self) -> dict[str, Any]:
        return {"order": list(self.order), "max_unavailable": self.max_unavailable,
                "batches": [list(b) for b in self.batches],
                "hosts": [self.rotations[h].as_dict() for h in self.order]}


@dataclass(frozen=True)
class DrainSettings:
    max_unavailable: int = 1
    drain_timeout_s: float | None = None  # None: each gateway's drain_timeout_s
    add_timeout_s: float | None = None


# --------------------------------------------------------------------------- deciding
def host_steps(view: WorkerView, gateway: str, drain_timeout_s: float) -> tuple[GatewayStep, ...]:
    """What a rollout does at the gateway around one host's transaction."""
    url = view.url
    steps: list[GatewayStep] = []
    if view.listed:
        steps += [GatewayStep(GatewayStepKind.REMOVE, f"take {url} out of gateway '{gateway}' (now {view.state}): "
                              "it drains, no new requests go to it"),
                  GatewayStep(GatewayStepKind.WAIT_DRAINED, "until nothing is in flight to it (the gateway's load and "
                              f"the server's own /v1/loads or /get_load); at most {drain_timeout_s:.0f} s")]
    steps += [GatewayStep(GatewayStepKind.DEPLOY, "the host's transaction: stop, idle GPUs, start, ready (rolled "
                          "back on failure)"),
              GatewayStep(GatewayStepKind.ADD, f"add {url} back to gateway '{gateway}' (the restored server after "
                          "a rollback)"),
              GatewayStep(GatewayStepKind.WAIT_ROUTED, "until the gateway lists it ready, the one state it routes to")]
    return tuple(steps)


def may_take_out(url: str, views: Sequence[WorkerView], rollout_urls: Sequence[str], max_unavailable: int
                 ) -> str | None:
    """Why the worker at `url` must not be taken out of rotation now; None when it may."""
    mine = next((v for v in views if same_url(v.url, url)), WorkerView(url, ABSENT))
    if not mine.routed:
        return None  # out of rotation already: taking it out costs nothing
    serving = [v for v in views if v.routed and not same_url(v.url, url)
               and (mine.model_id is None or v.model_id in (None, mine.model_id))]
    if not serving:
        return (f"{url} is the last worker the gateway routes to{' for ' + mine.model_id if mine.model_id else ''}; "
                "taking it out would leave nothing serving")
    out = [u for u in rollout_urls if not same_url(u, url)
           and not next((v for v in views if same_url(v.url, u)), WorkerView(u, ABSENT)).routed]
    if len(out) + 1 > max_unavailable:
        return (f"{len(out)} worker(s) of this rollout are out of rotation already ({', '.join(out)}); taking "
                f"{url} out too would exceed --max-unavailable {max_unavailable}")
    return None


def plan_rollout(hosts: Sequence[FleetHost], urls: dict[str, str], gateways: dict[str, str],
                 views: dict[str, list[WorkerView]], drain_timeouts: dict[str, float], max_unavailable: int,
                 parallel: int = 1, canary: bool = True) -> RolloutPlan:
    """The rollout as data: hosts whose worker is out of rotation first, then the rest in order."""
    rotations: dict[str, Rotation] = {}
    for host in hosts:
        gateway, url = gateways[host.name], urls[host.name]
        view = next((v for v in views[gateway] if same_url(v.url, url)), WorkerView(url, ABSENT))
        rotations[host.name] = Rotation(host.name, gateway, url, view,
                                        host_steps(view, gateway, drain_timeouts[gateway]))
    order = tuple(sorted((h.name for h in hosts), key=lambda n: rotations[n].before.routed))
    step = max(1, min(parallel, max_unavailable))
    rest = list(order)
    batches: list[tuple[str, ...]] = [(rest.pop(0),)] if canary and rest else []
    batches += [tuple(rest[i:i + step]) for i in range(0, len(rest), step)]
    return RolloutPlan(order, rotations, max_unavailable, tuple(batches))


# --------------------------------------------------------------------------- the inventory's side
@dataclass
class Fronted:
    """The gateways of a rollout's hosts: clients, worker URLs, settings."""

    clients: dict[str, GatewayClient]
    gateways: dict[str, str]  # host -> gateway name
    urls: dict[str, str]  # host -> worker URL
    drain_timeouts: dict[str, float]
    add_timeouts: dict[str, float]


def fronted(inventory: Inventory, hosts: Sequence[str], port: int, settings: DrainSettings,
            client: Callable[[str, Any], GatewayClient] = GatewayClient.for_entry) -> Fronted | None:
    """The gateways in front of `hosts`, or None when no host has one. GatewayError: a key is missing."""
    gateways = {h: g for h in hosts if (g := inventory.gateway_of(h))}
    if not gateways:
        return None
    names = sorted(set(gateways.values()))
    entries = {n: inventory.gateways[n] for n in names}
    return Fronted(
        clients={n: client(n, entries[n]) for n in names},
        gateways=gateways,
        urls={h: worker_url(inventory.hosts[h], port) for h in gateways},
        drain_timeouts={n: settings.drain_timeout_s if settings.drain_timeout_s is not None
                        else entries[n].drain_timeout_s for n in names},
        add_timeouts={n: settings.add_timeout_s if settings.add_timeout_s is not None
                      else entries[n].add_timeout_s for n in names})


def views_of(front: Fronted) -> dict[str, list[WorkerView]]:
    """Every gateway's workers (one GET each); GatewayError when one does not answer."""
    return {name: client.workers() for name, client in front.clients.items()}


def unfronted(hosts: Sequence[FleetHost], front: Fronted) -> list[str]:
    return [h.name for h in hosts if h.name not in front.gateways]


def prepare(loaded: LoadedProfile, hosts: Sequence[FleetHost], inventory: Inventory, settings: DrainSettings,
            parallel: int = 1, canary: bool = True,
            client: Callable[[str, Any], GatewayClient] = GatewayClient.for_entry) -> tuple[Fronted, RolloutPlan]:
    """The gateways of `hosts` and the rollout plan, from one look at each gateway.

    GatewayError, before anything changed: a key is missing, a gateway does not answer, or only
    some of the hosts have a gateway."""
    assert loaded.model is not None
    port = loaded.model.server.get("port", 30000)
    front = fronted(inventory, [h.name for h in hosts], port if isinstance(port, int) else 30000, settings, client)
    if front is None:
        raise GatewayError("no gateway fronts these hosts")
    missing = unfronted(hosts, front)
    if missing:
        raise GatewayError(f"{', '.join(missing)} {'has' if len(missing) == 1 else 'have'} no gateway while "
                           f"{', '.join(sorted(front.gateways))} do; give every host of the rollout its gateway "
                           "(`gateway = NAME` on the host, or the host or its group in the gateway's `hosts`)")
    plan = plan_rollout(hosts, front.urls, front.gateways, views_of(front), front.drain_timeouts,
                        settings.max_unavailable, parallel, canary)
    return front, plan


def worker_states(inventory: Inventory, hosts: Sequence[str], port: int,
                  client: Callable[[str, Any], GatewayClient] = GatewayClient.for_entry) -> dict[str, dict[str, Any]]:
    """What each fronted host's gateway thinks of its worker (`status`), or why it cannot tell."""
    gateways = {h: g for h in hosts if (g := inventory.gateway_of(h))}
    states: dict[str, dict[str, Any]] = {}
    for name in sorted(set(gateways.values())):
        mine = [h for h in hosts if gateways.get(h) == name]
        urls = {h: worker_url(inventory.hosts[h], port) for h in mine}
        try:
            listed = client(name, inventory.gateways[name]).workers()
            views = {h: next((v for v in listed if same_url(v.url, u)), WorkerView(u, ABSENT)) for h, u in urls.items()}
            states.update({h: {"gateway": name, **v.as_dict(), "problem": None} for h, v in views.items()})
        except GatewayError as exc:
            states.update({h: {"gateway": name, **WorkerView(u, "unknown").as_dict(), "problem": str(exc)}
                           for h, u in urls.items()})
    return states


def rotation_problem(state: dict[str, Any]) -> str | None:
    """A status problem when the gateway does not route to the host's worker."""
    if state["problem"]:
        return f"gateway '{state['gateway']}': {state['problem']}"
    if state["state"] != "ready":
        return (f"not in rotation at gateway '{state['gateway']}': {state['url']} is {state['state']}; "
                "`sgdeploy apply` puts it back")
    return None


# --------------------------------------------------------------------------- the worker's own load
def worker_in_flight(session: HostSession, deployment: Deployment) -> int | None:
    """Requests the server itself has running or waiting (SGLang's /v1/loads from 0.5.8, /get_load
    before 0.5.21), asked on the host; None when it cannot tell."""
    from sgdeploy.remote import RemoteError
    from sgdeploy.secret_args import bearer_headers

    headers = bearer_headers(session.remote, deployment.profile_text, deployment.unit, deployment.sglang_version)
    for path in ("/v1/loads?include=core", "/get_load"):
        try:
            response = session.remote.http_get(deployment.port, path, timeout=5.0, headers=headers)
        except (ConnectionRefusedError, RemoteError):
            return None
        if response.status == 200:
            return parse_in_flight(response.body)
    return None


def parse_in_flight(body: bytes) -> int | None:
    """Running + waiting requests from a /v1/loads or /get_load answer."""
    try:
        document = json.loads(body)
    except ValueError:
        return None
    rows = document.get("loads") if isinstance(document, dict) else document
    if not isinstance(rows, list):
        return None
    total = 0
    for row in rows:
        if not isinstance(row, dict):
            return None
        if isinstance(row.get("num_reqs"), int):  # /get_load: running + waiting already
            total += row["num_reqs"]
        else:
            total += int(row.get("num_running_reqs") or 0) + int(row.get("num_waiting_reqs") or 0)
    return total


# --------------------------------------------------------------------------- executing
@dataclass
class RotationResult:
    """What happened to one host's worker at the gateway."""

    gateway: str
    worker_url: str
    before: str
    taken_out: bool = False
    drained_s: float | None = None
    in_flight_left: int | None = None
    back: bool = False
    after: str | None = None
    problem: str | None = None
    steps: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class _Run:
    """One drained rollout in progress: the gateway calls, serialised where they decide."""

    def __init__(self, front: Fronted, plan: RolloutPlan, report_for: Callable[[str], Reporter]) -> None:
        self.front = front
        self.plan = plan
        self.report_for = report_for
        self.guard = threading.Lock()
        self.results: dict[str, RotationResult] = {}

    def client(self, host: str) -> GatewayClient:
        return self.front.clients[self.front.gateways[host]]

    def rollout_urls(self, gateway: str) -> list[str]:
        return [self.front.urls[h] for h in self.plan.order if self.front.gateways[h] == gateway]

    def take_out(self, host: str, rotation: RotationResult) -> str | None:
        """Remove the worker when the guard allows it; a sentence when it must not (or cannot)."""
        gateway = self.front.gateways[host]
        with self.guard:
            views = self.client(host).workers()
            view = self.client(host).worker(rotation.worker_url, views)
            if not view.listed:
                return None
            if view.routed:
                refusal = may_take_out(rotation.worker_url, views, self.rollout_urls(gateway),
                                       self.plan.max_unavailable)
                if refusal:
                    return refusal
            self.client(host).remove(view)
            rotation.taken_out = True
            rotation.steps.append(GatewayStepKind.REMOVE.value)
        return None

    def drain(self, host: str, rotation: RotationResult, session: HostSession, deployment: Deployment) -> None:
        """Wait until nothing is in flight to the worker, at the gateway or on the server (bounded)."""
        report = self.report_for(host)
        began = time.monotonic()
        deadline = began + self.front.drain_timeouts[self.front.gateways[host]]
        left: int | None = None
        while True:
            view = self.client(host).worker(rotation.worker_url)
            left = worker_in_flight(session, deployment)
            # Draining routes nothing new to it: done once neither side has a request of it
            # (the server unable to tell: once the gateway has let it go).
            if not view.routed and not view.load and (left == 0 or (left is None and not view.listed)):
                break
            if time.monotonic() >= deadline:
                report("warning", text=f"{rotation.worker_url} still {view.describe()} with {left} request(s) "
                       "running on the server at the drain timeout; stopping it anyway")
                break
            report("waiting", what="drain", detail=f"gateway: {view.describe()}; server: {left} in flight")
            time.sleep(POLL_S)
        rotation.drained_s = round(time.monotonic() - began, 3)
        rotation.in_flight_left = left
        rotation.steps.append(GatewayStepKind.WAIT_DRAINED.value)

    def before_stop(self, host: str) -> Callable[[HostSession, Deployment], str | None]:
        rotation = self.results[host]

        def hook(session: HostSession, deployment: Deployment) -> str | None:
            self.report_for(host)("step", step="gateway_remove", worker=rotation.worker_url)
            try:
                refusal = self.take_out(host, rotation)
                if refusal:
                    return f"{refusal}; nothing was stopped"
                if rotation.taken_out:
                    self.drain(host, rotation, session, deployment)
            except GatewayError as exc:
                rotation.problem = str(exc)
                return f"{exc}; nothing was stopped"
            return None

        return hook

    def put_back(self, host: str, rotation: RotationResult) -> None:
        """Add the worker back and wait until the gateway routes to it (bounded)."""
        client = self.client(host)
        report = self.report_for(host)
        deadline = time.monotonic() + self.front.add_timeouts[self.front.gateways[host]]
        view = client.worker(rotation.worker_url)
        while view.state == "draining" and time.monotonic() < deadline:  # still letting it go: 409 on add
            time.sleep(POLL_S)
            view = client.worker(rotation.worker_url)
        if not view.listed:
            report("step", step="gateway_add", worker=rotation.worker_url)
            client.add(rotation.worker_url)
            rotation.steps.append(GatewayStepKind.ADD.value)
        while not view.routed and time.monotonic() < deadline:
            time.sleep(POLL_S)
            view = client.worker(rotation.worker_url)
            report("waiting", what="gateway", detail=f"{rotation.worker_url} {view.describe()}")
        rotation.after = view.state
        rotation.back = view.routed
        rotation.steps.append(GatewayStepKind.WAIT_ROUTED.value)
        if not view.routed:
            rotation.problem = (f"gateway '{client.name}' did not route to {rotation.worker_url} within "
                                f"{self.front.add_timeouts[self.front.gateways[host]]:.0f} s (it is {view.state})")

    def one(self, loaded: LoadedProfile, host: FleetHost, options: ApplyOptions) -> ApplyResult:
        rotation = self.results[host.name]
        reporter = self.report_for(host.name)
        result = apply_profile(loaded, host.name, host.entry, host.target,
                               dataclasses.replace(options, before_stop=self.before_stop(host.name)), reporter)
        if result.exit_code == Exit.REFUSED and not rotation.taken_out:
            rotation.after = rotation.before  # refused before the gateway was touched
        elif serves(result) and rotation.problem is None:
            try:
                self.put_back(host.name, rotation)
            except GatewayError as exc:
                rotation.problem = str(exc)
        elif not serves(result):
            rotation.after = ABSENT if rotation.taken_out else rotation.before
            rotation.problem = rotation.problem or "left out of rotation: nothing healthy runs on the host"
        return result


def serves(result: ApplyResult) -> bool:
    """A healthy server runs on the host after this result: new, up to date, restored or untouched."""
    return result.exit_code in (Exit.READY, Exit.ROLLED_BACK, Exit.REFUSED)


def run_drained(loaded: LoadedProfile, hosts: Sequence[FleetHost], options: ApplyOptions, front: Fronted,
                plan: RolloutPlan, report_for: Callable[[str], Reporter] | None = None) -> FleetResult:
    """Execute `plan`: batch by batch, stopping at the first host that fails or is not back in rotation."""
    by_name = {h.name: h for h in hosts}
    run = _Run(front, plan, report_for or (lambda _: (lambda *a, **k: None)))
    for name in plan.order:
        rotation = plan.rotations[name]
        run.results[name] = RotationResult(rotation.gateway, rotation.worker_url, rotation.before.state)
    fleet = FleetResult(list(plan.order))
    for batch in plan.batches:
        with ThreadPoolExecutor(max_workers=len(batch)) as pool:
            results = list(pool.map(lambda n: run.one(loaded, by_name[n], options), batch))
        for name, result in zip(batch, results, strict=True):
            fleet.results[name] = result
        failed = [n for n, r in zip(batch, results, strict=True)
                  if r.exit_code != Exit.READY or run.results[n].problem is not None]
        if failed:
            fleet.stopped_at = failed[0]
            break
    fleet.gateway = {name: _final(run, name) for name in plan.order}
    return fleet


def _final(run: _Run, host: str) -> dict[str, Any]:
    """The host's rotation record, with the gateway's view of its worker now (or why it is unknown)."""
    rotation = run.results[host]
    try:
        rotation.after = run.client(host).worker(rotation.worker_url).state
    except GatewayError as exc:
        rotation.after = "unknown"
        rotation.problem = rotation.problem or str(exc)
    return rotation.as_dict()
