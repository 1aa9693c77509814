"""The throughput probe against a real test host: simulated SGLang servers in systemd units,
reached through a real `RemoteHost` (SSH, direct-tcpip to the host's loopback).

Two servers run side by side on one ct129-like host, each started with its own `tokens_per_s`:
the probe must find each rate (within 20 %) and the ratio between them.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from sgdeploy.deploy.probe import compare, probe_remote
from sgdeploy.host.remote import RemoteHost
from sgdeploy.profile.inventory import load_inventory
from sgdeploy.profile.model import ProbeSettings
from tests.hosts import HostSet, HostSpec, SimSettings, booted_or_skipped, free_port

pytestmark = pytest.mark.hosts

MODEL = "/root/models/Qwen3-8B"
FAST_TPS = 80.0
SLOW_TPS = 40.0  # the story's halving
SETTINGS = ProbeSettings(max_tokens=48, concurrency=4, requests=3, warmup=1, duration_s=40, request_timeout_s=15)


@dataclass
class Servers:
    hs: HostSet
    remote: RemoteHost
    fast: int  # ports
    slow: int


def start_server(hs: HostSet, unit: str, port: int, gpu: int, extra: str = "") -> None:
    argv = ["/root/ml-env/bin/python3", "-m", "sglang.launch_server", "--model-path", MODEL,
            "--host", "127.0.0.1", "--port", str(port), "--base-gpu-id", str(gpu), *extra.split()]
    hs.ssh("ct129", f"systemd-run --unit={unit} --quiet {shlex.join(argv)}")


def wait_healthy(remote: RemoteHost, port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if remote.http_get(port, "/health").status == 200:
                return
        except ConnectionRefusedError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"the server on port {port} did not become healthy")


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    with booted_or_skipped([HostSpec.like("ct129", sim=SimSettings(startup_s=1.0, release_delay_s=0.5))]) as hs:
        entry = load_inventory(hs.inventory_path).model.hosts["ct129"]
        with RemoteHost("ct129", entry).connect() as remote:
            fast, slow = free_port(), free_port()
            while slow == fast:
                slow = free_port()
            # the simulator reads tokens_per_s at launch: configure, start, configure, start
            hs.configure_sim("ct129", tokens_per_s=FAST_TPS)
            start_server(hs, "probe-fast", fast, gpu=0)
            wait_healthy(remote, fast)  # it has read its settings before they change
            hs.configure_sim("ct129", tokens_per_s=SLOW_TPS)
            start_server(hs, "probe-slow", slow, gpu=1, extra="--api-key sekrit")
            wait_healthy(remote, slow)
            yield Servers(hs, remote, fast, slow)
            hs.ssh("ct129", "systemctl stop probe-fast probe-slow", check=False)


def test_probe_finds_the_configured_rate(servers: Servers) -> None:
    fast = probe_remote(servers.remote, servers.fast, SETTINGS)
    assert fast.errors == 0, fast.error_messages
    assert fast.single_stream_tps == pytest.approx(FAST_TPS, rel=0.2)
    assert fast.ttft_ms_median is not None and 0 < fast.ttft_ms_median < 1000
    assert fast.ttft_ms_p90 is not None and fast.ttft_ms_p90 >= fast.ttft_ms_median
    # the simulated server runs each request on its own thread: four streams, four times the tokens
    assert fast.concurrent_tps is not None and fast.concurrent_tps > 0.6 * SETTINGS.concurrency * FAST_TPS
    assert fast.concurrent_stream_tps == pytest.approx(FAST_TPS, rel=0.2)
    assert fast.output_tokens == (SETTINGS.requests + SETTINGS.concurrency) * SETTINGS.max_tokens

    slow = probe_remote(servers.remote, servers.slow, SETTINGS, api_key="sekrit")
    assert slow.errors == 0, slow.error_messages
    assert slow.single_stream_tps == pytest.approx(SLOW_TPS, rel=0.2)
    assert slow.single_stream_tps / fast.single_stream_tps == pytest.approx(SLOW_TPS / FAST_TPS, rel=0.15)

    verdict = compare(slow, fast.as_dict(), 0.9)
    assert not verdict.ok and verdict.ratio is not None and verdict.ratio < 0.65
    assert "of the last good deployment's" in verdict.message
    assert compare(fast, fast.as_dict(), 0.9).ok


def test_openai_endpoint(servers: Servers) -> None:
    settings = SETTINGS.model_copy(update={"endpoint": "openai", "concurrency": 2, "requests": 2})
    result = probe_remote(servers.remote, servers.fast, settings)
    assert result.errors == 0, result.error_messages
    assert result.endpoint == "openai" and result.single_stream_tps == pytest.approx(FAST_TPS, rel=0.2)


def test_failures_are_reported_not_raised(servers: Servers) -> None:
    few = SETTINGS.model_copy(update={"requests": 1, "warmup": 0, "concurrency": 1})
    refused = probe_remote(servers.remote, servers.slow, few)  # no API key: HTTP 401
    assert refused.errors == 1 and refused.single_stream_tps is None
    assert "answered HTTP 401" in refused.error_messages[0]
    nobody = probe_remote(servers.remote, free_port(), few)
    assert nobody.errors == 1 and "nothing listens" in nobody.error_messages[0]
    verdict = compare(nobody, None, 0.9)
    assert not verdict.ok and "measured nothing" in verdict.message
