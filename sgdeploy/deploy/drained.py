"""Rollouts behind SGLang's gateway: each worker out of rotation before its server stops, and
back in rotation, registered as it was, before the next host.

For every host a rollout (or `sgdeploy rollback`) reaches, as `host_steps` decides from the
gateway's view of its worker: read the worker's registration from the gateway and take it out
(`DELETE /workers/{id}`: the gateway marks it `draining` and routes nothing new to it), wait
until nothing is in flight (the gateway's count for it and the server's own `/v1/loads` or
`/get_load`, asked on the host), bounded by the drain timeout, at which the host is refused and
the worker put back (`on_drain_timeout = "refuse"`, the default) or stopped anyway (`"stop"`);
then the host's own transaction (`sgdeploy.deploy.transaction`: stop, idle GPUs, start, ready,
rolled back on failure); then register the worker again (`POST /workers`) for the server that runs
now, at that server's port, with the operator's part of the old registration
(`gateway.registration`) and the server's own API key read on the host, and wait until the gateway
lists it `ready`, the one state it routes to.

The worker is found by the port the running server listens on (the installed unit's), not the
new profile's: a port change takes out the old URL and registers the new one. A worker the
gateway does not route to already (absent after an interrupted rollout, or never added) is not
taken out, only added back, and such hosts go first: they cost no capacity. Before a worker is
taken out, `may_take_out` checks that no more than `max_unavailable` of the rollout's workers
would be out of rotation and that another worker still serves; this is asked again, under a
lock, right before each removal. Hosts of a rollout without a gateway are restarted as in a
plain rollout, unless a gateway of the rollout routes to them (then the rollout is refused).
With `nnodes > 1` the group is one worker: rank 0's server, the one that serves the API.

`plan_rollout` decides all of this as data (what `sgdeploy plan` shows); `DrainedRollout` is the one
place that executes it, through `GatewayClient` (the gateway) and the hooks `apply` runs over
the host's connection (`ApplyOptions.before_stop`, `after_host`).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NamedTuple

from sgdeploy.deploy import multinode
from sgdeploy.deploy.apply import apply_profile
from sgdeploy.deploy.fleet import FleetHost, FleetResult
from sgdeploy.deploy.gateway import (
    ABSENT,
    GatewayClient,
    GatewayError,
    RotationResult,
    WorkerStatus,
    WorkerView,
    models_labels,
    registration,
    same_host,
    same_url,
    server_labels,
)
from sgdeploy.deploy.journal import Reporter
from sgdeploy.deploy.plan import DEFAULT_PORT, Deployment, Step, server_port
from sgdeploy.deploy.prestop import Handover
from sgdeploy.deploy.rollback import rollback_unit
from sgdeploy.deploy.secret_args import api_key_for, bearer_headers, without_secrets
from sgdeploy.deploy.session import HostSession
from sgdeploy.deploy.transaction import ApplyOptions, ApplyResult, Exit
from sgdeploy.host.remote import RemoteError
from sgdeploy.profile.inventory import HostEntry, Inventory, worker_url
from sgdeploy.profile.model import LoadedProfile, serving_hosts

POLL_S = 0.25
REFUSE, STOP = "refuse", "stop"  # what the drain timeout does with requests still running


class GatewayStepKind(enum.StrEnum):
    REMOVE = "gateway_remove"
    WAIT_DRAINED = "wait_drained"
    DEPLOY = "deploy"
    ADD = "gateway_add"
    WAIT_ROUTED = "wait_routed"


@dataclass(frozen=True)
class Rotation:
    """One host of a rollout behind a gateway: its worker, the gateway's view of it, the steps."""

    host: str
    gateway: str
    worker_url: str  # where the deployed server will be registered
    # the worker as the gateway lists it now (at its running port: maybe another URL)
    before: WorkerView
    steps: tuple[Step, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"host": self.host, "gateway": self.gateway, "worker_url": self.worker_url,
                "before": self.before.as_dict(), "steps": [s.as_dict() for s in self.steps]}


PLAIN_STEP = Step(GatewayStepKind.DEPLOY, "no gateway fronts this host: restarted as in a plain "
                         "rollout (clients that reach its server directly see the restart)")
NODE_STEP = Step(GatewayStepKind.DEPLOY, "a node of rank 0's launch (nnodes > 1): stopped and "
                        "started with it, while rank 0's worker is out of rotation; not a worker "
                        "of its own")


@dataclass(frozen=True)
class RolloutPlan:
    order: tuple[str, ...]
    rotations: dict[str, Rotation]  # the hosts a gateway fronts; the others are plain
    max_unavailable: int
    batches: tuple[tuple[str, ...], ...]
    others: Step = PLAIN_STEP  # what the hosts that are not a worker of a gateway get

    def steps_of(self, host: str) -> tuple[Step, ...]:
        rotation = self.rotations.get(host)
        return rotation.steps if rotation is not None else (self.others,)

    def as_dict(self) -> dict[str, Any]:
        return {"order": list(self.order), "max_unavailable": self.max_unavailable,
                "batches": [list(b) for b in self.batches],
                "hosts": [self.rotations[h].as_dict() if h in self.rotations else
                          {"host": h, "gateway": None, "worker_url": None, "before": None,
                           "steps": [s.as_dict() for s in self.steps_of(h)]}
                          for h in self.order]}


@dataclass(frozen=True)
class DrainSettings:
    max_unavailable: int = 1
    drain_timeout_s: float | None = None  # None: each gateway's drain_timeout_s
    add_timeout_s: float | None = None
    on_drain_timeout: str | None = None  # REFUSE or STOP; None: each gateway's on_drain_timeout


# --------------------------------------------------------------------------- deciding
def host_steps(
    view: WorkerView, gateway: str, url: str, drain_timeout_s: float, on_timeout: str = REFUSE
) -> tuple[Step, ...]:
    """What a rollout does at the gateway around one host's transaction."""
    steps: list[Step] = []
    if view.listed:
        at_timeout = ("put it back and refuse the host (its server keeps "
                      "them)" if on_timeout == REFUSE
                      else "stop it anyway (cuts them)")
        steps += [Step(GatewayStepKind.REMOVE, f"read the registration of {view.url} at gateway "
                              f"'{gateway}' (now {view.state}) and take it out: it drains, no new "
                              "requests go to it"),
                  Step(GatewayStepKind.WAIT_DRAINED, "until nothing is in flight to it (the "
                              "gateway's load and the server's own /v1/loads or /get_load); at "
                              f"most {drain_timeout_s:.0f} s, then with requests still running "
                              f"{at_timeout}")]
    moved = (" (the server moves from "
             f"{view.url})") if view.listed and not same_url(view.url, url) else ""
    steps += [Step(GatewayStepKind.DEPLOY, "the host's transaction: stop, idle GPUs, start, ready "
                          "(rolled back on failure)"),
              Step(GatewayStepKind.ADD, f"register {url} at gateway '{gateway}' again{moved}: the "
                          "server that runs then (the restored one after a rollback), with the "
                          "operator's settings of its registration and the server's own API key "
                          "when it has one"),
              Step(GatewayStepKind.WAIT_ROUTED, "until the gateway lists it ready, the one state "
                                                "it routes to")]
    return tuple(steps)


def may_take_out(
    url: str, views: Sequence[WorkerView], rollout_urls: Sequence[str], max_unavailable: int
) -> str | None:
    """Why the worker at `url` must not be taken out of rotation now; None when it may."""
    mine = find_view(views, url)
    if not mine.routed:
        return None  # out of rotation already: taking it out costs nothing
    serving = [v for v in views if v.routed and not same_url(v.url, url)
               and (mine.model_id is None or v.model_id in (None, mine.model_id))]
    if not serving:
        return (f"{url} is the last worker the gateway routes "
                f"to{' for ' + mine.model_id if mine.model_id else ''}; taking it out would leave "
                "nothing serving")
    out = [u for u in rollout_urls if not same_url(u, url) and not find_view(views, u).routed]
    if len(out) + 1 > max_unavailable:
        return (f"{len(out)} worker(s) of this rollout are out of rotation already "
                f"({', '.join(out)}); taking {url} out too would exceed --max-unavailable "
                f"{max_unavailable}")
    return None


def find_view(views: Sequence[WorkerView], url: str) -> WorkerView:
    """The gateway's view of the worker at `url` (ABSENT when it does not list it)."""
    return next((v for v in views if same_url(v.url, url)), WorkerView(url, ABSENT))


def planned_view(views: Sequence[WorkerView], url: str) -> WorkerView:
    """The worker of a host before its rollout: at `url`, or else the one worker listed on the
    same host at another port (its server runs on the port it had; the host confirms it)."""
    exact = find_view(views, url)
    if exact.listed:
        return exact
    moved = [v for v in views if same_host(v.url, url)]
    return moved[0] if len(moved) == 1 else exact


def plan_rollout(hosts: Sequence[FleetHost], front: Fronted, views: dict[str, list[WorkerView]],
                 max_unavailable: int, parallel: int = 1, canary: bool = True) -> RolloutPlan:
    """The rollout as data: hosts whose worker is out of rotation first, then the rest in order.
    `front` gives each host's gateway, worker URL and that gateway's drain timeout and policy."""
    rotations: dict[str, Rotation] = {}
    for host in hosts:
        if host.name not in front.gateways:
            continue
        gateway, url = front.gateways[host.name], front.urls[host.name]
        view = planned_view(views[gateway], url)
        rotations[host.name] = Rotation(
            host.name,
            gateway,
            url,
            view,
            host_steps(
                view,
                gateway,
                url,
                front.drain_timeouts[gateway],
                front.on_timeouts.get(gateway, REFUSE),
            ),
        )
    order = tuple(
        sorted(
            (h.name for h in hosts), key=lambda n: n not in rotations or rotations[n].before.routed
        )
    )
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
    gateways: dict[str, str]  # host -> gateway name, for the hosts a gateway fronts
    urls: dict[str, str]  # host -> worker URL of the new deployment
    entries: dict[str, HostEntry]  # host -> its inventory entry (the URL of another port)
    drain_timeouts: dict[str, float]
    add_timeouts: dict[str, float]
    on_timeouts: dict[str, str]


def fronted(
    inventory: Inventory,
    hosts: Sequence[str],
    port: int,
    settings: DrainSettings,
    client: Callable[[str, Any], GatewayClient] = GatewayClient.for_entry,
) -> Fronted | None:
    """The gateways in front of `hosts`, or None when no host has one. GatewayError: a key is
    missing."""
    gateways = {h: g for h in hosts if (g := inventory.gateway_of(h))}
    if not gateways:
        return None
    names = sorted(set(gateways.values()))
    entries = {n: inventory.gateways[n] for n in names}
    return Fronted(
        clients={n: client(n, entries[n]) for n in names},
        gateways=gateways,
        urls={h: worker_url(inventory.hosts[h], port) for h in gateways},
        entries={h: inventory.hosts[h] for h in hosts},
        drain_timeouts={n: settings.drain_timeout_s if settings.drain_timeout_s is not None
                        else entries[n].drain_timeout_s for n in names},
        add_timeouts={n: settings.add_timeout_s if settings.add_timeout_s is not None
                      else entries[n].add_timeout_s for n in names},
        on_timeouts={n: settings.on_drain_timeout or entries[n].on_drain_timeout for n in names})


class PreparedRollout(NamedTuple):
    """A rollout behind gateways, before anything changed: the gateways and the plan."""

    front: Fronted
    plan: RolloutPlan


def views_of(front: Fronted) -> dict[str, list[WorkerView]]:
    """Every gateway's workers (one GET each); GatewayError when one does not answer."""
    return {name: client.workers() for name, client in front.clients.items()}


def routed_unfronted(
    hosts: Sequence[FleetHost], front: Fronted, views: dict[str, list[WorkerView]], port: int
) -> list[str]:
    """Hosts without a gateway in the inventory that a gateway of the rollout lists all the same:
    restarting them plainly would drop that gateway's requests."""
    found = []
    for host in hosts:
        if host.name in front.gateways:
            continue
        url = worker_url(host.entry, port)
        for name, listed in views.items():
            view = planned_view(listed, url)
            if view.listed:
                found.append(f"{host.name} (gateway '{name}' lists {view.url})")
    return found


def routed_ranks(
    nodes: Sequence[FleetHost], views: dict[str, list[WorkerView]], port: int
) -> list[str]:
    """Nodes of rank 1 and above of a multi-node launch that a gateway lists as workers."""
    found = []
    for rank, node in enumerate(nodes, 1):
        for listed in views.values():
            view = planned_view(listed, worker_url(node.entry, port))
            if view.listed:
                found.append(f"{node.name}, rank {rank} ({view.url})")
    return found


def prepare(
    loaded: LoadedProfile,
    hosts: Sequence[FleetHost],
    inventory: Inventory,
    settings: DrainSettings,
    parallel: int = 1,
    canary: bool = True,
    client: Callable[[str, Any], GatewayClient] = GatewayClient.for_entry,
) -> PreparedRollout:
    """The gateways of `hosts` and the rollout plan, from one look at each gateway.

    GatewayError, before anything changed: a key is missing, a gateway does not answer, or a
    gateway of the rollout routes to a host the inventory does not put behind it."""
    port = profile_port(loaded)
    workers = serving_hosts(loaded.model, hosts)
    front = fronted(inventory, [h.name for h in workers], port, settings, client)
    if front is None:
        raise GatewayError("no gateway fronts these hosts")
    views = views_of(front)
    ranks = routed_ranks(hosts[1:], views, port) if len(workers) < len(hosts) else []
    if ranks:
        raise GatewayError(f"the gateway routes to {'; '.join(ranks)}: in a launch of nnodes > 1 "
                           "only rank 0 serves the API, so these would stop answering while still "
                           "routed to; take them out of the gateway first (DELETE /workers/ID), "
                           "then apply")
    stray = routed_unfronted(workers, front, views, port)
    if stray:
        raise GatewayError(f"{'; '.join(stray)}: the inventory gives "
                           f"{'it' if len(stray) == 1 else 'them'} no gateway, so its server would "
                           "be restarted without draining; give it its gateway (`gateway = NAME` "
                           "on the host, or the host or its group in the gateway's `hosts`)")
    plan = plan_rollout(workers, front, views, settings.max_unavailable, parallel, canary)
    if len(workers) < len(hosts):
        plan = dataclasses.replace(
            plan,
            order=tuple(h.name for h in hosts),
            batches=(tuple(h.name for h in hosts),),
            others=NODE_STEP,
        )
    return PreparedRollout(front, plan)


def prepare_rollback(inventory: Inventory, host: FleetHost, settings: DrainSettings,
                     client: Callable[[str, Any], GatewayClient] = GatewayClient.for_entry
                     ) -> PreparedRollout | None:
    """`sgdeploy rollback` of a host behind a gateway (None: it has none). Its port is known only
    on the host: the plan names the worker the gateway lists on it."""
    front = fronted(inventory, [host.name], DEFAULT_PORT, settings, client)
    if front is None:
        return None
    plan = plan_rollout([host], front, views_of(front), settings.max_unavailable, canary=False)
    return PreparedRollout(front, plan)


def profile_port(loaded: LoadedProfile) -> int:
    return server_port(loaded.model.server) if loaded.model else DEFAULT_PORT


def worker_states(
    inventory: Inventory,
    hosts: Sequence[str],
    port: int,
    client: Callable[[str, Any], GatewayClient] = GatewayClient.for_entry,
) -> dict[str, WorkerStatus]:
    """What each fronted host's gateway thinks of its worker (`status`), or why it cannot tell."""
    gateways = {h: g for h in hosts if (g := inventory.gateway_of(h))}
    states: dict[str, WorkerStatus] = {}
    for name in sorted(set(gateways.values())):
        mine = [h for h in hosts if gateways.get(h) == name]
        urls = {h: worker_url(inventory.hosts[h], port) for h in mine}
        try:
            listed = client(name, inventory.gateways[name]).workers()
            views = {h: planned_view(listed, u) for h, u in urls.items()}
            states.update({h: WorkerStatus(name, v) for h, v in views.items()})
        except GatewayError as exc:
            states.update(
                {h: WorkerStatus(name, WorkerView(u, "unknown"), str(exc)) for h, u in urls.items()}
            )
    return states


def rotation_problem(state: WorkerStatus) -> str | None:
    """A status problem when the gateway does not route to the host's worker."""
    if state.problem:
        return f"gateway '{state.gateway}': {state.problem}"
    if state.view.state != "ready":
        return (f"not in rotation at gateway '{state.gateway}': {state.view.url} is "
                f"{state.view.state}; `sgdeploy apply` puts it back")
    return None


# -------------------------------------------------------------------------- the worker's own server
def worker_in_flight(session: HostSession, port: int, keyed: Deployment | None) -> int | None:
    """Requests the server on `port` has running or waiting (SGLang's /v1/loads from 0.5.8,
    /get_load before 0.5.21), asked on the host with `keyed`'s API key; None when it cannot tell."""
    for path in ("/v1/loads?include=core", "/get_load"):
        status, body = _ask(session, port, keyed, path)
        if status is None:
            return None
        if status == 200:
            return parse_in_flight(body)
    return None


def server_said(session: HostSession, port: int, keyed: Deployment | None) -> dict[str, str] | None:
    """What the server on `port` tells a gateway registering it (/server_info, /model_info, each
    under its older name on 404, and /v1/models), as labels; None when it does not answer."""
    answers: list[Any] = []
    for name in ("server_info", "model_info"):
        status, body = _ask(session, port, keyed, f"/{name}")
        if status == 404:
            status, body = _ask(session, port, keyed, f"/get_{name}")
        if status != 200:
            return None
        answers.append(_json(body))
    status, body = _ask(session, port, keyed, "/v1/models")
    said = server_labels(
        without_secrets(answers[0]) if isinstance(answers[0], dict) else {}, answers[1]
    )
    return {**(models_labels(_json(body)) if status == 200 else {}), **said}


def _ask(
    session: HostSession, port: int, keyed: Deployment | None, path: str
) -> tuple[int | None, bytes]:
    headers = (
        bearer_headers(session.remote, keyed.profile_text, keyed.unit, keyed.sglang_version)
        if keyed
        else {}
    )
    try:
        response = session.remote.http_get(port, path, timeout=5.0, headers=headers)
    except (ConnectionRefusedError, RemoteError):
        return None, b""
    return response.status, response.body


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


def parse_in_flight(body: bytes) -> int | None:
    """Running + waiting requests from a /v1/loads or /get_load answer."""
    document = _json(body)
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
class _Worker:
    """One host's worker during its turn: what the hooks learn and need."""

    rotation: RotationResult
    current_url: str  # the URL the gateway knows it by now, for --max-unavailable's count
    swap: Handover | None = None
    registration: dict[str, Any] | None = None  # read from the gateway before the removal


class DrainedRollout:
    """One drained rollout in progress: the gateway calls, serialised where they decide."""

    def __init__(
        self, front: Fronted, plan: RolloutPlan, report_for: Callable[[str], Reporter]
    ) -> None:
        self.front = front
        self.plan = plan
        self.report_for = report_for
        self.guard = threading.Lock()
        self.workers: dict[str, _Worker] = {}
        for name, rotation in plan.rotations.items():
            result = RotationResult(rotation.gateway, rotation.worker_url, rotation.before.state)
            self.workers[name] = _Worker(result, rotation.before.url)

    def client(self, host: str) -> GatewayClient:
        return self.front.clients[self.front.gateways[host]]

    def url_at(self, host: str, port: int) -> str:
        return worker_url(self.front.entries[host], port)

    def rollout_urls(self, gateway: str) -> list[str]:
        return [w.current_url for h, w in self.workers.items() if self.front.gateways[h] == gateway]

    def options_for(self, host: str, options: ApplyOptions) -> ApplyOptions:
        if host not in self.workers:
            return options  # no gateway: a plain restart
        return dataclasses.replace(
            options, before_stop=self.before_stop(host), after_host=self.after_host(host)
        )

    # ----------------------------------------------------------------- before the stop
    def before_stop(self, host: str) -> Callable[[HostSession, Handover], str | None]:
        worker = self.workers[host]
        rotation = worker.rotation

        def hook(session: HostSession, swap: Handover) -> str | None:
            worker.swap = swap
            running = (
                self.url_at(host, swap.running_port) if swap.running_port else rotation.worker_url
            )
            self.report_for(host)("step", step="gateway_remove", worker=running)
            try:
                said = (
                    server_said(session, swap.running_port, swap.previous)
                    if swap.running_port
                    else None
                )
                refusal = self.take_out(host, worker, running, said)
                if refusal or not rotation.taken_out:
                    return refusal
                left = self.drain(host, worker, session, swap)
                if left and self.front.on_timeouts[self.front.gateways[host]] == REFUSE:
                    return self.refuse_at_timeout(host, worker, session, swap, left)
            except GatewayError as exc:
                rotation.problem = str(exc)
                return str(exc)
            return None

        return hook

    def take_out(
        self, host: str, worker: _Worker, running: str, said: dict[str, str] | None
    ) -> str | None:
        """Read the registration and remove the worker when the guard allows it; a sentence when
        it must not (or cannot)."""
        rotation, client = worker.rotation, self.client(host)
        with self.guard:
            views = client.workers()
            view = find_view(views, running)
            if not view.listed:
                view = find_view(views, rotation.worker_url)
            if not view.listed:
                return None
            worker.current_url = view.url
            if view.routed:
                refusal = may_take_out(
                    view.url,
                    views,
                    self.rollout_urls(self.front.gateways[host]),
                    self.plan.max_unavailable,
                )
                if refusal:
                    return refusal
            worker.registration = registration(view, said)
            # one removal only: a second one would remove the worker added back
            if view.state != "draining":
                client.remove(view)
            rotation.taken_out = True
            rotation.removed_url = view.url
            rotation.steps.append(GatewayStepKind.REMOVE.value)
        return None

    def drain(self, host: str, worker: _Worker, session: HostSession, swap: Handover) -> int | None:
        """Wait until nothing is in flight to the worker, at the gateway or on the server (bounded);
        what is still running at the timeout (None or 0: drained)."""
        rotation, report = worker.rotation, self.report_for(host)
        began = time.monotonic()
        timeout = self.front.drain_timeouts[self.front.gateways[host]]
        left: int | None = None
        while True:
            view = self.client(host).worker(worker.current_url)
            left = (
                worker_in_flight(session, swap.running_port, swap.previous)
                if swap.running_port
                else None
            )
            # Draining routes nothing new to it: done once neither side has a request of it
            # (the server unable to tell: once the gateway has let it go).
            if (
                not view.routed
                and not view.load
                and (left == 0 or (left is None and not view.listed))
            ):
                left = 0
                break
            if time.monotonic() - began >= timeout:
                left = max(left or 0, view.load or 0, 1)
                if self.front.on_timeouts[self.front.gateways[host]] == STOP:
                    report("warning", text=f"{worker.current_url} still {view.describe()} with "
                           f"{left} request(s) running at the drain timeout ({timeout:.0f} s); "
                           "stopping it anyway (on_drain_timeout = stop)")
                break
            report("waiting", what="drain", detail=f"gateway: {view.describe()}; server: {left} in "
                                            "flight")
            time.sleep(POLL_S)
        rotation.drained_s = round(time.monotonic() - began, 3)
        rotation.in_flight_left = left
        rotation.steps.append(GatewayStepKind.WAIT_DRAINED.value)
        return left

    def refuse_at_timeout(
        self, host: str, worker: _Worker, session: HostSession, swap: Handover, left: int
    ) -> str:
        """The drain timed out with requests running: the server keeps running them, the worker
        goes back in rotation as it was, the host is refused."""
        url = worker.current_url
        key = api_key_for(session.remote, swap.previous) if swap.previous else None
        self.put_back(host, worker, url, key)
        timeout = self.front.drain_timeouts[self.front.gateways[host]]
        back = "it was put back in rotation" if worker.rotation.back else "putting it back failed"
        worker.rotation.problem = worker.rotation.problem if not worker.rotation.back else None
        return (f"{url} still had {left} request(s) running after the drain timeout ({timeout:.0f} "
                f"s): {back} and its server left running (a longer --drain-timeout, or "
                "--on-drain-timeout stop to cut them)")

    # ----------------------------------------------------------------- after the transaction
    def after_host(self, host: str) -> Callable[[HostSession, ApplyResult], None]:
        worker = self.workers[host]
        rotation = worker.rotation

        def hook(session: HostSession, result: ApplyResult) -> None:
            if result.exit_code == Exit.REFUSED:
                if not rotation.taken_out:
                    rotation.after = rotation.before  # refused before the gateway was touched
                return
            serving = _serving(result, worker.swap)
            if serving is None:
                rotation.after = ABSENT if rotation.taken_out else rotation.before
                rotation.problem = rotation.problem or ("left out of rotation: nothing healthy "
                                                        "runs on the host")
                return
            if rotation.problem is not None:
                return  # the gateway failed before the stop: nothing more is asked of it
            try:
                self.put_back(
                    host,
                    worker,
                    self.url_at(host, serving.port),
                    api_key_for(session.remote, serving),
                )
            except GatewayError as exc:
                rotation.problem = str(exc)

        return hook

    def put_back(self, host: str, worker: _Worker, url: str, key: str | None) -> None:
        """Register the worker at `url` (its old registration, the server's key) and wait until the
        gateway routes to it (bounded)."""
        client, rotation, report = self.client(host), worker.rotation, self.report_for(host)
        timeout = self.front.add_timeouts[self.front.gateways[host]]
        deadline = time.monotonic() + timeout
        view = client.worker(url)
        # still letting it go: 409 on add
        while view.state == "draining" and time.monotonic() < deadline:
            time.sleep(POLL_S)
            view = client.worker(url)
        if not view.listed:
            report("step", step="gateway_add", worker=url)
            client.add(url, worker.registration, key)
            rotation.steps.append(GatewayStepKind.ADD.value)
            rotation.restored = worker.registration
            rotation.worker_api_key = key is not None
        while not view.routed and time.monotonic() < deadline:
            time.sleep(POLL_S)
            view = client.worker(url)
            report("waiting", what="gateway", detail=f"{url} {view.describe()}")
        rotation.worker_url = worker.current_url = url
        if rotation.removed_url and same_url(rotation.removed_url, url):
            rotation.removed_url = None  # back where it was
        rotation.after = view.state
        rotation.back = view.routed
        rotation.steps.append(GatewayStepKind.WAIT_ROUTED.value)
        if not view.routed:
            unkeyed = "" if key else ("; if its server takes an API key, give the profile "
                                      "[secrets] with api_key")
            rotation.problem = (f"gateway '{client.name}' did not route to {url} within "
                                f"{timeout:.0f} s (it is {view.state}{unkeyed})")

    def host_failed(self, host: str, result: ApplyResult) -> bool:
        """The host's apply failed, or its worker did not come back into rotation."""
        worker = self.workers.get(host)
        return result.exit_code != Exit.READY or (
            worker is not None and worker.rotation.problem is not None
        )

    def rotations_now(self) -> dict[str, RotationResult]:
        """Each fronted host's rotation record, with the gateway's view of its worker now."""
        out = {}
        for host, worker in self.workers.items():
            rotation = worker.rotation
            try:
                rotation.after = self.client(host).worker(rotation.worker_url).state
            except GatewayError as exc:
                rotation.after = "unknown"
                rotation.problem = rotation.problem or str(exc)
            out[host] = dataclasses.replace(rotation, steps=list(rotation.steps))  # a record of now
        return out


def _serving(result: ApplyResult, swap: Handover | None) -> Deployment | None:
    """The deployment that serves on the host after `result`: new, up to date, or restored."""
    if result.exit_code == Exit.READY:
        if swap is not None:
            return swap.deployment
        return result.plan.deployment if result.plan is not None else None
    if result.exit_code == Exit.ROLLED_BACK and swap is not None:
        return swap.previous
    return None


def run_drained(
    loaded: LoadedProfile,
    hosts: Sequence[FleetHost],
    options: ApplyOptions,
    front: Fronted,
    plan: RolloutPlan,
    report_for: Callable[[str], Reporter] | None = None,
) -> FleetResult:
    """Execute `plan`: batch by batch, stopping at the first host that fails or is not back in
    rotation."""
    by_name = {h.name: h for h in hosts}
    run = DrainedRollout(front, plan, report_for or (lambda _: (lambda *a, **k: None)))
    fleet = FleetResult(list(plan.order))

    def one(name: str) -> ApplyResult:
        host = by_name[name]
        return apply_profile(loaded, name, host.entry, host.target, run.options_for(name, options),
                             run.report_for(name))

    for batch in plan.batches:
        with ThreadPoolExecutor(max_workers=len(batch)) as pool:
            results = list(pool.map(one, batch))
        for name, result in zip(batch, results, strict=True):
            fleet.results[name] = result
        failed = [n for n, r in zip(batch, results, strict=True) if run.host_failed(n, r)]
        if failed:
            fleet.stopped_at = failed[0]
            break
    fleet.gateway = run.rotations_now()
    return fleet


def run_drained_multinode(
    loaded: LoadedProfile,
    hosts: Sequence[FleetHost],
    options: ApplyOptions,
    front: Fronted,
    plan: RolloutPlan,
    report_for: Callable[[str], Reporter] | None = None,
) -> FleetResult:
    """A multi-node launch behind a gateway: rank 0's worker drained before any node stops, put
    back once every node is ready (or restored)."""
    run = DrainedRollout(front, plan, report_for or (lambda _: (lambda *a, **k: None)))
    rank0 = hosts[0].name
    fleet = multinode.apply_multinode(
        loaded, hosts, run.options_for(rank0, options), report_for=run.report_for
    )
    first = fleet.results.get(rank0)
    if fleet.stopped_at is None and first is not None and run.host_failed(rank0, first):
        fleet.stopped_at = rank0
    fleet.gateway = run.rotations_now()
    return fleet


class DrainedRollback(NamedTuple):
    """A rollback behind a gateway: its result, and its worker's rotation record."""

    result: ApplyResult
    rotation: RotationResult


def rollback_drained(name: str, entry: HostEntry, unit: str, to: str | None, options: ApplyOptions,
                     prepared: PreparedRollout, report: Reporter) -> DrainedRollback:
    """`sgdeploy rollback` of a host behind a gateway: drained before the stop, registered again
    as it was for the restored server once it is ready."""
    run = DrainedRollout(prepared.front, prepared.plan, lambda _: report)
    result = rollback_unit(name, entry, unit, to, run.options_for(name, options), report)
    return DrainedRollback(result, run.rotations_now()[name])
