"""The weight-cache rules (SGD540-SGD546) release by release, beyond the example profiles of tests/rules/.

Each case follows SGLang's sources of the release: sglang/srt/weight_cache/ (0.5.17+), the engine's
daemon launch and the IPC loader; docs/weight-cache.md says where.
"""

from __future__ import annotations

from typing import Any

import pytest

from sgdeploy.sglang.catalog import load_catalog
from sgdeploy.sglang.model_config import ModelConfig
from sgdeploy.sglang.rule import LaunchContext
from sgdeploy.sglang.rules import RULES

BF16 = {"architectures": ["Qwen3ForCausalLM"], "num_attention_heads": 32, "num_key_value_heads": 8}
BLOCK_FP8 = {**BF16, "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
TENSOR_FP8 = {**BF16, "quantization_config": {"quant_method": "fp8"}}
AWQ = {**BF16, "quantization_config": {"quant_method": "awq", "bits": 4}}


def fires(rule_id: str, version: str, server: dict[str, Any], *, config: dict[str, Any] | None = None,
          env: dict[str, str] | None = None, hardening: str = "none") -> list[str]:
    model = ModelConfig(config, "config.json") if config else None
    ctx = LaunchContext(server={"model_path": "/models/m", **server}, env=env or {}, catalog=load_catalog(version),
                        model_config=model, architecture=model.architecture if model else None,
                        hardening=hardening)
    return [finding.message for finding in RULES.by_id(rule_id).run(ctx)]


def test_the_rules_start_where_the_flags_do() -> None:
    server = {"weight_cache_mode": "client", "speculative_algorithm": "NGRAM", "quantization": "awq"}
    assert not fires("SGD540", "0.5.16", server) and not fires("SGD541", "0.5.16", server)
    assert fires("SGD540", "0.5.17", server) and fires("SGD541", "0.5.17", server)


@pytest.mark.parametrize("mode", ["daemon", "client"])
def test_speculative_decoding_is_refused_in_both_modes(mode: str) -> None:
    assert fires("SGD540", "0.5.23", {"weight_cache_mode": mode, "speculative_algorithm": "EAGLE3"})
    assert not fires("SGD540", "0.5.23", {"weight_cache_mode": "off", "speculative_algorithm": "EAGLE3"})


@pytest.mark.parametrize(("server", "config", "refused"), [
    ({}, BF16, False),
    ({}, BLOCK_FP8, False),
    ({}, TENSOR_FP8, True),
    ({}, AWQ, True),
    ({"quantization": "fp8"}, BF16, True),  # online FP8 is per-tensor
    ({"quantization": "fp8"}, BLOCK_FP8, False),
    ({"quantization": "fp8"}, None, False),  # the checkpoint decides: not judged without it
    ({"quantization": "modelopt_fp4"}, None, True),
    ({}, None, False),
])
def test_only_unquantized_and_block_fp8_weights_go_through_the_cache(
        server: dict[str, Any], config: dict[str, Any] | None, refused: bool) -> None:
    assert bool(fires("SGD541", "0.5.21", {"weight_cache_mode": "client", **server}, config=config)) is refused
    assert not fires("SGD541", "0.5.21", server, config=config)  # the cache off: no check


def test_the_engines_daemons_refuse_expandable_segments_in_either_variable() -> None:
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        env = {name: "max_split_size_mb:512, expandable_segments:true"}
        assert fires("SGD542", "0.5.17", {"weight_cache_mode": "daemon"}, env=env)
        assert not fires("SGD542", "0.5.17", {"weight_cache_mode": "client"}, env=env)  # its daemon is out of band
    assert not fires("SGD542", "0.5.23", {"weight_cache_mode": "daemon"},
                     env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"})


def test_a_timeout_that_is_not_positive_is_said_as_the_release_fails() -> None:
    server = {"weight_cache_mode": "daemon", "weight_cache_timeout": 0}
    assert "must be positive" in fires("SGD542", "0.5.22", server)[0]
    assert "did not become ready within 0s" in fires("SGD542", "0.5.21", server)[0]
    assert not fires("SGD542", "0.5.23", {**server, "weight_cache_timeout": 60})


def test_one_socket_for_several_ranks_or_for_the_engines_own_daemons() -> None:
    socket = {"weight_cache_socket": "/run/w/qwen.sock"}
    assert fires("SGD543", "0.5.23", {"weight_cache_mode": "client", "tp_size": 2, **socket})
    assert fires("SGD543", "0.5.23", {"weight_cache_mode": "client", "tp_size": 2, "pp_size": 2, "nnodes": 2,
                                      **socket})
    assert not fires("SGD543", "0.5.23", {"weight_cache_mode": "client", **socket})
    assert fires("SGD543", "0.5.23", {"weight_cache_mode": "daemon", **socket})
    # the very path the engine's daemon binds
    assert not fires("SGD543", "0.5.23", {"weight_cache_mode": "daemon",
                                          "weight_cache_socket": "/tmp/sglang_weight_cache_GPU-1234.sock"})
    assert not fires("SGD543", "0.5.17", {"weight_cache_mode": "daemon",
                                          "weight_cache_socket": "/tmp/sglang_weight_cache_rank0.sock"})


def test_a_template_without_the_gpu_uuid_is_refused_where_it_is_read() -> None:
    env = {"SGLANG_WEIGHT_CACHE_SOCKET_TEMPLATE": "/run/w/cache.sock"}
    assert fires("SGD543", "0.5.19", {"weight_cache_mode": "client"}, env=env)
    assert not fires("SGD543", "0.5.18", {"weight_cache_mode": "client"}, env=env)  # not read before 0.5.19
    # a client with its own socket does not derive one
    assert not fires("SGD543", "0.5.23", {"weight_cache_mode": "client", "weight_cache_socket": "/run/w/a.sock"},
                     env=env)
    ready = {"SGLANG_WEIGHT_CACHE_READY_TEMPLATE": "/run/w/cache.ready"}
    assert fires("SGD543", "0.5.23", {"weight_cache_mode": "daemon"}, env=ready)
    assert not fires("SGD543", "0.5.23", {"weight_cache_mode": "client"}, env=ready)


def test_options_the_mode_does_not_read_and_the_cpu_backup() -> None:
    assert fires("SGD544", "0.5.23", {"weight_cache_timeout": 600})
    assert fires("SGD544", "0.5.23", {"weight_cache_mode": "client", "weight_cache_timeout": 600})
    assert not fires("SGD544", "0.5.23", {"weight_cache_mode": "daemon", "weight_cache_timeout": 600})
    assert fires("SGD544", "0.5.23", {"weight_cache_mode": "daemon", "enable_weights_cpu_backup": True})
    assert not fires("SGD544", "0.5.23", {"enable_weights_cpu_backup": True})


def test_a_hardened_client_and_its_private_tmp() -> None:
    client = {"weight_cache_mode": "client"}
    # 0.5.19+: the daemon unit sgdeploy renders puts both units' sockets under /run
    assert not fires("SGD545", "0.5.23", client, hardening="strict")
    assert fires("SGD545", "0.5.23", {**client, "weight_cache_socket": "/tmp/w.sock"}, hardening="strict")
    # 0.5.17, 0.5.18: the pair sgdeploy renders shares one private /tmp (JoinsNamespaceOf=)
    assert not fires("SGD545", "0.5.17", client, hardening="strict")
    assert "rank{global_rank}" in fires("SGD545", "0.5.17", {**client, "nnodes": 2, "node_rank": 0},
                                        hardening="strict")[0]
    assert not fires("SGD545", "0.5.23", client)
    assert not fires("SGD545", "0.5.23", {"weight_cache_mode": "daemon"}, hardening="strict")
    assert not fires("SGD545", "0.5.23", client, hardening="strict",
                     env={"SGLANG_WEIGHT_CACHE_SOCKET_TEMPLATE": "/run/w/sglang_weight_cache_{device_uuid}.sock"})
    assert not fires("SGD545", "0.5.17", {**client, "weight_cache_socket": "/run/w/a.sock"}, hardening="strict")


def test_the_0_5_17_daemon_cannot_be_told_every_weight_deciding_option() -> None:
    """Before 0.5.19 `python -m sglang.srt.weight_cache.daemon` parses its own flags only."""
    client = {"weight_cache_mode": "client", "tp_size": 2, "dtype": "bfloat16"}
    assert not fires("SGD546", "0.5.17", client)
    override = {**client, "json_model_override_args": '{"rope_scaling": null}'}
    found = fires("SGD546", "0.5.18", override)
    assert len(found) == 1 and "json_model_override_args" in found[0] and "--model-path" in found[0]
    assert not fires("SGD546", "0.5.19", override)  # the daemon takes the server's own argv
    assert not fires("SGD546", "0.5.17", {**override, "weight_cache_mode": "daemon"})
