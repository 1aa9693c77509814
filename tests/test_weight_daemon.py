"""The weight-cache daemon's unit (sgdeploy.deploy.weight_daemon, docs/weight-cache.md): what it
runs, how the server's unit depends on it, and the idle check that lets a kept daemon stay.
tests/test_weight_daemon_hosts.py runs the pair under systemd."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sgdeploy import __version__
from sgdeploy.deploy.render import RenderedUnit, render_unit
from sgdeploy.host.facts import GpuInfo, GpuProcess, gpus_idle, idle_check_sh
from sgdeploy.profile.model import load_profile
from sgdeploy.sglang.catalog import load_catalog

CLIENT = """\
[deploy]
host = "h200"
unit = "sglang"
python = "/opt/sglang/bin/python3"
{deploy}
[env]
PYTORCH_CUDA_ALLOC_CONF = "expandable_segments:True"
SGLANG_WEIGHT_CACHE_SOCKET_TEMPLATE = "/tmp/elsewhere/{{device_uuid}}.sock"

[server]
model_path = "/models/Qwen3-8B"
tp_size = 2
weight_cache_mode = "client"
max_running_requests = {running}
{extra}"""


def rendered(tmp_path: Path, version: str = "0.5.23", running: int = 64, extra: str = "",
             deploy: str = "") -> RenderedUnit:
    path = tmp_path / f"p{running}{len(extra)}{len(deploy)}.toml"
    path.write_text(CLIENT.format(running=running, extra=extra, deploy=deploy))
    return render_unit(load_profile(path), load_catalog(version), "h200")


def directives(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_a_client_gets_a_daemon_unit_the_server_requires(tmp_path: Path) -> None:
    unit = rendered(tmp_path)
    assert unit.daemon is not None and unit.daemon.unit == "sglang-weights"
    server = directives(unit.text)
    assert "Requires=sglang-weights.service" in server and "After=sglang-weights.service" in server
    daemon = unit.daemon.text
    assert '"-m" "sglang.srt.weight_cache.daemon"' in daemon
    assert '"--model-path" "/models/Qwen3-8B"' in daemon and '"--tp-size" "2"' in daemon
    assert "max-running-requests" not in daemon and "weight-cache-mode" not in daemon  # weights only
    assert '"--timeout" "1200"' in daemon
    assert "RuntimeDirectory=sgdeploy-weights/sglang" in daemon and "Restart=no" in daemon
    assert "ExecStartPost=" in daemon and "-ge 2 ]" in daemon  # two ranks, two ready files
    # both units find the sockets under /run (sgdeploy's templates replace the profile's)
    for text in (unit.text, daemon):
        assert 'SGLANG_WEIGHT_CACHE_SOCKET_TEMPLATE=/run/sgdeploy-weights/sglang/{device_uuid}.sock"' in text
        assert "/tmp/elsewhere" not in text
    # SGLang's daemon refuses expandable segments; the server keeps its allocator setting
    assert "expandable_segments" in unit.text and "expandable_segments" not in daemon


def test_the_daemon_text_changes_only_with_the_weights(tmp_path: Path) -> None:
    a, b = rendered(tmp_path, running=64), rendered(tmp_path, running=128)
    assert a.text != b.text
    assert a.daemon is not None and b.daemon is not None and a.daemon.text == b.daemon.text
    assert f"sgdeploy {__version__}" not in a.daemon.text  # an upgrade of sgdeploy keeps the daemon
    other = rendered(tmp_path, extra='quantization = "fp8"\n')
    assert other.daemon is not None and other.daemon.text != a.daemon.text


def test_no_daemon_where_sgdeploy_cannot_place_its_rendezvous(tmp_path: Path) -> None:
    two_nodes = rendered(tmp_path, extra='nnodes = 2\nnode_rank = 0\ndist_init_addr = "10.0.0.1:5000"\n')
    assert two_nodes.daemon is None and "Requires=" not in two_nodes.text


def test_before_0_5_19_the_pair_shares_a_private_tmp_and_the_daemon_gets_its_own_flags(tmp_path: Path) -> None:
    """0.5.17 and 0.5.18 fix the sockets at /tmp/sglang_weight_cache_rank<N>.sock and the daemon
    parses flags of its own (sglang/srt/weight_cache/daemon.py __main__)."""
    for version in ("0.5.17", "0.5.18"):
        unit = rendered(tmp_path, version=version, extra="gpu_id_step = 1\n")
        assert unit.daemon is not None
        server, daemon = directives(unit.text), directives(unit.daemon.text)
        assert "JoinsNamespaceOf=sglang-weights.service" in server and "PrivateTmp=yes" in server
        assert "PrivateTmp=yes" in daemon and not any(d.startswith("RuntimeDirectory=") for d in daemon)
        # no templates: this release does not read them (the profile's own stays, SGD543 judges it)
        assert "/run/sgdeploy-weights" not in unit.text + unit.daemon.text
        assert 'find /tmp -maxdepth 1 -name \\"sglang_weight_cache_rank*.ready\\"' in unit.daemon.text
        assert '"--gpu-id-step" "1"' in unit.daemon.text and '"--timeout" "1200"' in unit.daemon.text
    hardened = rendered(tmp_path, version="0.5.17", deploy='hardening = "strict"\n')
    assert hardened.daemon is not None
    for text in (hardened.text, hardened.daemon.text):
        assert directives(text).count("PrivateTmp=yes") == 1  # the sandbox's, not twice


def test_a_strict_client_and_its_daemon_share_the_sandbox(tmp_path: Path) -> None:
    unit = rendered(tmp_path, deploy='hardening = "strict"\n')
    assert unit.daemon is not None
    for text in (unit.text, unit.daemon.text):
        assert "User=sglang" in text and "ProtectSystem=strict" in text


GPUS = (GpuInfo(0, "GPU-a", "NVIDIA H200", "9.0", 143771, 16500),)
DAEMON = GpuProcess(41, "python3", 16000, "GPU-a")


def test_a_kept_daemon_and_its_memory_do_not_make_the_gpus_busy(tmp_path: Path) -> None:
    assert not gpus_idle(GPUS, (DAEMON,), [0]).idle
    assert gpus_idle(GPUS, (DAEMON,), [0], kept_pids=(41,)).idle
    stranger = GpuProcess(77, "python3", 400, "GPU-a")
    assert not gpus_idle(GPUS, (DAEMON, stranger), [0], kept_pids=(41,)).idle
    # the host's twin of the rule (run in the swap's round trip) agrees
    (tmp_path / "g").write_text("0, GPU-a, NVIDIA H200, 9.0, 143771, 16500, 00000000:01:00.0\n")
    (tmp_path / "a").write_text("41, python3, 16000, GPU-a\n")
    (tmp_path / "k").write_text("41\n")

    def idle(*files: str) -> bool:
        script = f"{idle_check_sh([0])}; sgd_idle {' '.join(str(tmp_path / f) for f in files)}"
        return subprocess.run(["sh", "-c", script], check=False).returncode == 0

    assert not idle("g", "a")
    assert idle("g", "a", "k")
    (tmp_path / "a").write_text("41, python3, 16000, GPU-a\n77, python3, 400, GPU-a\n")
    assert not idle("g", "a", "k")


def test_the_documented_fast_restart_profile_is_valid_and_keeps_the_weights_on_a_flag_change(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/weight-cache.md's "Fast restarts" profile, as a user copies it: valid for a 0.5.17 host,
    rendered with its daemon, and a flag change of it restarts with the weights kept."""
    from sgdeploy import cli
    from sgdeploy.deploy.restart_kind import WEIGHTS_KEPT, restart_for

    doc = (Path(__file__).parents[1] / "docs" / "weight-cache.md").read_text(encoding="utf-8")
    profile = doc.split("<!-- fast-restart-profile -->\n```toml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "fast.toml").write_text(profile)
    (tmp_path / "fast-b.toml").write_text(profile + "max_running_requests = 64\n")
    inventory = tmp_path / "inventory.toml"
    inventory.write_text('[hosts.h200-03]\naddress = "h200-03.example.com"\nuser = "root"\n'
                         'gpu = "NVIDIA H200"\ncompute_capability = "9.0"\ngpu_count = 8\n'
                         'gpu_memory_gib = 141\nsglang_version = "0.5.17"\n')
    code = cli.main(["validate", str(tmp_path / "fast.toml"), "--inventory", str(inventory)])
    assert code == 0, capsys.readouterr().out
    catalog = load_catalog("0.5.17")
    before, after = (render_unit(load_profile(tmp_path / name), catalog, "h200-03")
                     for name in ("fast.toml", "fast-b.toml"))
    assert before.daemon is not None and after.daemon is not None
    assert before.daemon.text == after.daemon.text
    restart = restart_for(before.text, after.text, "0.5.17")
    assert restart is not None and restart.kind == WEIGHTS_KEPT
