"""SGD1xx and MoE parallelism: GPU counts, tensor/pipeline/data/expert parallel sizes, multi-node
launches."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from sgdeploy.sglang.facts import fact
from sgdeploy.sglang.gpus import gpu_memory_gib_for
from sgdeploy.sglang.rule import Finding, LaunchContext
from sgdeploy.sglang.rules.attention import architecture, mla_model
from sgdeploy.sglang.rules.common import TBO_NEEDS_A2A, TBO_UNCHECKED, attention_dp, server_field
from sgdeploy.sglang.rules.registry import ERROR, WARNING, rule
from sgdeploy.sglang.rules.sites import Refusal, refusal_rule
from sgdeploy.sglang.versions import VersionRange


def gpus_per_node(server: Mapping[str, Any]) -> int:
    """GPUs one node of a launch occupies: tp x pp (x dp for plain DP replicas) / nnodes."""
    def count(name: str) -> int:
        value = server.get(name, 1)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1

    attention_dp = bool(server.get("enable_dp_attention")) or count("attn_dp_size") > 1
    # Attention DP splits the TP group; plain DP runs dp_size full replicas.
    world = count("tp_size") * count("pp_size") * (1 if attention_dp else count("dp_size"))
    return max(world // count("nnodes"), 1)


@rule("SGD101", "not-enough-gpus", ERROR, "tp x pp (x dp) needs more GPUs per node than the host "
                                          "has.",
      "lower tp_size/pp_size/dp_size or deploy to a host with more GPUs")
def not_enough_gpus(ctx: LaunchContext) -> Iterator[Finding]:
    needed = gpus_per_node(ctx.server)
    available = len(ctx.gpus) if ctx.gpus else (ctx.host.gpu_count if ctx.host else None)
    if available is not None and needed > available:
        where = "deploy.gpus lists" if ctx.gpus else (f"host {ctx.host.name if ctx.host else '?'} "
                                                      "has")
        field_name = "server.tp_size" if ctx.given("tp_size") else "server"
        yield Finding(field_name, f"the launch needs {needed} GPUs per node (tp x pp x dp / "
                      f"nnodes) but {where} {available}")


@rule("SGD102", "gpus-unused", WARNING, "deploy.gpus lists more GPUs than the launch uses.",
      "list exactly the GPUs the launch uses, or raise tp_size")
def gpus_unused(ctx: LaunchContext) -> Iterator[Finding]:
    used = gpus_per_node(ctx.server)
    if ctx.gpus and len(ctx.gpus) > used:
        yield Finding("deploy.gpus", f"deploy.gpus lists {len(ctx.gpus)} GPUs; the launch uses "
                                     f"{used}")


@rule("SGD103", "gpu-index-out-of-range", ERROR, "deploy.gpus names a GPU index the host does not "
                                                 "have.",
      "use indices from 0 to gpu_count - 1")
def gpu_index_out_of_range(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.gpus and ctx.host and ctx.host.gpu_count:
        bad = [g for g in ctx.gpus if isinstance(g, int) and g >= ctx.host.gpu_count]
        if bad:
            yield Finding("deploy.gpus", f"GPU index {bad[0]} does not exist on {ctx.host.name} "
                          f"({ctx.host.gpu_count} GPUs)")


@rule("SGD104", "tp-not-divisible-by-nnodes", ERROR, "(tp_size x pp_size) must divide evenly over "
                                                     "nnodes.",
      "make tp_size x pp_size a multiple of nnodes")
def tp_not_divisible(ctx: LaunchContext) -> Iterator[Finding]:
    nnodes = max(ctx.int("nnodes", 1), 1)
    if (ctx.int("tp_size", 1) * ctx.int("pp_size", 1)) % nnodes:
        yield Finding("server.nnodes", "tp_size x pp_size = "
                      f"{ctx.int('tp_size', 1) * ctx.int('pp_size', 1)} is not divisible by nnodes "
                      f"= {nnodes} ('tp_size must be divisible by number of nodes')")


@rule("SGD105", "multinode-without-dist-init-addr", ERROR,
      "nnodes > 1 without dist_init_addr: every node waits on its own loopback and the launch "
      "hangs.",
      "set dist_init_addr = \"<rank-0 address>:<port>\"")
def multinode_without_addr(ctx: LaunchContext) -> Iterator[Finding]:
    # Deployed to as many hosts as nodes, sgdeploy sets dist_init_addr to rank 0's address.
    spans_hosts = ctx.node_count is not None and ctx.node_count == ctx.int("nnodes", 1)
    if ctx.int("nnodes", 1) > 1 and not ctx.get("dist_init_addr") and not spans_hosts:
        yield Finding("server.nnodes", f"nnodes = {ctx.int('nnodes', 1)} but dist_init_addr is not "
                      "set; SGLang would hang waiting for the other nodes")


@rule("SGD106", "node-rank-out-of-range", ERROR, "node_rank must be in 0 .. nnodes - 1.",
      "set node_rank below nnodes")
def node_rank_out_of_range(ctx: LaunchContext) -> Iterator[Finding]:
    nnodes, rank = max(ctx.int("nnodes", 1), 1), ctx.int("node_rank", 0)
    if rank >= nnodes or rank < 0:
        yield Finding("server.node_rank", f"node_rank = {rank} with nnodes = {nnodes}")


@rule("SGD107", "multinode-dp-replicas", ERROR, "Data-parallel replicas cannot span nodes.",
      "use attention DP (enable_dp_attention / attn_dp_size) across nodes, or one node per replica")
def multinode_dp(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.int("dp_size", 1) > 1 and ctx.int("nnodes", 1) > 1 and not attention_dp(ctx):
        yield Finding("server.dp_size", "dp_size > 1 with nnodes > 1 needs attention DP "
                      "('multi-node data parallel is not supported unless dp attention')")


@rule("SGD109", "nnodes-vs-hosts", ERROR,
      "A multi-node launch (nnodes > 1) runs one node per host of its target: the counts must "
      "match.",
      "point deploy.host at a group with nnodes hosts (node_rank follows the group's order)")
def nnodes_vs_hosts(ctx: LaunchContext) -> Iterator[Finding]:
    nnodes = ctx.int("nnodes", 1)
    # A single host is one node of a launch managed node by node (node_rank in each profile).
    if (
        nnodes > 1
        and ctx.node_count is not None
        and ctx.node_count > 1
        and ctx.node_count != nnodes
    ):
        yield Finding("server.nnodes", f"nnodes = {nnodes} but deploy.host names {ctx.node_count} "
                                       "host(s)")


@rule("SGD110", "node-rank-set-by-sgdeploy", ERROR,
      "In a multi-node profile node_rank differs per host; sgdeploy sets it from the group's "
      "order.",
      "remove node_rank from the profile")
def node_rank_in_profile(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.int("nnodes", 1) > 1 and ctx.given("node_rank") and (ctx.node_count or 0) > 1:
        yield Finding("server.node_rank", "node_rank is set in a profile deployed to several "
                      "nodes; every node would claim the same rank")


# How SGLang resolves the data-parallel layout before it checks it. 0.5.22 introduced
# attn_dp_size: the deprecated `--dp-size N --enable-dp-attention` becomes `--attn-dp-size N`
# and dp_size counts replicas only. Before that, dp_size counted both and SGLang switched
# enable_dp_attention (and, from 0.5.3, enable_dp_lm_head) off when dp_size was 1.
DP_LM_HEAD_RESET = VersionRange(since="0.5.3")
# MoE all-to-all backends that set ep_size to tp_size ("The expert parallel size is adjusted to
# be the same as the tensor parallel size"); every backend but these two, in every release.
A2A_KEEPS_EP_SIZE = {None, "none", "ascend_tp"}
MEGAMOE_RUNNER_ALIAS = VersionRange(since="0.5.18")


def attn_dp_size(ctx: LaunchContext) -> int:
    """The attention-DP width SGLang resolves (1: off)."""
    if ctx.has_flag("attn_dp_size"):
        if ctx.on("enable_dp_attention") and ctx.int("attn_dp_size", 1) == 1:
            return ctx.int("dp_size", 1)
        return ctx.int("attn_dp_size", 1)
    return (
        ctx.int("dp_size", 1) if ctx.on("enable_dp_attention") and ctx.int("dp_size", 1) > 1 else 1
    )


def dp_ranks(ctx: LaunchContext) -> int:
    """Data-parallel ranks (replicas x attention-DP groups), as SGLang counts them."""
    if ctx.has_flag("attn_dp_size"):
        replicas = (
            1
            if ctx.on("enable_dp_attention") and ctx.int("attn_dp_size", 1) == 1
            else ctx.int("dp_size", 1)
        )
        return replicas * attn_dp_size(ctx)
    return ctx.int("dp_size", 1)


def moe_a2a(ctx: LaunchContext) -> object:
    """The MoE all-to-all backend after resolution: from 0.5.18 `--moe-runner-backend megamoe` is an
    alias that sets moe_a2a_backend = megamoe (and the runner back to auto); ascend_tp (0.5.16+)
    becomes none."""
    if ctx.version in MEGAMOE_RUNNER_ALIAS and ctx.get("moe_runner_backend") == "megamoe":
        return "megamoe"
    backend = ctx.get("moe_a2a_backend", "none")
    # SGLang runs ascend_tp as no all-to-all at all (its _handle_a2a_moe sets moe_a2a_backend =
    # none).
    return "none" if backend == "ascend_tp" else backend


def moe_runner(ctx: LaunchContext) -> object:
    if ctx.version in MEGAMOE_RUNNER_ALIAS and ctx.get("moe_runner_backend") == "megamoe":
        return "auto"
    return ctx.get("moe_runner_backend", "auto")


def ep_size(ctx: LaunchContext) -> int:
    """ep_size after the MoE all-to-all backend has set it."""
    if moe_a2a(ctx) not in A2A_KEEPS_EP_SIZE:
        return ctx.int("tp_size", 1)
    return ctx.int("ep_size", 1)


def ep_scale_joiner(ctx: LaunchContext) -> bool:
    """An elastic-EP node joining a running deployment (--ep-join-mode scale), which SGLang
    exempts."""
    return bool(ctx.get("ep_join_mode") == "scale")


def attention_dp_on(ctx: LaunchContext) -> bool:
    """DP attention as SGLang has resolved it before its later checks: with one DP rank it switched
    enable_dp_attention off (every release) except for an elastic-EP scale joiner (0.5.16+),
    which 0.5.22+ count as attention DP on its own."""
    if ep_scale_joiner(ctx) and (ctx.has_flag("attn_dp_size") or ctx.on("enable_dp_attention")):
        return True
    return attn_dp_size(ctx) > 1


def _dp_lm_head_kept(ctx: LaunchContext) -> bool:
    """enable_dp_lm_head is set and SGLang does not switch it off by itself."""
    if not ctx.on("enable_dp_lm_head"):
        return False
    return not (ctx.version in DP_LM_HEAD_RESET and dp_ranks(ctx) == 1 and not ep_scale_joiner(ctx))


@rule("SGD108", "dp-lm-head-without-dp-attention", ERROR, "enable_dp_lm_head requires DP "
                                                          "attention.",
      "turn attention DP on (attn_dp_size, or enable_dp_attention with dp_size) or drop "
      "enable_dp_lm_head")
def dp_lm_head(ctx: LaunchContext) -> Iterator[Finding]:
    if not _dp_lm_head_kept(ctx) or attn_dp_size(ctx) > 1 or ep_scale_joiner(ctx):
        return
    said = ("--enable-dp-lm-head requires attention DP "
            "(--attn-dp-size)." if ctx.has_flag("attn_dp_size")
            else "Please enable dp attention when setting enable_dp_lm_head.")
    yield Finding("server.enable_dp_lm_head", "enable_dp_lm_head is set without attention DP: "
                  f"SGLang {ctx.catalog.version} refuses it ('{said}')")


@rule("SGD111", "dp-lm-head-switched-off", WARNING,
      "With a single data-parallel rank SGLang silently switches enable_dp_lm_head off.",
      "remove enable_dp_lm_head, or give attention DP more than one "
      "rank", versions=DP_LM_HEAD_RESET)
def dp_lm_head_switched_off(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.on("enable_dp_lm_head") and not _dp_lm_head_kept(ctx):
        yield Finding("server.enable_dp_lm_head", "enable_dp_lm_head has no effect: with one "
                      "data-parallel rank SGLang sets it to false before it starts")


@rule("SGD112", "eplb-without-expert-parallelism", ERROR,
      "enable_eplb needs expert parallelism: ep_size > 1 (or an MoE all-to-all backend, which sets "
      "it to tp_size).",
      "set ep_size (e.g. to tp_size) or moe_a2a_backend, or drop enable_eplb")
def eplb_without_ep(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.on("enable_eplb") and ep_size(ctx) <= 1 and not ep_scale_joiner(ctx):
        yield Finding("server.enable_eplb", f"enable_eplb with ep_size = {ep_size(ctx)}: SGLang "
                      "fails with a bare AssertionError ('assert ep_size > 1')")


@rule("SGD113", "tp-not-divisible-by-attention-dp", ERROR,
      "With attention DP, tp_size must be a multiple of the attention-DP size.",
      "make tp_size a multiple of attn_dp_size (dp_size with enable_dp_attention)")
def tp_not_divisible_by_attn_dp(ctx: LaunchContext) -> Iterator[Finding]:
    width, tp = attn_dp_size(ctx), ctx.int("tp_size", 1)
    if width > 1 and tp % width:
        name = "attn_dp_size" if ctx.has_flag("attn_dp_size") else "dp_size"
        field_name = name if ctx.given(name) else "dp_size"
        yield Finding(server_field(field_name), f"tp_size = {tp} is not divisible by the "
                      f"attention-DP size {width}: SGLang fails with a bare AssertionError "
                      f"('assert tp_size % {name} == 0')")


@rule("SGD505", "two-batch-overlap-needs-a2a", ERROR,
      "enable_two_batch_overlap needs an MoE all-to-all backend (0.5.7-0.5.14) or, without one, "
      "attention DP "
      "(0.5.15+).", "set moe_a2a_backend (e.g. deepep), or drop enable_two_batch_overlap")
def two_batch_overlap(ctx: LaunchContext) -> Iterator[Finding]:
    if not ctx.on("enable_two_batch_overlap") or moe_a2a(ctx) not in (None, "none"):
        return
    if ctx.version in TBO_NEEDS_A2A:
        yield Finding("server.enable_two_batch_overlap", "SGLang refuses it: 'When enabling two "
                      "batch overlap, moe_a2a_backend cannot be 'none'.'")
    elif ctx.version not in TBO_UNCHECKED and not attention_dp_on(ctx):
        needs = (
            "attention DP (--attn-dp-size)"
            if ctx.has_flag("attn_dp_size")
            else "--enable-dp-attention"
        )
        yield Finding("server.enable_two_batch_overlap", "SGLang refuses it: 'When enabling two "
                      f"batch overlap without an EP a2a backend (moe_a2a_backend='none'), {needs} "
                      "is required' (with dp_size 1 SGLang turns enable_dp_attention off first)",
                      "set moe_a2a_backend (e.g. deepep), or give attention DP more than one rank")


# 0.5.13 allowed moe_dense_tp_size = tp_size beside 1 ("only supports None, 1, or tp_size
# currently").
MOE_DENSE_TP_SIZE_ALLOWS_TP = VersionRange(since="0.5.13")


@rule("SGD507", "moe-dense-tp-size", ERROR,
      "moe_dense_tp_size may only be unset or 1 (from 0.5.13 also tp_size).",
      "use moe_dense_tp_size = 1 or leave it unset")
def moe_dense_tp(ctx: LaunchContext) -> Iterator[Finding]:
    value = ctx.server.get("moe_dense_tp_size")
    tp_allowed = ctx.version in MOE_DENSE_TP_SIZE_ALLOWS_TP
    allowed = {1, ctx.int("tp_size", 1)} if tp_allowed else {1}
    if isinstance(value, int) and value not in allowed:
        said = ("moe_dense_tp_size only supports None, 1, or tp_size currently" if tp_allowed
                else "moe_dense_tp_size only support 1 and None currently")
        yield Finding("server.moe_dense_tp_size", f"moe_dense_tp_size = {value}: SGLang fails an "
                      f"assertion ('{said}')")


CONTEXT_PARALLEL = VersionRange(since="0.5.9")
CP_MOE_DP_MISMATCH = VersionRange(since="0.5.11")
PREFILL_CP_STRATEGY = VersionRange(since="0.5.14")


def _context_parallel_problems(ctx: LaunchContext) -> Iterator[tuple[str, str]]:
    """(field, SGLang's message) for each context-parallel layout check the launch fails, in
    SGLang's order."""
    tp, cp, moe_dp, ep = (
        ctx.int("tp_size", 1),
        ctx.int("attn_cp_size", 1),
        ctx.int("moe_dp_size", 1),
        ep_size(ctx),
    )
    if (
        ctx.on("enable_prefill_cp")
        and ctx.version in PREFILL_CP_STRATEGY
        and not ctx.get("cp_strategy")
    ):
        yield "enable_prefill_cp", "--cp-strategy must be set when --enable-prefill-cp is enabled."
    if cp > 1:
        dp, dp_name = (attn_dp_size(ctx), "attn_dp_size") if ctx.has_flag("attn_dp_size") else \
            (ctx.int("dp_size", 1), "dp_size")
        if tp % cp:
            yield "attn_cp_size", "tp_size must be divisible by attn_cp_size"
        elif tp % (dp * cp):
            yield "attn_cp_size", f"tp_size must be divisible by {dp_name} * attn_cp_size"
        if ctx.on("enable_aiter_allreduce_fusion"):
            yield "enable_aiter_allreduce_fusion", ("Aiter allreduce fusion is not supported with "
                                                    "context parallelism")
    if moe_dp > 1:
        if tp % moe_dp:
            yield "moe_dp_size", "tp_size must be divisible by moe_dp_size"
        elif ep * moe_dp > tp:
            yield "moe_dp_size", "ep_size * moe_dp_size must be less than or equal to tp_size"
        elif ctx.int("pp_size", 1) != 1:
            yield "pp_size", "PP is not supported with context parallelism"
        elif ep > 1 and ep * moe_dp != tp:
            yield "moe_dp_size", "ep_size * moe_dp_size must be equal to tp_size"
        elif ctx.on("enable_aiter_allreduce_fusion") and cp <= 1:
            yield "enable_aiter_allreduce_fusion", ("Aiter allreduce fusion is not supported with "
                                                    "context parallelism")
    if ctx.version in CP_MOE_DP_MISMATCH and cp != moe_dp and moe_dp != 1:
        yield "moe_dp_size", "attn_cp_size != moe_dp_size is only supported when moe_dp_size == 1"


@rule("SGD114", "context-parallel-layout", ERROR,
      "attn_cp_size / moe_dp_size must fit tp_size the way SGLang's context-parallel checks "
      "require.",
      "make tp_size a multiple of attn_cp_size (x the attention-DP size) and of moe_dp_size, with "
      "moe_dp_size equal to attn_cp_size or 1", versions=CONTEXT_PARALLEL)
def context_parallel_layout(ctx: LaunchContext) -> Iterator[Finding]:
    # SGLang stops at the first failing assert: report that one, as it would.
    for name, said in _context_parallel_problems(ctx):
        yield Finding(server_field(name), f"SGLang refuses this context-parallel layout ('{said}'; "
                      f"tp_size = {ctx.int('tp_size', 1)}, attn_cp_size = "
                      f"{ctx.int('attn_cp_size', 1)}, moe_dp_size = {ctx.int('moe_dp_size', 1)}, "
                      f"ep_size = {ep_size(ctx)})")
        return


# The MoE runner backends FlashInfer's all-to-all accepts, by release (`handle_a2a_moe`).
FLASHINFER_A2A_RUNNERS = (
    (VersionRange(since="0.5.19"), ("flashinfer_cutlass", "flashinfer_cutedsl", "flashinfer_trtllm",
                                    "flashinfer_trtllm_routed", "deep_gemm")),
    (VersionRange(since="0.5.15", until="0.5.19"), ("flashinfer_cutlass", "flashinfer_cutedsl",
                                                    "flashinfer_trtllm_routed")),
    (VersionRange(since="0.5.13", until="0.5.15"), ("flashinfer_cutlass", "flashinfer_cutedsl")),
    (VersionRange(until="0.5.13"), ("flashinfer_cutlass",)),
)
FLASHINFER_A2A_TOPOLOGY = VersionRange(since="0.5.13")


@rule(
    "SGD115",
    "flashinfer-a2a-layout",
    ERROR,
    'moe_a2a_backend = "flashinfer" needs attention DP over the whole TP group (0.5.13+) and a '
    'FlashInfer MoE '
    "runner backend.",
    'set moe_runner_backend = "flashinfer_cutlass" and attention DP equal '
    "to tp_size, or another moe_a2a_backend",
)
def flashinfer_a2a_layout(ctx: LaunchContext) -> Iterator[Finding]:
    if moe_a2a(ctx) != "flashinfer":
        return
    tp = ctx.int("tp_size", 1)
    # 0.5.23 also takes Muse Spark's prefill sequence parallelism (TP4/EP4, TP8/EP8) without
    # attention DP.
    muse_sp = (
        ctx.architecture == "MuseSparkForConditionalGeneration"
        and ctx.on("enable_layernorm_sp")
        and attn_dp_size(ctx) == 1
        and (tp, ep_size(ctx)) in ((4, 4), (8, 8))
    )
    if (
        ctx.version in FLASHINFER_A2A_TOPOLOGY
        and (attn_dp_size(ctx) == 1 or attn_dp_size(ctx) != tp)
        and not muse_sp
    ):
        said = ("Flashinfer MoE A2A requires --attn-dp-size equal to "
                "--tp-size" if ctx.has_flag("attn_dp_size")
                else "Flashinfer MoE A2A is only supported with dp_size == tp_size and "
                     "--enable-dp-attention")
        yield Finding("server.moe_a2a_backend", "SGLang refuses moe_a2a_backend = 'flashinfer' "
                      f"here ('{said}'; tp_size = {tp}, attention DP = {attn_dp_size(ctx)})")
        return
    runner = ctx.get("moe_runner_backend", "auto")
    allowed = next(
        (names for versions, names in FLASHINFER_A2A_RUNNERS if ctx.version in versions), ()
    )
    if runner not in allowed:
        yield Finding("server.moe_runner_backend", "moe_a2a_backend = 'flashinfer' with "
                      f"moe_runner_backend = '{runner}': SGLang {ctx.catalog.version} supports it "
                      f"only with {', '.join(allowed)}")


@rule("SGD116", "tp-lm-head-all-to-all-layout", ERROR,
      "enable_tp_lm_head_all_to_all needs attention DP over the whole TP group, no DP LM head and "
      "no attention CP.",
      "set attn_dp_size = tp_size (attn_cp_size 1, no enable_dp_lm_head), or drop "
      "enable_tp_lm_head_all_to_all",
      versions=VersionRange(since="0.5.18"))
def tp_lm_head_all_to_all(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.server.get("enable_tp_lm_head_all_to_all") is not True:
        return
    tp, width, new = ctx.int("tp_size", 1), attn_dp_size(ctx), ctx.has_flag("attn_dp_size")
    dp_name = "attn_dp_size" if new else "dp_size"
    if width <= 1:
        said = ("--enable-tp-lm-head-all-to-all requires attention DP (--attn-dp-size)." if new
                else "Please enable dp attention when setting enable_tp_lm_head_all_to_all.")
    elif _dp_lm_head_kept(ctx):
        said = ("--enable-tp-lm-head-all-to-all uses a TP-sharded LM head and is incompatible with "
                "--enable-dp-lm-head.")
    elif tp != width:
        said = (
            f"--enable-tp-lm-head-all-to-all currently requires tp_size == {dp_name}, got "
            f"tp_size={tp}, {dp_name}={width}."
        )
    elif ctx.int("attn_cp_size", 1) != 1:
        said = ("--enable-tp-lm-head-all-to-all currently requires attn_cp_size == 1, got "
                f"{ctx.int('attn_cp_size', 1)}.")
    else:
        return
    hint = None if new else ("set dp_size = tp_size with enable_dp_attention = true (attn_cp_size "
                             "1, no enable_dp_lm_head), or drop enable_tp_lm_head_all_to_all")
    yield Finding("server.enable_tp_lm_head_all_to_all", f"SGLang refuses it: '{said}'", hint)


_UNKNOWN = "?"


# Architectures whose checkpoint quantization SGLang copies into --quantization on Blackwell
# (SM100) before its MoE checks (the per-model adjustments); elsewhere the checks see the flag
# alone.
_AUTO_QUANTIZATION_ARCHITECTURES = {
    "DeepseekV3ForCausalLM",
    "KimiK25ForConditionalGeneration",
    "MistralLarge3ForCausalLM",
    "PixtralForConditionalGeneration",
    "GlmMoeDsaForCausalLM",
    "Qwen3MoeForCausalLM",
    "Qwen3VLMoeForConditionalGeneration",
    "Qwen3NextForCausalLM",
    "Qwen3_5MoeForConditionalGeneration",
    "Qwen3_5ForConditionalGeneration",
    "NemotronHForCausalLM",
    "Glm4MoeForCausalLM",
}


def _quantization(ctx: LaunchContext) -> str | None:
    """The quantization SGLang's MoE checks see: the flag ('unquant' is none); on Blackwell, for the
    architectures above, the checkpoint's when its config.json is known, else unknown ("?": the
    entries below then stay silent)."""
    if ctx.given("quantization"):
        value = ctx.server["quantization"]
        return None if value in (None, "unquant") else str(value)
    sm = ctx.host.sm if ctx.host else None
    if ctx.architecture in _AUTO_QUANTIZATION_ARCHITECTURES and (sm is None or sm >= 100):
        if ctx.model_config is None:
            return _UNKNOWN
        # DeepSeek V3 without a declared method is fp8 when its safetensors hold fp8 experts.
        if ctx.model_config.quant_method is None and ctx.architecture == "DeepseekV3ForCausalLM":
            return _UNKNOWN
        return ctx.model_config.quant_method
    return None


def checkpoint_quantization_unknown(ctx: LaunchContext) -> bool:
    """The MoE kernel checks would read the checkpoint's quantization, which only its config.json
    says: a Blackwell model whose checkpoint method SGLang copies into --quantization, or FlashInfer
    CuteDSL (0.5.15+), which takes a hybrid NVFP4 checkpoint whatever --quantization says."""
    uses_moe_kernels = ctx.given("moe_runner_backend") or bool(ctx.env_true("SGLANG_CUTLASS_MOE"))
    cutedsl = _effective_runner(ctx) == "flashinfer_cutedsl" and ctx.version >= (0, 5, 15, 0)
    return uses_moe_kernels and (
        _quantization(ctx) == _UNKNOWN or (cutedsl and _hybrid_nvfp4(ctx) is None)
    )


def _effective_runner(ctx: LaunchContext) -> object:
    """The MoE runner SGLang's kernel checks see: the megamoe alias resolved, and with mxfp8
    quantization any runner but cutlass and the FlashInfer TRT-LLM ones replaced by
    flashinfer_trtllm (with a warning)."""
    runner = moe_runner(ctx) if ctx.given("moe_runner_backend") else None
    if _quantization(ctx) == "mxfp8" and runner not in (
        None,
        "auto",
        "cutlass",
        "flashinfer_trtllm",
        "flashinfer_trtllm_routed",
    ):
        return "flashinfer_trtllm"
    return runner


def _runner_quantization(
    runners: tuple[str, ...], allowed: tuple[str | None, ...]
) -> Callable[[LaunchContext], bool]:
    def fires(ctx: LaunchContext) -> bool:
        quantization = _quantization(ctx)
        return _effective_runner(ctx) in runners and quantization != _UNKNOWN and \
            quantization not in allowed
    return fires


def _invalid_quantization(runner_words: str, allowed_words: str) -> Callable[[LaunchContext], str]:
    return lambda ctx: (
        f"Invalid quantization '{_quantization(ctx)}'. FlashInfer {runner_words} supports only: "
        f"{allowed_words}."
    )


def _runner_ep_size(ctx: LaunchContext) -> bool:
    runners = ("flashinfer_cutlass", "flashinfer_cutedsl")
    return _effective_runner(ctx) in runners and ep_size(ctx) not in (1, ctx.int("tp_size", 1))


def _cutedsl_a2a(allowed: tuple[str, ...]) -> Callable[[LaunchContext], bool]:
    return lambda ctx: _effective_runner(ctx) == "flashinfer_cutedsl" and \
        moe_a2a(ctx) not in allowed


def _fp8_cutlass_ep(quantizations: tuple[str, ...]) -> Callable[[LaunchContext], bool]:
    return lambda ctx: _effective_runner(ctx) == "cutlass" and \
        _quantization(ctx) in quantizations and ep_size(ctx) != 1


_TRTLLM = ("flashinfer_trtllm", "experimental_sgl_trtllm")
_ROUTED = ("flashinfer_trtllm_routed",)
MOE_RUNNER_CONSTRAINTS: tuple[Refusal, ...] = (
    Refusal(
        "handle_moe_kernel_config: The expert parallel size must be 1 or the same as the "
        "tensor parallel size",
        "ep_size",
        _runner_ep_size,
        "The expert parallel size must be 1 or the same as the tensor parallel size",
        VersionRange(since="0.5.3"),
    ),
    Refusal(
        "handle_moe_kernel_config: modelopt_fp4 quantization is required for Flashinfer MOE",
        "moe_runner_backend",
        _runner_quantization(("flashinfer_cutlass",), ("modelopt_fp4",)),
        "modelopt_fp4 quantization is required for Flashinfer MOE",
        VersionRange(since="0.5.3", until="0.5.5.post1"),
    ),
    Refusal(
        "handle_moe_kernel_config: modelopt_fp4 quantization is required for Flashinfer "
        "Cutlass MOE",
        "moe_runner_backend",
        _runner_quantization(("flashinfer_cutlass",), ("modelopt_fp4",)),
        "modelopt_fp4 quantization is required for Flashinfer Cutlass MOE",
        VersionRange(since="0.5.5.post1", until="0.5.6"),
    ),
    Refusal(
        "handle_moe_kernel_config: modelopt_fp4 or fp8 quantization is required for Flashinfer "
        "TRTLLM MoE",
        "moe_runner_backend",
        _runner_quantization(_TRTLLM, ("modelopt_fp4", "fp8")),
        "modelopt_fp4 or fp8 quantization is required for Flashinfer TRTLLM MoE",
        VersionRange(since="0.5.3", until="0.5.4.post2"),
    ),
    Refusal(
        "handle_moe_kernel_config: modelopt_fp4, modelopt_fp8 or fp8 quantization is required for "
        "Flashinfer TRTLLM MoE",
        "moe_runner_backend",
        _runner_quantization(_TRTLLM, ("modelopt_fp4", "modelopt_fp8", "fp8")),
        "modelopt_fp4, modelopt_fp8 or fp8 quantization is required for Flashinfer TRTLLM MoE",
        VersionRange(since="0.5.4.post2", until="0.5.7"),
    ),
    Refusal(
        "handle_moe_kernel_config: cutlass MoE is only supported with fp8 quantization",
        "quantization",
        lambda ctx: (
            bool(ctx.env_true("SGLANG_CUTLASS_MOE")) and _quantization(ctx) not in ("fp8", _UNKNOWN)
        ),
        "cutlass MoE is only supported with fp8 quantization",
        VersionRange(since="0.5.4.post3", until="0.5.9"),
    ),
    Refusal(
        "handle_moe_kernel_config: cutlass MoE is only supported with fp8/mxfp8 quantization",
        "quantization",
        lambda ctx: (
            bool(ctx.env_true("SGLANG_CUTLASS_MOE"))
            and _quantization(ctx) not in ("fp8", "mxfp8", _UNKNOWN)
        ),
        "cutlass MoE is only supported with fp8/mxfp8 quantization",
        VersionRange(since="0.5.9", until="0.5.15"),
    ),
    Refusal(
        "handle_moe_kernel_config: Invalid quantization '{}'. FlashInfer Cutlass MOE supports "
        "only: 'modelopt_fp4', 'modelopt_fp8', or bfloat16 (None).",
        "moe_runner_backend",
        _runner_quantization(("flashinfer_cutlass",), ("modelopt_fp4", "modelopt_fp8", None)),
        _invalid_quantization("Cutlass MOE", "'modelopt_fp4', 'modelopt_fp8', or bfloat16 (None)"),
        VersionRange(since="0.5.6", until="0.5.10"),
    ),
    Refusal(
        "handle_moe_kernel_config: Invalid quantization '{}'. FlashInfer Cutlass MOE supports "
        "only: 'modelopt_fp4', 'modelopt_fp8', 'modelopt_mixed', or bfloat16 "
        "(None).",
        "moe_runner_backend",
        _runner_quantization(
            ("flashinfer_cutlass",), ("modelopt_fp4", "modelopt_fp8", "modelopt_mixed", None)
        ),
        _invalid_quantization(
            "Cutlass MOE", "'modelopt_fp4', 'modelopt_fp8', 'modelopt_mixed', or bfloat16 (None)"
        ),
        VersionRange(since="0.5.10"),
    ),
    Refusal(
        "handle_moe_kernel_config: Invalid quantization '{}'. FlashInfer CuteDSL MOE currently "
        "supports only: 'modelopt_fp4'.",
        "moe_runner_backend",
        _runner_quantization(("flashinfer_cutedsl",), ("modelopt_fp4",)),
        _invalid_quantization("CuteDSL MOE currently", "'modelopt_fp4'"),
        VersionRange(since="0.5.11", until="0.5.15"),
    ),
    Refusal(
        "handle_moe_kernel_config: flashinfer_cutedsl supports moe_a2a_backend='none' "
        "(standard path) or 'deepep' (DeepEP low-latency path), got "
        "'{}'.",
        "moe_a2a_backend",
        _cutedsl_a2a(("none", "deepep")),
        lambda ctx: (
            "flashinfer_cutedsl supports moe_a2a_backend='none' (standard path) or "
            f"'deepep' (DeepEP low-latency path), got '{ctx.get('moe_a2a_backend')}'."
        ),
        VersionRange(since="0.5.11", until="0.5.13"),
    ),
    Refusal(
        "handle_moe_kernel_config: flashinfer_cutedsl supports moe_a2a_backend='none', "
        "'deepep', or 'flashinfer', got "
        "'{}'.",
        "moe_a2a_backend",
        _cutedsl_a2a(("none", "deepep", "flashinfer")),
        lambda ctx: (
            "flashinfer_cutedsl supports moe_a2a_backend='none', 'deepep', or "
            "'flashinfer', got "
            f"'{ctx.get('moe_a2a_backend')}'."
        ),
        VersionRange(since="0.5.13"),
    ),
    Refusal(
        "handle_moe_kernel_config: Invalid quantization '{}'. FlashInfer TRTLLM MOE supports "
        "only: 'modelopt_fp4', 'fp8', 'modelopt_fp8', 'compressed-tensors', or bfloat16 "
        "(None).",
        "moe_runner_backend",
        _runner_quantization(
            _TRTLLM, ("modelopt_fp4", "fp8", "mxfp8", "modelopt_fp8", "compressed-tensors", None)
        ),
        _invalid_quantization(
            "TRTLLM MOE",
            "'modelopt_fp4', 'fp8', 'modelopt_fp8', 'compressed-tensors', or bfloat16 (None)",
        ),
        VersionRange(since="0.5.7", until="0.5.10"),
    ),
    Refusal(
        "handle_moe_kernel_config: Invalid quantization '{}'. FlashInfer TRTLLM MOE supports "
        "only: 'modelopt_fp4', 'fp8', 'modelopt_fp8', 'modelopt_mixed', 'compressed-tensors', "
        "or bfloat16 (None).",
        "moe_runner_backend",
        _runner_quantization(
            _TRTLLM,
            (
                "modelopt_fp4",
                "fp8",
                "mxfp8",
                "modelopt_fp8",
                "modelopt_mixed",
                "compressed-tensors",
                None,
            ),
        ),
        _invalid_quantization(
            "TRTLLM MOE",
            "'modelopt_fp4', 'fp8', 'modelopt_fp8', "
            "'modelopt_mixed', 'compressed-tensors', or bfloat16 (None)",
        ),
        VersionRange(since="0.5.10", until="0.5.14"),
    ),
    Refusal(
        "handle_moe_kernel_config: Invalid quantization '{}'. FlashInfer TRTLLM MOE supports "
        "only: 'modelopt_fp4', 'nvfp4_online', 'fp8', 'modelopt_fp8', 'modelopt_mixed', "
        "'compressed-tensors', or bfloat16 (None).",
        "moe_runner_backend",
        _runner_quantization(
            _TRTLLM,
            (
                "modelopt_fp4",
                "nvfp4_online",
                "fp8",
                "mxfp8",
                "modelopt_fp8",
                "modelopt_mixed",
                "compressed-tensors",
                None,
            ),
        ),
        _invalid_quantization(
            "TRTLLM MOE",
            "'modelopt_fp4', 'nvfp4_online', 'fp8', "
            "'modelopt_fp8', 'modelopt_mixed', 'compressed-tensors', or "
            "bfloat16 (None)",
        ),
        VersionRange(since="0.5.14"),
    ),
    Refusal(
        "handle_moe_kernel_config: Invalid quantization '{}'. FlashInfer TRTLLM routed MOE "
        "supports only: 'fp8', 'mxfp8', or bfloat16 (None).",
        "moe_runner_backend",
        _runner_quantization(_ROUTED, ("fp8", "mxfp8", None)),
        _invalid_quantization("TRTLLM routed MOE", "'fp8', 'mxfp8', or bfloat16 (None)"),
        VersionRange(since="0.5.10", until="0.5.11"),
    ),
    Refusal(
        "handle_moe_kernel_config: Invalid quantization '{}'. FlashInfer TRTLLM routed MOE "
        "supports only: 'fp8', 'mxfp8', 'modelopt_fp4', or bfloat16 "
        "(None).",
        "moe_runner_backend",
        _runner_quantization(_ROUTED, ("fp8", "mxfp8", "modelopt_fp4", None)),
        _invalid_quantization(
            "TRTLLM routed MOE", "'fp8', 'mxfp8', 'modelopt_fp4', or bfloat16 (None)"
        ),
        VersionRange(since="0.5.11", until="0.5.14"),
    ),
    Refusal(
        "handle_moe_kernel_config: Invalid quantization '{}'. FlashInfer TRTLLM routed MOE "
        "supports only: 'fp8', 'mxfp8', 'modelopt_fp4', 'nvfp4_online', or bfloat16 "
        "(None).",
        "moe_runner_backend",
        _runner_quantization(_ROUTED, ("fp8", "mxfp8", "modelopt_fp4", "nvfp4_online", None)),
        _invalid_quantization(
            "TRTLLM routed MOE",
            "'fp8', 'mxfp8', 'modelopt_fp4', 'nvfp4_online', or bfloat16 (None)",
        ),
        VersionRange(since="0.5.14", until="0.5.16"),
    ),
    Refusal(
        "handle_moe_kernel_config: Invalid quantization '{}'. FlashInfer TRTLLM routed MOE "
        "supports only: 'fp8', 'mxfp8', 'modelopt_fp4', 'modelopt_mixed', 'nvfp4_online', or "
        "bfloat16 (None).",
        "moe_runner_backend",
        _runner_quantization(
            _ROUTED, ("fp8", "mxfp8", "modelopt_fp4", "modelopt_mixed", "nvfp4_online", None)
        ),
        _invalid_quantization(
            "TRTLLM routed MOE",
            "'fp8', 'mxfp8', 'modelopt_fp4', 'modelopt_mixed', 'nvfp4_online', or bfloat16 (None)",
        ),
        VersionRange(since="0.5.16", until="0.5.23"),
    ),
    Refusal(
        "handle_moe_kernel_config: Invalid quantization '{}'. FlashInfer TRTLLM routed MOE "
        "supports only: 'fp8', 'mxfp8', 'modelopt_fp4', 'modelopt_mixed', 'nvfp4_online', "
        "'minimax_m3_nvfp4', or bfloat16 (None).",
        "moe_runner_backend",
        _runner_quantization(
            _ROUTED,
            (
                "fp8",
                "mxfp8",
                "modelopt_fp4",
                "modelopt_mixed",
                "nvfp4_online",
                "minimax_m3_nvfp4",
                None,
            ),
        ),
        _invalid_quantization(
            "TRTLLM routed MOE",
            "'fp8', 'mxfp8', 'modelopt_fp4', "
            "'modelopt_mixed', 'nvfp4_online', 'minimax_m3_nvfp4', or "
            "bfloat16 (None)",
        ),
        VersionRange(since="0.5.23"),
    ),
    Refusal(
        "handle_moe_kernel_config: FP8 Cutlass MoE is only supported with ep_size == 1",
        "ep_size",
        _fp8_cutlass_ep(("fp8",)),
        "FP8 Cutlass MoE is only supported with ep_size == 1",
        VersionRange(since="0.5.4.post3", until="0.5.9"),
    ),
    Refusal(
        "handle_moe_kernel_config: FP8/MXFP8 Cutlass MoE is only supported with ep_size == 1",
        "ep_size",
        _fp8_cutlass_ep(("fp8", "mxfp8")),
        "FP8/MXFP8 Cutlass MoE is only supported with ep_size == 1",
        VersionRange(since="0.5.9"),
    ),
)
MOE_RUNNER_CONSTRAINTS += (
    Refusal(
        "ServerArgs.__post_init__: The expert parallel size must be 1 or the same as the "
        "tensor parallel size",
        "ep_size",
        _runner_ep_size,
        "The expert parallel size must be 1 or the same as the tensor parallel size",
        VersionRange(until="0.5.3"),
    ),
    Refusal(
        "ServerArgs.__post_init__: modelopt_fp4 quantization is required for Flashinfer MOE",
        "moe_runner_backend",
        _runner_quantization(("flashinfer_cutlass",), ("modelopt_fp4",)),
        "modelopt_fp4 quantization is required for Flashinfer MOE",
        VersionRange(until="0.5.3"),
    ),
    Refusal(
        "ServerArgs.__post_init__: modelopt_fp4 quantization is required for Flashinfer TRTLLM MoE",
        "moe_runner_backend",
        _runner_quantization(_TRTLLM, ("modelopt_fp4",)),
        "modelopt_fp4 quantization is required for Flashinfer TRTLLM MoE",
        VersionRange(since="0.5.2", until="0.5.3"),
    ),
    Refusal(
        "handle_moe_kernel_config: --quantization nvfp4_online supports only "
        "--moe-runner-backend flashinfer_trtllm or "
        "flashinfer_trtllm_routed.",
        "moe_runner_backend",
        lambda ctx: (
            _quantization(ctx) == "nvfp4_online"
            and ctx.get("moe_runner_backend", "auto")
            not in ("auto", "flashinfer_trtllm", "flashinfer_trtllm_routed")
        ),
        "--quantization nvfp4_online supports only --moe-runner-backend flashinfer_trtllm or "
        "flashinfer_trtllm_routed.",
        VersionRange(since="0.5.14", until="0.5.15"),
    ),
    Refusal(
        "moe_runner_backend_quant_constraints: --quantization nvfp4_online supports only "
        "--moe-runner-backend flashinfer_trtllm or "
        "flashinfer_trtllm_routed.",
        "moe_runner_backend",
        lambda ctx: (
            _quantization(ctx) == "nvfp4_online"
            and ctx.get("moe_runner_backend", "auto")
            not in ("auto", "flashinfer_trtllm", "flashinfer_trtllm_routed")
        ),
        "--quantization nvfp4_online supports only --moe-runner-backend flashinfer_trtllm or "
        "flashinfer_trtllm_routed.",
        VersionRange(since="0.5.15", until="0.5.18"),
    ),
    Refusal(
        "moe_runner_backend_quant_constraints: --quantization nvfp4_online supports only "
        "--moe-runner-backend flashinfer_trtllm or flashinfer_trtllm_routed, or "
        "flashinfer_cutedsl.",
        "moe_runner_backend",
        lambda ctx: (
            _quantization(ctx) == "nvfp4_online"
            and ctx.get("moe_runner_backend", "auto")
            not in ("auto", "flashinfer_trtllm", "flashinfer_trtllm_routed", "flashinfer_cutedsl")
        ),
        "--quantization nvfp4_online supports only --moe-runner-backend flashinfer_trtllm or "
        "flashinfer_trtllm_routed, or flashinfer_cutedsl.",
        VersionRange(since="0.5.18", until="0.5.23"),
    ),
    Refusal(
        "handle_moe_kernel_config: flashinfer_cutedsl per-token NVFP4 activation requires "
        "moe_a2a_backend='none' or 'flashinfer'.",
        "moe_a2a_backend",
        lambda ctx: (
            _effective_runner(ctx) == "flashinfer_cutedsl"
            and moe_a2a(ctx) == "deepep"
            and (
                _quantization(ctx) == "nvfp4_online"
                or bool(ctx.env_true("SGLANG_FLASHINFER_NVFP4_PER_TOKEN_ACTIVATION"))
            )
        ),
        "flashinfer_cutedsl per-token NVFP4 activation requires moe_a2a_backend='none' or "
        "'flashinfer'.",
        VersionRange(since="0.5.18"),
    ),
    Refusal(
        "cutlass_moe_env_override: cutlass MoE is only supported with fp8/mxfp8 quantization",
        "quantization",
        lambda ctx: (
            bool(ctx.env_true("SGLANG_CUTLASS_MOE"))
            and _quantization(ctx) not in ("fp8", "mxfp8", _UNKNOWN)
        ),
        "cutlass MoE is only supported with fp8/mxfp8 quantization",
        VersionRange(since="0.5.15", until="0.5.18"),
    ),
)
def _hybrid_nvfp4(ctx: LaunchContext) -> bool | None:
    """A hybrid FP8 + NVFP4-MoE checkpoint (SGLang's nvfp4_moe_meta); None without its
    config.json."""
    if ctx.model_config is None:
        return None
    quant = ctx.model_config.value("quantization_config")
    return (
        isinstance(quant, dict)
        and str(quant.get("quant_algo", "")).upper() == "MIXED_PRECISION"
        and str(quant.get("moe_quant_algo", "")).upper() == "NVFP4"
        and quant.get("group_size") is not None
    )


def _cutedsl_quantization(allowed: tuple[str, ...]) -> Callable[[LaunchContext], bool]:
    """CuteDSL's check from 0.5.15: the quantizations it lists, or a hybrid NVFP4 checkpoint
    (config.json)."""
    return lambda ctx: (
        _effective_runner(ctx) == "flashinfer_cutedsl"
        and _hybrid_nvfp4(ctx) is False
        and _quantization(ctx) not in (*allowed, _UNKNOWN)
    )


MOE_RUNNER_CONSTRAINTS += (
    Refusal(
        "handle_moe_kernel_config: Invalid quantization '{}'. FlashInfer CuteDSL MOE currently "
        "supports only: 'modelopt_fp4' or hybrid NVFP4 "
        "models.",
        "moe_runner_backend",
        _cutedsl_quantization(("modelopt_fp4",)),
        _invalid_quantization("CuteDSL MOE currently", "'modelopt_fp4' or hybrid NVFP4 models"),
        VersionRange(since="0.5.15", until="0.5.16"),
    ),
    Refusal(
        "handle_moe_kernel_config: Invalid quantization '{}'. FlashInfer CuteDSL MOE currently "
        "supports only: 'modelopt_fp4', 'modelopt_mixed' (with NVFP4 MoE layers), or hybrid "
        "NVFP4 models.",
        "moe_runner_backend",
        _cutedsl_quantization(("modelopt_fp4", "modelopt_mixed")),
        _invalid_quantization(
            "CuteDSL MOE currently",
            "'modelopt_fp4', 'modelopt_mixed' (with NVFP4 MoE layers), or hybrid NVFP4 models",
        ),
        VersionRange(since="0.5.16", until="0.5.18"),
    ),
    Refusal(
        "handle_moe_kernel_config: Invalid quantization '{}'. FlashInfer CuteDSL MOE currently "
        "supports only: 'modelopt_fp4', 'modelopt_mixed' (with NVFP4 MoE layers), "
        "'nvfp4_online', or hybrid NVFP4 models.",
        "moe_runner_backend",
        _cutedsl_quantization(("modelopt_fp4", "modelopt_mixed", "nvfp4_online")),
        _invalid_quantization(
            "CuteDSL MOE currently",
            "'modelopt_fp4', 'modelopt_mixed' (with "
            "NVFP4 MoE layers), 'nvfp4_online', or hybrid NVFP4 "
            "models",
        ),
        VersionRange(since="0.5.18"),
    ),
)
MOE_RUNNER_CONSTRAINTS += (
    Refusal(
        "moe_runner_backend_quant_constraints: --quantization nvfp4_online supports only "
        "--moe-runner-backend flashinfer_trtllm or flashinfer_trtllm_routed, or "
        "flashinfer_cutedsl; flashinfer_megamoe requires --moe-a2a-backend flashinfer_megamoe "
        "and SGLANG_FLASHINFER_CUTEDSL_NVFP4_W4A16=1.",
        "moe_runner_backend",
        lambda ctx: (
            _quantization(ctx) == "nvfp4_online"
            and moe_runner(ctx)
            not in (
                "auto",
                "flashinfer_trtllm",
                "flashinfer_trtllm_routed",
                "flashinfer_cutedsl",
                "flashinfer_megamoe",
            )
        ),
        "--quantization nvfp4_online supports only --moe-runner-backend flashinfer_trtllm or "
        "flashinfer_trtllm_routed, or flashinfer_cutedsl",
        VersionRange(since="0.5.23"),
    ),
)
refusal_rule(
    "SGD117",
    "moe-runner-constraints",
    "An explicit moe_runner_backend that SGLang refuses with this quantization, ep_size or "
    "all-to-all backend.",
    "choose a MoE runner backend that supports the checkpoint's quantization "
    "(or leave it auto), with ep_size 1 or tp_size",
    MOE_RUNNER_CONSTRAINTS,
)


# --------------------------------------------------------------------------- one-condition checks
def _layernorm_sp(ctx: LaunchContext) -> bool:
    return ctx.on("enable_layernorm_sp")


def _layernorm_sp_architectures(ctx: LaunchContext) -> tuple[str, ...]:
    """`SP_SUPPORTED_ARCHITECTURES` (sglang/srt/layers/layernorm_sp.py) of the release."""
    muse = (
        ("MuseSparkForConditionalGeneration",)
        if ctx.version in VersionRange(since="0.5.23")
        else ()
    )
    return (*muse, "Qwen3ForCausalLM")


def _dcp(ctx: LaunchContext) -> int:
    return ctx.int("dcp_size", 1)


def _attn_tp(ctx: LaunchContext) -> int:
    return max(
        ctx.int("tp_size", 1) // max(ctx.int("attn_cp_size", 1), 1) // max(attn_dp_size(ctx), 1), 1
    )


def _shared_experts_tp_bad(ctx: LaunchContext) -> bool:
    size = ctx.server.get("shared_experts_tp_size")
    return (
        isinstance(size, int)
        and not isinstance(size, bool)
        and (size < 1 or _attn_tp(ctx) % size != 0)
    )


def _elastic_backend(ctx: LaunchContext) -> bool:
    return ctx.get("elastic_ep_backend") is not None


def _elastic_scaling(ctx: LaunchContext) -> bool:
    max_ep = ctx.get("max_ep_size")
    return _elastic_backend(ctx) and isinstance(max_ep, int) and max_ep > ctx.int("tp_size", 1)


PARALLEL_OPTIONS: tuple[Refusal, ...] = (
    Refusal(
        "validate_layernorm_sp: --enable-layernorm-sp is only supported for {}; got {}.",
        "enable_layernorm_sp",
        lambda ctx: (
            _layernorm_sp(ctx)
            and ctx.architecture is not None
            and ctx.architecture not in _layernorm_sp_architectures(ctx)
        ),
        lambda ctx: (
            "--enable-layernorm-sp is only supported for "
            f"{sorted(_layernorm_sp_architectures(ctx))}; got "
            f"{ctx.architecture}."
        ),
        VersionRange(since="0.5.19"),
    ),
    Refusal(
        "validate_layernorm_sp: --enable-layernorm-sp requires tp_size > 1: there is no sequence "
        "to shard across a single TP rank.",
        "enable_layernorm_sp",
        lambda ctx: _layernorm_sp(ctx) and ctx.int("tp_size", 1) <= 1,
        "--enable-layernorm-sp requires tp_size > 1: there is no sequence to shard across a "
        "single TP rank.",
        VersionRange(since="0.5.19"),
    ),
    Refusal(
        "validate_layernorm_sp: --enable-layernorm-sp is not compatible with "
        "--enable-dp-attention: SP shards the sequence across the full TP group, which under DP "
        "attention spans data-parallel groups holding different sequences.",
        "enable_layernorm_sp",
        lambda ctx: _layernorm_sp(ctx) and attn_dp_size(ctx) > 1,
        "--enable-layernorm-sp is not compatible with --enable-dp-attention",
        VersionRange(since="0.5.19", until="0.5.22"),
    ),
    Refusal(
        "validate_layernorm_sp: --enable-layernorm-sp is not compatible with attention DP: SP "
        "shards the sequence across the full TP group, which under DP attention spans "
        "data-parallel groups holding different sequences.",
        "enable_layernorm_sp",
        lambda ctx: _layernorm_sp(ctx) and attn_dp_size(ctx) > 1,
        "--enable-layernorm-sp is not compatible with attention DP",
        VersionRange(since="0.5.22"),
    ),
    Refusal(
        "validate_layernorm_sp: --enable-layernorm-sp is not compatible with speculative "
        "decoding (EAGLE/EAGLE3): the captured aux hidden states would be "
        "sequence-sharded.",
        "enable_layernorm_sp",
        lambda ctx: _layernorm_sp(ctx) and bool(ctx.get("speculative_algorithm")),
        "--enable-layernorm-sp is not compatible with speculative decoding (EAGLE/EAGLE3)",
        VersionRange(since="0.5.19", until="0.5.23"),
    ),
    Refusal(
        "validate_layernorm_sp: --enable-layernorm-sp supports speculative decoding only with "
        "Muse Spark DFLASH: other models/algorithms do not gather the sequence-sharded "
        "auxiliary hidden states.",
        "enable_layernorm_sp",
        lambda ctx: (
            _layernorm_sp(ctx)
            and bool(ctx.get("speculative_algorithm"))
            and not (
                ctx.architecture == "MuseSparkForConditionalGeneration"
                and str(ctx.get("speculative_algorithm")).upper() == "DFLASH"
            )
        ),
        "--enable-layernorm-sp supports speculative decoding only with Muse Spark DFLASH",
        VersionRange(since="0.5.23"),
    ),
    Refusal(
        "validate_layernorm_sp: --enable-layernorm-sp is not compatible with pipeline "
        "parallelism: only the first rank's stack starts the sequence-sharded region, so the "
        "next rank would receive a stream it does not "
        "expect.",
        "pp_size",
        lambda ctx: _layernorm_sp(ctx) and ctx.int("pp_size", 1) > 1,
        "--enable-layernorm-sp is not compatible with pipeline parallelism",
        VersionRange(since="0.5.22"),
    ),
    Refusal(
        "handle_layernorm_sp: --enable-megamoe-for-layernorm-sp requires --enable-layernorm-sp.",
        "enable_megamoe_for_layernorm_sp",
        lambda ctx: ctx.on("enable_megamoe_for_layernorm_sp") and not _layernorm_sp(ctx),
        "--enable-megamoe-for-layernorm-sp requires --enable-layernorm-sp.",
        VersionRange(since="0.5.23"),
    ),
    Refusal(
        "validate_layernorm_sp: --enable-megamoe-for-layernorm-sp supports only Muse Spark.",
        "enable_megamoe_for_layernorm_sp",
        lambda ctx: (
            ctx.on("enable_megamoe_for_layernorm_sp")
            and _layernorm_sp(ctx)
            and ctx.architecture is not None
            and ctx.architecture != "MuseSparkForConditionalGeneration"
        ),
        "--enable-megamoe-for-layernorm-sp supports only Muse Spark.",
        VersionRange(since="0.5.23"),
    ),
    Refusal(
        "handle_a2a_moe: --flashinfer-a2a-dispatch-type requires --moe-a2a-backend flashinfer.",
        "flashinfer_a2a_dispatch_type",
        lambda ctx: (
            ctx.get("flashinfer_a2a_dispatch_type") not in (None, "auto")
            and moe_a2a(ctx) != "flashinfer"
        ),
        "--flashinfer-a2a-dispatch-type requires --moe-a2a-backend flashinfer.",
        VersionRange(since="0.5.20"),
    ),
    Refusal(
        "handle_a2a_moe: moe_a2a_backend='pplx' requires --enable-dp-attention with at least 2 "
        "DP groups (--dp-size >= 2).",
        "moe_a2a_backend",
        lambda ctx: moe_a2a(ctx) == "pplx" and attn_dp_size(ctx) < 2,
        "moe_a2a_backend='pplx' requires --enable-dp-attention with at least 2 DP groups "
        "(--dp-size >= 2).",
        VersionRange(since="0.5.17", until="0.5.22"),
    ),
    Refusal(
        "handle_a2a_moe: moe_a2a_backend='pplx' requires attention DP with at least 2 groups "
        "(--attn-dp-size >= 2).",
        "moe_a2a_backend",
        lambda ctx: moe_a2a(ctx) == "pplx" and attn_dp_size(ctx) < 2,
        "moe_a2a_backend='pplx' requires attention DP with at least 2 groups (--attn-dp-size "
        ">= 2).",
        VersionRange(since="0.5.22"),
    ),
    Refusal(
        "handle_a2a_moe: moe_a2a_backend='pplx' only supports low-latency mode; set "
        "--deepep-mode to 'low_latency' or 'auto'.",
        "deepep_mode",
        lambda ctx: moe_a2a(ctx) == "pplx" and ctx.get("deepep_mode") == "normal",
        "moe_a2a_backend='pplx' only supports low-latency mode; set --deepep-mode to "
        "'low_latency' or 'auto'.",
        VersionRange(since="0.5.17"),
    ),
    Refusal(
        "handle_a2a_moe: moe_a2a_backend='pplx' is only supported with --moe-runner-backend "
        "deep_gemm (or auto).",
        "moe_runner_backend",
        lambda ctx: (
            moe_a2a(ctx) == "pplx"
            and ctx.get("moe_runner_backend", "auto") not in ("deep_gemm", "auto")
        ),
        "moe_a2a_backend='pplx' is only supported with --moe-runner-backend deep_gemm (or auto).",
        VersionRange(since="0.5.17"),
    ),
    Refusal(
        "handle_shared_experts_tp: --shared-experts-tp-size ({}) must be a positive divisor of "
        "attention TP size ({}).",
        "shared_experts_tp_size",
        _shared_experts_tp_bad,
        lambda ctx: (
            f"--shared-experts-tp-size ({ctx.get('shared_experts_tp_size')}) must be a "
            "positive divisor of attention TP size "
            f"({_attn_tp(ctx)})."
        ),
        VersionRange(since="0.5.21"),
    ),
    Refusal(
        "handle_shared_experts_tp: --shared-experts-tp-size is only supported for Kimi-K3.",
        "shared_experts_tp_size",
        lambda ctx: (
            ctx.get("shared_experts_tp_size") is not None
            and not _shared_experts_tp_bad(ctx)
            and ctx.architecture is not None
            and ctx.architecture != "KimiK3ForConditionalGeneration"
        ),
        "--shared-experts-tp-size is only supported for Kimi-K3.",
        VersionRange(since="0.5.21"),
    ),
    Refusal(
        "handle_dcp_validation: Decode context parallel size (--dcp-size / "
        "--decode-context-parallel-size) must be >= 1, but got "
        "dcp_size={}.",
        "dcp_size",
        lambda ctx: ctx.given("dcp_size") and _dcp(ctx) < 1,
        lambda ctx: (
            "Decode context parallel size (--dcp-size / "
            "--decode-context-parallel-size) must be >= 1, but got "
            f"dcp_size={_dcp(ctx)}."
        ),
        VersionRange(since="0.5.15", until="0.5.20"),
    ),
    Refusal(
        "handle_decode_context_parallelism: Decode context parallel size (--dcp-size / "
        "--decode-context-parallel-size) must be >= 1, but got dcp_size={}.",
        "dcp_size",
        lambda ctx: ctx.given("dcp_size") and _dcp(ctx) < 1,
        lambda ctx: (
            "Decode context parallel size (--dcp-size / "
            "--decode-context-parallel-size) must be >= 1, but got "
            f"dcp_size={_dcp(ctx)}."
        ),
        VersionRange(since="0.5.20"),
    ),
    Refusal(
        "handle_decode_context_parallelism: --dcp-size > 1 does not support --enable-prefill-cp.",
        "dcp_size",
        lambda ctx: _dcp(ctx) > 1 and ctx.on("enable_prefill_cp"),
        "--dcp-size > 1 does not support --enable-prefill-cp.",
        VersionRange(since="0.5.22"),
    ),
    Refusal(
        "handle_dcp_validation: --dcp-comm-backend {} only affects the decode context-parallel "
        "attention reduction and therefore requires --dcp-size / "
        "--decode-context-parallel-size > 1, but got dcp_size={}.",
        "dcp_comm_backend",
        lambda ctx: ctx.get("dcp_comm_backend") in ("a2a", "fi_a2a") and _dcp(ctx) <= 1,
        lambda ctx: (
            f"--dcp-comm-backend {ctx.get('dcp_comm_backend')} only affects the decode "
            "context-parallel attention reduction and therefore requires --dcp-size > "
            f"1, but got dcp_size={_dcp(ctx)}."
        ),
        VersionRange(since="0.5.17", until="0.5.20"),
    ),
    Refusal(
        "handle_decode_context_parallelism: --dcp-comm-backend {} only affects the decode "
        "context-parallel attention reduction and therefore requires --dcp-size / "
        "--decode-context-parallel-size > 1, but got dcp_size={}.",
        "dcp_comm_backend",
        lambda ctx: ctx.get("dcp_comm_backend") in ("a2a", "fi_a2a") and _dcp(ctx) <= 1,
        lambda ctx: (
            f"--dcp-comm-backend {ctx.get('dcp_comm_backend')} only affects the decode "
            "context-parallel attention reduction and therefore requires --dcp-size > "
            f"1, but got dcp_size={_dcp(ctx)}."
        ),
        VersionRange(since="0.5.20"),
    ),
    Refusal(
        "handle_dcp_validation: --dcp-replicate-q-proj requires --dcp-size > 1.",
        "dcp_replicate_q_proj",
        lambda ctx: ctx.on("dcp_replicate_q_proj") and _dcp(ctx) <= 1,
        "--dcp-replicate-q-proj requires --dcp-size > 1.",
        VersionRange(since="0.5.17", until="0.5.20"),
    ),
    Refusal(
        "handle_decode_context_parallelism: --dcp-replicate-q-proj requires --dcp-size > 1.",
        "dcp_replicate_q_proj",
        lambda ctx: ctx.on("dcp_replicate_q_proj") and _dcp(ctx) <= 1,
        "--dcp-replicate-q-proj requires --dcp-size > 1.",
        VersionRange(since="0.5.20"),
    ),
    Refusal(
        "handle_eplb_and_dispatch: --ep-dispatch-algorithm {} picks a different physical "
        "replica per rank, which only holds up when an a2a backend routes each token to a "
        "single rank. Use --ep-dispatch-algorithm dynamic with --moe-a2a-backend "
        "none.",
        "ep_dispatch_algorithm",
        lambda ctx: (
            ctx.get("ep_dispatch_algorithm") in ("static", "lp") and moe_a2a(ctx) in (None, "none")
        ),
        lambda ctx: (
            f"--ep-dispatch-algorithm {ctx.get('ep_dispatch_algorithm')} picks a "
            "different physical replica per rank, which only holds up when an a2a "
            "backend routes each token to a single rank. Use --ep-dispatch-algorithm "
            "dynamic with --moe-a2a-backend none."
        ),
        VersionRange(since="0.5.17"),
    ),
    Refusal(
        "handle_dwdp: dwdp_size ({}) must equal tp_size ({})",
        "dwdp_size",
        lambda ctx: (
            ctx.int("dwdp_size", 1) > 1 and ctx.int("dwdp_size", 1) != ctx.int("tp_size", 1)
        ),
        lambda ctx: (
            f"dwdp_size ({ctx.int('dwdp_size', 1)}) must equal tp_size ({ctx.int('tp_size', 1)})"
        ),
        VersionRange(since="0.5.17"),
    ),
    Refusal(
        "check_mega_moe_compat: --moe-a2a-backend megamoe has no two-batch / single-batch "
        "overlap decomposition; disable --enable-two-batch-overlap and "
        "--enable-single-batch-overlap.",
        "moe_a2a_backend",
        lambda ctx: (
            moe_a2a(ctx) == "megamoe"
            and (ctx.on("enable_two_batch_overlap") or ctx.on("enable_single_batch_overlap"))
        ),
        "--moe-a2a-backend megamoe has no two-batch / single-batch overlap decomposition; "
        "disable --enable-two-batch-overlap and "
        "--enable-single-batch-overlap.",
        VersionRange(since="0.5.21"),
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP rejoin requires elastic_ep_backend to be set.",
        "elastic_ep_rejoin",
        lambda ctx: ctx.on("elastic_ep_rejoin") and not _elastic_backend(ctx),
        "Elastic EP rejoin requires elastic_ep_backend to be set.",
        VersionRange(since="0.5.11", until="0.5.16"),
    ),
    Refusal(
        "handle_elastic_ep: --elastic-ep-join-mode requires --elastic-ep-backend to be set.",
        "ep_join_mode",
        lambda ctx: ctx.get("ep_join_mode") is not None and not _elastic_backend(ctx),
        "--elastic-ep-join-mode requires --elastic-ep-backend to be set.",
        VersionRange(since="0.5.16"),
    ),
    Refusal(
        "handle_elastic_ep: --elastic-ep-join-rank-offset is only valid with "
        "--elastic-ep-join-mode scale.",
        "ep_join_rank_offset",
        lambda ctx: ctx.int("ep_join_rank_offset", 0) != 0 and ctx.get("ep_join_mode") != "scale",
        "--elastic-ep-join-rank-offset is only valid with --elastic-ep-join-mode scale.",
        VersionRange(since="0.5.16"),
    ),
    Refusal(
        "handle_elastic_ep: --max-ep-size requires --elastic-ep-backend to be set.",
        "max_ep_size",
        lambda ctx: ctx.get("max_ep_size") is not None and not _elastic_backend(ctx),
        "--max-ep-size requires --elastic-ep-backend to be set.",
        VersionRange(since="0.5.16"),
    ),
    Refusal(
        "handle_elastic_ep: --max-ep-size must be a positive integer.",
        "max_ep_size",
        lambda ctx: (
            _elastic_backend(ctx)
            and isinstance(ctx.get("max_ep_size"), int)
            and ctx.int("max_ep_size", 1) <= 0
        ),
        "--max-ep-size must be a positive integer.",
        VersionRange(since="0.5.16"),
    ),
    Refusal(
        "handle_elastic_ep: --elastic-ep-initial-size is only valid for an Elastic EP "
        "deployment with --max-ep-size larger than its local TP "
        "size.",
        "elastic_ep_initial_size",
        lambda ctx: ctx.get("elastic_ep_initial_size") is not None and not _elastic_scaling(ctx),
        "--elastic-ep-initial-size is only valid for an Elastic EP deployment with "
        "--max-ep-size larger than its local TP size.",
        VersionRange(since="0.5.16"),
    ),
)

PARALLEL_OPTIONS += (
    Refusal(
        "handle_context_parallelism: --enable-prefill-context-parallel and "
        "--enable-nsa-prefill-context-parallel are mutually exclusive. Use "
        "--enable-nsa-prefill-context-parallel for DeepSeek V3.2 (NSA) models and "
        "--enable-prefill-context-parallel for MLA-based models (DeepSeek V3/R1, Kimi K2.5) or "
        "MHA/GQA-based models.",
        "enable_prefill_context_parallel",
        lambda ctx: (
            ctx.on("enable_prefill_context_parallel")
            and (
                ctx.on("enable_nsa_prefill_context_parallel")
                or ctx.on("enable_dsa_prefill_context_parallel")
            )
        ),
        "--enable-prefill-context-parallel and --enable-nsa-prefill-context-parallel are "
        "mutually exclusive.",
        VersionRange(since="0.5.13", until="0.5.20"),
    ),
    Refusal(
        "handle_data_parallelism: --dp-size {} with --attn-dp-size {}: data-parallel replicas "
        "combined with attention data parallelism are not supported.",
        "attn_dp_size",
        lambda ctx: ctx.int("dp_size", 1) > 1 and ctx.int("attn_dp_size", 1) > 1,
        lambda ctx: (
            f"--dp-size {ctx.int('dp_size', 1)} with --attn-dp-size "
            f"{ctx.int('attn_dp_size', 1)}: data-parallel replicas combined with "
            "attention data parallelism are not supported."
        ),
        VersionRange(since="0.5.22"),
    ),
    Refusal(
        "context_parallel_attn_dp_size: --dp-size {} with --attn-dp-size {}: data-parallel "
        "replicas combined with attention data parallelism are not supported.",
        "attn_dp_size",
        lambda ctx: ctx.int("dp_size", 1) > 1 and ctx.int("attn_dp_size", 1) > 1,
        lambda ctx: (
            f"--dp-size {ctx.int('dp_size', 1)} with --attn-dp-size "
            f"{ctx.int('attn_dp_size', 1)}: data-parallel replicas combined with "
            "attention data parallelism are not supported."
        ),
        VersionRange(since="0.5.22"),
    ),
    Refusal(
        "handle_dcp_validation: --dcp-replicate-q-proj only applies to the a2a/fi_a2a DCP "
        "communication backend (it removes the head-dim Q all-gather); got "
        "--dcp-comm-backend={}.",
        "dcp_comm_backend",
        lambda ctx: (
            ctx.on("dcp_replicate_q_proj")
            and _dcp(ctx) > 1
            and ctx.get("dcp_comm_backend") == "ag_rs"
        ),
        "--dcp-replicate-q-proj only applies to the a2a/fi_a2a DCP communication backend; got "
        "--dcp-comm-backend=ag_rs.",
        VersionRange(since="0.5.17", until="0.5.20"),
    ),
    Refusal(
        "handle_decode_context_parallelism: --dcp-replicate-q-proj only applies to the "
        "a2a/fi_a2a DCP communication backend (it removes the head-dim Q all-gather); got "
        "--dcp-comm-backend={}.",
        "dcp_comm_backend",
        lambda ctx: (
            ctx.on("dcp_replicate_q_proj")
            and _dcp(ctx) > 1
            and ctx.get("dcp_comm_backend") == "ag_rs"
        ),
        "--dcp-replicate-q-proj only applies to the a2a/fi_a2a DCP communication backend; got "
        "--dcp-comm-backend=ag_rs.",
        VersionRange(since="0.5.20"),
    ),
    Refusal(
        "ServerArgs.__post_init__: Please set a dp-size > 1. You can use 1 < dp-size <= tp-size",
        "dp_size",
        lambda ctx: ctx.on("enable_dp_attention") and ctx.int("dp_size", 1) <= 1,
        "Please set a dp-size > 1. You can use 1 < dp-size <= tp-size",
        VersionRange(until="0.5.2"),
    ),
    Refusal(
        "handle_expert_distribution_metrics: SGLANG_ENABLE_EPLB_BALANCEDNESS_METRIC is no "
        "longer supported. Use --expert-balancedness-report-mode with one of: off, server_log, "
        "prometheus, both.",
        "",
        lambda ctx: bool(ctx.env_true("SGLANG_ENABLE_EPLB_BALANCEDNESS_METRIC")),
        "SGLANG_ENABLE_EPLB_BALANCEDNESS_METRIC is no longer supported. Use "
        "--expert-balancedness-report-mode with one of: off, server_log, prometheus, "
        "both.",
        VersionRange(since="0.5.18", until="0.5.21"),
    ),
    Refusal(
        "check_server_args: --enable-two-batch-overlap and --enforce-shared-experts-fusion "
        "cannot be used together.",
        "enforce_shared_experts_fusion",
        lambda ctx: ctx.on("enable_two_batch_overlap") and ctx.on("enforce_shared_experts_fusion"),
        "--enable-two-batch-overlap and --enforce-shared-experts-fusion cannot be used together.",
        VersionRange(since="0.5.12", until="0.5.14"),
    ),
    Refusal(
        "handle_shared_experts_tp: --shared-experts-tp-size requires an expert-parallel "
        "all-to-all backend (deepep, megamoe, mooncake, ascend_fuseep or "
        "mori).",
        "moe_a2a_backend",
        lambda ctx: (
            ctx.get("shared_experts_tp_size") is not None
            and not _shared_experts_tp_bad(ctx)
            and ctx.architecture == "KimiK3ForConditionalGeneration"
            and moe_a2a(ctx) not in ("deepep", "megamoe", "mooncake", "ascend_fuseep", "mori")
        ),
        "--shared-experts-tp-size requires an expert-parallel all-to-all backend (deepep, "
        "megamoe, mooncake, ascend_fuseep or mori).",
        VersionRange(since="0.5.21"),
    ),
)
refusal_rule("SGD118", "parallel-options-together",
             "A parallelism option SGLang refuses without the setting it depends on (layernorm SP, "
             "all-to-all and DCP options, dispatch algorithm, DWDP, elastic EP).",
             "set what SGLang's message names, or drop the option", PARALLEL_OPTIONS)


# --------------------------------------------------------------------------- elastic EP
def _scale_join(ctx: LaunchContext) -> bool:
    return _elastic_backend(ctx) and ctx.get("ep_join_mode") == "scale"


def _initial(ctx: LaunchContext) -> int | None:
    value = ctx.get("elastic_ep_initial_size")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _decode_graph_full(ctx: LaunchContext) -> bool:
    """The decode CUDA graph stays `full` (its default) unless the profile turns it off or picks
    another backend."""
    return (
        ctx.get("cuda_graph_backend_decode") in (None, "full")
        and not ctx.on("disable_cuda_graph")
        and not ctx.on("disable_decode_cuda_graph")
    )


def _scaling_and(condition: Callable[[LaunchContext], bool]) -> Callable[[LaunchContext], bool]:
    return lambda ctx: _elastic_scaling(ctx) and condition(ctx)


def _recapture(condition: Callable[[LaunchContext], bool]) -> Callable[[LaunchContext], bool]:
    return lambda ctx: _elastic_scaling(ctx) and _decode_graph_full(ctx) and condition(ctx)


_SCALE = VersionRange(since="0.5.16")
_RECAPTURE = VersionRange(since="0.5.21")
ELASTIC_EP: tuple[Refusal, ...] = (
    Refusal(
        "handle_elastic_ep: Elastic EP requires eplb_algorithm to be set to 'auto' or "
        "'elasticity_aware'.",
        "eplb_algorithm",
        lambda ctx: (
            _elastic_backend(ctx)
            and ctx.on("enable_eplb")
            and ctx.get("eplb_algorithm", "auto") not in ("auto", "elasticity_aware")
        ),
        "Elastic EP requires eplb_algorithm to be set to 'auto' or 'elasticity_aware'.",
        VersionRange(since="0.5.4", until="0.5.10"),
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP requires eplb_algorithm to be set to 'auto' or "
        "'elasticity_aware(_hierarchical)'.",
        "eplb_algorithm",
        lambda ctx: (
            _elastic_backend(ctx)
            and ctx.on("enable_eplb")
            and ctx.get("eplb_algorithm", "auto")
            not in ("auto", "elasticity_aware", "elasticity_aware_hierarchical")
        ),
        "Elastic EP requires eplb_algorithm to be set to 'auto' or "
        "'elasticity_aware(_hierarchical)'.",
        VersionRange(since="0.5.10"),
    ),
    Refusal(
        "handle_elastic_ep: PP size should be set to 1 under elastic EP",
        "pp_size",
        lambda ctx: _elastic_backend(ctx) and ctx.int("pp_size", 1) != 1,
        "PP size should be set to 1 under elastic EP",
        VersionRange(since="0.5.11"),
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP scale-up requires one joining TP group at --node-rank 1 "
        "(got {}).",
        "node_rank",
        lambda ctx: _scale_join(ctx) and ctx.int("node_rank", 0) != 1,
        lambda ctx: (
            f"Elastic EP scale-up requires one joining TP group at --node-rank 1 (got "
            f"{ctx.int('node_rank', 0)})."
        ),
        _SCALE,
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP scale joiners require --elastic-ep-join-rank-offset set "
        "to the current effective EP size.",
        "ep_join_rank_offset",
        lambda ctx: _scale_join(ctx) and ctx.int("ep_join_rank_offset", 0) <= 0,
        "Elastic EP scale joiners require --elastic-ep-join-rank-offset set to the current "
        "effective EP size.",
        _SCALE,
    ),
    Refusal(
        "handle_elastic_ep: elastic EP join rank offset must be >= 0.",
        "ep_join_rank_offset",
        lambda ctx: ctx.get("ep_join_mode") == "scale" and ctx.int("ep_join_rank_offset", 0) < 0,
        "elastic EP join rank offset must be >= 0.",
        _SCALE,
    ),
    Refusal(
        "handle_elastic_ep: --elastic-ep-scale-timeout must be greater than zero.",
        "elastic_ep_scale_timeout",
        _scaling_and(
            lambda ctx: (
                isinstance(ctx.get("elastic_ep_scale_timeout"), int | float)
                and ctx.get("elastic_ep_scale_timeout") <= 0
            )
        ),
        "--elastic-ep-scale-timeout must be greater than zero.",
        _SCALE,
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP runtime scale-up currently requires "
        "--tokenizer-worker-num 1.",
        "tokenizer_worker_num",
        _scaling_and(lambda ctx: ctx.int("tokenizer_worker_num", 1) != 1),
        "Elastic EP runtime scale-up currently requires --tokenizer-worker-num 1.",
        _SCALE,
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP runtime scale-up does not support --use-ray.",
        "use_ray",
        _scaling_and(lambda ctx: ctx.on("use_ray")),
        "Elastic EP runtime scale-up does not support --use-ray.",
        _SCALE,
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP runtime scale-up does not support "
        "--enable-elastic-expert-backup.",
        "enable_elastic_expert_backup",
        _scaling_and(lambda ctx: ctx.on("enable_elastic_expert_backup")),
        "Elastic EP runtime scale-up does not support --enable-elastic-expert-backup.",
        _SCALE,
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP scale joiners require --elastic-ep-initial-size set to "
        "the primary deployment's launch-time EP size.",
        "elastic_ep_initial_size",
        _scaling_and(lambda ctx: _scale_join(ctx) and _initial(ctx) is None),
        "Elastic EP scale joiners require --elastic-ep-initial-size set to the primary "
        "deployment's launch-time EP size.",
        _SCALE,
    ),
    Refusal(
        "handle_elastic_ep: --elastic-ep-initial-size cannot exceed the current EP size "
        "(initial={}, current={}).",
        "elastic_ep_initial_size",
        _scaling_and(
            lambda ctx: (
                _scale_join(ctx) and (_initial(ctx) or 0) > ctx.int("ep_join_rank_offset", 0)
            )
        ),
        lambda ctx: (
            "--elastic-ep-initial-size cannot exceed the current EP size "
            f"(initial={_initial(ctx)}, "
            f"current={ctx.int('ep_join_rank_offset', 0)})."
        ),
        _SCALE,
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP joining group exceeds --max-ep-size (join_target={}, "
        "max_ep_size={}).",
        "max_ep_size",
        _scaling_and(
            lambda ctx: (
                _scale_join(ctx)
                and ctx.int("ep_join_rank_offset", 0) + ctx.int("tp_size", 1)
                > ctx.int("max_ep_size", 0)
            )
        ),
        lambda ctx: (
            "Elastic EP joining group exceeds --max-ep-size (join_target="
            f"{ctx.int('ep_join_rank_offset', 0) + ctx.int('tp_size', 1)}, max_ep_size="
            f"{ctx.int('max_ep_size', 0)})."
        ),
        _SCALE,
    ),
    Refusal(
        "handle_elastic_ep: A single-rank Elastic EP joining group requires --moe-dense-tp-size 1.",
        "moe_dense_tp_size",
        _scaling_and(
            lambda ctx: (
                _scale_join(ctx)
                and ctx.int("tp_size", 1) == 1
                and ctx.get("moe_dense_tp_size") != 1
            )
        ),
        "A single-rank Elastic EP joining group requires --moe-dense-tp-size 1.",
        _SCALE,
    ),
    Refusal(
        "handle_elastic_ep: The primary --elastic-ep-initial-size must equal its launch-time "
        "TP size ({}).",
        "elastic_ep_initial_size",
        _scaling_and(
            lambda ctx: not _scale_join(ctx) and _initial(ctx) not in (None, ctx.int("tp_size", 1))
        ),
        lambda ctx: (
            f"The primary --elastic-ep-initial-size must equal its launch-time TP size "
            f"({ctx.int('tp_size', 1)})."
        ),
        _SCALE,
    ),
    Refusal(
        "handle_elastic_ep: assert elastic_ep_initial_size > 0",
        "elastic_ep_initial_size",
        _scaling_and(lambda ctx: _initial(ctx) is not None and (_initial(ctx) or 0) <= 0),
        "assert elastic_ep_initial_size > 0",
        _SCALE,
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP scale-up requires --load-balance-method round_robin; "
        "load-aware methods require global-rank load snapshots after scale (got "
        "{}).",
        "load_balance_method",
        _scaling_and(
            lambda ctx: ctx.get("load_balance_method", "auto") not in ("auto", "round_robin")
        ),
        lambda ctx: (
            "Elastic EP scale-up requires --load-balance-method round_robin; "
            "load-aware methods require global-rank load snapshots after scale (got "
            f"{ctx.get('load_balance_method')})."
        ),
        _SCALE,
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP runtime scale-up requires --elastic-ep-backend mooncake "
        "(got elastic_ep_backend={}).",
        "elastic_ep_backend",
        _scaling_and(lambda ctx: ctx.get("elastic_ep_backend") != "mooncake"),
        lambda ctx: (
            "Elastic EP runtime scale-up requires --elastic-ep-backend mooncake (got "
            f"elastic_ep_backend={ctx.get('elastic_ep_backend')})."
        ),
        _SCALE,
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP scale-up requires --pp-size 1 (got pp_size={}); WORLD "
        "must not span PP "
        "stages.",
        "pp_size",
        _scaling_and(lambda ctx: ctx.int("pp_size", 1) != 1),
        lambda ctx: (
            f"Elastic EP scale-up requires --pp-size 1 (got pp_size={ctx.int('pp_size', 1)})"
        ),
        _SCALE,
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP runtime scale-up requires decode and prefill CUDA "
        "graphs to be disabled.",
        "disable_cuda_graph",
        _scaling_and(
            lambda ctx: (
                not ctx.on("disable_cuda_graph")
                and not (
                    ctx.get("cuda_graph_backend_decode") == "disabled"
                    and ctx.get("cuda_graph_backend_prefill") == "disabled"
                )
            )
        ),
        "Elastic EP runtime scale-up requires decode and prefill CUDA graphs to be disabled.",
        VersionRange(since="0.5.16", until="0.5.21"),
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP runtime scale-up supports decode CUDA graph backend "
        "'full' or 'disabled' (got {}).",
        "cuda_graph_backend_decode",
        _scaling_and(lambda ctx: ctx.get("cuda_graph_backend_decode") == "breakable"),
        "Elastic EP runtime scale-up supports decode CUDA graph backend 'full' or 'disabled' "
        "(got 'breakable').",
        _RECAPTURE,
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP runtime scale-up requires prefill CUDA graph to be "
        "disabled.",
        "cuda_graph_backend_prefill",
        _scaling_and(lambda ctx: ctx.get("cuda_graph_backend_prefill") in ("full", "breakable")),
        "Elastic EP runtime scale-up requires prefill CUDA graph to be disabled.",
        _RECAPTURE,
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP CUDA graph recapture requires CUDA (got device={}).",
        "device",
        _recapture(lambda ctx: ctx.get("device") not in (None, "cuda", "auto")),
        lambda ctx: (
            f"Elastic EP CUDA graph recapture requires CUDA (got device={ctx.get('device')!r})."
        ),
        _RECAPTURE,
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP CUDA graph recapture does not support speculative decoding.",
        "speculative_algorithm",
        _recapture(lambda ctx: bool(ctx.get("speculative_algorithm"))),
        "Elastic EP CUDA graph recapture does not support speculative decoding.",
        _RECAPTURE,
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP CUDA graph recapture does not support embedding models.",
        "is_embedding",
        _recapture(lambda ctx: ctx.on("is_embedding")),
        "Elastic EP CUDA graph recapture does not support embedding models.",
        _RECAPTURE,
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP CUDA graph recapture does not support diffusion models.",
        "dllm_algorithm",
        _recapture(lambda ctx: ctx.get("dllm_algorithm") is not None),
        "Elastic EP CUDA graph recapture does not support diffusion models.",
        _RECAPTURE,
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP CUDA graph recapture does not support encoder-only models.",
        "encoder_only",
        _recapture(lambda ctx: ctx.on("encoder_only")),
        "Elastic EP CUDA graph recapture does not support encoder-only models.",
        _RECAPTURE,
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP CUDA graph recapture does not support forward hooks.",
        "forward_hooks",
        _recapture(lambda ctx: bool(ctx.get("forward_hooks"))),
        "Elastic EP CUDA graph recapture does not support forward hooks.",
        _RECAPTURE,
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP CUDA graph recapture does not support PDMux.",
        "enable_pdmux",
        _recapture(lambda ctx: ctx.on("enable_pdmux")),
        "Elastic EP CUDA graph recapture does not support PDMux.",
        _RECAPTURE,
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP scale-up requires --enable-dp-attention; without it the "
        "TP group is not equivalent to WORLD and the post-scale collective path is "
        "invalid.",
        "enable_dp_attention",
        _scaling_and(lambda ctx: attn_dp_size(ctx) <= 1),
        "Elastic EP scale-up requires --enable-dp-attention",
        VersionRange(since="0.5.16", until="0.5.22"),
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP scale-up requires attention DP (--attn-dp-size); "
        "without it the TP group is not equivalent to WORLD and the post-scale collective path "
        "is invalid.",
        "attn_dp_size",
        _scaling_and(lambda ctx: attn_dp_size(ctx) <= 1 and not ep_scale_joiner(ctx)),
        "Elastic EP scale-up requires attention DP (--attn-dp-size)",
        VersionRange(since="0.5.22"),
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP scale-up requires --enable-dp-lm-head so output "
        "projection does not depend on the joining group's TP size.",
        "enable_dp_lm_head",
        _scaling_and(lambda ctx: not _dp_lm_head_kept(ctx)),
        "Elastic EP scale-up requires --enable-dp-lm-head so output projection does not depend "
        "on the joining group's TP size.",
        _SCALE,
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP scale-up requires --attn-cp-size 1 (got attn_cp_size={}).",
        "attn_cp_size",
        _scaling_and(lambda ctx: ctx.int("attn_cp_size", 1) != 1),
        lambda ctx: (
            f"Elastic EP scale-up requires --attn-cp-size 1 (got attn_cp_size="
            f"{ctx.int('attn_cp_size', 1)})."
        ),
        _SCALE,
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP scale-up requires --moe-dp-size 1 (got moe_dp_size={}).",
        "moe_dp_size",
        _scaling_and(lambda ctx: ctx.int("moe_dp_size", 1) != 1),
        lambda ctx: (
            "Elastic EP scale-up requires --moe-dp-size 1 (got "
            f"moe_dp_size={ctx.int('moe_dp_size', 1)})."
        ),
        _SCALE,
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP scale-up requires ep_size == tp_size (got ep_size={}, "
        "tp_size={}); EP, TP and the attention DP group must all coincide with "
        "WORLD.",
        "ep_size",
        _scaling_and(lambda ctx: ep_size(ctx) != ctx.int("tp_size", 1)),
        lambda ctx: (
            f"Elastic EP scale-up requires ep_size == tp_size (got ep_size={ep_size(ctx)}, tp_size="
            f"{ctx.int('tp_size', 1)})"
        ),
        VersionRange(since="0.5.16", until="0.5.23"),
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP scale-up requires ep_size == tp_size (got ep_size={}, "
        "tp_size={}); physical EP membership must coincide with the launch-time TP "
        "span.",
        "ep_size",
        _scaling_and(lambda ctx: ep_size(ctx) != ctx.int("tp_size", 1)),
        lambda ctx: (
            f"Elastic EP scale-up requires ep_size == tp_size (got ep_size={ep_size(ctx)}, tp_size="
            f"{ctx.int('tp_size', 1)})"
        ),
        VersionRange(since="0.5.23"),
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP scale-up requires dp_size == tp_size (got dp_size={}, "
        "tp_size={}).",
        "dp_size",
        _scaling_and(
            lambda ctx: attn_dp_size(ctx) > 1 and attn_dp_size(ctx) != ctx.int("tp_size", 1)
        ),
        lambda ctx: (
            f"Elastic EP scale-up requires dp_size == tp_size (got dp_size={attn_dp_size(ctx)}, "
            f"tp_size={ctx.int('tp_size', 1)})."
        ),
        VersionRange(since="0.5.16", until="0.5.22"),
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP scale-up requires attn_dp_size == tp_size (got "
        "attn_dp_size={}, tp_size={}).",
        "attn_dp_size",
        _scaling_and(
            lambda ctx: attn_dp_size(ctx) > 1 and attn_dp_size(ctx) != ctx.int("tp_size", 1)
        ),
        lambda ctx: (
            "Elastic EP scale-up requires attn_dp_size == tp_size (got "
            f"attn_dp_size={attn_dp_size(ctx)}, tp_size={ctx.int('tp_size', 1)})."
        ),
        VersionRange(since="0.5.22", until="0.5.23"),
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP scale-up requires --moe-a2a-backend nixl (got "
        "moe_a2a_backend={}).",
        "moe_a2a_backend",
        _scaling_and(lambda ctx: moe_a2a(ctx) != "nixl"),
        lambda ctx: (
            f"Elastic EP scale-up requires --moe-a2a-backend nixl (got moe_a2a_backend="
            f"{ctx.get('moe_a2a_backend', 'none')})."
        ),
        _SCALE,
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP scale-up with attention TP greater than one requires "
        "--moe-dense-tp-size 1 (got moe_dense_tp_size={}).",
        "moe_dense_tp_size",
        _scaling_and(lambda ctx: _attn_tp(ctx) > 1 and ctx.get("moe_dense_tp_size") != 1),
        lambda ctx: (
            "Elastic EP scale-up with attention TP greater than one requires --moe-dense-tp-size 1 "
            f"(got moe_dense_tp_size={ctx.get('moe_dense_tp_size')})."
        ),
        VersionRange(since="0.5.23"),
    ),
    Refusal(
        "handle_elastic_ep: Elastic EP scale-up requires --dcp-size to divide the fixed "
        "attention TP width (got dcp_size={}, attn_tp_size={}).",
        "dcp_size",
        _scaling_and(lambda ctx: _dcp(ctx) > 0 and _attn_tp(ctx) % _dcp(ctx) != 0),
        lambda ctx: (
            "Elastic EP scale-up requires --dcp-size to divide the fixed attention TP "
            f"width (got dcp_size={_dcp(ctx)}, "
            f"attn_tp_size={_attn_tp(ctx)})."
        ),
        VersionRange(since="0.5.23"),
    ),
)
ELASTIC_EP += (
    Refusal(
        "handle_elastic_ep: --elastic-ep-rejoin (deprecated) conflicts with "
        "--elastic-ep-join-mode {}.",
        "elastic_ep_rejoin",
        lambda ctx: (
            ctx.on("elastic_ep_rejoin") and ctx.get("ep_join_mode") not in (None, "recover")
        ),
        lambda ctx: (
            f"--elastic-ep-rejoin (deprecated) conflicts with --elastic-ep-join-mode "
            f"{ctx.get('ep_join_mode')}."
        ),
        VersionRange(since="0.5.16", until="0.5.21"),
    ),
    Refusal(
        "handle_elastic_ep: Invalid attention topology: tp_size={}, attn_dp_size={}, "
        "attn_cp_size={}.",
        "attn_dp_size",
        _scaling_and(
            lambda ctx: (
                ctx.int("tp_size", 1)
                % max(ctx.int("attn_dp_size", 1) * ctx.int("attn_cp_size", 1), 1)
                != 0
            )
        ),
        lambda ctx: (
            f"Invalid attention topology: tp_size={ctx.int('tp_size', 1)}, "
            f"attn_dp_size={ctx.int('attn_dp_size', 1)}, "
            f"attn_cp_size={ctx.int('attn_cp_size', 1)}."
        ),
        VersionRange(since="0.5.23"),
    ),
)
refusal_rule("SGD119", "elastic-ep-layout",
             "An elastic-EP launch SGLang refuses: the EPLB algorithm, PP, and for runtime "
             "scale-up (max_ep_size > tp_size) the joining group, the all-to-all backend, "
             "attention DP and the CUDA graphs it needs.",
             "set what SGLang's message names, or drop the elastic-EP options", ELASTIC_EP)


# -------------------------------------------------------------------- pipeline parallelism and DWDP
def _pp(ctx: LaunchContext) -> bool:
    return ctx.int("pp_size", 1) > 1


def _resolved_algorithm(ctx: LaunchContext) -> str | None:
    """The speculative algorithm after SGLang renames NEXTN to EAGLE."""
    value = ctx.get("speculative_algorithm")
    name = str(value).upper() if value else None
    return "EAGLE" if name == "NEXTN" else name


def _pp_spec_env(ctx: LaunchContext) -> bool:
    return (
        _pp(ctx)
        and bool(ctx.env_true("SGLANG_ENABLE_PP_SPEC"))
        and _resolved_algorithm(ctx) not in (None, "DSPARK")
    )


def _dwdp(ctx: LaunchContext) -> bool:
    return ctx.int("dwdp_size", 1) > 1


_PP_COMPAT = VersionRange(since="0.5.21")
_DWDP = VersionRange(since="0.5.17")
PIPELINE_AND_DWDP = (
    Refusal(
        "check_server_args: Pipeline parallelism currently only supports EAGLE "
        "(non-multi-layer) speculative decoding",
        "speculative_algorithm",
        lambda ctx: (
            _pp(ctx)
            and _resolved_algorithm(ctx) is not None
            and (_resolved_algorithm(ctx) != "EAGLE" or ctx.on("enable_multi_layer_eagle"))
        ),
        "Pipeline parallelism currently only supports EAGLE (non-multi-layer) speculative decoding",
        VersionRange(since="0.5.20", until="0.5.21"),
    ),
    Refusal(
        "check_pipeline_parallel_compat: Pipeline parallelism currently only supports EAGLE "
        "(non-multi-layer) speculative decoding",
        "speculative_algorithm",
        lambda ctx: (
            _pp(ctx)
            and _resolved_algorithm(ctx) not in (None, "DSPARK")
            and (_resolved_algorithm(ctx) != "EAGLE" or ctx.on("enable_multi_layer_eagle"))
        ),
        "Pipeline parallelism currently only supports EAGLE (non-multi-layer) speculative decoding",
        _PP_COMPAT,
    ),
    Refusal(
        "check_pipeline_parallel_compat: Pipeline parallel DSPARK requires "
        "disaggregation-mode=prefill",
        "disaggregation_mode",
        lambda ctx: (
            _pp(ctx)
            and _resolved_algorithm(ctx) == "DSPARK"
            and ctx.get("disaggregation_mode") != "prefill"
        ),
        "Pipeline parallel DSPARK requires disaggregation-mode=prefill",
        _PP_COMPAT,
    ),
    Refusal(
        "check_pipeline_parallel_compat: SGLANG_ENABLE_PP_SPEC does not support DSPARK PD prefill",
        "pp_size",
        lambda ctx: (
            _pp(ctx)
            and _resolved_algorithm(ctx) == "DSPARK"
            and bool(ctx.env_true("SGLANG_ENABLE_PP_SPEC"))
        ),
        "SGLANG_ENABLE_PP_SPEC does not support DSPARK PD prefill",
        _PP_COMPAT,
    ),
    Refusal(
        "check_pipeline_parallel_compat: SGLANG_ENABLE_PP_SPEC is not compatible with "
        "--disaggregation-mode",
        "disaggregation_mode",
        lambda ctx: (
            _pp_spec_env(ctx) and ctx.get("disaggregation_mode", "null") not in (None, "null")
        ),
        "SGLANG_ENABLE_PP_SPEC is not compatible with --disaggregation-mode",
        _PP_COMPAT,
    ),
    Refusal(
        "check_pipeline_parallel_compat: SGLANG_ENABLE_PP_SPEC is not compatible with "
        "--speculative-adaptive",
        "speculative_adaptive",
        lambda ctx: _pp_spec_env(ctx) and ctx.on("speculative_adaptive"),
        "SGLANG_ENABLE_PP_SPEC is not compatible with --speculative-adaptive",
        _PP_COMPAT,
    ),
    Refusal(
        "check_pipeline_parallel_compat: SGLANG_ENABLE_PP_SPEC is not compatible with "
        "--enable-dp-attention",
        "enable_dp_attention",
        lambda ctx: _pp_spec_env(ctx) and attention_dp_on(ctx),
        "SGLANG_ENABLE_PP_SPEC is not compatible with --enable-dp-attention",
        VersionRange(since="0.5.21", until="0.5.22"),
    ),
    Refusal(
        "check_pipeline_parallel_compat: SGLANG_ENABLE_PP_SPEC is not compatible with attention DP "
        "(--attn-dp-size)",
        "attn_dp_size",
        lambda ctx: _pp_spec_env(ctx) and attention_dp_on(ctx),
        "SGLANG_ENABLE_PP_SPEC is not compatible with attention DP (--attn-dp-size)",
        VersionRange(since="0.5.22"),
    ),
    Refusal(
        "check_server_args: --min-free-slots-delay is not supported with pipeline parallelism: "
        "allocatable slots per microbatch are bounded by pp-max-micro-batch-size, so the "
        "threshold may never be reached",
        "min_free_slots_delay",
        lambda ctx: _pp(ctx) and ctx.get("min_free_slots_delay") is not None,
        "--min-free-slots-delay is not supported with pipeline parallelism",
        VersionRange(since="0.5.18", until="0.5.21"),
    ),
    Refusal(
        "check_pipeline_parallel_compat: --min-free-slots-delay is not supported with pipeline "
        "parallelism: allocatable slots per microbatch are bounded by pp-max-micro-batch-size, so "
        "the threshold may never be reached",
        "min_free_slots_delay",
        lambda ctx: _pp(ctx) and ctx.get("min_free_slots_delay") is not None,
        "--min-free-slots-delay is not supported with pipeline parallelism",
        _PP_COMPAT,
    ),
    Refusal(
        "handle_dwdp: DWDP requires --disaggregation-mode null or prefill",
        "disaggregation_mode",
        lambda ctx: (
            _dwdp(ctx) and ctx.get("disaggregation_mode", "null") not in (None, "null", "prefill")
        ),
        "DWDP requires --disaggregation-mode null or prefill",
        _DWDP,
    ),
    Refusal(
        "handle_dwdp: EPLB dynamic migration conflicts with static DWDP partitioning",
        "enable_eplb",
        lambda ctx: _dwdp(ctx) and ctx.on("enable_eplb"),
        "EPLB dynamic migration conflicts with static DWDP partitioning",
        _DWDP,
    ),
    Refusal(
        "handle_dwdp: DWDP does not support speculative decoding (MTP/draft workers)",
        "speculative_algorithm",
        lambda ctx: _dwdp(ctx) and bool(ctx.get("speculative_algorithm")),
        "DWDP does not support speculative decoding (MTP/draft workers)",
        _DWDP,
    ),
    Refusal(
        "handle_dwdp: DWDP requires pp_size == 1",
        "pp_size",
        lambda ctx: _dwdp(ctx) and _pp(ctx),
        "DWDP requires pp_size == 1",
        _DWDP,
    ),
    Refusal(
        "handle_dwdp: DWDP's prefetch event protocol does not support two-batch overlap",
        "enable_two_batch_overlap",
        lambda ctx: _dwdp(ctx) and ctx.on("enable_two_batch_overlap"),
        "DWDP's prefetch event protocol does not support two-batch overlap",
        _DWDP,
    ),
)
refusal_rule("SGD120", "pipeline-and-dwdp-compat",
             "What pipeline parallelism (speculative decoding, SGLANG_ENABLE_PP_SPEC, "
             "min_free_slots_delay) and DWDP (PD mode, EPLB, speculative decoding, PP, two-batch "
             "overlap) cannot run with.",
             "drop the option SGLang's message names, or pp_size / dwdp_size", PIPELINE_AND_DWDP)


# ------------------------------------------------------------ all-to-all backends' own requirements
def _a2a(name: str) -> Callable[[LaunchContext], bool]:
    return lambda ctx: moe_a2a(ctx) == name


def _explicit_runner_not(*names: str) -> Callable[[LaunchContext], bool]:
    """An explicit MoE runner other than `names` (SGLang resolves `auto` to the one it needs)."""
    return lambda ctx: moe_runner(ctx) not in ("auto", *names)


def _dispatch_type(ctx: LaunchContext) -> object:
    return ctx.get("flashinfer_a2a_dispatch_type")


def _host_major(ctx: LaunchContext) -> int | None:
    sm = ctx.host.sm if ctx.host else None
    return sm // 10 if isinstance(sm, int) else None


def _and(*conditions: Callable[[LaunchContext], bool]) -> Callable[[LaunchContext], bool]:
    return lambda ctx: all(c(ctx) for c in conditions)


_DEEPEP_V2 = VersionRange(since="0.5.19")
def _xpu_prefill(ctx: LaunchContext) -> bool:
    """The prefill backend is intel_xpu (get_attention_backends); an --attention-backend intel_xpu
    on --device xpu may fall back to triton first (no XMX on the GPU: not known offline), so that
    one is not counted."""
    if ctx.get("prefill_attention_backend"):
        return bool(ctx.get("prefill_attention_backend") == "intel_xpu")
    return bool(ctx.get("attention_backend") == "intel_xpu" and ctx.get("device") != "xpu")


A2A_REQUIREMENTS: tuple[Refusal, ...] = (
    Refusal(
        "handle_a2a_moe: DeepEP v2 MoE currently supports only --moe-runner-backend deep_gemm. "
        "Got {}. Add a runner adapter before enabling DeepEP v2 with other MoE "
        "runners.",
        "moe_runner_backend",
        _and(_a2a("deepep_v2"), _explicit_runner_not("deep_gemm")),
        lambda ctx: (
            "DeepEP v2 MoE currently supports only --moe-runner-backend deep_gemm. Got "
            f"{ctx.get('moe_runner_backend')!r}."
        ),
        _DEEPEP_V2,
    ),
    Refusal(
        "handle_a2a_moe: DeepEP v2 MoE has not implemented the TBO/SBO overlap hooks yet. "
        "Disable --enable-two-batch-overlap and --enable-single-batch-overlap when using "
        "--moe-a2a-backend deepep_v2.",
        "moe_a2a_backend",
        _and(
            _a2a("deepep_v2"),
            lambda ctx: ctx.on("enable_two_batch_overlap") or ctx.on("enable_single_batch_overlap"),
        ),
        "DeepEP v2 MoE has not implemented the TBO/SBO overlap hooks yet.",
        _DEEPEP_V2,
    ),
    Refusal(
        "handle_a2a_moe: DeepEP v2 MoE has not validated fused shared experts yet. Remove "
        "--enforce-shared-experts-fusion when using --moe-a2a-backend deepep_v2.",
        "enforce_shared_experts_fusion",
        _and(_a2a("deepep_v2"), lambda ctx: ctx.on("enforce_shared_experts_fusion")),
        "DeepEP v2 MoE has not validated fused shared experts yet.",
        _DEEPEP_V2,
    ),
    Refusal(
        "handle_a2a_moe: DeepEP v2 does not forward deterministic=True to ElasticBuffer, so "
        "deterministic sorting remains disabled. Disable --enable-deterministic-inference or "
        "use --moe-a2a-backend deepep.",
        "enable_deterministic_inference",
        _and(_a2a("deepep_v2"), lambda ctx: ctx.on("enable_deterministic_inference")),
        "DeepEP v2 does not forward deterministic=True to ElasticBuffer",
        VersionRange(since="0.5.19", until="0.5.21"),
    ),
    Refusal(
        "handle_a2a_moe: --deepep-v2-mode direct is NVLink-only and cannot run across nodes "
        "(nnodes={}); pass --deepep-v2-mode hybrid.",
        "deepep_v2_mode",
        _and(
            _a2a("deepep_v2"),
            lambda ctx: ctx.get("deepep_v2_mode") == "direct",
            lambda ctx: ctx.int("nnodes", 1) > 1,
        ),
        lambda ctx: (
            "--deepep-v2-mode direct is NVLink-only and cannot run across nodes "
            f"(nnodes={ctx.int('nnodes', 1)}); pass --deepep-v2-mode "
            "hybrid."
        ),
        VersionRange(since="0.5.22"),
    ),
    Refusal(
        "validate_deepep_v2_speculative_draft: DeepEP v2 MoE is not validated as a speculative "
        "draft backend. Select another "
        "--speculative-moe-a2a-backend.",
        "speculative_moe_a2a_backend",
        lambda ctx: (
            (
                ctx.get("speculative_moe_a2a_backend")
                or (
                    moe_a2a(ctx)
                    if ctx.get("speculative_algorithm")
                    and str(ctx.get("speculative_algorithm")).upper() != "NGRAM"
                    else None
                )
            )
            == "deepep_v2"
        ),
        "DeepEP v2 MoE is not validated as a speculative draft backend. Select another "
        "--speculative-moe-a2a-backend.",
        _DEEPEP_V2,
    ),
    Refusal(
        "handle_a2a_moe: FlashInfer MegaMOE is only supported with dp_size == tp_size and "
        "--enable-dp-attention",
        "moe_a2a_backend",
        _and(
            _a2a("flashinfer_megamoe"),
            lambda ctx: attn_dp_size(ctx) != ctx.int("tp_size", 1) or attn_dp_size(ctx) == 1,
        ),
        "FlashInfer MegaMOE is only supported with dp_size == tp_size and --enable-dp-attention",
        VersionRange(since="0.5.20", until="0.5.22"),
    ),
    Refusal(
        "handle_a2a_moe: FlashInfer MegaMOE is only supported with --attn-dp-size equal to "
        "--tp-size",
        "moe_a2a_backend",
        _and(
            _a2a("flashinfer_megamoe"),
            lambda ctx: attn_dp_size(ctx) != ctx.int("tp_size", 1) or attn_dp_size(ctx) == 1,
        ),
        "FlashInfer MegaMOE is only supported with --attn-dp-size equal to --tp-size",
        VersionRange(since="0.5.22"),
    ),
    Refusal(
        "handle_a2a_moe: FlashInfer MegaMOE a2a backend requires --moe-runner-backend "
        "flashinfer_megamoe",
        "moe_runner_backend",
        _and(_a2a("flashinfer_megamoe"), _explicit_runner_not("flashinfer_megamoe")),
        "FlashInfer MegaMOE a2a backend requires --moe-runner-backend flashinfer_megamoe",
        VersionRange(since="0.5.20"),
    ),
    Refusal(
        "check_mega_moe_compat: --moe-a2a-backend megamoe needs a CUDA SM90 GPU (block-FP8 "
        "experts) or an SM100-class GPU (MXFP4 / NVFP4 experts); it runs DeepGEMM kernels over "
        "CUDA symmetric memory. On ROCm, set SGLANG_AMD_USE_FLYDSL_MEGA_MOE=1 to select aiter "
        "MegaMoEv2 instead.",
        "moe_a2a_backend",
        _and(_a2a("megamoe"), lambda ctx: _host_major(ctx) not in (None, 9, 10)),
        "--moe-a2a-backend megamoe needs a CUDA SM90 GPU (block-FP8 experts) or an SM100-class GPU",
        VersionRange(since="0.5.21"),
    ),
    Refusal(
        "handle_flashinfer_a2a_dispatch_type: --flashinfer-a2a-dispatch-type mxfp8 requires "
        "--moe-runner-backend flashinfer_trtllm_routed.",
        "moe_runner_backend",
        _and(
            _a2a("flashinfer"),
            lambda ctx: _dispatch_type(ctx) == "mxfp8",
            lambda ctx: ctx.get("moe_runner_backend") != "flashinfer_trtllm_routed",
        ),
        "--flashinfer-a2a-dispatch-type mxfp8 requires --moe-runner-backend "
        "flashinfer_trtllm_routed.",
        VersionRange(since="0.5.20"),
    ),
    Refusal(
        "handle_flashinfer_a2a_dispatch_type: --flashinfer-a2a-dispatch-type mxfp8 requires "
        "--quantization mxfp8.",
        "quantization",
        _and(
            _a2a("flashinfer"),
            lambda ctx: _dispatch_type(ctx) == "mxfp8",
            lambda ctx: ctx.get("moe_runner_backend") == "flashinfer_trtllm_routed",
            lambda ctx: ctx.get("quantization") != "mxfp8",
        ),
        "--flashinfer-a2a-dispatch-type mxfp8 requires --quantization mxfp8.",
        VersionRange(since="0.5.20"),
    ),
    Refusal(
        "handle_flashinfer_a2a_dispatch_type: SGLANG_MOE_NVFP4_DISPATCH cannot be set together "
        "with --flashinfer-a2a-dispatch-type.",
        "flashinfer_a2a_dispatch_type",
        _and(
            _a2a("flashinfer"),
            lambda ctx: _dispatch_type(ctx) not in (None, "auto"),
            lambda ctx: "SGLANG_MOE_NVFP4_DISPATCH" in ctx.env,
        ),
        "SGLANG_MOE_NVFP4_DISPATCH cannot be set together with --flashinfer-a2a-dispatch-type.",
        VersionRange(since="0.5.20"),
    ),
    Refusal(
        "handle_attention_backend_compatibility: CuteDSL MLA only supports decoding for now",
        "prefill_attention_backend",
        lambda ctx: ctx.get("prefill_attention_backend") == "cutedsl_mla",
        "CuteDSL MLA only supports decoding for now",
        VersionRange(since="0.5.13", until="0.5.15"),
    ),
    Refusal(
        "cutedsl_prefill_backend_fill: CuteDSL MLA only supports decoding for now",
        "prefill_attention_backend",
        lambda ctx: ctx.get("prefill_attention_backend") == "cutedsl_mla",
        "CuteDSL MLA only supports decoding for now",
        VersionRange(since="0.5.15"),
    ),
    Refusal(
        "handle_attention_backend_compatibility: intel_xpu backend is only supported on decode "
        "for MLA models, please set --decode-attention-backend to intel_xpu and do not set "
        "--attention-backend or --prefill-attention-backend to intel_xpu for prefill instead "
        "use triton.",
        lambda ctx: (
            "prefill_attention_backend"
            if ctx.given("prefill_attention_backend")
            else "attention_backend"
        ),
        lambda ctx: _xpu_prefill(ctx) and mla_model(ctx) is True,
        "intel_xpu backend is only supported on decode for MLA models, please set "
        "--decode-attention-backend to intel_xpu and do not set --attention-backend or "
        "--prefill-attention-backend to intel_xpu for prefill instead use "
        "triton.",
        VersionRange(since="0.5.11", until="0.5.20"),
    ),
    Refusal(
        "handle_attention_backend_compatibility: Speculative decoding is currently not "
        "supported with Flex Attention backend",
        "attention_backend",
        lambda ctx: (
            ctx.get("attention_backend") == "flex_attention"
            and bool(ctx.get("speculative_algorithm"))
        ),
        "Speculative decoding is currently not supported with Flex Attention backend",
        VersionRange(since="0.5.3"),
    ),
)
A2A_REQUIREMENTS += (
    Refusal(
        "handle_attention_backend_compatibility: FA4 backend is only supported for prefill. "
        "Please use `--prefill-attention-backend fa4` instead.",
        "attention_backend",
        lambda ctx: "fa4" in (ctx.get("attention_backend"), ctx.get("decode_attention_backend")),
        "FA4 backend is only supported for prefill. Please use `--prefill-attention-backend "
        "fa4` instead.",
        VersionRange(since="0.5.4", until="0.5.8"),
    ),
    Refusal(
        "validate_flashinfer_megamoe_envs: SGLANG_FLASHINFER_MEGAMOE_COMBINE_DTYPE must be one "
        "of 'bf16', 'mxfp8', or 'nvfp4', got {}.",
        "moe_a2a_backend",
        lambda ctx: (
            moe_a2a(ctx) == "flashinfer_megamoe"
            and ctx.env.get("SGLANG_FLASHINFER_MEGAMOE_COMBINE_DTYPE", "bf16")
            not in ("bf16", "mxfp8", "nvfp4")
        ),
        lambda ctx: (
            "SGLANG_FLASHINFER_MEGAMOE_COMBINE_DTYPE must be one of 'bf16', 'mxfp8', or 'nvfp4', "
            f"got {ctx.env.get('SGLANG_FLASHINFER_MEGAMOE_COMBINE_DTYPE')}."
        ),
        VersionRange(since="0.5.20"),
    ),
)
refusal_rule("SGD121", "a2a-backend-requirements",
             "What an MoE all-to-all backend (DeepEP v2, FlashInfer MegaMOE, MegaMoE, FlashInfer "
             "dispatch types) and some attention backends (CuteDSL MLA, Flex Attention) require.",
             "set what SGLang's message names, or choose another backend", A2A_REQUIREMENTS)


# The chunked-prefill size SGLang picks from the GPU's memory (_handle_gpu_memory_settings), by the
# GPU's memory in GiB: the tiers from 35 GiB up are the same in every release that has an all-to-all
# token budget (0.5.9+); below that the releases differ (2048 or 4096), so no default is assumed.
CHUNKED_PREFILL_BY_MEMORY = ((35, None), (60, 4096), (160, 8192), (None, 16384))


def default_chunked_prefill_size(ctx: LaunchContext) -> int | None:
    """The chunked_prefill_size SGLang derives from the host's GPU memory; None when unknown."""
    host = ctx.host
    memory = host.gpu_memory_gib if host and host.gpu_memory_gib else (
        gpu_memory_gib_for(host.gpu) if host and host.gpu else None)
    if not memory:
        return None
    return next(
        size for ceiling, size in CHUNKED_PREFILL_BY_MEMORY if ceiling is None or memory < ceiling
    )


def chunked_prefill_per_rank(ctx: LaunchContext) -> int | None:
    """The chunked_prefill_size the MoE all-to-all checks read: the profile's or the GPU's default,
    divided over the attention-DP groups (_handle_data_parallelism runs first); None when it cannot
    be known (the GPU's memory, or a launch whose model or mode switches chunked prefill off)."""
    if ctx.on("enable_mis") or ctx.on("is_embedding"):
        return None  # multi-item scoring sets -1; embedding models may switch chunked prefill off
    given = ctx.get("chunked_prefill_size") if ctx.given("chunked_prefill_size") else None
    if given is not None and (not isinstance(given, int) or isinstance(given, bool)):
        return None
    chunk = given if given is not None else default_chunked_prefill_size(ctx)
    if chunk is None or chunk <= 0:
        return chunk
    return chunk // max(attn_dp_size(ctx), 1)


def _env_int(ctx: LaunchContext, name: str, default: int) -> int | None:
    value = ctx.env.get(name)
    if value is None:
        return default
    try:
        return int(value.strip())
    except ValueError:
        return None


MORI_BUDGET = "SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK"


def _mori_over_budget(ctx: LaunchContext) -> bool:
    if moe_a2a(ctx) != "mori" or ctx.get("disaggregation_mode") == "decode":
        return False
    chunk, budget = chunked_prefill_per_rank(ctx), _env_int(ctx, MORI_BUDGET, 4096)
    return chunk is not None and budget is not None and chunk > 0 and chunk > budget


def _budget_field(ctx: LaunchContext) -> str:
    """The chunked-prefill size where the profile sets it, else the backend that checks the
    budget."""
    return "chunked_prefill_size" if ctx.given("chunked_prefill_size") else "moe_a2a_backend"


def _budget_words(ctx: LaunchContext) -> str:
    chunk = chunked_prefill_per_rank(ctx)
    given = ctx.given("chunked_prefill_size")
    return (" (chunked_prefill_size per rank "
            f"{chunk}{'' if given else ', the default for the GPU'}, {MORI_BUDGET} "
            f"{_env_int(ctx, MORI_BUDGET, 4096)})")


MEGA_MOE_BUDGET = "SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK"


def _mega_moe_prefill_required(ctx: LaunchContext) -> int | None:
    """The per-rank prefill tokens validate_mega_moe_token_budget requires with pure TP
    (chunked_prefill_size aligned up to the TP width), for an architecture with no fused-MoE
    fallback (`mega_moe_no_fallback_archs`); None where it is not checked here: another layout
    (prefill CP, attention DP, attention CP, PP with dynamic chunking), a PD decode instance, an
    encoder-only instance or an unknown size."""
    archs = fact("mega_moe_no_fallback_archs", ctx.version)
    if (
        moe_a2a(ctx) != "megamoe"
        or archs is None
        or architecture(ctx) not in archs
        or ctx.on("encoder_only")
    ):
        return None
    if (
        ctx.get("disaggregation_mode") == "decode"
        or ctx.on("enable_prefill_cp")
        or attn_dp_size(ctx) > 1
        or ctx.int("attn_cp_size", 1) > 1
        or (ctx.int("pp_size", 1) > 1 and ctx.on("enable_dynamic_chunking"))
    ):
        return None
    chunk = chunked_prefill_per_rank(ctx)
    if chunk is None or chunk <= 0:
        return None
    alignment = max(ctx.int("tp_size", 1), 1)
    return -(-chunk // alignment) * alignment


def _mega_moe_over_budget(ctx: LaunchContext) -> bool:
    required, budget = _mega_moe_prefill_required(ctx), _env_int(ctx, MEGA_MOE_BUDGET, 8192)
    return required is not None and budget is not None and required > budget


A2A_TOKEN_BUDGETS = (
    Refusal(
        "handle_a2a_moe: SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK (default 4096) must be "
        "larger or equal to chunked_prefill_size",
        _budget_field,
        _mori_over_budget,
        lambda ctx: (
            "SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK (default 4096) must be larger or equal "
            "to chunked_prefill_size" + _budget_words(ctx)
        ),
        VersionRange(since="0.5.9", until="0.5.15"),
    ),
    Refusal(
        "handle_a2a_moe: SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK (default 4096) must be "
        ">= the per-rank MoRI dispatch tokens (chunked_prefill_size by "
        "default)",
        _budget_field,
        _mori_over_budget,
        lambda ctx: (
            "SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK (default 4096) must be >= "
            "the per-rank MoRI dispatch tokens (chunked_prefill_size by "
            "default)" + _budget_words(ctx)
        ),
        VersionRange(since="0.5.15"),
    ),
    Refusal(
        "validate_mega_moe_token_budget: {} with MegaMoE requires "
        "SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK to cover each rank's effective "
        "prefill token budget. Current values: chunked_prefill_size={}, token_partition={}, "
        "token_partition_size={}, token_alignment={}, required_per_rank={}, "
        "SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK={}. Set "
        "SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK to at least {}, or lower "
        "--chunked-prefill-size until the effective per-rank budget "
        "fits.",
        _budget_field,
        _mega_moe_over_budget,
        lambda ctx: (
            f"{architecture(ctx)} with MegaMoE requires {MEGA_MOE_BUDGET} to cover each rank's "
            f"effective prefill token budget (required_per_rank={_mega_moe_prefill_required(ctx)}, "
            f"{MEGA_MOE_BUDGET}={_env_int(ctx, MEGA_MOE_BUDGET, 8192)})"
        ),
        VersionRange(since="0.5.21"),
    ),
)
refusal_rule("SGD122", "a2a-token-budget",
             "An MoE all-to-all's per-rank token budget (an environment variable) below the "
             "chunked-prefill size each rank dispatches, the profile's or the one SGLang derives "
             "from the GPU's memory.",
             "lower chunked_prefill_size to the budget, or raise the budget's environment variable "
             "in [env]",
             A2A_TOKEN_BUDGETS)
