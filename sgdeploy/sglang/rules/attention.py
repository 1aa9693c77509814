"""SGLang's own pick of the attention backends, per release: the one model every rule reads.

A launch that leaves `attention_backend`, `prefill_attention_backend` or
`decode_attention_backend` unset runs what SGLang resolves for it, and its checks (multi-item
scoring, deterministic inference, UNO, the FP4 KV cache, the unified pool's audited backends)
read the resolved pair. `resolve` follows that resolution, read from the wheels:

1. before 0.5.4.post1 ServerArgs resolves nothing: the model runner picks the default when it
   starts, and the checks see only what the profile gives (and the model branches of step 2);
2. the model's own branch (`_handle_model_specific_adjustments`, from 0.5.19 `model_overrides/`):
   DeepSeek V3/R1 (not DSA) on SM100 with no backend given gets trtllm_mla (0.5.3.post2+); the
   Qwen3-Next/3.5 hybrids on SM100 without attention_backend get triton, or trtllm_mha where the
   default is trtllm_mha and the page size may exceed 1 (0.5.9+); Qwen3-VL on a Hopper GPU of
   60 GiB or more gets a flashinfer decode backend (0.5.20+);
3. deterministic inference without attention_backend: flashinfer on SM100/SM120 (triton for the
   DeepSeek family), fa3 below (from 0.5.15; before, it runs after step 4 and finds it set);
4. a prefill backend equal to the decode backend becomes attention_backend; an unset one gets
   the default (`_get_default_attn_backend`): for MHA models fa3 on SM90 and trtllm_mha on
   SM100/SM103 (0.5.7+; fa4 for unequal K/V head dims from 0.5.17) unless tree speculative
   decoding or a page size above 1 with it rules them out, else flashinfer (triton for attention
   sinks, 0.5.11+); for MLA models fa3 on SM90, flashinfer on SM100, triton below;
5. an unset prefill or decode backend is attention_backend.

A profile that names no model (no config.json, no deploy.model_architecture) is read as a model
without a branch of its own, the common case. Where a step cannot be followed (no GPU facts, an
architecture with a branch of its own that is not modelled, MLA unknown where it matters), the
result is not `exact` and the rules that read it warn (SGD409) instead of refusing.
"""

from __future__ import annotations

from dataclasses import dataclass

from sgdeploy.sglang.facts import fact
from sgdeploy.sglang.rule import LaunchContext
from sgdeploy.sglang.rules.common import algorithm
from sgdeploy.sglang.versions import VersionRange

RESOLVED_IN_SERVER_ARGS = VersionRange(since="0.5.4.post1")
DEEPSEEK_TRTLLM_MLA = VersionRange(since="0.5.3.post2")
HYBRID_SM100_BRANCH = VersionRange(since="0.5.9")
QWEN3_VL_HOPPER_DECODE = VersionRange(since="0.5.20")
DETERMINISTIC_BEFORE_DEFAULT = VersionRange(since="0.5.15")
TRTLLM_MHA_DEFAULT = VersionRange(since="0.5.7")
# is_fa3_default_architecture
FA3_ARCHITECTURE_LIST = VersionRange(since="0.5.4.post1", until="0.5.8")
ATTENTION_SINKS_TRITON = VersionRange(since="0.5.11")
ASYMMETRIC_KV_FA4 = VersionRange(since="0.5.17")
DFLASH_TOPK_ONE = VersionRange(since="0.5.23")

# Architectures with no attention branch of their own in any release: the default applies as is.
PLAIN_ARCHITECTURES = frozenset(
    {
        "LlamaForCausalLM",
        "MistralForCausalLM",
        "Qwen2ForCausalLM",
        "Qwen2MoeForCausalLM",
        "Qwen3ForCausalLM",
        "Qwen3MoeForCausalLM",
        "Qwen2_5_VLForConditionalGeneration",
    }
)
QWEN3_VL = frozenset({"Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration"})
HYBRID_SM100 = frozenset({"Qwen3NextForCausalLM", "Qwen3_5ForConditionalGeneration",
                          "Qwen3_5MoeForConditionalGeneration"})
DEEPSEEK_V3 = "DeepseekV3ForCausalLM"
MODELLED_ARCHITECTURES = PLAIN_ARCHITECTURES | QWEN3_VL | HYBRID_SM100 | {DEEPSEEK_V3}
# is_fa3_default_architecture, 0.5.4.post1-0.5.7 (0.5.6.post2 added Qwen2 back and the Qwen3-VL
# models).
_FA3_ARCHS_0_5_4 = frozenset(
    {
        "Llama4ForConditionalGeneration",
        "LlamaForCausalLM",
        "Olmo2ForCausalLM",
        "Gemma2ForCausalLM",
        "Gemma3ForConditionalGeneration",
        "Qwen3ForCausalLM",
        "Qwen3MoeForCausalLM",
        "Glm4MoeForCausalLM",
        "Glm4vMoeForConditionalGeneration",
        "Step3VLForConditionalGeneration",
    }
)
_FA3_ARCHS_0_5_6_POST2 = _FA3_ARCHS_0_5_4 | {
    "Qwen2ForCausalLM",
    "Qwen3VLForConditionalGeneration",
    "Qwen3VLMoeForConditionalGeneration",
    "Glm4vForConditionalGeneration",
}
_MLA_PREFIXES = ("Deepseek", "KimiK", "MistralLarge3")
_FIELDS = ("attention_backend", "prefill_attention_backend", "decode_attention_backend")


@dataclass(frozen=True)
class Backends:
    """The backends SGLang's checks read after its resolution; None where it leaves one unset."""

    attention: str | None
    prefill: str | None
    decode: str | None
    exact: bool  # every step followed; else the values are sgdeploy's best reading
    why: str = ""  # what could not be followed, for a warning
    # attention_backend after the model's own branch (step 2), before steps 3-4
    branch: str | None = None
    # attention_backend after step 3, before the default of step 4
    before_default: str | None = None

    @property
    def pair(self) -> tuple[str | None, str | None]:
        return self.prefill, self.decode

    def words(self) -> str:
        return f"prefill={self.prefill}, decode={self.decode}"


def _given(ctx: LaunchContext, name: str) -> str | None:
    value = ctx.get(name)
    return value if isinstance(value, str) and value else None


def architecture(ctx: LaunchContext) -> str | None:
    return (ctx.model_config.architecture if ctx.model_config else None) or ctx.architecture


def uses_mla(ctx: LaunchContext) -> bool | None:
    """MLA attention: kv_lora_rank in config.json, else the architecture's family; None unknown."""
    if ctx.model_config is not None:
        return ctx.model_config.value("kv_lora_rank") is not None
    arch = ctx.architecture
    if not arch:
        return None
    return arch.startswith(_MLA_PREFIXES)


def mla_model(ctx: LaunchContext) -> bool | None:
    """The model uses MLA: kv_lora_rank in config.json. Without one, from the declared
    architecture: True for one whose branch of the release's ModelConfig decides MLA by the name
    alone (`mla_archs_by_name`), False for one no MLA branch names (`mla_archs`), None for one a
    branch names with a config value (Pixtral's kv_lora_rank) or none declared."""
    if ctx.model_config is not None:
        return ctx.model_config.value("kv_lora_rank") is not None
    archs = fact("mla_archs", ctx.version)
    if not ctx.architecture or archs is None:
        return None
    if ctx.architecture in (fact("mla_archs_by_name", ctx.version) or ()):
        return True
    return None if ctx.architecture in archs else False


def _major(ctx: LaunchContext) -> int | None:
    return ctx.host.sm // 10 if ctx.host is not None and ctx.host.sm is not None else None


def _number(ctx: LaunchContext, name: str) -> int | None:
    value = ctx.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _no_tree(ctx: LaunchContext) -> bool:
    """is_no_spec_infer_or_topk_one: no topk given, or topk 1 with a page size of 1."""
    topk = _number(ctx, "speculative_eagle_topk")
    return topk is None or (topk == 1 and (_number(ctx, "page_size") or 1) == 1)


def _asymmetric_kv(ctx: LaunchContext) -> bool:
    config = ctx.model_config
    if config is None:
        return False
    v_dim, head_dim = config.value("v_head_dim"), config.value("head_dim")
    return v_dim is not None and head_dim is not None and v_dim != head_dim


def _default(ctx: LaunchContext, mla: bool, major: int) -> str:
    """_get_default_attn_backend for a CUDA GPU of this compute-capability major."""
    if mla:
        return "fa3" if major == 9 else "flashinfer" if major == 10 else "triton"
    arch = architecture(ctx)
    fa3_ok = _no_tree(ctx)
    if ctx.version in FA3_ARCHITECTURE_LIST:
        archs = _FA3_ARCHS_0_5_6_POST2 if ctx.version >= (0, 5, 6, 2) else _FA3_ARCHS_0_5_4
        fa3_ok = fa3_ok and arch in archs
    if major == 9 and fa3_ok:
        return "fa3"
    spec = algorithm(ctx)
    topk_known = (spec is None or ctx.get("speculative_eagle_topk") is not None
                  or (spec == "DFLASH" and ctx.version in DFLASH_TOPK_ONE))
    if major == 10 and ctx.version in TRTLLM_MHA_DEFAULT and _no_tree(ctx) and topk_known:
        return "fa4" if ctx.version in ASYMMETRIC_KV_FA4 and _asymmetric_kv(ctx) else "trtllm_mha"
    return "flashinfer"


def _hybrid_sm100(ctx: LaunchContext, mla: bool) -> str:
    """The Qwen3-Next/3.5 branch: trtllm_mha only where the page size may exceed 1."""
    page_one = (
        ctx.get("mamba_scheduler_strategy", ctx.get("mamba_radix_cache_strategy"))
        not in ("extra_buffer", "extra_buffer_lazy")
        and not ctx.on("disable_radix_cache")
        and algorithm(ctx) is None
    )
    return "trtllm_mha" if _default(ctx, mla, 10) == "trtllm_mha" and not page_one else "triton"


def _model_branch(
    ctx: LaunchContext, given: dict[str, str | None], major: int | None
) -> dict[str, str]:
    """What the model's own branch sets (step 2)."""
    arch = architecture(ctx)
    nothing = not any(given.values())
    if arch == DEEPSEEK_V3 and major == 10 and nothing and ctx.version in DEEPSEEK_TRTLLM_MLA:
        dsa = ctx.model_config is not None and ctx.model_config.value("index_topk") is not None
        return {} if dsa else {"attention_backend": "trtllm_mla"}
    if arch in HYBRID_SM100 and major == 10 and given["attention_backend"] is None \
            and ctx.version in HYBRID_SM100_BRANCH:
        return {"attention_backend": _hybrid_sm100(ctx, bool(uses_mla(ctx)))}
    memory = ctx.host.gpu_memory_gib if ctx.host else None
    if (
        arch in QWEN3_VL
        and major == 9
        and ctx.version in QWEN3_VL_HOPPER_DECODE
        and memory
        and memory >= 60
        and given["attention_backend"] is None
        and given["decode_attention_backend"] is None
    ):
        return {"decode_attention_backend": "flashinfer"}
    return {}


def _unknown(ctx: LaunchContext, major: int | None, mla: bool | None) -> str:
    """Why the resolution cannot be followed exactly ("" when it can)."""
    # SGLang reads the platform from the hardware, not from --device: the host's facts decide.
    if major is None:
        return "the host's GPU is not known"
    arch = architecture(ctx)
    if mla is None:
        # No model named: the default alone decides, where MHA and MLA models get the same one.
        if _default(ctx, True, major) == _default(ctx, False, major):
            return ""
        return ("the model's attention type is not known (no config.json or "
                "deploy.model_architecture)")
    if arch not in MODELLED_ARCHITECTURES:
        return f"{arch or 'the architecture'} has a branch of its own that sgdeploy does not follow"
    if ctx.model_config is not None and ctx.model_config.value("index_topk") is not None:
        return "DSA models pick their own backends"
    return ""


def resolve(ctx: LaunchContext) -> Backends:
    """The (attention, prefill, decode) backends SGLang's checks read for this launch."""
    given = {name: _given(ctx, name) for name in _FIELDS}
    major, mla = _major(ctx), uses_mla(ctx)
    # A backend the profile gives for both phases leaves nothing to SGLang's pick.
    whole = given["attention_backend"] is not None or None not in (
        given["prefill_attention_backend"],
        given["decode_attention_backend"],
    )
    why = "" if whole else _unknown(ctx, major, mla)
    values = {**given, **_model_branch(ctx, given, major)}
    branch = values["attention_backend"]
    if ctx.on("enable_deterministic_inference") and ctx.version in DETERMINISTIC_BEFORE_DEFAULT \
            and values["attention_backend"] is None and major is not None:
        deepseek = architecture(ctx) in (fact("deterministic_deepseek_archs", ctx.version) or ())
        values["attention_backend"] = (
            ("triton" if deepseek else "flashinfer") if major in (10, 12) else "fa3"
        )
    before_default = values["attention_backend"]
    if ctx.version in RESOLVED_IN_SERVER_ARGS:
        prefill, decode = values["prefill_attention_backend"], values["decode_attention_backend"]
        if prefill is not None and prefill == decode:
            values["attention_backend"] = prefill
        if values["attention_backend"] is None and major is not None:
            values["attention_backend"] = _default(ctx, bool(mla), major)
    base = values["attention_backend"]
    return Backends(
        base,
        values["prefill_attention_backend"] or base,
        values["decode_attention_backend"] or base,
        exact=not why,
        why=why,
        branch=branch,
        before_default=before_default,
    )
