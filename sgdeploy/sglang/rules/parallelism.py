"""SGD1xx and MoE parallelism: GPU counts, tensor/pipeline/data/expert parallel sizes, multi-node launches."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from sgdeploy.sglang.rule import Finding, LaunchContext
from sgdeploy.sglang.rules.common import TBO_NEEDS_A2A, V1X, attention_dp
from sgdeploy.sglang.rules.registry import ERROR, WARNING, rule


def gpus_per_node(server: Mapping[str, Any]) -> int:
    """GPUs one node of a launch occupies: tp x pp (x dp for plain DP replicas) / nnodes."""
    def count(name: str) -> int:
        value = server.get(name, 1)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1

    attention_dp = bool(server.get("enable_dp_attention")) or count("attn_dp_size") > 1
    # Attention DP splits the TP group; plain DP runs dp_size full replicas.
    world = count("tp_size") * count("pp_size") * (1 if attention_dp else count("dp_size"))
    return max(world // count("nnodes"), 1)


@rule("SGD101", "not-enough-gpus", ERROR, "tp x pp (x dp) needs more GPUs per node than the host has.",
      "lower tp_size/pp_size/dp_size or deploy to a host with more GPUs")
def not_enough_gpus(ctx: LaunchContext) -> Iterator[Finding]:
    needed = gpus_per_node(ctx.server)
    available = len(ctx.gpus) if ctx.gpus else (ctx.host.gpu_count if ctx.host else None)
    if available is not None and needed > available:
        where = "deploy.gpus lists" if ctx.gpus else f"host {ctx.host.name if ctx.host else '?'} has"
        field_name = "server.tp_size" if ctx.given("tp_size") else "server"
        yield Finding(field_name, f"the launch needs {needed} GPUs per node (tp x pp x dp / nnodes) "
                      f"but {where} {available}")


@rule("SGD102", "gpus-unused", WARNING, "deploy.gpus lists more GPUs than the launch uses.",
      "list exactly the GPUs the launch uses, or raise tp_size")
def gpus_unused(ctx: LaunchContext) -> Iterator[Finding]:
    used = gpus_per_node(ctx.server)
    if ctx.gpus and len(ctx.gpus) > used:
        yield Finding("deploy.gpus", f"deploy.gpus lists {len(ctx.gpus)} GPUs; the launch uses {used}")


@rule("SGD103", "gpu-index-out-of-range", ERROR, "deploy.gpus names a GPU index the host does not have.",
      "use indices from 0 to gpu_count - 1")
def gpu_index_out_of_range(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.gpus and ctx.host and ctx.host.gpu_count:
        bad = [g for g in ctx.gpus if isinstance(g, int) and g >= ctx.host.gpu_count]
        if bad:
            yield Finding("deploy.gpus", f"GPU index {bad[0]} does not exist on {ctx.host.name} "
                          f"({ctx.host.gpu_count} GPUs)")


@rule("SGD104", "tp-not-divisible-by-nnodes", ERROR, "(tp_size x pp_size) must divide evenly over nnodes.",
      "make tp_size x pp_size a multiple of nnodes")
def tp_not_divisible(ctx: LaunchContext) -> Iterator[Finding]:
    nnodes = max(ctx.int("nnodes", 1), 1)
    if (ctx.int("tp_size", 1) * ctx.int("pp_size", 1)) % nnodes:
        yield Finding("server.nnodes", f"tp_size x pp_size = {ctx.int('tp_size', 1) * ctx.int('pp_size', 1)} "
                      f"is not divisible by nnodes = {nnodes} ('tp_size must be divisible by number of nodes')")


@rule("SGD105", "multinode-without-dist-init-addr", ERROR,
      "nnodes > 1 without dist_init_addr: every node waits on its own loopback and the launch hangs.",
      "set dist_init_addr = \"<rank-0 address>:<port>\"")
def multinode_without_addr(ctx: LaunchContext) -> Iterator[Finding]:
    # Deployed to as many hosts as nodes, sgdeploy sets dist_init_addr to rank 0's address.
    spans_hosts = ctx.node_count is not None and ctx.node_count == ctx.int("nnodes", 1)
    if ctx.int("nnodes", 1) > 1 and not ctx.get("dist_init_addr") and not spans_hosts:
        yield Finding("server.nnodes", f"nnodes = {ctx.int('nnodes', 1)} but dist_init_addr is not set; "
                      "SGLang would hang waiting for the other nodes")


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
      "A multi-node launch (nnodes > 1) runs one node per host of its target: the counts must match.",
      "point deploy.host at a group with nnodes hosts (node_rank follows the group's order)")
def nnodes_vs_hosts(ctx: LaunchContext) -> Iterator[Finding]:
    nnodes = ctx.int("nnodes", 1)
    # A single host is one node of a launch managed node by node (node_rank in each profile).
    if nnodes > 1 and ctx.node_count is not None and ctx.node_count > 1 and ctx.node_count != nnodes:
        yield Finding("server.nnodes", f"nnodes = {nnodes} but deploy.host names {ctx.node_count} host(s)")


@rule("SGD110", "node-rank-set-by-sgdeploy", ERROR,
      "In a multi-node profile node_rank differs per host; sgdeploy sets it from the group's order.",
      "remove node_rank from the profile")
def node_rank_in_profile(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.int("nnodes", 1) > 1 and ctx.given("node_rank") and (ctx.node_count or 0) > 1:
        yield Finding("server.node_rank", "node_rank is set in a profile deployed to several nodes; every "
                      "node would claim the same rank")


@rule("SGD108", "dp-lm-head-without-dp-attention", ERROR, "enable_dp_lm_head requires DP attention.",
      "set enable_dp_attention = true or drop enable_dp_lm_head", versions=V1X)
def dp_lm_head(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.on("enable_dp_lm_head") and not ctx.on("enable_dp_attention"):
        yield Finding("server.enable_dp_lm_head", "enable_dp_lm_head is set without enable_dp_attention")




@rule("SGD505", "two-batch-overlap-needs-a2a", ERROR,
      "enable_two_batch_overlap needs an MoE all-to-all backend (0.5.1x) or attention DP (0.5.2x).",
      "set moe_a2a_backend (e.g. deepep), or drop enable_two_batch_overlap")
def two_batch_overlap(ctx: LaunchContext) -> Iterator[Finding]:
    if not ctx.on("enable_two_batch_overlap") or ctx.get("moe_a2a_backend", "none") not in (None, "none"):
        return
    if ctx.version in TBO_NEEDS_A2A:
        yield Finding("server.enable_two_batch_overlap", "When enabling two batch overlap, moe_a2a_backend "
                      "cannot be 'none'")
    elif not attention_dp(ctx):
        yield Finding("server.enable_two_batch_overlap", "two batch overlap without an EP a2a backend requires "
                      "attention DP (attn_dp_size)")


@rule("SGD507", "moe-dense-tp-size", ERROR, "moe_dense_tp_size may only be unset, 1 (or tp_size in 0.5.2x).",
      "use moe_dense_tp_size = 1 or leave it unset")
def moe_dense_tp(ctx: LaunchContext) -> Iterator[Finding]:
    value = ctx.server.get("moe_dense_tp_size")
    allowed = {1} if ctx.version in V1X else {1, ctx.int("tp_size", 1)}
    if isinstance(value, int) and value not in allowed:
        yield Finding("server.moe_dense_tp_size", f"moe_dense_tp_size = {value} is not supported")
