"""`apply --probe` / `--min-ratio` and `sgdeploy probe` end to end on a real systemd test host.

The simulated server streams tokens at the rate its environment says (SGLANG_SIM_TOKENS_PER_S),
so a profile can regress throughput the way a lost flag did in the reference story.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sgdeploy import cli
from tests.hosts import HostSet, HostSpec, SimSettings, booted_or_skipped, free_port

pytestmark = pytest.mark.hosts

REPO = Path(__file__).resolve().parents[1]
MODEL = "/root/models/Qwen3.6-27B"
PORT = free_port()
REFERENCE = (REPO / "profiles" / "qwen36-mtp3.toml").read_text().replace("port = 30000", f"port = {PORT}")
PROBE = '\n[probe]\nmax_tokens = 24\nrequests = 2\nconcurrency = 2\nwarmup = 0\n'


def with_rate(tokens_per_s: int) -> str:
    return REFERENCE.replace('SGLANG_ENABLE_SPEC_V2 = "1"',
                             f'SGLANG_ENABLE_SPEC_V2 = "1"\nSGLANG_SIM_TOKENS_PER_S = "{tokens_per_s}"') + PROBE


@pytest.fixture(scope="module")
def host() -> Iterator[HostSet]:
    with booted_or_skipped([HostSpec.like("ct129", sim=SimSettings(startup_s=1.0, release_delay_s=0.5))]) as hs:
        hs.make_model("ct129", MODEL, "Qwen3_5ForConditionalGeneration")
        yield hs


def run(host: HostSet, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = cli.main([*args, "--inventory", str(host.inventory_path), "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_probe_records_then_a_regression_rolls_back(host: HostSet, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    fast, slow = tmp_path / "fast.toml", tmp_path / "slow.toml"
    fast.write_text(with_rate(80))
    slow.write_text(with_rate(35))

    code, first = run(host, capsys, "apply", str(fast), "--probe", "--settle", "1")
    assert code == 0, first["message"]
    figure = first["probe"]["single_stream_tps"]
    assert 60 <= figure <= 96, first["probe"]
    assert "no previous figure" in first["probe"]["verdict"]["message"]
    meta = json.loads(host.ssh("ct129", f"cat /var/lib/sgdeploy/sglang/{first['deployment_id']}/meta.json").stdout)
    assert meta["probe"]["single_stream_tps"] == figure

    code, regressed = run(host, capsys, "apply", str(slow), "--min-ratio", "0.9", "--settle", "1")
    assert code == 1, regressed["message"]
    assert regressed["failure"]["kind"] == "throughput_regression"
    assert "% of the last good deployment's" in regressed["failure"]["reason"]
    assert regressed["rollback"]["ready"] is True

    code, history = run(host, capsys, "history", str(fast))
    assert code == 0
    by_id = {r["id"]: r for r in history["deployments"]}
    assert by_id[first["deployment_id"]]["probe"]["single_stream_tps"] == figure

    code, probed = run(host, capsys, "probe", str(fast))
    assert code == 0, probed
    assert 60 <= probed["probe"]["single_stream_tps"] <= 96
