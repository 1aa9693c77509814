"""The gateway client over a fake transport, the inventory's gateways, and the drained rollout's
decisions and executor (the hosts' transaction replaced at its seam)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sgdeploy import drained
from sgdeploy.apply import ApplyOptions, ApplyResult, Exit
from sgdeploy.drained import DrainSettings, GatewayStepKind, may_take_out, parse_in_flight, plan_rollout
from sgdeploy.fleet import FleetHost
from sgdeploy.gateway import (
    ABSENT,
    GatewayClient,
    GatewayError,
    GatewayRefused,
    GatewayUnreachable,
    Reply,
    WorkerView,
    api_key,
)
from sgdeploy.inventory import GatewayEntry, HostTarget, load_inventory, worker_url
from sgdeploy.profile import load_profile


class FakeGateway:
    """smg's worker API as it behaves: DELETE drains for a few looks, POST is pending for one."""

    def __init__(self, urls: list[str], key: str | None = None) -> None:
        self.workers = {u: {"id": f"id-{i}", "url": u, "status": "ready", "load": 0, "model_id": "m"}
                        for i, u in enumerate(urls)}
        self.key = key
        self.calls: list[tuple[str, str]] = []
        self.draining: dict[str, int] = {}
        self.down = False

    def __call__(self, method: str, url: str, headers: dict[str, str], body: bytes | None, timeout: float) -> Reply:
        if self.down:
            raise ConnectionRefusedError(111, "Connection refused")
        path = url.split("://", 1)[1].partition("/")[2]
        self.calls.append((method, "/" + path))
        if self.key and headers.get("Authorization") != f"Bearer {self.key}":
            return Reply(401, b'{"error": "unauthorized"}')
        if method == "GET":
            self._tick()
            return Reply(200, json.dumps({"workers": list(self.workers.values()), "total": len(self.workers)}).encode())
        if method == "DELETE":
            wid = path.rsplit("/", 1)[1]
            for u, w in self.workers.items():
                if w["id"] == wid:
                    w["status"] = "draining"
                    self.draining[u] = 2
                    return Reply(202, b'{"status": "accepted"}')
            return Reply(404, b'{"error": "not found"}')
        if method == "POST":
            u = json.loads(body or b"{}")["url"]
            if u in self.workers:
                return Reply(409, b'{"error": "exists"}')
            self.workers[u] = {"id": f"id-{u}", "url": u, "status": "pending", "load": 0, "model_id": "m"}
            return Reply(202, b'{"status": "accepted"}')
        return Reply(405, b"")

    def _tick(self) -> None:
        for u in list(self.draining):
            self.draining[u] -= 1
            if self.draining[u] < 0:
                del self.workers[u], self.draining[u]
        for w in self.workers.values():
            if w["status"] == "pending":
                w["status"] = "ready"


URLS = ["http://10.0.0.1:30000", "http://10.0.0.2:30000", "http://10.0.0.3:30000"]


# --------------------------------------------------------------------------- the client
def test_client_lists_removes_and_adds_with_the_key() -> None:
    fake = FakeGateway(URLS, key="k")
    client = GatewayClient("front", "http://gw:8080/", "k", transport=fake)
    views = client.workers()
    assert [v.state for v in views] == ["ready"] * 3 and views[0].worker_id == "id-0"
    client.remove(client.worker(URLS[0] + "/"))  # a trailing slash is the same worker
    assert client.worker(URLS[0]).state == "draining"
    client.add(URLS[1])  # listed already: 409 is fine
    assert ("DELETE", "/workers/id-0") in fake.calls


def test_client_errors_say_what_to_fix() -> None:
    fake = FakeGateway(URLS, key="k")
    with pytest.raises(GatewayRefused, match="API key"):
        GatewayClient("front", "http://gw:8080", "wrong", transport=fake).workers()
    fake.down = True
    with pytest.raises(GatewayUnreachable, match="does not answer"):
        GatewayClient("front", "http://gw:8080", "k", transport=fake).workers()
    not_smg = GatewayClient("front", "http://gw:8080", transport=lambda *a: Reply(200, b"<html>"))
    with pytest.raises(GatewayRefused, match="smg gateway"):
        not_smg.workers()


def test_api_key_comes_from_the_environment_or_a_file(tmp_path: Path) -> None:
    assert api_key("f", GatewayEntry(url="http://g:1", api_key_env="K"), {"K": " s3cret\n"}) == "s3cret"
    with pytest.raises(GatewayError, match=r"K \(api_key_env\) is not set"):
        api_key("f", GatewayEntry(url="http://g:1", api_key_env="K"), {})
    key = tmp_path / "key"
    key.write_text("from-file\n")
    assert api_key("f", GatewayEntry(url="http://g:1", api_key_file=str(key))) == "from-file"
    with pytest.raises(GatewayError, match="cannot read"):
        api_key("f", GatewayEntry(url="http://g:1", api_key_file=str(tmp_path / "missing")))
    assert api_key("f", GatewayEntry(url="http://g:1")) is None


# --------------------------------------------------------------------------- the inventory
INVENTORY = """[hosts.a]
address = "10.0.0.1"
[hosts.b]
address = "10.0.0.2"
worker_url = "http://b.lan:31000/"
[groups]
both = ["a", "b"]
"""


def inventory_with(tmp_path: Path, extra: str) -> Any:
    path = tmp_path / "inventory.toml"
    path.write_text(INVENTORY + extra)
    return load_inventory(path)


def test_gateways_front_hosts_and_groups(tmp_path: Path) -> None:
    doc = inventory_with(tmp_path, '[gateways.front]\nurl = "http://g:8080"\napi_key_file = "k"\nhosts = ["both"]\n')
    assert not doc.diagnostics
    inv = doc.model
    assert inv.gateway_of("a") == "front" and inv.gateway_of("b") == "front"
    assert inv.gateways["front"].api_key_file == str(tmp_path / "k")
    assert worker_url(inv.hosts["a"], 30000) == "http://10.0.0.1:30000"
    assert worker_url(inv.hosts["b"], 30000) == "http://b.lan:31000"


@pytest.mark.parametrize(("extra", "line", "says"), [
    ('[gateways.front]\nurl = "http://g:8080"\napi_key = "s3cret"\n', 10, "never written in the inventory"),
    ('[gateways.front]\nurl = "http://g:8080"\nhosts = ["nope"]\n', 10, "neither a host nor a group"),
    ('[gateways.f]\nurl = "http://g:1"\nhosts = ["a"]\n[gateways.g]\nurl = "http://g:2"\nhosts = ["both"]\n',
     13, "fronted by gateway 'f' already"),
    ('[gateways.front]\nurl = "g:8080"\n', 9, "url"),
])
def test_bad_gateways_are_located(tmp_path: Path, extra: str, line: int, says: str) -> None:
    doc = inventory_with(tmp_path, extra)
    assert doc.model is None
    assert any(says in d.message and d.line == line for d in doc.diagnostics), [
        (d.line, d.message) for d in doc.diagnostics]


def test_a_host_naming_an_unknown_gateway_is_located(tmp_path: Path) -> None:
    path = tmp_path / "inventory.toml"
    path.write_text(INVENTORY.replace('address = "10.0.0.1"\n', 'address = "10.0.0.1"\ngateway = "gw"\n'))
    doc = load_inventory(path)
    assert [(d.line, d.field) for d in doc.diagnostics] == [(3, "hosts.a.gateway")]
    assert "no gateway 'gw'" in doc.diagnostics[0].message


# --------------------------------------------------------------------------- decisions
def views(*states: str) -> list[WorkerView]:
    return [WorkerView(u, s, f"id-{i}", 0, "m") for i, (u, s) in enumerate(zip(URLS, states, strict=False))]


def test_the_last_routed_worker_is_never_taken_out() -> None:
    assert may_take_out(URLS[0], views("ready", "ready", "ready"), URLS, 1) is None
    assert "last worker" in (may_take_out(URLS[0], views("ready", "draining", ABSENT), URLS[:1], 3) or "")
    assert may_take_out(URLS[0], views(ABSENT, "ready"), URLS, 1) is None  # out already: costs nothing


def test_max_unavailable_counts_the_rollouts_workers_out_already() -> None:
    refusal = may_take_out(URLS[0], views("ready", "draining", "ready"), URLS, 1)
    assert refusal and "--max-unavailable 1" in refusal and URLS[1] in refusal
    assert may_take_out(URLS[0], views("ready", "draining", "ready"), URLS, 2) is None


def fleet_hosts(tmp_path: Path) -> list[FleetHost]:
    inv = inventory_with(tmp_path, '[hosts.c]\naddress = "10.0.0.3"\n').model
    return [FleetHost(n, inv.hosts[n], HostTarget(n)) for n in ("a", "b", "c")]


def test_plan_puts_workers_out_of_rotation_first_and_batches_by_max_unavailable(tmp_path: Path) -> None:
    hosts = fleet_hosts(tmp_path)
    urls = dict(zip("abc", URLS, strict=True))
    plan = plan_rollout(hosts, urls, dict.fromkeys("abc", "front"), {"front": views("ready", ABSENT, "ready")},
                        {"front": 120.0}, max_unavailable=2, parallel=3)
    assert plan.order == ("b", "a", "c")
    assert plan.batches == (("b",), ("a", "c"))
    assert plan.rotations["b"].steps[0].kind == GatewayStepKind.DEPLOY  # absent: nothing to remove
    assert [s.kind for s in plan.rotations["a"].steps][:2] == [GatewayStepKind.REMOVE, GatewayStepKind.WAIT_DRAINED]
    assert plan_rollout(hosts, urls, dict.fromkeys("abc", "front"), {"front": views("ready", "ready", "ready")},
                        {"front": 1.0}, max_unavailable=1, parallel=3).batches == (("a",), ("b",), ("c",))


def test_in_flight_from_both_load_endpoints() -> None:
    v1 = {"loads": [{"dp_rank": 0, "num_running_reqs": 2, "num_waiting_reqs": 1}, {"num_running_reqs": 1}]}
    assert parse_in_flight(json.dumps(v1).encode()) == 4
    assert parse_in_flight(json.dumps([{"dp_rank": 0, "num_reqs": 3}]).encode()) == 3
    assert parse_in_flight(b"<html>") is None


# --------------------------------------------------------------------------- the executor
PROFILE = """[deploy]
host = "all"
unit = "sglang"
python = "/root/ml-env/bin/python3"

[server]
model_path = "/m"
port = 30000
"""


class Hosts:
    """The hosts' transaction at its seam: each host's outcome, and the drain hook called as apply does."""

    def __init__(self, outcome: dict[str, Exit], fake: FakeGateway, lose_gateway_after: str | None = None) -> None:
        self.outcome, self.fake, self.lose = outcome, fake, lose_gateway_after
        self.order: list[str] = []

    def __call__(self, loaded: Any, name: str, entry: Any, target: Any, options: ApplyOptions, report: Any
                 ) -> ApplyResult:
        self.order.append(name)
        assert options.before_stop is not None
        refusal = options.before_stop(None, None)  # type: ignore[arg-type]
        if refusal:
            return ApplyResult(Exit.REFUSED, "refused", name, "sglang", refusal)
        if self.lose == name:
            self.fake.down = True
        code = self.outcome.get(name, Exit.READY)
        status = {Exit.READY: "ready", Exit.ROLLED_BACK: "rolled_back", Exit.NOTHING_HEALTHY: "failed"}[code]
        return ApplyResult(code, status, name, "sglang", status)


def run(tmp_path: Path, mocker: Any, fake: FakeGateway, hosts_double: Hosts, max_unavailable: int = 1,
        names: tuple[str, ...] = ("a", "b", "c")) -> Any:
    mocker.patch.object(drained, "apply_profile", hosts_double)
    mocker.patch.object(drained, "worker_in_flight", lambda session, deployment: 0)
    mocker.patch.object(drained, "POLL_S", 0.0)
    profile = tmp_path / "p.toml"
    profile.write_text(PROFILE)
    loaded = load_profile(profile)
    inv = inventory_with(tmp_path, '[hosts.c]\naddress = "10.0.0.3"\n'
                         '[gateways.front]\nurl = "http://gw:1"\nhosts = ["a", "b", "c"]\n').model
    hosts = [FleetHost(n, inv.hosts[n], HostTarget(n)) for n in names]
    client = lambda name, entry: GatewayClient(name, entry.url, transport=fake)  # noqa: E731
    front, plan = drained.prepare(loaded, hosts, inv, DrainSettings(max_unavailable), client=client)
    return drained.run_drained(loaded, hosts, ApplyOptions(), front, plan)


def test_each_worker_is_drained_then_put_back(tmp_path: Path, mocker: Any) -> None:
    fake = FakeGateway(["http://10.0.0.1:30000", "http://b.lan:31000", "http://10.0.0.3:30000"])
    fleet = run(tmp_path, mocker, fake, Hosts({}, fake))
    assert fleet.exit_code == 0 and fleet.stopped_at is None
    for host in "abc":
        g = fleet.gateway[host]
        assert g["taken_out"] and g["back"] and g["after"] == "ready"
        assert g["steps"] == ["gateway_remove", "wait_drained", "gateway_add", "wait_routed"]


def test_a_rolled_back_host_is_put_back_and_the_rollout_stops(tmp_path: Path, mocker: Any) -> None:
    fake = FakeGateway(["http://10.0.0.1:30000", "http://b.lan:31000", "http://10.0.0.3:30000"])
    double = Hosts({"b": Exit.ROLLED_BACK}, fake)
    fleet = run(tmp_path, mocker, fake, double)
    assert fleet.exit_code == 1 and fleet.stopped_at == "b" and double.order == ["a", "b"]
    assert fleet.gateway["b"]["back"] and fleet.gateway["c"]["after"] == "ready"
    assert not fleet.gateway["c"]["taken_out"]


def test_a_host_left_with_nothing_healthy_stays_out(tmp_path: Path, mocker: Any) -> None:
    fake = FakeGateway(["http://10.0.0.1:30000", "http://b.lan:31000", "http://10.0.0.3:30000"])
    fleet = run(tmp_path, mocker, fake, Hosts({"a": Exit.NOTHING_HEALTHY}, fake))
    assert fleet.exit_code == 3 and fleet.stopped_at == "a"
    assert fleet.gateway["a"]["after"] in (ABSENT, "draining") and "nothing healthy" in fleet.gateway["a"]["problem"]


def test_the_gateway_lost_after_a_host_stops_the_rollout_and_says_so(tmp_path: Path, mocker: Any) -> None:
    fake = FakeGateway(["http://10.0.0.1:30000", "http://b.lan:31000", "http://10.0.0.3:30000"])
    fleet = run(tmp_path, mocker, fake, Hosts({}, fake, lose_gateway_after="a"))
    assert fleet.exit_code == 1 and fleet.stopped_at == "a"
    assert all(g["after"] == "unknown" and "does not answer" in g["problem"] for g in fleet.gateway.values())
    assert fleet.rows()[1]["status"] == "not started"


def test_workers_out_of_rotation_go_first_and_are_added(tmp_path: Path, mocker: Any) -> None:
    fake = FakeGateway(["http://10.0.0.1:30000"])  # b and c are not listed
    double = Hosts({}, fake)
    fleet = run(tmp_path, mocker, fake, double)
    assert double.order == ["b", "c", "a"]
    assert fleet.exit_code == 0 and fleet.gateway["a"]["taken_out"] and not fleet.gateway["b"]["taken_out"]
    assert all(g["after"] == "ready" for g in fleet.gateway.values())


def test_the_last_worker_is_refused_before_its_server_stops(tmp_path: Path, mocker: Any) -> None:
    fake = FakeGateway(["http://10.0.0.1:30000"])
    fleet = run(tmp_path, mocker, fake, Hosts({}, fake), names=("a",))
    assert fleet.exit_code == 2 and fleet.stopped_at == "a"
    assert "last worker" in fleet.results["a"].message and "nothing was stopped" in fleet.results["a"].message
    assert fleet.gateway["a"]["after"] == "ready" and not fleet.gateway["a"]["taken_out"]
    assert not any(method == "DELETE" for method, _ in fake.calls)
