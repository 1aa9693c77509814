"""Rules that read the attention backends SGLang resolves, and the last check sites mapped to rules.

Each case is a launch SGLang itself refuses or accepts (the verdicts of bench/fidelity's oracle
runs of 0.5.11 and 0.5.23, or the check's source where no oracle covers the release).
"""

from __future__ import annotations

from typing import Any

import pytest

from sgdeploy.sglang.catalog import load_catalog
from sgdeploy.sglang.model_config import ModelConfig
from sgdeploy.sglang.rule import LaunchContext
from sgdeploy.sglang.rules import RULES
from sgdeploy.sglang.target import HostTarget

HOSTS = {"A6000": ("NVIDIA RTX A6000", "8.6", 48), "H200": ("NVIDIA H200", "9.0", 141),
         "B200": ("NVIDIA B200", "10.0", 180)}
LLAMA = {"architectures": ["LlamaForCausalLM"], "num_attention_heads": 32, "num_key_value_heads": 8}
DEEPSEEK_DSA = {"architectures": ["DeepseekV32ForCausalLM"], "kv_lora_rank": 512, "index_topk": 2048}
QWEN_HYBRID = {"architectures": ["Qwen3_5ForConditionalGeneration"], "layer_types": ["linear_attention"]}


def fires(rule_id: str, version: str, gpu: str, server: dict[str, Any], config: dict[str, Any] | None = None,
          env: dict[str, str] | None = None) -> list[str]:
    name, capability, memory = HOSTS[gpu]
    model = ModelConfig(config, "config.json") if config else None
    ctx = LaunchContext(server=server, env=env or {}, catalog=load_catalog(version),
                        host=HostTarget("h", gpu=name, compute_capability=capability, gpu_count=8,
                                        gpu_memory_gib=memory),
                        architecture=model.architecture if model else None, model_config=model)
    return [finding.message for finding in RULES.by_id(rule_id).run(ctx)]


def test_mis_with_deterministic_inference_on_b200_runs_flashinfer_from_0_5_15() -> None:
    server = {"enable_mis": True, "enable_deterministic_inference": True}
    assert not fires("SGD405", "0.5.23", "B200", server, LLAMA)
    assert fires("SGD405", "0.5.11", "B200", server, LLAMA)  # the default (trtllm_mha) comes first there
    assert fires("SGD405", "0.5.23", "H200", {"enable_mis": True}, LLAMA)


def test_deterministic_inference_without_a_backend_in_0_5_3_is_refused() -> None:
    assert fires("SGD535", "0.5.3", "H200", {"enable_deterministic_inference": True}, LLAMA)
    assert not fires("SGD535", "0.5.4", "H200", {"enable_deterministic_inference": True}, LLAMA)


def test_deterministic_default_trtllm_mha_in_0_5_11_and_not_in_0_5_23() -> None:
    server = {"enable_deterministic_inference": True}
    assert fires("SGD535", "0.5.11", "B200", server, LLAMA)
    assert not fires("SGD535", "0.5.23", "B200", server, LLAMA)


def test_uno_needs_fa3_as_sglang_resolves_it() -> None:
    server = {"speculative_algorithm": "UNO"}
    assert not [m for m in fires("SGD216", "0.5.23", "H200", server, LLAMA) if "FA3" in m]
    assert [m for m in fires("SGD216", "0.5.23", "B200", server, LLAMA) if "FA3" in m]


def test_kv4_reads_the_default_backend() -> None:
    assert fires("SGD558", "0.5.11", "A6000", {"kv_cache_dtype": "fp4_e2m1"}, LLAMA)  # flashinfer
    assert not fires("SGD558", "0.5.11", "B200", {"kv_cache_dtype": "fp4_e2m1"}, LLAMA)  # trtllm_mha


def test_unified_memory_with_dspark_needs_audited_backends() -> None:
    server = {"enable_unified_memory": True, "speculative_algorithm": "DSPARK"}
    assert fires("SGD552", "0.5.20", "H200", server, LLAMA)  # fa3
    assert not fires("SGD552", "0.5.20", "H200", {**server, "attention_backend": "triton"}, LLAMA)


def test_linear_replayssm_spec_and_replayssm_are_exclusive() -> None:
    server = {"enable_linear_replayssm_spec": True, "enable_linear_replayssm": True}
    assert fires("SGD555", "0.5.23", "H200", server, QWEN_HYBRID)
    assert not fires("SGD555", "0.5.23", "H200", {"enable_linear_replayssm_spec": True}, QWEN_HYBRID)


def test_hicache_with_dcp_takes_only_dspark_from_0_5_18() -> None:
    server = {"enable_hierarchical_cache": True, "dcp_size": 2, "speculative_algorithm": "EAGLE"}
    assert [m for m in fires("SGD556", "0.5.23", "H200", server) if "DSPARK" in m]
    assert not [m for m in fires("SGD556", "0.5.23", "H200", {**server, "speculative_algorithm": "DSPARK"})
                if "DSPARK" in m]


@pytest.mark.parametrize(("server", "refused"), [
    ({"kv_cache_dtype": "fp8_e4m3", "dsa_prefill_backend": "tilelang"}, True),
    ({"kv_cache_dtype": "fp8_e4m3", "dsa_prefill_backend": "tilelang", "dsa_decode_backend": "tilelang"}, False),
    ({"kv_cache_dtype": "fp8_e4m3", "dsa_prefill_backend": "tilelang", "dsa_decode_backend": "tilelang",
      "dcp_size": 2}, True),
])
def test_tilelang_fp8_kv_on_a_dsa_model(server: dict[str, Any], refused: bool) -> None:
    found = [m for m in fires("SGD587", "0.5.23", "H200", server, DEEPSEEK_DSA) if "TileLang" in m]
    assert bool(found) is refused


def test_a_model_with_a_branch_of_its_own_is_a_warning() -> None:
    gpt_oss = {"architectures": ["GptOssForCausalLM"]}
    assert not fires("SGD405", "0.5.23", "B200", {"enable_mis": True}, gpt_oss)
    assert fires("SGD409", "0.5.23", "B200", {"enable_mis": True}, gpt_oss)


def test_options_of_one_model_family_read_config_json() -> None:
    replay = {"enable_encoder_swa_bounded_replay": True}
    v41 = {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v41"}
    v4 = {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4"}
    assert fires("SGD592", "0.5.23", "H200", replay, LLAMA)
    assert not fires("SGD592", "0.5.22", "H200", replay, LLAMA)  # the check on any model is 0.5.23's
    assert fires("SGD592", "0.5.22", "H200", replay, v4)
    assert not fires("SGD592", "0.5.23", "H200", replay, v41)
    assert not fires("SGD592", "0.5.23", "H200", replay)  # no config.json: skipped (SGD580)
    cp = {"enable_cp_decode_attn_tp": True}
    assert fires("SGD592", "0.5.20", "H200", cp, LLAMA)
    assert not fires("SGD592", "0.5.20", "H200", cp, {"architectures": ["GlmMoeDsaForCausalLM"]})


def test_unified_memory_with_dcp_is_refused_from_the_declared_architecture_alone() -> None:
    """MLA is decided by the architecture (the release's `mla_archs`): without a config.json the
    declared architecture refuses a non-MLA model, and an MLA one is not refused."""
    server = {"tp_size": 8, "enable_unified_memory": True, "dcp_size": 2}

    def declared(arch: str) -> list[str]:
        ctx = LaunchContext(server=server, env={}, catalog=load_catalog("0.5.23"),
                            host=HostTarget("h", gpu="NVIDIA RTX A6000", compute_capability="8.6", gpu_count=8,
                                            gpu_memory_gib=48),
                            architecture=arch, model_config=None)
        return [f.message for f in RULES.by_id("SGD552").run(ctx) if "supports MLA models only" in f.message]

    assert declared("Qwen3_5ForConditionalGeneration")  # the oracle's 0.5.23 verdict: refused
    assert not declared("KimiLinearForCausalLM")
    assert any("supports MLA models only" in m for m in fires("SGD552", "0.5.23", "A6000", server, QWEN_HYBRID))


def _declared_only(version: str, gpu: str, server: dict[str, Any], architecture: str) -> LaunchContext:
    name, capability, memory = HOSTS[gpu]
    return LaunchContext(server=server, env={}, catalog=load_catalog(version),
                         host=HostTarget("h", gpu=name, compute_capability=capability, gpu_count=8,
                                         gpu_memory_gib=memory), architecture=architecture)


@pytest.mark.parametrize(("version", "gpu", "architecture", "server", "said"), [
    # the FP4 KV cache's backend list depends on MLA, which Pixtral's branch reads from the config
    ("0.5.11", "H200", "PixtralForConditionalGeneration", {"tp_size": 4, "kv_cache_dtype": "fp4_e2m1"},
     "whether the model uses MLA"),
    # the MoE kernel checks read a DeepSeek V3 checkpoint's quantization on Blackwell
    ("0.5.11", "B200", "DeepseekV3ForCausalLM", {"tp_size": 8, "moe_runner_backend": "flashinfer_cutedsl"},
     "the checkpoint's quantization the MoE runner backend needs"),
])
def test_a_check_that_needs_config_json_says_not_checked_without_it(
        version: str, gpu: str, architecture: str, server: dict[str, Any], said: str) -> None:
    ctx = _declared_only(version, gpu, server, architecture)
    (note,) = [f.message for f in RULES.by_id("SGD580").run(ctx)]
    assert "not checked" in note and said in note


@pytest.mark.parametrize("architecture", ["DeepseekV3ForCausalLM", "LlamaForCausalLM"])
def test_mla_settled_by_the_declared_architecture_needs_no_config(architecture: str) -> None:
    """DeepSeek V3's branch decides MLA by the name alone, Llama's is named by none: the KV4
    backend list is checked from the declared architecture, and nothing is noted as unchecked."""
    server = {"tp_size": 4, "kv_cache_dtype": "fp4_e2m1", "attention_backend": "triton" if architecture[0] == "D"
              else "flashmla"}
    ctx = _declared_only("0.5.11", "H200", server, architecture)
    assert not any("MLA" in f.message for f in RULES.by_id("SGD580").run(ctx))
    with_config = fires("SGD558", "0.5.11", "H200", server,
                        {"architectures": [architecture], **({"kv_lora_rank": 512} if architecture[0] == "D" else {}),
                         "num_attention_heads": 32, "num_key_value_heads": 8})
    assert [f.message for f in RULES.by_id("SGD558").run(ctx)] == with_config != []


@pytest.mark.parametrize(("version", "gpu", "backend", "refused"), [
    ("0.5.11", "H200", "flashinfer", True),  # the DeepSeek family takes fa3 and triton only
    ("0.5.11", "H200", "fa3", False),
    ("0.5.23", "A6000", "fa4", True),  # fa4 for absorbed MLA needs SM100/SM110
    ("0.5.23", "B200", "fa4", False),
    ("0.5.23", "H200", "flashinfer", True),
])
def test_deterministic_deepseek_family_from_the_declared_architecture(
        version: str, gpu: str, backend: str, refused: bool) -> None:
    server = {"enable_deterministic_inference": True, "attention_backend": backend}
    ctx = _declared_only(version, gpu, server, "DeepseekV3ForCausalLM")
    found = [f.message for f in RULES.by_id("SGD535").run(ctx)]
    assert bool(found) == refused, found
    # a model outside the family is not held to it (every backend here is a deterministic one)
    assert not list(RULES.by_id("SGD535").run(_declared_only(version, gpu, server, "LlamaForCausalLM")))
