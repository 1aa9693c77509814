"""SGD54x the weight-cache daemon (0.5.17+): `--weight-cache-mode daemon|client`.

In "daemon" mode the engine spawns one daemon per local PP x TP rank (`Engine.
_launch_weight_cache_daemons`) that loads the weights and exports them over CUDA IPC; in "client"
mode a daemon started out of band (`python -m sglang.srt.weight_cache.daemon`) already holds them
and the engine maps them (`sglang/srt/weight_cache/ipc_loader.py`, `IpcModelLoader`).
docs/weight-cache.md tells the whole story.

SGLang refuses one combination while it resolves its arguments (SGD540). The others fail later,
while the weights load, in the daemon or in each engine rank; the launch alone shows them, so
they are rules too, and their findings say "while loading the weights".
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from sgdeploy.sglang.rule import Finding, LaunchContext
from sgdeploy.sglang.rules.common import algorithm
from sgdeploy.sglang.rules.parallelism import gpus_per_node
from sgdeploy.sglang.rules.registry import ERROR, WARNING, rule
from sgdeploy.sglang.rules.sites import Refusal, refusal_rule
from sgdeploy.sglang.versions import VersionRange

WEIGHT_CACHE = VersionRange(since="0.5.17")  # the flags and sglang/srt/weight_cache/
# SGLANG_WEIGHT_CACHE_SOCKET_TEMPLATE / _READY_TEMPLATE keyed by GPU UUID; before, a fixed
# /tmp/sglang_weight_cache_rank{global_rank}.sock
SOCKET_TEMPLATE_ENV = VersionRange(since="0.5.19")
# The out-of-band daemon's own argparse (weight_cache/daemon.py __main__): a fixed set of flags;
# from 0.5.19 it parses SGLang's whole server argv (prepare_server_args)
DAEMON_OWN_PARSER = VersionRange(since="0.5.17", until="0.5.19")
DAEMON_OWN_FLAGS = (
    "model_path", "tp_size", "dp_size", "ep_size", "pp_size", "nnodes", "node_rank", "base_gpu_id",
    "gpu_id_step", "load_format", "dtype", "quantization", "model_loader_extra_config",
    "trust_remote_code", "revision",
)
# The [server] keys a daemon's weights depend on, as the daemon and the client fingerprint them
# (CacheConfig) or as the daemon's loader reads them (WeightCacheDaemon.load).
WEIGHT_FIELDS = (
    # the checkpoint and how it is read
    "model_path",
    "revision",
    "dtype",
    "quantization",
    "load_format",
    "model_loader_extra_config",
    "trust_remote_code",
    "json_model_override_args",
    "download_dir",
    # the rank layout each daemon's shard belongs to
    "tp_size",
    "pp_size",
    "dp_size",
    "attn_dp_size",
    "enable_dp_attention",
    "ep_size",
    "moe_dp_size",
    "attn_cp_size",
    "moe_dense_tp_size",
    "enable_dp_lm_head",
    "moe_a2a_backend",
    "deepep_mode",
    "nnodes",
    "node_rank",
    "base_gpu_id",
    "gpu_id_step",
    # the physical expert layout the daemon builds with EPLB
    "enable_eplb",
    "ep_num_redundant_experts",
    "init_expert_location",
)
# the daemon's own "--weight-cache-timeout must be positive"
TIMEOUT_CHECKED = VersionRange(since="0.5.22")

SOCKET_ENV = "SGLANG_WEIGHT_CACHE_SOCKET_TEMPLATE"
READY_ENV = "SGLANG_WEIGHT_CACHE_READY_TEMPLATE"
DEFAULT_SOCKET_TEMPLATE = "/tmp/sglang_weight_cache_{device_uuid}.sock"
DEFAULT_READY_TEMPLATE = "/tmp/sglang_weight_cache_{device_uuid}.ready"
RANK_SOCKET_TEMPLATE = "/tmp/sglang_weight_cache_rank{global_rank}.sock"  # 0.5.17, 0.5.18
RANK_READY_TEMPLATE = "/tmp/sglang_weight_cache_rank{global_rank}.ready"  # beside it
ALLOC_CONF_ENV = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


def mode(ctx: LaunchContext) -> str:
    """weight_cache_mode as SGLang reads it: "off", "daemon" or "client" ("off" before 0.5.17)."""
    value = ctx.get("weight_cache_mode", "off") if ctx.has_flag("weight_cache_mode") else "off"
    return value if isinstance(value, str) and value else "off"


def cache_on(ctx: LaunchContext) -> bool:
    return mode(ctx) != "off"


def ranks_per_node(ctx: LaunchContext) -> int:
    """Engine ranks, hence daemons, on one node: tp x pp (x dp replicas) / nnodes."""
    return gpus_per_node(ctx.server)


# ----------------------------------------------------------------- SGD540: refused at argument time
WEIGHT_CACHE_ARGUMENTS = (
    Refusal("handle_load_format: --weight-cache-mode is not supported together with speculative "
            "decoding (--speculative-algorithm): the weight cache daemon does not export the draft "
            "model's weights. Disable one of them (--weight-cache-mode off) for this "
            "configuration.", "weight_cache_mode",
            lambda ctx: cache_on(ctx) and bool(algorithm(ctx)),
            "--weight-cache-mode is not supported together with speculative decoding "
            "(--speculative-algorithm): the weight cache daemon does not export the draft model's "
            "weights.", WEIGHT_CACHE,
            hint="set weight_cache_mode = \"off\", or drop speculative decoding"),
)
refusal_rule("SGD540", "weight-cache-arguments",
             "What SGLang refuses with --weight-cache-mode while it resolves its arguments "
             "(speculative decoding).",
             "set weight_cache_mode = \"off\" or drop what SGLang's message "
             "names", WEIGHT_CACHE_ARGUMENTS,
             versions=WEIGHT_CACHE)


# ---------------------------------------------------------- SGD541: the IPC quantization allow-list
def _ipc_quant_refusal(ctx: LaunchContext) -> str | None:
    """The quantization method check_ipc_quant_support refuses, with why; None when allowed or
    unknown.

    SGLang's method is --quantization, else the checkpoint's quantization_config.quant_method;
    only unquantized weights and block-wise FP8 (weight_block_size set) are on IPC_QUANT_ALLOWLIST.
    """
    given = ctx.get("quantization")
    config = ctx.model_config
    method = (
        given.lower()
        if isinstance(given, str) and given
        else (config.quant_method if config else None)
    )
    if method is None:
        return None  # unquantized when the config is known; unknown otherwise
    if method != "fp8":
        return f"quantization method '{method}'"
    if config is None:
        return None  # FP8 is allowed block-wise only: the checkpoint's config decides
    quant = config.value("quantization_config")
    if isinstance(quant, dict) and quant.get("weight_block_size") is not None:
        return None
    return "per-tensor FP8 (no weight_block_size in the checkpoint's quantization_config)"


@rule("SGD541", "weight-cache-quantization", ERROR,
      "The weight cache serves only unquantized and block-wise FP8 weights; SGLang refuses any "
      "other quantization while loading the weights (daemon and client).",
      "set weight_cache_mode = \"off\" for this model, or serve an unquantized or block-wise FP8 "
      "checkpoint",
      versions=WEIGHT_CACHE)
def weight_cache_quantization(ctx: LaunchContext) -> Iterator[Finding]:
    if not cache_on(ctx):
        return
    refused = _ipc_quant_refusal(ctx)
    if refused:
        field = "server.quantization" if ctx.given("quantization") else "server.weight_cache_mode"
        yield Finding(field, f"{refused} with weight_cache_mode = \"{mode(ctx)}\": SGLang refuses "
                      "it while loading the weights (check_ipc_quant_support, 0.5.17 and later): "
                      "'is not verified for CUDA IPC zero-copy weight sharing ... Verified "
                      "methods: '' (unquantized), 'fp8'. Note: FP8 is only verified for block-wise "
                      "configs (weight_block_size set), not per-tensor FP8.'")


# ---------------------------------------------------------------- SGD542: daemons the engine spawns
def _expandable_segments(ctx: LaunchContext) -> str | None:
    """The allocator variable that turns expandable_segments on, as the daemon parses it."""
    for name in ALLOC_CONF_ENV:
        for item in ctx.env.get(name, "").split(","):
            key, _, value = item.partition(":")
            if key.strip() == "expandable_segments" and value.strip().lower() == "true":
                return name
    return None


@rule("SGD542", "weight-cache-daemon-mode", ERROR,
      "weight_cache_mode = \"daemon\": the daemons the engine spawns fail before they serve (an "
      "allocator they cannot export, a readiness timeout that is not positive).",
      "fix what the message names, or run the daemon out of band and use weight_cache_mode = "
      "\"client\"",
      versions=WEIGHT_CACHE)
def weight_cache_daemon_mode(ctx: LaunchContext) -> Iterator[Finding]:
    if mode(ctx) != "daemon":
        return
    variable = _expandable_segments(ctx)
    if variable:
        yield Finding(f"env.{variable}", f"the engine's daemons inherit {variable} with "
                      "expandable_segments:True; each refuses it while loading the weights "
                      "(WeightCacheDaemon._assert_ipc_compatible_allocator, 0.5.17 and later): "
                      f"'{variable} sets expandable_segments:True, which is incompatible with CUDA "
                      "IPC weight sharing'",
                      "drop expandable_segments:True from the [env] of a weight_cache_mode = "
                      "\"daemon\" launch")
    timeout = ctx.get("weight_cache_timeout")
    if isinstance(timeout, int) and not isinstance(timeout, bool) and timeout <= 0:
        said = (f"each daemon raises '--weight-cache-timeout must be positive, got {timeout}'"
                if ctx.version in TIMEOUT_CHECKED else
                "the engine gives up on its daemons at its first poll: 'did not become ready "
                f"within {timeout}s'")
        yield Finding("server.weight_cache_timeout", f"weight_cache_timeout = {timeout}: {said} "
                      "(0.5.22 and later: _await_cluster_ready_to_serve; before: "
                      "Engine._launch_weight_cache_daemons)",
                      "set weight_cache_timeout to a positive number of seconds (1800 by default)")


# ------------------------------------------------------------ SGD543: where a rank finds its daemon
def _template_matches(template: str, path: str) -> bool:
    pattern = re.escape(template).replace(re.escape("{device_uuid}"), r"[^/]+")
    return re.fullmatch(pattern, path) is not None


def _daemon_socket_path(ctx: LaunchContext, path: str) -> bool:
    """`path` could be the socket a daemon of this release binds for a GPU."""
    if ctx.version in SOCKET_TEMPLATE_ENV:
        return _template_matches(ctx.env.get(SOCKET_ENV, DEFAULT_SOCKET_TEMPLATE), path)
    return path == RANK_SOCKET_TEMPLATE.format(global_rank=0)


@rule("SGD543", "weight-cache-socket", ERROR,
      "The engine's ranks cannot reach their own daemon: one weight_cache_socket for several "
      "ranks, a socket the engine's own daemons do not bind, or a path template without "
      "{device_uuid}.",
      "leave weight_cache_socket unset (each rank derives its GPU's socket) and keep {device_uuid} "
      "in the templates",
      versions=WEIGHT_CACHE)
def weight_cache_socket(ctx: LaunchContext) -> Iterator[Finding]:
    if not cache_on(ctx):
        return
    socket = ctx.get("weight_cache_socket")
    if isinstance(socket, str) and socket:
        ranks = ranks_per_node(ctx)
        if ranks > 1:
            yield Finding("server.weight_cache_socket", "weight_cache_socket is one path for the "
                          f"{ranks} ranks of the node: every rank asks the same daemon, whose "
                          "CacheConfig names one tp/pp rank, so the others fail while loading the "
                          "weights (IpcModelLoader._fetch_from_cache, 0.5.17 and later): 'Daemon "
                          "config mismatch!'")
        elif mode(ctx) == "daemon" and not _daemon_socket_path(ctx, socket):
            yield Finding("server.weight_cache_socket", f"weight_cache_socket = \"{socket}\" is "
                          "not where the engine's own daemons listen (the path template with the "
                          "GPU's UUID); in daemon mode the loader does not fall back to disk and "
                          "raises (IpcModelLoader.load_model, 0.5.17 and later): 'Weight cache "
                          "daemon not available at ...'")
    if ctx.version not in SOCKET_TEMPLATE_ENV:
        return
    read = [SOCKET_ENV] if mode(ctx) == "daemon" or not socket else []
    read += [READY_ENV] if mode(ctx) == "daemon" else []
    for name in read:
        template = ctx.env.get(name)
        if template is not None and "{device_uuid}" not in template:
            yield Finding(f"env.{name}", f"{name} = \"{template}\" has no {{device_uuid}}: SGLang "
                          "raises while loading the weights (_format_daemon_path, 0.5.19 and "
                          f"later): '{name}={template!r} must contain '{{device_uuid}}''",
                          f"keep {{device_uuid}} in {name}, e.g. "
                          "/run/sglang-weights/sglang_weight_cache_{device_uuid}.sock")


# --------------------------------------------------------- SGD544: what SGLang ignores or turns off
@rule("SGD544", "weight-cache-options-ignored", WARNING,
      "A weight-cache option the launch's mode never reads, or the weights CPU backup SGLang turns "
      "off when the weights come from the daemon.",
      "remove the option, or set the weight_cache_mode that reads it",
      versions=WEIGHT_CACHE)
def weight_cache_options_ignored(ctx: LaunchContext) -> Iterator[Finding]:
    current = mode(ctx)
    unread = {
        "off": ("weight_cache_socket", "weight_cache_timeout"),
        "client": ("weight_cache_timeout",),
    }
    for name in unread.get(current, ()):
        if ctx.given(name) and ctx.server[name] not in (None, ""):
            reader = ("only the engine's own daemons (weight_cache_mode = \"daemon\") read it; the "
                      "out-of-band daemon takes its own --timeout" if name == "weight_cache_timeout"
                      else "only weight_cache_mode = \"client\" reads it")
            yield Finding(f"server.{name}", f"{name} is ignored with weight_cache_mode = "
                                            f"\"{current}\": {reader}")
    if current != "off" and ctx.on("enable_weights_cpu_backup"):
        yield Finding("server.enable_weights_cpu_backup", "SGLang turns the weights CPU backup off "
                      "when the weights come from the daemon (load_model_with_memory_saver, 0.5.17 "
                      "and later): 'Disabling weights CPU backup in zero-copy IPC mode — "
                      "IPC-mapped weights cannot be offloaded to CPU.'")


# ----------------------------------------------------------- SGD545: a hardened unit's private /tmp
def client_socket_paths(ctx: LaunchContext) -> str:
    """Where a client rank looks for its daemon: the given socket, else the release's template."""
    socket = ctx.get("weight_cache_socket")
    if isinstance(socket, str) and socket:
        return socket
    if ctx.version in SOCKET_TEMPLATE_ENV:
        return ctx.env.get(SOCKET_ENV, DEFAULT_SOCKET_TEMPLATE)
    return RANK_SOCKET_TEMPLATE


@rule("SGD545", "weight-cache-private-tmp", WARNING,
      "A client in a hardened unit looks for its daemon's socket under /tmp, which PrivateTmp= "
      "makes the unit's own: SGLang finds no socket and loads the weights from disk.",
      "put the socket outside /tmp: SGLANG_WEIGHT_CACHE_SOCKET_TEMPLATE = "
      "\"/run/sglang-weights/sglang_weight_cache_{device_uuid}.sock\" (0.5.19+) for the daemon and "
      "the server, or weight_cache_socket",
      versions=WEIGHT_CACHE)
def weight_cache_private_tmp(ctx: LaunchContext) -> Iterator[Finding]:
    if mode(ctx) != "client" or ctx.hardening != "strict":
        return
    if not ctx.given("weight_cache_socket") and ctx.int("nnodes", 1) <= 1:
        # the daemon unit sgdeploy renders shares its sockets with the server: both templates under
        # /run (0.5.19+), or one private /tmp for the pair (JoinsNamespaceOf=, 0.5.17 and 0.5.18)
        return
    path = client_socket_paths(ctx)
    if path.startswith(("/tmp/", "/var/tmp/")):
        field = ("server.weight_cache_socket" if ctx.given("weight_cache_socket")
                 else f"env.{SOCKET_ENV}" if SOCKET_ENV in ctx.env else "server.weight_cache_mode")
        yield Finding(field, f"the client looks for its daemon at {path}, inside the unit's "
                      "private /tmp (deploy.hardening = \"strict\" renders PrivateTmp=yes): the "
                      "daemon's socket is not there, and SGLang quietly loads the weights from "
                      "disk (IpcModelLoader._fetch_from_cache, 0.5.17 and later: 'Daemon socket "
                      "not found')")


# ---------------------------------------------------- SGD546: what the 0.5.17 daemon cannot be told
@rule("SGD546", "weight-cache-daemon-flags", ERROR,
      "Before 0.5.19 the out-of-band daemon parses flags of its own: a weight-deciding option it "
      "has no flag for loads the daemon's weights differently from the server's.",
      "drop the option, set weight_cache_mode = \"off\", or use SGLang 0.5.19+ (its daemon takes "
      "the server's own flags)",
      versions=DAEMON_OWN_PARSER)
def weight_cache_daemon_flags(ctx: LaunchContext) -> Iterator[Finding]:
    if mode(ctx) != "client" or ctx.int("nnodes", 1) > 1:
        return
    for name in WEIGHT_FIELDS:
        if (
            name in DAEMON_OWN_FLAGS
            or not ctx.given(name)
            or ctx.server.get(name) in (None, "", False)
        ):
            continue
        yield Finding(f"server.{name}", f"{name} decides the weights, but the weight-cache daemon "
                      f"of SGLang {ctx.catalog.version} has no flag for it (python -m "
                      "sglang.srt.weight_cache.daemon parses only its own: "
                      f"{', '.join('--' + f.replace('_', '-') for f in DAEMON_OWN_FLAGS)}): the "
                      "daemon would hold weights the server does not expect")
