"""SGD58x: checks that read the model's config.json (context length, heads against tp, DSA models,
Mamba state, the checkpoint's quantization).

They run when a config is known: from the host at plan/apply (the facts read config.json), or
offline from `validate --model-config DIR` or `deploy.model_config`. Without one they are skipped
and SGD580 says so, never guessed from names.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

from sgdeploy.sglang import models
from sgdeploy.sglang.facts import fact
from sgdeploy.sglang.model_config import ModelConfig
from sgdeploy.sglang.rule import Finding, LaunchContext
from sgdeploy.sglang.rules.common import attention_dp, radix_cache_off
from sgdeploy.sglang.rules.kv_cache import kv4_model_unknown
from sgdeploy.sglang.rules.parallelism import checkpoint_quantization_unknown
from sgdeploy.sglang.rules.registry import ERROR, INFO, WARNING, rule
from sgdeploy.sglang.rules.sites import Refusal, refusal_rule
from sgdeploy.sglang.versions import VersionRange

_DSA_KV_DTYPES = ("auto", "bf16", "bfloat16", "fp8_e4m3")
_EXTRA_BUFFER = ("extra_buffer", "extra_buffer_lazy")
MAMBA_STATE_CHECK = VersionRange(since="0.5.21")
DSA_KV_CHECK = VersionRange(since="0.5.8")
# --quantization values SGLang keeps against a checkpoint's different quant_method
# (ModelConfig._verify_quantization's compatible_quantization_methods).
_COMPATIBLE_QUANTIZATION = {
    "modelopt_fp8": {"modelopt"},
    "modelopt_fp4": {"modelopt", "fp8"},
    "modelopt_mixed": {"modelopt"},
    "nvfp4_online": {"fp8", "modelopt_fp8"},
    "minimax_m3_nvfp4": {"mxfp8"},
    "petit_nvfp4": {"modelopt"},
    "w8a8_int8": {"compressed-tensors", "compressed_tensors"},
    "w8a8_fp8": {"compressed-tensors", "compressed_tensors"},
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
    elif checkpoint_quantization_unknown(ctx):
        wanted.append("the checkpoint's quantization the MoE runner backend needs")
    if kv4_model_unknown(ctx):
        wanted.append("whether the model uses MLA, for the FP4 KV cache's attention backends")
    if ctx.given("kv_cache_dtype") and ctx.version in DSA_KV_CHECK:
        wanted.append("the KV cache dtype of DSA models")
    extra_buffer = _strategy(ctx) in _EXTRA_BUFFER and ctx.version in MAMBA_STATE_CHECK
    if extra_buffer and _mamba_state(ctx) is None:
        wanted.append("the Mamba state an extra_buffer strategy needs")
    sparse = ctx.on("enable_dsa_cache_layer_split") or (
        ctx.on("enable_hisparse") and ctx.version in _HISPARSE_MODEL_CHECK)
    if sparse and _sparse_unknown(ctx):
        wanted.append("the sparse-attention model HiSparse needs")
    if ctx.on("enable_encoder_swa_bounded_replay") and _v41(ctx) is None:
        wanted.append("the DeepSeek-V4.1 model_type the encoder SWA replay needs")
    if ctx.on("enable_cp_decode_attn_tp") and _declared(ctx) is None:
        wanted.append("the model an option of DeepSeek V4 / GLM-5 needs")
    if _attention_tp(ctx) > 1:  # every model's heads must split over the attention ranks
        wanted.append("attention heads against tp_size")
    return wanted


@rule("SGD580", "model-config-checks-skipped", INFO,
      "No config.json of the model is known, so the checks that read it were skipped.",
      "pass --model-config DIR (a local copy of the model folder or its config.json) or set "
      "deploy.model_config; plan and apply read it on the host")
def config_checks_skipped(ctx: LaunchContext) -> Iterator[Finding]:
    sized = bool(ctx.host and (ctx.host.gpu_memory_gib or ctx.host.gpu))  # SGD511 could run
    if ctx.model_config is None:
        skipped = [*_skipped(ctx), *(["the checkpoint's size against GPU memory"] if sized else [])]
        if skipped:
            yield Finding("server", "the model's config.json is not known here: not "
                                    "checked: " + "; ".join(skipped))
    elif sized and ctx.model_config.weights_bytes is None:
        yield Finding("server", f"no safetensors index or files beside {ctx.model_config.source}: "
                      "not checked: the checkpoint's size against GPU memory")


@rule("SGD581", "context-length-exceeds-model", ERROR,
      "context_length is larger than the context length SGLang derives from the model's "
      "config.json.",
      "lower context_length to the model's maximum, or set "
      "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 in [env] if the model really supports it")
def context_length_exceeds(ctx: LaunchContext) -> Iterator[Finding]:
    config, wanted = ctx.model_config, ctx.get("context_length")
    if config is None or not isinstance(wanted, int) or isinstance(wanted, bool):
        return
    derived = config.context_length()
    if wanted > derived and not ctx.env_true("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"):
        yield Finding("server.context_length", f"User-specified context_length ({wanted}) is "
                      f"greater than the derived context_length ({derived}) of {config.source} "
                      "(max_position_embeddings and rope scaling); SGLang refuses it (all "
                      "releases)")


def _attention_tp(ctx: LaunchContext) -> int:
    tp = max(ctx.int("tp_size", 1), 1)
    dp = ctx.int("attn_dp_size", 1) if ctx.int("attn_dp_size", 1) > 1 else ctx.int("dp_size", 1)
    return tp // dp if attention_dp(ctx) and dp > 0 and tp % dp == 0 else tp


def _heads_problem(config: ModelConfig, tp: int) -> str | None:
    heads, kv = config.attention_heads, config.kv_heads
    if heads is None or tp <= 1:
        return None
    if heads % tp:
        return (f"num_attention_heads ({heads}) is not divisible by the attention tensor-parallel "
                f"size ({tp})")
    if kv is not None and kv < heads and (tp % kv if kv < tp else kv % tp):
        return (f"num_key_value_heads ({kv}) and the attention tensor-parallel size ({tp}) do not "
                "divide each other (KV heads are split when there are at least tp of them, "
                "replicated otherwise)")
    return None


@rule("SGD582", "heads-not-divisible-by-tp", ERROR,
      "The model's attention (and KV) heads must split evenly over the attention tensor-parallel "
      "ranks.",
      "choose a tp_size that divides num_attention_heads (and divides or is divided by "
      "num_key_value_heads)")
def heads_not_divisible(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.model_config is None:
        return
    problem = _heads_problem(ctx.model_config, _attention_tp(ctx))
    if problem:
        yield Finding("server.tp_size", f"{problem} in {ctx.model_config.source}; the server fails "
                      "when it builds the attention layers (all releases)")


@rule("SGD583", "dsa-kv-cache-dtype", ERROR,
      "DeepSeek sparse attention (DSA) models take only a bf16 or fp8_e4m3 KV cache.",
      "set kv_cache_dtype = \"fp8_e4m3\" or \"bfloat16\", or leave it \"auto\"", DSA_KV_CHECK)
def dsa_kv_cache_dtype(ctx: LaunchContext) -> Iterator[Finding]:
    config, dtype = ctx.model_config, ctx.get("kv_cache_dtype")
    if (
        config is not None
        and config.is_dsa
        and isinstance(dtype, str)
        and dtype not in _DSA_KV_DTYPES
    ):
        yield Finding("server.kv_cache_dtype", f"{config.architecture} with index_topk is a DSA "
                      "model: 'DeepSeek DSA only supports bf16/bfloat16 or fp8_e4m3 "
                      f"kv_cache_dtype' (got {dtype}; SGLang 0.5.8 and later)")


def _declared(ctx: LaunchContext) -> str | None:
    """The model's architecture: config.json's, else deploy.model_architecture."""
    return (ctx.model_config.architecture if ctx.model_config else None) or ctx.architecture


def _has_mamba_state(config: ModelConfig, architecture: str | None) -> bool:
    return models.is_mamba_hybrid(config.architecture) or models.is_mamba_hybrid(architecture) \
        or config.has_hybrid_layers


# Hybrids whose Mamba layers SGLang finds in config.json (Granite's layer_types), not by name.
_STATE_FROM_CONFIG = frozenset({"GraniteMoeHybridForCausalLM"})


def _mamba_state(ctx: LaunchContext) -> bool | None:
    """Whether the model has Mamba state: from config.json, else from the declared architecture
    against the release's lists (facts: mamba_state_archs, mamba_extra_buffer_archs); None when
    only config.json can tell."""
    if ctx.model_config is not None:
        return _has_mamba_state(ctx.model_config, ctx.architecture)
    arch = ctx.architecture
    if arch is None or arch in _STATE_FROM_CONFIG:
        return None
    named = {*(fact("mamba_state_archs", ctx.version) or ()),
             *(fact("mamba_extra_buffer_archs", ctx.version) or ())}
    return arch in named or models.is_mamba_hybrid(arch)


@rule("SGD584", "mamba-strategy-without-mamba-state", ERROR,
      "An extra_buffer Mamba radix-cache strategy on a model without Mamba state is refused.",
      "remove mamba_radix_cache_strategy (auto is right for models without Mamba "
      "layers)", MAMBA_STATE_CHECK)
def mamba_strategy_without_state(ctx: LaunchContext) -> Iterator[Finding]:
    strategy = _strategy(ctx)
    if strategy not in _EXTRA_BUFFER or radix_cache_off(ctx) or _mamba_state(ctx) is not False:
        return
    config = ctx.model_config
    why = (f"{config.source} declares no Mamba or linear-attention layers" if config else
           f"deploy.model_architecture; SGLang {ctx.catalog.version} lists it with no Mamba state")
    yield Finding("server.mamba_radix_cache_strategy",
                  f"--mamba-radix-cache-strategy {strategy} needs mamba state, got "
                  f"{_declared(ctx)} ({why}; SGLang 0.5.21 and later)")


_GPTQ_AWQ = ("gptq", "awq", "marlin", "gptq_marlin", "awq_marlin")


def _override_possible(given: str, declared: str, config: ModelConfig | None) -> bool:
    """Whether one of SGLang's checkpoint detections (override_quantization_method) may replace the
    given method before the comparison: the Marlin conversions and moe_wna16 take only GPTQ/AWQ
    checkpoints, ModelOpt's detection a checkpoint with quant_algo or a ModelOpt method, humming
    anything but MXFP4; quark_mxfp4 requantizes whatever the checkpoint holds (0.5.18+)."""
    if declared.startswith("modelopt") or given in ("humming", "quark_mxfp4"):
        return True
    if "marlin" in given or given == "moe_wna16":
        return declared in _GPTQ_AWQ
    if given == "modelopt":
        quant = config.value("quantization_config") if config else None
        return isinstance(quant, dict) and bool(quant.get("quant_algo"))
    return False


def _quantization_mismatch(ctx: LaunchContext) -> tuple[str, str] | None:
    """(given, declared) when --quantization names another method than the checkpoint."""
    config, given = ctx.model_config, ctx.get("quantization")
    if config is None or not isinstance(given, str) or not given or config.quant_method is None:
        return None
    given, declared = given.lower(), config.quant_method
    if given == declared or declared in _COMPATIBLE_QUANTIZATION.get(given, set()):
        return None
    return given, declared


def _mismatch_words(given: str, declared: str) -> str:
    return (f"'Quantization method specified in the model config ({declared}) does not match the "
            f"quantization method specified in the `quantization` argument ({given}).'")


@rule("SGD585", "quantization-differs-from-checkpoint", ERROR,
      "quantization names another method than the checkpoint's quantization_config declares, and "
      "no checkpoint detection of SGLang can reconcile them.",
      "remove quantization (SGLang reads the checkpoint's method) or use one compatible with it")
def quantization_differs(ctx: LaunchContext) -> Iterator[Finding]:
    mismatch = _quantization_mismatch(ctx)
    if mismatch and not _override_possible(*mismatch, ctx.model_config):
        yield Finding("server.quantization", "the checkpoint declares quant_method "
                      f"'{mismatch[1]}' "
                      f"({ctx.model_config.source if ctx.model_config else 'config.json'}); SGLang "
                      f"refuses: {_mismatch_words(*mismatch)} (all releases)")


@rule("SGD586", "quantization-may-differ-from-checkpoint", WARNING,
      "quantization names another method than the checkpoint's, where a checkpoint detection of "
      "SGLang may replace it first (Marlin conversions, ModelOpt, moe_wna16, humming, online "
      "requantization).",
      "remove quantization and let SGLang read the checkpoint's method, or check that the "
      "detection applies")
def quantization_may_differ(ctx: LaunchContext) -> Iterator[Finding]:
    mismatch = _quantization_mismatch(ctx)
    if mismatch and _override_possible(*mismatch, ctx.model_config):
        yield Finding("server.quantization", "the checkpoint declares quant_method "
                      f"'{mismatch[1]}'; unless SGLang's detection for '{mismatch[0]}' takes this "
                      f"checkpoint it raises {_mismatch_words(*mismatch)}")


# ModelConfig._verify_quantization: the method must be a key of QUANTIZATION_METHODS, a registry
# built when SGLang loads (facts: quantization_methods, as on CUDA), narrower than the choices.
def _detectable(given: str) -> bool:
    """A checkpoint detection may turn the method into one of the registry (GPTQ/AWQ to Marlin)."""
    return "marlin" in given or given in ("gptq", "awq")


def _unknown_method(ctx: LaunchContext) -> str | None:
    given, methods = ctx.get("quantization"), fact("quantization_methods", ctx.version)
    unset = not isinstance(given, str) or given in ("", "unquant")
    if unset or methods is None or given in methods:
        return None
    return given if ctx.get("device") in (None, "cuda", "auto") else None


@rule("SGD593", "quantization-method-unknown", ERROR,
      "quantization names a method the release's quantization registry lacks on CUDA, though "
      "argparse takes it.",
      "use a method of the list in the message, or remove quantization and let SGLang read the "
      "checkpoint's")
def quantization_method_unknown(ctx: LaunchContext) -> Iterator[Finding]:
    given, config = _unknown_method(ctx), ctx.model_config
    if given is None or (config is None and _detectable(given)):
        return
    declared = config.quant_method if config is not None else None
    if declared and _override_possible(given, declared, config):
        return
    methods = fact("quantization_methods", ctx.version) or []
    yield Finding("server.quantization",
                  f"SGLang {ctx.catalog.version} refuses when it builds the model config: "
                  f"'Unknown quantization method: {given}. Must be one of {methods}.' "
                  "(its registry on CUDA; the --quantization choices list more)")


# -------------------------------------------------------------------------- sparse-attention models
# is_deepseek_dsa's architectures (with index_topk), in every release up to 0.5.23; is_deepseek_v4
# (0.5.12 and later) and is_minimax_sparse (0.5.21 and later) need no index_topk.
_DSA_ARCHITECTURES = frozenset(
    {
        "DeepseekV3ForCausalLM",
        "DeepseekV32ForCausalLM",
        "DeepseekV3ForCausalLMNextN",
        "MistralLarge3ForCausalLM",
        "PixtralForConditionalGeneration",
        "GlmMoeDsaForCausalLM",
        "GlmMoeDsaForCausalLMNextN",
        "Glm5NextForConditionalGenerationNextN",
        "Glm5NextForConditionalGeneration",
        "LongcatFlashForCausalLM",
        "LongcatFlashForCausalLMNextN",
        "Dots3NoteForCausalLM",
        "Dots3NoteForCausalLMNextN",
        "HYV4ForCausalLM",
        "HYV4ForCausalLMNextN",
    }
)
_DEEPSEEK_V4 = frozenset(
    {"DeepseekV4ForCausalLM", "DeepseekV4ForCausalLMNextN", "DeepseekV4ForCausalLMDSpark"}
)
_MINIMAX_SPARSE = frozenset(
    {"MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForConditionalGeneration"}
)
_HISPARSE_MODEL_CHECK = VersionRange(since="0.5.10")


def _dsa(config: ModelConfig) -> bool:
    return config.architecture in _DSA_ARCHITECTURES and config.raw.get("index_topk") is not None


def _not_sparse(*also: frozenset[str]) -> Callable[[LaunchContext], bool]:
    """None of the sparse-attention models the check accepts: by config.json, else by the declared
    architecture when no DSA model has it (a DSA architecture needs index_topk from config.json)."""
    def check(ctx: LaunchContext) -> bool:
        config, arch = ctx.model_config, ctx.architecture
        if config is not None:
            return not _dsa(config) and not any(config.architecture in names for names in also)
        if arch is None or arch in _DSA_ARCHITECTURES:
            return False
        return not any(arch in names for names in also)
    return check


def _sparse_unknown(ctx: LaunchContext) -> bool:
    """Only config.json can tell whether the model is a sparse-attention one."""
    arch = ctx.architecture
    return ctx.model_config is None and (arch is None or arch in _DSA_ARCHITECTURES)


def _hisparse(condition: Callable[[LaunchContext], bool]) -> Callable[[LaunchContext], bool]:
    return lambda ctx: ctx.on("enable_hisparse") and condition(ctx)


# _dsa_split_backend_resolution (0.5.22+): the DeepSeek-family DSA models it fills the DSA backends
# for.
_DSA_TILELANG = VersionRange(since="0.5.22")
_DEEPSEEK_FAMILY = frozenset(
    {
        "DeepseekV3ForCausalLM",
        "DeepseekV32ForCausalLM",
        "KimiK25ForConditionalGeneration",
        "MistralLarge3ForCausalLM",
        "PixtralForConditionalGeneration",
        "GlmMoeDsaForCausalLM",
        "Glm5NextForConditionalGeneration",
    }
)


def _dsa_backends(ctx: LaunchContext) -> tuple[object, object]:
    """The DSA prefill/decode backends: given, else the fill for an fp8 KV cache (never
    tilelang)."""
    return ctx.get("dsa_prefill_backend") or "default", ctx.get("dsa_decode_backend") or "default"


def _tilelang_fp8(condition: Callable[[LaunchContext], bool]) -> Callable[[LaunchContext], bool]:
    """A DeepSeek-family DSA model (config.json) with an fp8_e4m3 KV cache and a tilelang DSA
    backend, on CUDA."""
    def check(ctx: LaunchContext) -> bool:
        config = ctx.model_config
        return (config is not None and config.architecture in _DEEPSEEK_FAMILY and _dsa(config)
                and ctx.get("kv_cache_dtype") == "fp8_e4m3" and "tilelang" in _dsa_backends(ctx)
                and ctx.get("device") in (None, "cuda") and condition(ctx))
    return check


SPARSE_ATTENTION_MODELS = (
    Refusal(
        "check_server_args: --enable-hisparse is only supported for DSA (DeepSeek Sparse "
        "Attention) models now(e.g., DeepSeek V3.2, "
        "GLM-5).",
        "enable_hisparse",
        _hisparse(_not_sparse()),
        "--enable-hisparse is only supported for DSA (DeepSeek Sparse Attention) models "
        "now(e.g., DeepSeek V3.2, GLM-5).",
        VersionRange(since="0.5.10", until="0.5.12"),
    ),
    Refusal(
        "validate_hisparse: --enable-hisparse is only supported for DSA (DeepSeek Sparse "
        "Attention) models (e.g., DeepSeek V3.2, GLM-5) and DeepSeek V4 "
        "now.",
        "enable_hisparse",
        _hisparse(_not_sparse(_DEEPSEEK_V4)),
        "--enable-hisparse is only supported for DSA (DeepSeek Sparse Attention) models (e.g., "
        "DeepSeek V3.2, GLM-5) and DeepSeek V4 "
        "now.",
        VersionRange(since="0.5.12", until="0.5.21"),
    ),
    Refusal(
        "validate_hisparse: --enable-hisparse is only supported for DSA (DeepSeek Sparse "
        "Attention) models (e.g., DeepSeek V3.2, GLM-5), DeepSeek V4, and MiniMax M3 "
        "now.",
        "enable_hisparse",
        _hisparse(_not_sparse(_DEEPSEEK_V4, _MINIMAX_SPARSE)),
        "--enable-hisparse is only supported for DSA (DeepSeek Sparse Attention) models (e.g., "
        "DeepSeek V3.2, GLM-5), DeepSeek V4, and MiniMax M3 "
        "now.",
        VersionRange(since="0.5.21"),
    ),
    Refusal(
        "handle_model_specific_adjustments: --enable-dsa-cache-layer-split is only supported "
        "for DSA (DeepSeek Sparse Attention) models.",
        "enable_dsa_cache_layer_split",
        lambda ctx: ctx.on("enable_dsa_cache_layer_split") and _not_sparse()(ctx),
        "--enable-dsa-cache-layer-split is only supported for DSA (DeepSeek Sparse Attention) "
        "models.",
        VersionRange(since="0.5.16"),
    ),
    Refusal(
        "check_dsa_backend_constraints: CUDA TileLang FP8 KV requires both DSA backends to be "
        "tilelang; raw and scaled FP8 KV layouts cannot be mixed.",
        "dsa_decode_backend",
        _tilelang_fp8(lambda ctx: _dsa_backends(ctx) != ("tilelang", "tilelang")),
        "CUDA TileLang FP8 KV requires both DSA backends to be tilelang; raw and scaled FP8 KV "
        "layouts cannot be mixed.",
        _DSA_TILELANG,
    ),
    Refusal(
        "check_dsa_backend_constraints: CUDA TileLang FP8 KV does not support --dcp-size > 1.",
        "dcp_size",
        _tilelang_fp8(
            lambda ctx: (
                _dsa_backends(ctx) == ("tilelang", "tilelang") and ctx.int("dcp_size", 1) > 1
            )
        ),
        "CUDA TileLang FP8 KV does not support --dcp-size > 1.",
        _DSA_TILELANG,
    ),
    Refusal(
        "dsa_split_backend_resolution: CUDA TileLang FP8 KV does not support HiSparse.",
        "enable_hisparse",
        _hisparse(_tilelang_fp8(lambda ctx: True)),
        "CUDA TileLang FP8 KV does not support HiSparse.",
        _DSA_TILELANG,
    ),
)

refusal_rule("SGD587", "sparse-attention-model-options", "HiSparse and the DSA cache layer split "
             "need a sparse-attention model (DSA with index_topk, DeepSeek V4, MiniMax M3 sparse): "
             "read from config.json.",
             "remove the option, or serve a model it supports", SPARSE_ATTENTION_MODELS)


# ------------------------------------------------------------------ what ModelConfig itself refuses
@rule("SGD588", "model-override-args-not-json", ERROR,
      "json_model_override_args must be a JSON object: SGLang decodes it when it builds the model "
      "config.",
      "write json_model_override_args as a JSON object, e.g. '{\"max_position_embeddings\": "
      "65536}'")
def model_override_args_json(ctx: LaunchContext) -> Iterator[Finding]:
    value = ctx.server.get("json_model_override_args")
    if not isinstance(value, str):
        return
    try:
        json.loads(value)
    except ValueError as exc:
        yield Finding("server.json_model_override_args", "json_model_override_args is not JSON "
                      f"({exc}); SGLang's json.loads raises when it builds the model config (all "
                      "releases)")


# DllmConfig.from_server_args: the diffusion LLMs SGLang knows, per release.
_DLLM_ARCHITECTURES = (
    (VersionRange(until="0.5.21"), ("LLaDA2MoeModelLM", "SDARForCausalLM", "SDARMoeForCausalLM")),
    (VersionRange(since="0.5.21"), ("LLaDA2MoeModelLM", "SDARForCausalLM", "SDARMoeForCausalLM",
                                    "DiffusionGemmaForBlockDiffusion")),
)
# Resolution builds the diffusion config from 0.5.10; up to 0.5.14 only while the radix cache is on.
_DLLM_CHECK = VersionRange(since="0.5.10")
_DLLM_ONLY_WITH_RADIX = VersionRange(until="0.5.15")


@rule("SGD589", "diffusion-llm-architecture", ERROR,
      "dllm_algorithm needs a diffusion LLM SGLang knows (by the architecture in config.json).",
      "remove dllm_algorithm, or serve one of the diffusion LLMs the message lists", _DLLM_CHECK)
def diffusion_llm_architecture(ctx: LaunchContext) -> Iterator[Finding]:
    if not ctx.get("dllm_algorithm"):
        return
    if ctx.version in _DLLM_ONLY_WITH_RADIX and ctx.on("disable_radix_cache"):
        return
    arch = ctx.model_config.architecture if ctx.model_config else ctx.architecture
    known = next(names for versions, names in _DLLM_ARCHITECTURES if ctx.version in versions)
    if arch and arch not in known:
        yield Finding("server.dllm_algorithm", f"SGLang raises 'Unknown diffusion LLM: {arch}' (it "
                      f"knows {', '.join(known)}; SGLang 0.5.10 and later)")


# ModelConfig._validate_quantize_and_serve_config: the feature is switched off in every release that
# has it.
@rule("SGD590", "quantize-and-serve-disabled", ERROR,
      "quantize_and_serve is refused by every SGLang release that has it.",
      "remove quantize_and_serve: quantize and export the model first, then serve the exported "
      "model",
      VersionRange(since="0.5.4"))
def quantize_and_serve(ctx: LaunchContext) -> Iterator[Finding]:
    if not ctx.on("quantize_and_serve"):
        return
    if str(ctx.get("quantization") or "").lower() in (
        "modelopt",
        "modelopt_fp8",
        "modelopt_fp4",
        "modelopt_mixed",
        "nvfp4_online",
    ):
        words = ("quantize_and_serve functionality is currently disabled due to compatibility "
                 "issues. Please use the separate quantize-then-deploy workflow instead.")
    else:
        words = ("quantize_and_serve requires ModelOpt quantization (set with --quantization "
                 "{modelopt, ...})")
    yield Finding("server.quantize_and_serve", f"SGLang 0.5.4 and later refuses: '{words}'")


# --------------------------------------------------------------------------- language-model-only
# ServerArgs.LANGUAGE_MODEL_ONLY_ARCHITECTURES per release, read from the wheels.
_LANGUAGE_MODEL_ONLY = (
    (VersionRange(since="0.5.18", until="0.5.20"), ("MuseGlimmerForConditionalGeneration",)),
    (
        VersionRange(since="0.5.20", until="0.5.22"),
        (
            "Cosmos3EdgeForConditionalGeneration",
            "Cosmos3ForConditionalGeneration",
            "MuseGlimmerForConditionalGeneration",
        ),
    ),
    (
        VersionRange(since="0.5.22"),
        (
            "Cosmos3EdgeForConditionalGeneration",
            "Cosmos3ForConditionalGeneration",
            "DeepseekV4ForCausalLM",
            "MuseGlimmerForConditionalGeneration",
        ),
    ),
)
_LANGUAGE_MODEL_ONLY_CHECK = VersionRange(since="0.5.18")
_WITHOUT_LANGUAGE_MODEL_ONLY = ("encoder_only", "language_only", "enable_prefix_mm_cache",
                                "enable_broadcast_mm_inputs_process", "mm_enable_dp_encoder")


def _architectures(ctx: LaunchContext) -> list[str]:
    if ctx.model_config is not None:
        names = ctx.model_config.raw.get("architectures")
        return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []
    return [ctx.architecture] if ctx.architecture else []


def _lmo_supported(ctx: LaunchContext) -> tuple[str, ...]:
    return next((names for versions, names in _LANGUAGE_MODEL_ONLY if ctx.version in versions), ())


def _lmo_unsupported(ctx: LaunchContext) -> bool:
    archs = _architectures(ctx)
    return bool(archs) and not any(a in _lmo_supported(ctx) for a in archs)


def _lmo_combined(ctx: LaunchContext) -> str | None:
    return next((f for f in _WITHOUT_LANGUAGE_MODEL_ONLY if ctx.on(f)), None)


def _lmo(condition: Callable[[LaunchContext], bool]) -> Callable[[LaunchContext], bool]:
    return lambda ctx: ctx.on("language_model_only") and condition(ctx)


LANGUAGE_MODEL_ONLY = (
    Refusal(
        "handle_language_model_only: --language-model-only cannot be combined with {}",
        lambda ctx: _lmo_combined(ctx) or "language_model_only",
        _lmo(lambda ctx: _lmo_combined(ctx) is not None),
        lambda ctx: (
            "--language-model-only cannot be combined with "
            f"--{str(_lmo_combined(ctx)).replace('_', '-')}"
        ),
        _LANGUAGE_MODEL_ONLY_CHECK,
    ),
    Refusal(
        "handle_language_model_only: --language-model-only is incompatible with "
        "--disaggregation-mode prefill/decode",
        "disaggregation_mode",
        _lmo(
            lambda ctx: (
                ctx.get("disaggregation_mode", "null") not in (None, "null") and _v41(ctx) is False
            )
        ),
        "--language-model-only is incompatible with --disaggregation-mode prefill/decode",
        _LANGUAGE_MODEL_ONLY_CHECK,
    ),
    Refusal(
        "handle_language_model_only: --language-model-only does not support {}. Supported: {}.",
        "language_model_only",
        _lmo(_lmo_unsupported),
        lambda ctx: (
            f"--language-model-only does not support {_architectures(ctx)}. Supported: "
            f"{list(_lmo_supported(ctx))}."
        ),
        _LANGUAGE_MODEL_ONLY_CHECK,
    ),
)

refusal_rule("SGD591", "language-model-only", "language_model_only serves the language model of "
             "the few architectures SGLang lists for it, without the encoder and multimodal "
             "options.",
             "remove language_model_only, or the option it cannot be combined "
             "with", LANGUAGE_MODEL_ONLY)


# ---------------------------------------------------------------------- options of one model family
# CP_DECODE_ATTN_TP_SUPPORTED_ARCHS (layers/cp/cp_decode_attn_tp.py), the same in 0.5.20-0.5.23.
_CP_DECODE_ATTN_TP_ARCHS = (
    "DeepseekV4ForCausalLM",
    "DeepseekV4ForCausalLMNextN",
    "DeepseekV4ForCausalLMDSpark",
    "GlmMoeDsaForCausalLM",
    "GlmMoeDsaForCausalLMNextN",
)
_ENCODER_REPLAY = "--enable-encoder-swa-bounded-replay requires DeepSeek-V4.1"


def _config(condition: Callable[[ModelConfig], bool]) -> Callable[[LaunchContext], bool]:
    return lambda ctx: ctx.model_config is not None and condition(ctx.model_config)


def _not_v41(config: ModelConfig) -> bool:
    return config.raw.get("model_type") != "deepseek_v41"


def _v41(ctx: LaunchContext) -> bool | None:
    """A DeepSeek-V4.1 model (model_type deepseek_v41): from config.json, else False for a declared
    architecture that is not DeepSeek V4's (V4.1 configs name a DeepseekV4 architecture); None
    when only config.json can tell."""
    if ctx.model_config is not None:
        return not _not_v41(ctx.model_config)
    arch = ctx.architecture
    return None if arch is None or "DeepseekV4" in arch else False


Names = tuple[str, ...] | frozenset[str] | list[str]


def _architecture_not_in(names: Names) -> Callable[[LaunchContext], bool]:
    return lambda ctx: (arch := _declared(ctx)) is not None and arch not in names


MODEL_FAMILY_OPTIONS: tuple[Refusal, ...] = (
    Refusal(
        "handle_model_specific_adjustments: --enable-cp-decode-attn-tp is only supported for "
        "models whose attention linears are replicated across CP ranks (attn_tp_size=1). Got "
        "{}; supported: {}.",
        "enable_cp_decode_attn_tp",
        lambda ctx: (
            ctx.on("enable_cp_decode_attn_tp")
            and _architecture_not_in(_CP_DECODE_ATTN_TP_ARCHS)(ctx)
        ),
        lambda ctx: (
            "--enable-cp-decode-attn-tp is only supported for models whose attention "
            f"linears are replicated across CP ranks (attn_tp_size=1). Got {_declared(ctx)}; "
            f"supported: {sorted(_CP_DECODE_ATTN_TP_ARCHS)}."
        ),
        VersionRange(since="0.5.20"),
    ),
    Refusal(
        "validate_deepseek_v41_features: " + _ENCODER_REPLAY,
        "enable_encoder_swa_bounded_replay",
        lambda ctx: (
            ctx.on("enable_encoder_swa_bounded_replay")
            and _config(lambda c: c.architecture == "DeepseekV4ForCausalLM" and _not_v41(c))(ctx)
        ),
        _ENCODER_REPLAY,
        VersionRange(since="0.5.21"),
    ),
    Refusal(
        "handle_model_capability_adjustments: " + _ENCODER_REPLAY,
        "enable_encoder_swa_bounded_replay",
        lambda ctx: (
            ctx.on("enable_encoder_swa_bounded_replay")
            and _v41(ctx) is False
            and _declared(ctx) != "DeepseekV4ForCausalLM"
        ),
        _ENCODER_REPLAY,
        VersionRange(since="0.5.23"),
    ),
)

# validate_deepep_v2_model_architecture: only the architectures SGLang validated (from 0.5.21 a
# model package may register more with register_deepep_v2_model before the server starts).
_DEEPEP_V2_OLD = VersionRange(since="0.5.19", until="0.5.21")
_DEEPEP_V2_REGISTERED = VersionRange(since="0.5.21")


def _deepep_v2_unvalidated(ctx: LaunchContext) -> bool:
    archs = fact("deepep_v2_archs", ctx.version)
    chosen = ctx.get("moe_a2a_backend") == "deepep_v2"
    return chosen and archs is not None and _architecture_not_in(archs)(ctx)


_DEEPEP_OLD_SITE = ("validate_deepep_v2_model_architecture: DeepEP v2 MoE is not validated for {}; "
                    "supported architectures are {}. Other model workflows may require an "
                    "all-reduce after A2A combine. Use --moe-a2a-backend deepep.")
_DEEPEP_SITE = ("validate_deepep_v2_model_architecture: DeepEP v2 MoE is not validated for {}. The "
                "model package must register its architecture with register_deepep_v2_model, "
                "because its combine and post-expert reduction semantics must be validated first.")


def _deepep_words(site: str) -> Callable[[LaunchContext], str]:
    """SGLang's message with the declared architecture and the release's list filled in."""
    def words(ctx: LaunchContext) -> str:
        archs = tuple(fact("deepep_v2_archs", ctx.version) or ())
        return site.split(": ", 1)[1].format(repr(_declared(ctx)), archs)
    return words


MODEL_FAMILY_OPTIONS += (
    Refusal(_DEEPEP_OLD_SITE, "moe_a2a_backend", _deepep_v2_unvalidated,
            _deepep_words(_DEEPEP_OLD_SITE), _DEEPEP_V2_OLD),
    Refusal(_DEEPEP_SITE, "moe_a2a_backend", _deepep_v2_unvalidated, _deepep_words(_DEEPEP_SITE),
            _DEEPEP_V2_REGISTERED,
            hint="use moe_a2a_backend = \"deepep\", or install the model package that registers "
            "the architecture for DeepEP v2 (register_deepep_v2_model) and check it on the host"),
)

refusal_rule("SGD592", "model-family-options",
             "Options of one model family (DeepSeek V4.1's encoder SWA replay, the CP-decode "
             "attention TP of DeepSeek V4 and GLM-5, DeepEP v2's validated MoE models) on another "
             "model: read from config.json, else from deploy.model_architecture.",
             "remove the option, or serve a model it supports", MODEL_FAMILY_OPTIONS)
