"""SGD122's token budget read against the chunked-prefill size, and SGD121's intel_xpu prefill on MLA models."""

from __future__ import annotations

from pathlib import Path

import pytest

from sgdeploy.profile.validate import InventoryContext, validate_file

ROOT = Path(__file__).resolve().parent
INVENTORY = ROOT / "inventory.rules.toml"
MODELS = ROOT / "rules" / "models"
MORI_8192 = 'SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK = "8192"'


def errors(tmp_path: Path, host: str, server: str, env: str = "", model_config: str | None = None,
           deploy: str = "") -> set[str]:
    deploy = f'host = "{host}"\nunit = "sglang"\npython = "/opt/sglang/bin/python3"\n{deploy}\n'
    if model_config:
        deploy += f'model_config = "{MODELS / model_config}"\n'
    text = f'[deploy]\n{deploy}\n[server]\nmodel_path = "/models/m"\n{server}\n'
    if env:
        text += f"\n[env]\n{env}\n"
    path = tmp_path / "p.toml"
    path.write_text(text, encoding="utf-8")
    result = validate_file(str(path), InventoryContext.load(INVENTORY), None)
    return {d.rule for d in result.diagnostics if d.severity.name == "ERROR"}


@pytest.mark.parametrize(("host", "server", "env", "fires"), [
    ("h200-new", 'tp_size = 8\nmoe_a2a_backend = "mori"', "", True),  # 8192 > 4096 (0.5.23)
    ("h200", 'tp_size = 8\nmoe_a2a_backend = "mori"', "", True),  # 0.5.11's message
    ("b200", 'tp_size = 8\nmoe_a2a_backend = "mori"', MORI_8192, True),
    ("h200-new", 'tp_size = 8\nmoe_a2a_backend = "mori"', MORI_8192, False),
    ("a6000-new", 'tp_size = 2\nmoe_a2a_backend = "mori"', "", False),  # 48 GiB: 4096
    ("h200-new", 'tp_size = 8\nmoe_a2a_backend = "mori"\nchunked_prefill_size = 4096', "", False),
    ("h200-new", 'tp_size = 8\nmoe_a2a_backend = "mori"\nchunked_prefill_size = -1', "", False),
    # DP attention divides the chunk before the check: 8192 // 2
    ("h200-new", 'tp_size = 8\ndp_size = 2\nenable_dp_attention = true\nmoe_a2a_backend = "mori"', "", False),
    ("h200-new", 'tp_size = 8\nmoe_a2a_backend = "mori"\ndisaggregation_mode = "decode"', "", False),
])
def test_mori_budget(tmp_path: Path, host: str, server: str, env: str, fires: bool) -> None:
    assert ("SGD122" in errors(tmp_path, host, server, env)) is fires


@pytest.mark.parametrize(("server", "model", "fires"), [
    ('prefill_attention_backend = "intel_xpu"', "deepseek-v3", True),
    ('attention_backend = "intel_xpu"', "deepseek-v3", True),
    ('attention_backend = "intel_xpu"\ndevice = "xpu"', "deepseek-v3", False),  # may fall back to triton
    ('decode_attention_backend = "intel_xpu"', "deepseek-v3", False),
    ('prefill_attention_backend = "intel_xpu"', "qwen3-8b", False),  # not MLA
])
def test_intel_xpu_prefill_on_mla(tmp_path: Path, server: str, model: str, fires: bool) -> None:
    found = errors(tmp_path, "h200", f"tp_size = 8\n{server}", model_config=model)
    assert ("SGD121" in found) is fires


@pytest.mark.parametrize(("arch", "server", "env", "fires"), [
    ("Qwen3MoeForCausalLM", "chunked_prefill_size = 16384", "", True),  # 16384 > 8192
    ("Qwen3MoeForCausalLM", "", "", False),  # the H200's default 8192, aligned to tp 8
    ("Qwen3MoeForCausalLM", "chunked_prefill_size = 16384",
     'SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK = "16384"', False),
    ("DeepseekV3ForCausalLM", "chunked_prefill_size = 16384", "", False),  # has a fused-MoE fallback
    ("Qwen3MoeForCausalLM", "chunked_prefill_size = 16384\ndp_size = 2\nenable_dp_attention = true", "", False),
])
def test_mega_moe_prefill_budget(tmp_path: Path, arch: str, server: str, env: str, fires: bool) -> None:
    launch = f'tp_size = 8\nmoe_a2a_backend = "megamoe"\n{server}'
    deploy = f'model_architecture = "{arch}"'
    assert ("SGD122" in errors(tmp_path, "h200-new", launch, env, deploy=deploy)) is fires


@pytest.mark.parametrize(("server", "fires"), [
    ("speculative_eagle_topk = 4", True),  # asserted without a speculative algorithm too (0.5.22+)
    ("speculative_eagle_topk = 1", False),
])
def test_unified_memory_tree_topk(tmp_path: Path, server: str, fires: bool) -> None:
    found = errors(tmp_path, "h200-new", f"tp_size = 8\nenable_unified_memory = true\n{server}")
    assert ("SGD552" in found) is fires
