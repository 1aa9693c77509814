"""SGD58x: checks that read the model's config.json (context length, heads against tp, DSA models,
Mamba state, the checkpoint's quantization).

They run when a config is known: from the host at plan/apply (the facts read config.json), or
offline from `validate --model-config DIR` or `deploy.model_config`. Without one they are skipped
and SGD580 says so, never guessed from names.
"""

from __future__ import annotations

from collections.abc import Iterator

from sgdeploy.sglang import models
from sgdeploy.sglang.model_config import ModelConfig
from sgdeploy.sglang.rule import Finding, LaunchContext
from sgdeploy.sglang.rules.common import attention_dp
from sgdeploy.sglang.rules.registry import ERROR, INFO, WARNING, rule
from sgdeploy.sglang.versions import VersionRange

_DSA_KV_DTYPES = ("auto", "bf16", "bfloat16", "fp8_e4m3")
_EXTRA_BUFFER = ("extra_buffer", "extra_buffer_lazy")
MAMBA_STATE_CHECK = VersionRange(since="0.5.21")
DSA_KV_CHECK = VersionRange(since="0.5.8")
# --quantization values SGLang keeps against a checkpoint's different quant_method
# (ModelConfig._verify_quantization's compatible_quantization_methods).
_COMPATIBLE_QUANTIZATION = {
    "modelopt_fp8": {"modelopt"}, "modelopt_fp4": {"modelopt", "fp8"}, "modelopt_mixed": {"modelopt"},
    "nvfp4_online": {"fp8", "modelopt_fp8"}, "minimax_m3_nvfp4": {"mxfp8"}, "petit_nvfp4": {"modelopt"},
    "w8a8_int8": {"compressed-tensors", "compressed_tensors"}, "w8a8_fp8": {"compressed-tensors", "compressed_tensors"},
    "auto-round-int8": {"compressed-tensors", "compressed_tensors"},
}


def _strategy(ctx: LaunchContext) -> str | None:
    for name in ("mamba_radix_cache_strategy", "mamba_scheduler_strategy"):
        if ctx.given(name):
            value = ctx.server[name]
            return value if isinstance(value, str) else None
    return None


def _skipped(ctx: LaunchContext) -> list[str]:
    """The config checks this launch would need (named for the info line)."""
    wanted = []
    if ctx.given("context_length"):
        wanted.append("context_length against the model's maximum")
    if ctx.given("quantization"):
        wanted.append("quantization against the checkpoint's")
    if ctx.given("kv_cache_dtype") and ctx.version in DSA_KV_CHECK:
        wanted.append("the KV cache dtype of DSA models")
    if _strategy(ctx) in _EXTRA_BUFFER and ctx.version in MAMBA_STATE_CHECK:
        wanted.append("the Mamba state an extra_buffer strategy needs")
    if wanted and ctx.int("tp_size", 1) > 1:
        wanted.append("attention heads against tp_size")
    return wanted


@rule("SGD580", "model-config-checks-skipped", INFO,
      "No config.json of the model is known, so the checks that read it were skipped.",
      "pass --model-config DIR (a local copy of the model folder or its config.json) or set "
      "deploy.model_config; plan and apply read it on the host")
def config_checks_skipped(ctx: LaunchContext) -> Iterator[Finding]:
    skipped = _skipped(ctx) if ctx.model_config is None else []
    if skipped:
        yield Finding("server", "the model's config.json is not known here: not checked: " + "; ".join(skipped))


@rule("SGD581", "context-length-exceeds-model", ERROR,
      "context_length is larger than the context length SGLang derives from the model's config.json.",
      "lower context_length to the model's maximum, or set SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 in [env] "
      "if the model really supports it")
def context_length_exceeds(ctx: LaunchContext) -> Iterator[Finding]:
    config, wanted = ctx.model_config, ctx.get("context_length")
    if config is None or not isinstance(wanted, int) or isinstance(wanted, bool):
        return
    derived = config.context_length()
    if wanted > derived and not ctx.env_true("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"):
        yield Finding("server.context_length", f"User-specified context_length ({wanted}) is greater than the derived "
                      f"context_length ({derived}) of {config.source} (max_position_embeddings and rope scaling); "
                      "SGLang refuses it (all releases)")


def _attention_tp(ctx: LaunchContext) -> int:
    tp = max(ctx.int("tp_size", 1), 1)
    dp = ctx.int("attn_dp_size", 1) if ctx.int("attn_dp_size", 1) > 1 else ctx.int("dp_size", 1)
    return tp // dp if attention_dp(ctx) and dp > 0 and tp % dp == 0 else tp


def _heads_problem(config: ModelConfig, tp: int) -> str | None:
    heads, kv = config.attention_heads, config.kv_heads
    if heads is None or tp <= 1:
        return None
    if heads % tp:
        return f"num_attention_heads ({heads}) is not divisible by the attention tensor-parallel size ({tp})"
    if kv is not None and kv < heads and (tp % kv if kv < tp else kv % tp):
        return (f"num_key_value_heads ({kv}) and the attention tensor-parallel size ({tp}) do not divide each other "
                "(KV heads are split when there are at least tp of them, replicated otherwise)")
    return None


@rule("SGD582", "heads-not-divisible-by-tp", ERROR,
      "The model's attention (and KV) heads must split evenly over the attention tensor-parallel ranks.",
      "choose a tp_size that divides num_attention_heads (and divides or is divided by num_key_value_heads)")
def heads_not_divisible(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.model_config is None:
        return
    problem = _heads_problem(ctx.model_config, _attention_tp(ctx))
    if problem:
        yield Finding("server.tp_size", f"{problem} in {ctx.model_config.source}; the server fails when it builds "
                      "the attention layers (all releases)")


@rule("SGD583", "dsa-kv-cache-dtype", ERROR,
      "DeepSeek sparse attention (DSA) models take only a bf16 or fp8_e4m3 KV cache.",
      "set kv_cache_dtype = \"fp8_e4m3\" or \"bfloat16\", or leave it \"auto\"", DSA_KV_CHECK)
def dsa_kv_cache_dtype(ctx: LaunchContext) -> Iterator[Finding]:
    config, dtype = ctx.model_config, ctx.get("kv_cache_dtype")
    if config is not None and config.is_dsa and isinstance(dtype, str) and dtype not in _DSA_KV_DTYPES:
        yield Finding("server.kv_cache_dtype", f"{config.architecture} with index_topk is a DSA model: 'DeepSeek DSA "
                      f"only supports bf16/bfloat16 or fp8_e4m3 kv_cache_dtype' (got {dtype}; SGLang 0.5.8 and later)")


def _has_mamba_state(config: ModelConfig, architecture: str | None) -> bool:
    return models.is_mamba_hybrid(config.architecture) or models.is_mamba_hybrid(architecture) \
        or config.has_hybrid_layers


@rule("SGD584", "mamba-strategy-without-mamba-state", ERROR,
      "An extra_buffer Mamba radix-cache strategy on a model without Mamba state is refused.",
      "remove mamba_radix_cache_strategy (auto is right for models without Mamba layers)", MAMBA_STATE_CHECK)
def mamba_strategy_without_state(ctx: LaunchContext) -> Iterator[Finding]:
    config, strategy = ctx.model_config, _strategy(ctx)
    if config is None or strategy not in _EXTRA_BUFFER or ctx.on("disable_radix_cache"):
        return
    if not _has_mamba_state(config, ctx.architecture):
        yield Finding("server.mamba_radix_cache_strategy", f"--mamba-radix-cache-strategy {strategy} needs mamba "
                      f"state, got {config.architecture} ({config.source} declares no Mamba or linear-attention "
                      "layers; SGLang 0.5.21 and later)")


def _override_family(quantization: str) -> bool:
    """--quantization values that SGLang's checkpoint detection may turn into another method."""
    return "marlin" in quantization or quantization in ("moe_wna16", "humming", "quark_mxfp4")


@rule("SGD585", "quantization-differs-from-checkpoint", WARNING,
      "quantization names another method than the checkpoint's quantization_config declares.",
      "remove quantization (SGLang reads the checkpoint's method) or use one compatible with it")
def quantization_differs(ctx: LaunchContext) -> Iterator[Finding]:
    config, given = ctx.model_config, ctx.get("quantization")
    if config is None or not isinstance(given, str) or not given or config.quant_method is None:
        return
    given, declared = given.lower(), config.quant_method
    if given == declared or declared in _COMPATIBLE_QUANTIZATION.get(given, set()) or _override_family(given):
        return
    yield Finding("server.quantization", f"the checkpoint declares quant_method '{declared}' ({config.source}); "
                  f"SGLang raises 'Quantization method specified in the model config ({declared}) does not match the "
                  f"quantization method specified in the `quantization` argument ({given})' unless a checkpoint "
                  "override of that method applies")
