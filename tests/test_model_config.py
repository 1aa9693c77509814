"""The model's config.json as the SGD58x checks read it: offline (--model-config, deploy.model_config)
and from the host's facts at plan/apply."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sgdeploy.deploy.preflight import host_model_config
from sgdeploy.host import facts as host_facts
from sgdeploy.host.facts import HostFacts
from sgdeploy.profile.model import load_profile
from sgdeploy.profile.validate import InventoryContext, check_launch, validate_file
from sgdeploy.sglang.model_config import ModelConfigError, load_model_config, parse_model_config

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "rules" / "models"
RULES_INVENTORY = ROOT / "tests" / "inventory.rules.toml"


def config(**keys: object) -> str:
    return json.dumps({"architectures": ["Qwen3ForCausalLM"], **keys})


@pytest.mark.parametrize(("keys", "expected"), [
    ({"max_position_embeddings": 40960}, 40960),
    ({"max_position_embeddings": 32768, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, 131072),
    # rope scaling that keeps original_max_position_embeddings, or llama3's, does not multiply
    ({"max_position_embeddings": 163840,
      "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096}}, 163840),
    ({"max_position_embeddings": 131072, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, 131072),
    # SGLang's key order: seq_length wins over max_position_embeddings
    ({"seq_length": 8192, "max_position_embeddings": 32768}, 8192),
    ({}, 2048),
    ({"text_config": {"max_position_embeddings": 262144}}, 262144),
])
def test_context_length_is_derived_as_sglang_does(keys: dict[str, object], expected: int) -> None:
    assert parse_model_config(config(**keys), "c").context_length() == expected


def test_heads_dsa_quantization_and_hybrid_layers() -> None:
    dsa = load_model_config(MODELS / "deepseek-v32")
    assert dsa.is_dsa and dsa.quant_method == "fp8" and dsa.attention_heads == 128
    dense = load_model_config(MODELS / "qwen3-8b" / "config.json")
    assert not dense.is_dsa and dense.kv_heads == 8 and not dense.has_hybrid_layers
    hybrid = parse_model_config(config(text_config={"layer_types": ["linear_attention", "full_attention"]}), "c")
    assert hybrid.has_hybrid_layers
    assert not parse_model_config(json.dumps({"architectures": ["DeepseekV3ForCausalLM"]}), "c").is_dsa


@pytest.mark.parametrize("text", ["{bad", "[1, 2]"])
def test_a_config_that_is_not_a_json_object_is_a_clear_error(text: str) -> None:
    with pytest.raises(ModelConfigError, match=r"c\.json"):
        parse_model_config(text, "c.json")


def test_a_missing_config_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match="cannot read"):
        load_model_config(tmp_path)


def test_the_command_line_config_wins_over_the_profile(tmp_path: Path) -> None:
    profile = ROOT / "tests" / "rules" / "SGD581-context-length-exceeds-model.toml"
    inventory = InventoryContext.load(RULES_INVENTORY)
    assert "SGD581" in {d.rule for d in validate_file(str(profile), inventory).diagnostics}
    roomy = tmp_path / "config.json"
    roomy.write_text(config(max_position_embeddings=262144))
    assert "SGD581" not in {d.rule for d in validate_file(str(profile), inventory, model_config=str(roomy)).diagnostics}


def test_the_host_probe_sends_the_config_and_preflight_reads_it(tmp_path: Path) -> None:
    file = tmp_path / "config.json"
    file.write_text(config(max_position_embeddings=40960))
    out = subprocess.run([sys.executable, "-c", host_facts._MODEL_PROBE, str(file)], capture_output=True,
                         text=True, check=True).stdout
    values = host_facts.parse_key_values(out)
    assert json.loads(values["architectures"]) == ["Qwen3ForCausalLM"]
    facts = HostFacts(model_config_json=values["config_json"])
    found = host_model_config(facts, "gpu1", "/models/m")
    assert found is not None and found.context_length() == 40960 and found.source == "gpu1:/models/m/config.json"
    assert host_model_config(HostFacts(), "gpu1", "/models/m") is None
    loaded = load_profile(ROOT / "tests" / "rules" / "SGD580-model-config-checks-skipped.toml")
    # the host's config is what plan/apply check with: context_length 32768 fits
    assert [d.rule for d in check_launch(loaded, None, "0.5.11", model_config=found)] == []


@pytest.mark.parametrize("with_index", [True, False])
def test_the_checkpoint_size_comes_from_its_index_else_its_files(tmp_path: Path, with_index: bool) -> None:
    (tmp_path / "config.json").write_text(config(max_position_embeddings=40960))
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"\0" * 1000)
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(b"\0" * 24)
    if with_index:
        (tmp_path / "model.safetensors.index.json").write_text('{"metadata": {"total_size": 987654321}}')
    expected = 987654321 if with_index else 1024
    assert load_model_config(tmp_path).weights_bytes == expected
    # the host's probe reads the same, and preflight keeps it with the config
    out = subprocess.run([sys.executable, "-c", host_facts._MODEL_PROBE, str(tmp_path / "config.json")],
                         capture_output=True, text=True, check=True).stdout
    values = host_facts.parse_key_values(out)
    assert int(values["weights_bytes"]) == expected
    facts = HostFacts(model_config_json=values["config_json"], model_weights_bytes=int(values["weights_bytes"]))
    found = host_model_config(facts, "gpu1", "/models/m")
    assert found is not None and found.weights_bytes == expected


def test_a_folder_without_weights_has_no_size(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(config(max_position_embeddings=40960))
    assert load_model_config(tmp_path).weights_bytes is None
