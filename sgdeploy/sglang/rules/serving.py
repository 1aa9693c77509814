"""SGD5xx serving: ports, names, scheduling policies and worker counts."""

from __future__ import annotations

from collections.abc import Iterator

from sgdeploy.sglang.rule import Finding, LaunchContext
from sgdeploy.sglang.rules.common import server_field
from sgdeploy.sglang.rules.registry import ERROR, rule


@rule("SGD503", "served-model-name-colon", ERROR, "served_model_name cannot contain ':'.",
      "remove the ':' (SGLang reserves it for LoRA adapters)")
def served_name_colon(ctx: LaunchContext) -> Iterator[Finding]:
    name = ctx.server.get("served_model_name")
    if isinstance(name, str) and ":" in name:
        yield Finding("server.served_model_name", f"served_model_name '{name}' contains ':'")


@rule("SGD504", "grpc-port-equals-port", ERROR, "grpc_port must differ from port.",
      "pick another grpc_port")
def grpc_port(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.given("grpc_port") and ctx.get("grpc_port") == ctx.get("port", 30000):
        yield Finding("server.grpc_port", f"grpc_port ({ctx.get('grpc_port')}) must differ from port")


@rule("SGD506", "positive-counts", ERROR, "Worker counts and GPU ids must be in range.",
      "use a value in range")
def positive_counts(ctx: LaunchContext) -> Iterator[Finding]:
    for name, minimum in (("tp_size", 1), ("pp_size", 1), ("dp_size", 1), ("nnodes", 1), ("base_gpu_id", 0),
                          ("gpu_id_step", 1), ("tokenizer_worker_num", 1), ("detokenizer_worker_num", 1),
                          ("attn_dp_size", 1), ("page_size", 1)):
        value = ctx.server.get(name)
        if isinstance(value, int) and value < minimum:
            yield Finding(server_field(name), f"{name} = {value} must be at least {minimum}")
    port = ctx.server.get("port")
    if isinstance(port, int) and not 1 <= port <= 65535:
        yield Finding("server.port", f"port = {port} is not a TCP port")


@rule("SGD508", "priority-scheduling-policy", ERROR,
      "Priority scheduling needs schedule_policy fcfs or lof; retraction_policy priority needs it on.",
      "fix schedule_policy or enable priority scheduling")
def priority_scheduling(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.on("enable_priority_scheduling") and ctx.get("schedule_policy") not in (None, "fcfs", "lof"):
        yield Finding("server.schedule_policy", "To use priority scheduling, schedule_policy must be 'fcfs' or 'lof'")
    if ctx.get("retraction_policy") == "priority" and not ctx.on("enable_priority_scheduling"):
        yield Finding("server.retraction_policy", "retraction_policy priority requires enable_priority_scheduling")
