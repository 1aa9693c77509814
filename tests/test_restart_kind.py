"""Which restart a change of launch needs (sgdeploy/deploy/restart_kind.py) and what plan says of it."""

from __future__ import annotations

import pytest

from sgdeploy.deploy.restart_kind import (
    COLD,
    WEIGHT_FIELDS,
    WEIGHTS_KEPT,
    Restart,
    restart_for,
    restart_kind,
)
from sgdeploy.sglang.catalog import load_catalog

CLIENT = {"model_path": "/models/Qwen3-8B", "tp_size": 2, "weight_cache_mode": "client"}


def unit(flags: str, env: str = 'Environment="CUDA_VISIBLE_DEVICES=0,1"') -> str:
    return ("[Unit]\nDescription=sglang\n\n[Service]\n" + env + "\n"
            "ExecStart=/opt/sglang/bin/python3 -m sglang.launch_server " + flags + "\n")


def test_a_flag_that_leaves_the_weights_alone_keeps_them() -> None:
    restart = restart_kind(CLIENT, {**CLIENT, "max_running_requests": 64})
    assert restart.kind == WEIGHTS_KEPT and restart.keeps_weights


@pytest.mark.parametrize("field", ["model_path", "quantization", "tp_size", "pp_size", "dtype", "revision",
                                   "load_format", "ep_size", "attn_dp_size"])
def test_a_weight_field_makes_it_cold(field: str) -> None:
    assert field in WEIGHT_FIELDS
    restart = restart_kind(CLIENT, {**CLIENT, field: "other"})
    assert restart.kind == COLD and field in restart.why


@pytest.mark.parametrize(("old", "new"), [("off", "client"), ("client", "off"), ("daemon", "daemon"),
                                          ("client", "daemon")])
def test_only_client_to_client_keeps_the_weights(old: str, new: str) -> None:
    assert restart_kind({**CLIENT, "weight_cache_mode": old}, {**CLIENT, "weight_cache_mode": new}).kind == COLD


def test_nothing_running_the_release_the_gpus_and_the_socket_template() -> None:
    assert restart_kind(None, CLIENT).kind == COLD
    assert restart_kind(CLIENT, CLIENT, old_version="0.5.22", new_version="0.5.23").kind == COLD
    assert restart_kind(CLIENT, CLIENT, old_gpus=(0, 1), new_gpus=(2, 3)).kind == COLD
    assert restart_kind(CLIENT, CLIENT, old_env={}, new_env={"SGLANG_WEIGHT_CACHE_SOCKET_TEMPLATE": "/run/x"}).kind \
        == COLD


def test_a_default_written_out_is_no_change() -> None:
    catalog = load_catalog("0.5.23")
    restart = restart_kind(CLIENT, {**CLIENT, "dtype": catalog.default("dtype")}, default=catalog.default)
    assert restart.kind == WEIGHTS_KEPT


def test_from_the_unit_files() -> None:
    flags = "--model-path /models/Qwen3-8B --tp-size 2 --weight-cache-mode client"
    kept = restart_for(unit(flags), unit(flags + " --max-running-requests 64"), "0.5.23")
    assert kept is not None and kept.kind == WEIGHTS_KEPT
    moved = restart_for(unit(flags), unit(flags, 'Environment="CUDA_VISIBLE_DEVICES=2,3"'), "0.5.23")
    assert moved is not None and moved.kind == COLD and "CUDA_VISIBLE_DEVICES" in moved.why
    first = restart_for(None, unit(flags), "0.5.23")
    assert first is not None and first.kind == COLD
    assert restart_for(unit("--model-path /m"), unit("--model-path /m --tp-size 2"), "0.5.23") is None
    assert restart_for(unit(flags), unit(flags), "9.9.9") is None  # no catalog: nothing said


def test_plan_says_it_at_the_start_step() -> None:
    from sgdeploy.deploy.plan import Deployment, StepKind, make_plan
    from sgdeploy.host.facts import HostFacts

    flags = "--model-path /models/Qwen3-8B --tp-size 2 --weight-cache-mode client"
    deployment = Deployment(id="d1", unit="sglang", unit_text=unit(flags + " --max-running-requests 64"),
                            profile_name="p", profile_sha256="0" * 64, profile_text="", sglang_version="0.5.23",
                            server=dict(CLIENT), gpus=(0, 1), ready_timeout_s=600)
    plan = make_plan("h", deployment, HostFacts(), unit(flags), [])
    start = next(step for step in plan.steps if step.kind is StepKind.START)
    assert plan.restart is not None and "restart: weights kept" in start.why


def test_the_daemon_unit_on_the_host_decides_as_the_swap_does() -> None:
    """apply keeps a running daemon exactly when its unit's text stays the same; plan says so."""
    from sgdeploy.deploy.plan import BeforeStop, Deployment, StepKind, make_plan
    from sgdeploy.deploy.restart_kind import as_the_swap_decides
    from sgdeploy.host.facts import HostFacts

    flags = "--model-path /models/Qwen3-8B --tp-size 2 --weight-cache-mode client"
    daemon = "[Service]\nExecStart=/py -m sglang.srt.weight_cache.daemon --tp-size 2\n"
    deployment = Deployment(id="d1", unit="sglang", unit_text=unit(flags + " --max-running-requests 64"),
                            profile_name="p", profile_sha256="0" * 64, profile_text="", sglang_version="0.5.23",
                            server=dict(CLIENT), gpus=(0, 1), ready_timeout_s=600, daemon_text=daemon)
    edited = make_plan("h", deployment, HostFacts(), unit(flags), [],
                       BeforeStop(daemon_text=daemon.replace("2", "4")))
    start = next(step for step in edited.steps if step.kind is StepKind.START)
    assert edited.restart is not None and edited.restart.kind == COLD and "restart: cold" in start.why
    assert "daemon is replaced" in edited.restart.why
    same = make_plan("h", deployment, HostFacts(), unit(flags), [], BeforeStop(daemon_text=daemon))
    assert same.restart is not None and same.restart.kind == WEIGHTS_KEPT
    cold = Restart(COLD, "nothing runs yet")
    assert as_the_swap_decides(cold, daemon, daemon) == Restart(
        WEIGHTS_KEPT, "the daemon's unit stays as it is on the host: the running daemon keeps its "
        "weights for the new server")
    assert as_the_swap_decides(cold, None, daemon) is cold  # no daemon yet: it loads them
    assert as_the_swap_decides(None, daemon, daemon) is None  # no weight cache named: nothing said


def rendered(flags: str, release: str = "0.5.11", service: str = "") -> str:
    """A unit as sgdeploy renders it: its header names the release."""
    return f"# sglang.service\n# target: host h, SGLang {release}\n#\n" + unit(flags).replace(
        "[Service]\n", "[Service]\n" + service)


def test_a_restart_that_loads_the_weights_again_finds_the_running_servers_kernels() -> None:
    from sgdeploy.deploy.restart_kind import CACHES_WARM, compile_cache_restart

    flags = "--model-path /models/Qwen3-8B --tp-size 2"
    warm = compile_cache_restart(rendered(flags), rendered(flags + " --max-running-requests 64"))
    assert warm.kind == CACHES_WARM and "the weights load again" in warm.why
    assert compile_cache_restart(None, rendered(flags)).kind == COLD
    upgrade = compile_cache_restart(rendered(flags), rendered(flags, "0.5.17"))
    assert upgrade.kind == COLD and "SGLang 0.5.11 -> 0.5.17" in upgrade.why
    strict = rendered(flags, service='User=sglang\nEnvironment="HOME=/var/cache/sgdeploy/sglang"\n')
    moved = compile_cache_restart(rendered(flags), strict)
    assert moved.kind == COLD and "User= root -> sglang" in moved.why and "env.HOME" in moved.why
    by_hand = compile_cache_restart(unit(flags), rendered(flags))
    assert by_hand.kind == COLD and "does not name it" in by_hand.why


def test_plan_names_the_kind_of_every_restart() -> None:
    from sgdeploy.deploy.plan import Deployment, StepKind, make_plan
    from sgdeploy.host.facts import HostFacts

    flags = "--model-path /models/Qwen3-8B --tp-size 2"
    deployment = Deployment(id="d1", unit="sglang", unit_text=rendered(flags + " --max-running-requests 64"),
                            profile_name="p", profile_sha256="0" * 64, profile_text="", sglang_version="0.5.11",
                            server={"model_path": "/models/Qwen3-8B", "tp_size": 2}, gpus=(0, 1),
                            ready_timeout_s=600)
    for running, said in ((rendered(flags), "restart: caches warm (the same SGLang release"),
                          (None, "restart: cold (nothing runs yet")):
        plan = make_plan("h", deployment, HostFacts(), running, [])
        start = next(step for step in plan.steps if step.kind is StepKind.START)
        assert said in start.why, start.why


def test_a_change_of_weights_with_the_same_release_keeps_the_caches_warm() -> None:
    from sgdeploy.deploy.restart_kind import CACHES_WARM, compile_cache_restart, restart_of

    flags = "--model-path /models/Qwen3-8B --tp-size 2 --weight-cache-mode client"
    old, new = rendered(flags, "0.5.23"), rendered(flags.replace("Qwen3-8B", "Qwen3-14B"), "0.5.23")
    weights = restart_for(old, new, "0.5.23")
    assert weights is not None and weights.kind == COLD
    restart = restart_of(weights, compile_cache_restart(old, new))
    assert restart.kind == CACHES_WARM and "model_path changed" in restart.why
    kept = restart_for(old, rendered(flags + " --max-running-requests 64", "0.5.23"), "0.5.23")
    assert kept is not None and restart_of(kept, compile_cache_restart(old, old)) is kept
