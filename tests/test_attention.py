"""sgdeploy's model of SGLang's attention-backend pick, held against SGLang's own resolution.

tests/fixtures/attention_backends.json holds what SGLang 0.5.11 and 0.5.23 resolved (their real
ServerArgs on simulated A6000/H200/B200 GPUs, bench/fidelity/attention.py) for a grid of launches:
every oracle model with no backend, deterministic inference, speculative chains and trees, a page
size, split backends.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sgdeploy.sglang.catalog import load_catalog
from sgdeploy.sglang.model_config import ModelConfig
from sgdeploy.sglang.rule import LaunchContext
from sgdeploy.sglang.rules.attention import resolve
from sgdeploy.sglang.target import HostTarget

FIXTURE = Path(__file__).parent / "fixtures" / "attention_backends.json"
GPUS = {"A6000": ("NVIDIA RTX A6000", "8.6", 48), "H200": ("NVIDIA H200", "9.0", 141),
        "B200": ("NVIDIA B200", "10.0", 180)}
CASES: list[dict[str, Any]] = json.loads(FIXTURE.read_text(encoding="utf-8"))


def _ctx(version: str, gpu: str | None, server: dict[str, Any], config: dict[str, Any] | None,
         architecture: str | None = None) -> LaunchContext:
    host = None
    if gpu is not None:
        name, capability, memory = GPUS[gpu]
        host = HostTarget("h", gpu=name, compute_capability=capability, gpu_count=1, gpu_memory_gib=memory)
    model = ModelConfig(config, "config.json") if config is not None else None
    return LaunchContext(server=server, env={}, catalog=load_catalog(version), host=host,
                         architecture=architecture or (model.architecture if model else None), model_config=model)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_resolve_agrees_with_sglang(case: dict[str, Any]) -> None:
    backends = resolve(_ctx(case["version"], case["gpu"], case["server"], case["config"]))
    assert backends.exact
    assert list(backends.pair) == case["sglang"]


def test_the_grid_covers_both_measured_releases_and_every_gpu() -> None:
    assert {c["version"] for c in CASES} == {"0.5.11", "0.5.23"}
    assert {c["gpu"] for c in CASES} == set(GPUS)


def test_before_0_5_4_post1_server_args_leaves_the_backend_unset() -> None:
    backends = resolve(_ctx("0.5.3", "H200", {}, {"architectures": ["LlamaForCausalLM"]}))
    assert backends.pair == (None, None) and backends.exact


def test_deterministic_inference_fills_the_backend_first_from_0_5_15() -> None:
    config = {"architectures": ["LlamaForCausalLM"]}
    server = {"enable_deterministic_inference": True}
    assert resolve(_ctx("0.5.14", "B200", server, config)).pair == ("trtllm_mha", "trtllm_mha")
    assert resolve(_ctx("0.5.15", "B200", server, config)).pair == ("flashinfer", "flashinfer")


def test_what_cannot_be_followed_is_not_exact() -> None:
    unknown_gpu = resolve(_ctx("0.5.23", None, {}, {"architectures": ["LlamaForCausalLM"]}))
    own_branch = resolve(_ctx("0.5.23", "B200", {}, {"architectures": ["GptOssForCausalLM"]}))
    no_model = resolve(_ctx("0.5.23", "B200", {}, None))  # trtllm_mha for MHA, flashinfer for MLA
    assert not unknown_gpu.exact and not own_branch.exact and not no_model.exact
    hopper = resolve(_ctx("0.5.23", "H200", {}, None))  # fa3 for both
    assert hopper.exact and hopper.pair == ("fa3", "fa3")
    assert "GptOssForCausalLM" in own_branch.why


def test_a_backend_given_for_both_phases_is_exact_without_facts() -> None:
    backends = resolve(_ctx("0.5.23", None, {"attention_backend": "triton"}, None))
    assert backends.exact and backends.pair == ("triton", "triton")
