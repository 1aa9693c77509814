"""The gateway client over a fake transport, the inventory's gateways, and the drained rollout's
decisions and executor (the hosts' transaction replaced at its seam)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sgdeploy.deploy import drained
from sgdeploy.deploy.drained import (
    DrainSettings,
    GatewayStepKind,
    may_take_out,
    parse_in_flight,
    plan_rollout,
)
from sgdeploy.deploy.fleet import FleetHost
from sgdeploy.deploy.gateway import (
    ABSENT,
    GatewayClient,
    GatewayError,
    GatewayRefused,
    GatewayUnreachable,
    Reply,
    WorkerView,
    api_key,
    registration,
    server_labels,
)
from sgdeploy.deploy.plan import Deployment
from sgdeploy.deploy.prestop import Handover
from sgdeploy.deploy.transaction import ApplyOptions, ApplyResult, Exit
from sgdeploy.profile.inventory import GatewayEntry, load_inventory, worker_url
from sgdeploy.profile.model import load_profile
from sgdeploy.sglang.target import HostTarget


class FakeGateway:
    """smg's worker API as it behaves: DELETE drains for a few looks, POST is pending for one."""

    def __init__(self, urls: list[str], key: str | None = None, operator: dict[str, Any] | None = None) -> None:
        self.workers = {u: self.listed(f"id-{i}", {**(operator or {}), "url": u}, "ready") for i, u in enumerate(urls)}
        self.key = key
        self.calls: list[tuple[str, str]] = []
        self.posted: list[dict[str, Any]] = []
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
            posted = json.loads(body or b"{}")
            self.posted.append(posted)
            if posted["url"] in self.workers:
                return Reply(409, b'{"error": "exists"}')
            self.workers[posted["url"]] = self.listed(f"id-{posted['url']}", posted, "pending")
            return Reply(202, b'{"status": "accepted"}')
        return Reply(405, b"")

    @staticmethod
    def listed(wid: str, posted: dict[str, Any], status: str) -> dict[str, Any]:
        """A worker as smg lists it: the registration, the labels and card it found itself, its state."""
        spec = {k: v for k, v in posted.items() if k != "api_key"}
        labels = {"served_model_name": "m", "version": "0.5.11", "tp_size": "1", **spec.get("labels", {})}
        return {"priority": 50, "cost": 1.0, "models": [{"id": "m", "context_length": 40960}], **spec,
                "labels": labels, "id": wid, "model_id": "m", "status": status, "is_healthy": status == "ready",
                "load": 0, "http2": False}

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
    plan = plan_rollout(hosts, _front(urls, 120.0), {"front": views("ready", ABSENT, "ready")},
                        max_unavailable=2, parallel=3)
    assert plan.order == ("b", "a", "c")
    assert plan.batches == (("b",), ("a", "c"))
    assert plan.rotations["b"].steps[0].kind == GatewayStepKind.DEPLOY  # absent: nothing to remove
    assert [s.kind for s in plan.rotations["a"].steps][:2] == [GatewayStepKind.REMOVE, GatewayStepKind.WAIT_DRAINED]
    assert plan_rollout(hosts, _front(urls, 1.0), {"front": views("ready", "ready", "ready")},
                        max_unavailable=1, parallel=3).batches == (("a",), ("b",), ("c",))


def _front(urls: dict[str, str], drain_timeout_s: float) -> drained.Fronted:
    """Hosts a, b, c behind gateway 'front', no client needed: what plan_rollout reads."""
    return drained.Fronted({}, dict.fromkeys("abc", "front"), urls, {}, {"front": drain_timeout_s}, {}, {})


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


def deployment(port: int = 30000, text: str = "") -> Deployment:
    return Deployment(id=f"d{port}", unit="sglang", unit_text="", profile_name="p", profile_sha256="",
                      profile_text=text, sglang_version="0.5.11", server={"port": port}, gpus=(0,), ready_timeout_s=60)


class Hosts:
    """The hosts' transaction at its seam: each host's outcome, the drain hook called before the
    stop and the put-back hook after the result, as apply calls them."""

    def __init__(self, outcome: dict[str, Exit], fake: FakeGateway, lose_gateway_after: str | None = None,
                 port: int = 30000, running_port: int = 30000) -> None:
        self.outcome, self.fake, self.lose = outcome, fake, lose_gateway_after
        self.port, self.running_port = port, running_port
        self.order: list[str] = []

    def __call__(self, loaded: Any, name: str, entry: Any, target: Any, options: ApplyOptions, report: Any
                 ) -> ApplyResult:
        self.order.append(name)
        assert options.before_stop is not None and options.after_host is not None
        swap = Handover(deployment(self.port), deployment(self.running_port), self.running_port)
        refusal = options.before_stop(SESSION, swap)
        if refusal:
            result = ApplyResult(Exit.REFUSED, "refused", name, "sglang", f"{refusal}; nothing was stopped")
        else:
            if self.lose == name:
                self.fake.down = True
            code = self.outcome.get(name, Exit.READY)
            status = {Exit.READY: "ready", Exit.ROLLED_BACK: "rolled_back", Exit.NOTHING_HEALTHY: "failed"}[code]
            result = ApplyResult(code, status, name, "sglang", status)
        options.after_host(SESSION, result)
        return result


SESSION: Any = SimpleNamespace(remote=None)  # the hooks' host session: its calls are replaced below
SAID = {"served_model_name": "m", "version": "0.5.11", "tp_size": "1"}  # what the servers answer


def run(tmp_path: Path, mocker: Any, fake: FakeGateway, hosts_double: Hosts, max_unavailable: int = 1,
        names: tuple[str, ...] = ("a", "b", "c"), settings: DrainSettings | None = None,
        gateway_hosts: str = '"a", "b", "c"', in_flight: int = 0, port: int = 30000) -> Any:
    mocker.patch.object(drained, "apply_profile", hosts_double)
    mocker.patch.object(drained, "worker_in_flight", lambda session, port, keyed: in_flight)
    mocker.patch.object(drained, "server_said", lambda session, port, keyed: dict(SAID))
    mocker.patch.object(drained, "api_key_for", lambda remote, deployment: None)
    mocker.patch.object(drained, "POLL_S", 0.0)
    profile = tmp_path / "p.toml"
    profile.write_text(PROFILE.replace("port = 30000", f"port = {port}"))
    loaded = load_profile(profile)
    inv = inventory_with(tmp_path, '[hosts.c]\naddress = "10.0.0.3"\n'
                         f'[gateways.front]\nurl = "http://gw:1"\nhosts = [{gateway_hosts}]\n').model
    hosts = [FleetHost(n, inv.hosts[n], HostTarget(n)) for n in names]
    client = lambda name, entry: GatewayClient(name, entry.url, transport=fake)  # noqa: E731
    front, plan = drained.prepare(loaded, hosts, inv, settings or DrainSettings(max_unavailable), client=client)
    return drained.run_drained(loaded, hosts, ApplyOptions(), front, plan)


def test_each_worker_is_drained_then_put_back(tmp_path: Path, mocker: Any) -> None:
    fake = FakeGateway(["http://10.0.0.1:30000", "http://b.lan:31000", "http://10.0.0.3:30000"])
    fleet = run(tmp_path, mocker, fake, Hosts({}, fake))
    assert fleet.exit_code == 0 and fleet.stopped_at is None
    for host in "abc":
        g = fleet.gateway[host]
        assert g.taken_out and g.back and g.after == "ready"
        assert g.steps == ["gateway_remove", "wait_drained", "gateway_add", "wait_routed"]
    document = json.loads(json.dumps(fleet.as_dict()))  # the records' JSON: made by RotationResult.as_dict
    assert [row["gateway"] for row in document["hosts"]] == [document["gateway"][h] for h in "abc"]
    assert document["gateway"]["a"] == dataclasses.asdict(fleet.gateway["a"])


def test_a_rolled_back_host_is_put_back_and_the_rollout_stops(tmp_path: Path, mocker: Any) -> None:
    fake = FakeGateway(["http://10.0.0.1:30000", "http://b.lan:31000", "http://10.0.0.3:30000"])
    double = Hosts({"b": Exit.ROLLED_BACK}, fake)
    fleet = run(tmp_path, mocker, fake, double)
    assert fleet.exit_code == 1 and fleet.stopped_at == "b" and double.order == ["a", "b"]
    assert fleet.gateway["b"].back and fleet.gateway["c"].after == "ready"
    assert not fleet.gateway["c"].taken_out


def test_a_host_left_with_nothing_healthy_stays_out(tmp_path: Path, mocker: Any) -> None:
    fake = FakeGateway(["http://10.0.0.1:30000", "http://b.lan:31000", "http://10.0.0.3:30000"])
    fleet = run(tmp_path, mocker, fake, Hosts({"a": Exit.NOTHING_HEALTHY}, fake))
    assert fleet.exit_code == 3 and fleet.stopped_at == "a"
    assert fleet.gateway["a"].after in (ABSENT, "draining") and "nothing healthy" in fleet.gateway["a"].problem


def test_the_gateway_lost_after_a_host_stops_the_rollout_and_says_so(tmp_path: Path, mocker: Any) -> None:
    fake = FakeGateway(["http://10.0.0.1:30000", "http://b.lan:31000", "http://10.0.0.3:30000"])
    fleet = run(tmp_path, mocker, fake, Hosts({}, fake, lose_gateway_after="a"))
    assert fleet.exit_code == 1 and fleet.stopped_at == "a"
    assert all(g.after == "unknown" and "does not answer" in g.problem for g in fleet.gateway.values())
    assert fleet.rows()[1]["status"] == "not started"


def test_workers_out_of_rotation_go_first_and_are_added(tmp_path: Path, mocker: Any) -> None:
    fake = FakeGateway(["http://10.0.0.1:30000"])  # b and c are not listed
    double = Hosts({}, fake)
    fleet = run(tmp_path, mocker, fake, double)
    assert double.order == ["b", "c", "a"]
    assert fleet.exit_code == 0 and fleet.gateway["a"].taken_out and not fleet.gateway["b"].taken_out
    assert all(g.after == "ready" for g in fleet.gateway.values())


def test_the_last_worker_is_refused_before_its_server_stops(tmp_path: Path, mocker: Any) -> None:
    fake = FakeGateway(["http://10.0.0.1:30000"])
    fleet = run(tmp_path, mocker, fake, Hosts({}, fake), names=("a",))
    assert fleet.exit_code == 2 and fleet.stopped_at == "a"
    assert "last worker" in fleet.results["a"].message and "nothing was stopped" in fleet.results["a"].message
    assert fleet.gateway["a"].after == "ready" and not fleet.gateway["a"].taken_out
    assert not any(method == "DELETE" for method, _ in fake.calls)


# --------------------------------------------------------------------------- registrations
OPERATOR = {"priority": 70, "cost": 2.5, "labels": {"zone": "a", "version": "pinned"},
            "health": {"drain_settle_secs": 1}}


def test_the_operators_registration_is_told_from_what_the_gateway_found() -> None:
    listed = FakeGateway.listed("id-1", {"url": URLS[0], **OPERATOR}, "ready")
    view = WorkerView(URLS[0], "ready", "id-1", 0, "m", spec=listed)
    mine = registration(view, dict(SAID))
    # the label the server said is the gateway's; one it did not say, or said otherwise, the operator's
    assert mine == {"priority": 70, "cost": 2.5, "health": {"drain_settle_secs": 1},
                    "labels": {"zone": "a", "version": "pinned"}}
    assert "models" not in mine  # the card of the model the server serves: made again from the new server
    alias = WorkerView(URLS[0], "ready", "id-1", 0, "x", spec={**listed, "models": [{"id": "alias-x"}]})
    assert registration(alias, dict(SAID))["models"] == [{"id": "alias-x"}]
    # the server not asked: labels of the keys smg discovers are its own
    assert registration(view, None)["labels"] == {"zone": "a"}


def test_server_answers_become_labels_as_smg_makes_them() -> None:
    info = {"tp_size": 2, "dp_size": 0, "version": "0.5.11", "enable_dp_attention": False, "mem_fraction_static": 0.88,
            "served_model_name": "", "architectures": ["Qwen3ForCausalLM"], "extra": None}
    assert server_labels(info) == {"tp_size": "2", "version": "0.5.11", "enable_dp_attention": "false",
                                   "mem_fraction_static": "0.88", "architectures": '["Qwen3ForCausalLM"]'}


def test_a_port_change_drains_the_running_url_and_registers_the_new_one_as_it_was(tmp_path: Path, mocker: Any
                                                                                 ) -> None:
    old = ["http://10.0.0.1:30000", "http://b.lan:31000", "http://10.0.0.3:30000"]
    fake = FakeGateway(old, operator=OPERATOR)
    fleet = run(tmp_path, mocker, fake, Hosts({}, fake, port=30001), names=("a", "c"), port=30001)
    assert fleet.exit_code == 0, fleet.gateway
    a = fleet.gateway["a"]
    assert a.removed_url == "http://10.0.0.1:30000" and a.worker_url == "http://10.0.0.1:30001"
    assert a.after == "ready" and a.restored == OPERATOR
    posted = {p["url"]: p for p in fake.posted}
    assert set(posted) == {"http://10.0.0.1:30001", "http://10.0.0.3:30001"}
    assert posted["http://10.0.0.1:30001"] == {**OPERATOR, "url": "http://10.0.0.1:30001"}
    assert "http://10.0.0.1:30000" not in fake.workers or fake.workers["http://10.0.0.1:30000"]["status"] == "draining"


def test_the_drain_timeout_puts_the_worker_back_and_refuses_the_host(tmp_path: Path, mocker: Any) -> None:
    fake = FakeGateway(["http://10.0.0.1:30000", "http://b.lan:31000", "http://10.0.0.3:30000"], operator=OPERATOR)
    double = Hosts({}, fake)
    fleet = run(tmp_path, mocker, fake, double, settings=DrainSettings(drain_timeout_s=0.0), in_flight=3)
    assert fleet.exit_code == 2 and fleet.stopped_at == "a" and double.order == ["a"]
    message = fleet.results["a"].message
    assert "3 request(s) running after the drain timeout" in message and "put back in rotation" in message
    assert "nothing was stopped" in message
    a = fleet.gateway["a"]
    assert a.taken_out and a.back and a.after == "ready" and a.problem is None
    assert fake.posted == [{**OPERATOR, "url": "http://10.0.0.1:30000"}]


def test_the_drain_timeout_stops_anyway_when_told_to(tmp_path: Path, mocker: Any) -> None:
    fake = FakeGateway(["http://10.0.0.1:30000", "http://b.lan:31000", "http://10.0.0.3:30000"])
    settings = DrainSettings(drain_timeout_s=0.0, on_drain_timeout="stop")
    fleet = run(tmp_path, mocker, fake, Hosts({}, fake), settings=settings, in_flight=3)
    assert fleet.exit_code == 0
    assert all(g.in_flight_left == 3 and g.after == "ready" for g in fleet.gateway.values())


def test_hosts_without_a_gateway_are_restarted_plainly(tmp_path: Path, mocker: Any) -> None:
    fake = FakeGateway(["http://10.0.0.1:30000", "http://b.lan:31000"])
    plain: list[str] = []

    def double(loaded: Any, name: str, entry: Any, target: Any, options: ApplyOptions, report: Any) -> ApplyResult:
        if name == "c":
            assert options.before_stop is None and options.after_host is None
            plain.append(name)
            return ApplyResult(Exit.READY, "ready", name, "sglang", "ready")
        return Hosts({}, fake)(loaded, name, entry, target, options, report)

    fleet = run(tmp_path, mocker, fake, double, gateway_hosts='"a", "b"')  # type: ignore[arg-type]
    assert fleet.exit_code == 0 and plain == ["c"]
    assert set(fleet.gateway) == {"a", "b"} and fleet.rows()[2]["gateway"] is None


def test_a_host_the_gateway_routes_to_but_the_inventory_does_not_put_behind_it_is_refused(
        tmp_path: Path, mocker: Any) -> None:
    fake = FakeGateway(["http://10.0.0.1:30000", "http://b.lan:31000", "http://10.0.0.3:30000"])
    with pytest.raises(GatewayError, match=r"c \(gateway 'front' lists http://10.0.0.3:30000\).*no gateway"):
        run(tmp_path, mocker, fake, Hosts({}, fake), gateway_hosts='"a", "b"')
    assert not any(method in ("DELETE", "POST") for method, _ in fake.calls)


def test_a_rollback_behind_the_gateway_is_drained_and_put_back(tmp_path: Path, mocker: Any) -> None:
    fake = FakeGateway(["http://10.0.0.1:30000", "http://b.lan:31000"], operator=OPERATOR)
    mocker.patch.object(drained, "server_said", lambda session, port, keyed: dict(SAID))
    mocker.patch.object(drained, "worker_in_flight", lambda session, port, keyed: 0)
    mocker.patch.object(drained, "api_key_for", lambda remote, deployment: "worker-key")
    mocker.patch.object(drained, "POLL_S", 0.0)

    def rollback(name: str, entry: Any, unit: str, to: Any, options: ApplyOptions, report: Any) -> ApplyResult:
        assert options.before_stop is not None and options.after_host is not None
        assert options.before_stop(SESSION, Handover(deployment(30002), None, 30000)) is None
        assert fake.workers["http://10.0.0.1:30000"]["status"] == "draining"  # drained before the stop
        result = ApplyResult(Exit.READY, "ready", name, unit, "rolled back")
        options.after_host(SESSION, result)
        return result

    mocker.patch.object(drained, "rollback_unit", rollback)
    inv = inventory_with(tmp_path, '[gateways.front]\nurl = "http://gw:1"\nhosts = ["both"]\n').model
    client = lambda name, entry: GatewayClient(name, entry.url, transport=fake)  # noqa: E731
    host = FleetHost("a", inv.hosts["a"], HostTarget("a"))
    prepared = drained.prepare_rollback(inv, host, DrainSettings(), client=client)
    assert prepared is not None and prepared.plan.rotations["a"].before.url == "http://10.0.0.1:30000"
    result, rotation = drained.rollback_drained("a", inv.hosts["a"], "sglang", None, ApplyOptions(), prepared,
                                                report=lambda *a, **k: None)
    assert result.exit_code == 0 and rotation.back and rotation.worker_url == "http://10.0.0.1:30002"
    assert fake.posted == [{**OPERATOR, "url": "http://10.0.0.1:30002", "api_key": "worker-key"}]
    assert rotation.worker_api_key and "worker-key" not in json.dumps(rotation.as_dict())


def test_a_multinode_launch_behind_the_gateway_drains_rank_0(tmp_path: Path, mocker: Any) -> None:
    from sgdeploy.deploy import multinode
    from sgdeploy.deploy.fleet import FleetResult

    fake = FakeGateway(["http://10.0.0.1:30000", "http://10.0.0.3:30000"])
    mocker.patch.object(drained, "server_said", lambda session, port, keyed: dict(SAID))
    mocker.patch.object(drained, "worker_in_flight", lambda session, port, keyed: 0)
    mocker.patch.object(drained, "api_key_for", lambda remote, deployment: None)
    mocker.patch.object(drained, "POLL_S", 0.0)

    def launch(loaded: Any, hosts: Any, options: ApplyOptions, report_for: Any = None) -> FleetResult:
        fleet = FleetResult([h.name for h in hosts])
        assert options.before_stop is not None and options.after_host is not None
        assert options.before_stop(SESSION, Handover(deployment(), deployment(), 30000)) is None
        for h in hosts:
            fleet.results[h.name] = ApplyResult(Exit.READY, "ready", h.name, "sglang", "ready")
        options.after_host(SESSION, fleet.results[hosts[0].name])
        return fleet

    mocker.patch.object(multinode, "apply_multinode", launch)
    profile = tmp_path / "p.toml"
    profile.write_text(PROFILE.replace("port = 30000", "port = 30000\nnnodes = 2\ntp_size = 2"))
    loaded = load_profile(profile)
    inv = inventory_with(tmp_path, '[hosts.c]\naddress = "10.0.0.3"\n'
                         '[gateways.front]\nurl = "http://gw:1"\nhosts = ["a", "c"]\n').model
    hosts = [FleetHost(n, inv.hosts[n], HostTarget(n)) for n in ("a", "b")]
    client = lambda name, entry: GatewayClient(name, entry.url, transport=fake)  # noqa: E731
    front, plan = drained.prepare(loaded, hosts, inv, DrainSettings(), client=client)
    assert plan.order == ("a", "b") and set(plan.rotations) == {"a"}  # rank 0 alone is a worker
    fleet = drained.run_drained_multinode(loaded, hosts, ApplyOptions(), front, plan)
    assert fleet.exit_code == 0 and set(fleet.gateway) == {"a"}
    assert fleet.gateway["a"].taken_out and fleet.gateway["a"].after == "ready"


def test_a_worker_draining_already_is_not_removed_twice(tmp_path: Path, mocker: Any) -> None:
    """An interrupted rollout's removal still under way: a second DELETE would remove the worker
    once it is registered again (smg removes by URL after its settle time)."""
    fake = FakeGateway(["http://10.0.0.1:30000", "http://b.lan:31000", "http://10.0.0.3:30000"], operator=OPERATOR)
    fake.workers["http://10.0.0.1:30000"]["status"] = "draining"
    fake.draining["http://10.0.0.1:30000"] = 3
    fleet = run(tmp_path, mocker, fake, Hosts({}, fake))
    assert fleet.exit_code == 0 and fleet.rows()[0]["host"] == "a"
    assert ("DELETE", "/workers/id-0") not in fake.calls
    assert fleet.gateway["a"].after == "ready" and fleet.gateway["a"].restored == OPERATOR
