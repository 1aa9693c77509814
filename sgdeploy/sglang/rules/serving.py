"""SGD5xx serving: ports, names, scheduling policies, worker counts, TLS/HTTP, gRPC, metrics and API
options."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable, Iterator

from sgdeploy.sglang.facts import fact
from sgdeploy.sglang.rule import Finding, LaunchContext
from sgdeploy.sglang.rules.attention import architecture, resolve
from sgdeploy.sglang.rules.common import radix_cache_off, server_field
from sgdeploy.sglang.rules.registry import ERROR, WARNING, rule
from sgdeploy.sglang.rules.sites import Refusal, refusal_rule
from sgdeploy.sglang.versions import VersionRange


@rule("SGD503", "served-model-name-colon", ERROR, "served_model_name cannot contain ':' "
                                                  "(0.5.5.post1+).",
      "remove the ':' (SGLang reserves it for LoRA "
      "adapters)", versions=VersionRange(since="0.5.5.post1"))
def served_name_colon(ctx: LaunchContext) -> Iterator[Finding]:
    name = ctx.server.get("served_model_name")
    if isinstance(name, str) and ":" in name:
        yield Finding("server.served_model_name", f"served_model_name '{name}' contains ':'")


@rule("SGD504", "grpc-port-equals-port", ERROR,
      "The native gRPC port (grpc_port, or SGLANG_GRPC_PORT) must differ from port (0.5.16+; not "
      "checked in the legacy smg_grpc_mode / "
      "grpc_mode).", "pick another grpc_port", versions=VersionRange(since="0.5.16"))
def grpc_port(ctx: LaunchContext) -> Iterator[Finding]:
    if _legacy_grpc(ctx):
        return
    port, grpc = ctx.int("port", 30000), _grpc_port(ctx)
    if grpc is not None and grpc == port:
        where = "server.grpc_port" if ctx.given("grpc_port") else "env.SGLANG_GRPC_PORT"
        yield Finding(where, f"SGLang refuses it: '--grpc-port ({grpc}) must differ from --port "
                             f"({port})'")


@rule("SGD506", "positive-counts", ERROR, "Worker counts and GPU ids must be in range.",
      "use a value in range")
def positive_counts(ctx: LaunchContext) -> Iterator[Finding]:
    for name, minimum in (
        ("tp_size", 1),
        ("pp_size", 1),
        ("dp_size", 1),
        ("nnodes", 1),
        ("base_gpu_id", 0),
        ("gpu_id_step", 1),
        ("tokenizer_worker_num", 1),
        ("detokenizer_worker_num", 1),
        ("attn_dp_size", 1),
        ("page_size", 1),
    ):
        value = ctx.server.get(name)
        if isinstance(value, int) and value < minimum:
            yield Finding(server_field(name), f"{name} = {value} must be at least {minimum}")


@rule("SGD537", "port-range", ERROR, "port must be a fixed TCP port, 1 to 65535: SGLang accepts "
      "others and fails or binds a random port.", "give the server a fixed port, e.g. port = 30000")
def port_range(ctx: LaunchContext) -> Iterator[Finding]:
    port = ctx.server.get("port")
    if not isinstance(port, int) or isinstance(port, bool) or 1 <= port <= 65535:
        return
    if port == 0:
        yield Finding("server.port", "port = 0: SGLang accepts it and binds a port the kernel "
                      "picks, which the unit, the readiness probe and routers cannot know "
                      "(sgdeploy policy)")
    else:
        yield Finding("server.port", f"port = {port} is not a TCP port: SGLang's argument checks "
                      "accept it and the HTTP server fails when it binds (sgdeploy policy)")


@rule("SGD508", "priority-scheduling-policy", ERROR,
      "Priority scheduling needs schedule_policy fcfs or lof; retraction_policy priority needs it "
      "on.",
      "fix schedule_policy or enable priority scheduling")
def priority_scheduling(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.on("enable_priority_scheduling") and ctx.get("schedule_policy") not in (
        None,
        "fcfs",
        "lof",
    ):
        yield Finding("server.schedule_policy", "To use priority scheduling, schedule_policy must "
                                                "be 'fcfs' or 'lof'")
    if ctx.get("retraction_policy") == "priority" and not ctx.on("enable_priority_scheduling"):
        yield Finding("server.retraction_policy", "retraction_policy priority requires "
                                                  "enable_priority_scheduling")


# ---------------------------------------------------------------------- SGLang's own serving checks
# Tables of SGLang's refusals (sgdeploy.sglang.rules.sites): each entry names its check site and
# the releases it exists in, read from the wheels.

def _ssl_pair(ctx: LaunchContext) -> bool:
    return bool(ctx.get("ssl_certfile")) and bool(ctx.get("ssl_keyfile"))


def _no_ssl(ctx: LaunchContext) -> bool:
    return not ctx.get("ssl_certfile") and not ctx.get("ssl_keyfile")


_SSL = VersionRange(since="0.5.10")

SSL_AND_HTTP = (
    Refusal(
        "handle_ssl_validation: --ssl-keyfile requires --ssl-certfile to be specified as well.",
        "ssl_certfile",
        lambda ctx: bool(ctx.get("ssl_keyfile")) and not ctx.get("ssl_certfile"),
        "--ssl-keyfile requires --ssl-certfile to be specified as well.",
        _SSL,
    ),
    Refusal(
        "handle_ssl_validation: --ssl-certfile requires --ssl-keyfile to be specified as well.",
        "ssl_keyfile",
        lambda ctx: bool(ctx.get("ssl_certfile")) and not ctx.get("ssl_keyfile"),
        "--ssl-certfile requires --ssl-keyfile to be specified as well.",
        _SSL,
    ),
    Refusal(
        "handle_ssl_validation: --ssl-ca-certs has no effect without --ssl-certfile and "
        "--ssl-keyfile.",
        "ssl_ca_certs",
        lambda ctx: _no_ssl(ctx) and bool(ctx.get("ssl_ca_certs")),
        "--ssl-ca-certs has no effect without --ssl-certfile and --ssl-keyfile.",
        _SSL,
    ),
    Refusal(
        "handle_ssl_validation: --ssl-keyfile-password has no effect without --ssl-certfile "
        "and --ssl-keyfile.",
        "ssl_keyfile_password",
        lambda ctx: (
            _no_ssl(ctx) and not ctx.get("ssl_ca_certs") and bool(ctx.get("ssl_keyfile_password"))
        ),
        "--ssl-keyfile-password has no effect without --ssl-certfile and --ssl-keyfile.",
        _SSL,
    ),
    Refusal(
        "handle_ssl_validation: --enable-ssl-refresh requires --ssl-certfile and --ssl-keyfile to "
        "be specified.",
        "enable_ssl_refresh",
        lambda ctx: ctx.on("enable_ssl_refresh") and not _ssl_pair(ctx),
        "--enable-ssl-refresh requires --ssl-certfile and --ssl-keyfile to be specified.",
        _SSL,
    ),
    Refusal(
        "handle_ssl_validation: --enable-http-worker-reuseport requires --tokenizer-worker-num "
        "> 1 and has no effect with --enable-http2.",
        "enable_http_worker_reuseport",
        lambda ctx: (
            ctx.on("enable_http_worker_reuseport")
            and (ctx.int("tokenizer_worker_num", 1) == 1 or ctx.on("enable_http2"))
        ),
        "--enable-http-worker-reuseport requires --tokenizer-worker-num > 1 and has no effect "
        "with --enable-http2.",
        VersionRange(since="0.5.23"),
    ),
    Refusal(
        "handle_ssl_validation: --http2-max-concurrent-streams must be between 1 and 4294967295.",
        "http2_max_concurrent_streams",
        lambda ctx: (
            ctx.on("enable_http2") and not 0 < ctx.int("http2_max_concurrent_streams", 200) < 2**32
        ),
        "--http2-max-concurrent-streams must be between 1 and 4294967295.",
        VersionRange(since="0.5.18"),
    ),
    Refusal(
        "handle_ssl_validation: --http2-initial-connection-window-size must be between 1024 "
        "and 2147483647.",
        "http2_initial_connection_window_size",
        lambda ctx: (
            ctx.on("enable_http2")
            and not 1024 <= ctx.int("http2_initial_connection_window_size", 1024) < 2**31
        ),
        "--http2-initial-connection-window-size must be between 1024 and 2147483647.",
        VersionRange(since="0.5.19"),
    ),
    Refusal(
        "handle_ssl_validation: --enable-ssl-refresh is not supported with --enable-http2. "
        "Granian does not support SSL certificate hot-reloading. Use Uvicorn (the default) or "
        "handle certificate rotation externally.",
        "enable_ssl_refresh",
        lambda ctx: ctx.on("enable_http2") and ctx.on("enable_ssl_refresh") and _ssl_pair(ctx),
        "--enable-ssl-refresh is not supported with --enable-http2. Granian does not support "
        "SSL certificate hot-reloading.",
        VersionRange(since="0.5.11"),
    ),
    Refusal(
        "handle_ssl_validation: --enable-http2 does not yet support --tokenizer-worker-num > "
        "1. Multi-worker HTTP/2 support will be added in a future "
        "release.",
        "tokenizer_worker_num",
        lambda ctx: ctx.on("enable_http2") and ctx.int("tokenizer_worker_num", 1) > 1,
        "--enable-http2 does not yet support --tokenizer-worker-num > 1.",
        VersionRange(since="0.5.11", until="0.5.14"),
    ),
)

refusal_rule("SGD530", "ssl-and-http-options", "TLS and HTTP server options SGLang checks "
             "together: the certificate and key pair, SSL refresh, "
             "HTTP/2.", "give ssl_certfile and ssl_keyfile together, "
             "or drop the option that needs them", SSL_AND_HTTP)


_BUCKET_FLAGS = (("prompt_tokens_buckets", "--prompt-tokens-buckets"),
                 ("generation_tokens_buckets", "--generation-tokens-buckets"))


def _floats(words: list[str]) -> list[float] | None:
    try:
        return [float(w) for w in words]
    except ValueError:
        return None


def _bucket_problem(words: list[str], name: str, custom: str) -> tuple[str, str] | None:
    """SGLang's validate_buckets_rule: (site message, message) of the first problem, or None."""
    rule, rest = words[0], words[1:]
    if rule not in ("tse", "default", custom):
        return (f"Unsupported {{}} rule type: '{{}}'. Must be one of: 'tse', 'default', '{custom}'",
                f"Unsupported {name} rule type: '{rule}'. Must be one of: 'tse', 'default', "
                f"'{custom}'")
    if rule == "tse":
        if len(words) != 4:
            return ("{} TSE rule requires exactly 4 parameters: ['tse', middle, base, count], got "
                    "{}",
                    f"{name} TSE rule requires exactly 4 parameters: ['tse', middle, base, count], "
                    f"got {len(words)}")
        numbers = _floats(rest[:2])
        if numbers is None or not rest[2].strip().lstrip("+-").isdigit():
            return ("{} TSE rule parameters must be: ['tse', <float:middle>, <float:base>, "
                    "<int:count>]",
                    f"{name} TSE rule parameters must be: ['tse', <float:middle>, <float:base>, "
                    "<int:count>]")
        middle, base, count = numbers[0], numbers[1], int(rest[2])
        for ok, what, value in ((base > 1, "base must be larger than "
                                           "1", base), (count > 0, "count must be positive",
                                count), (middle > 0, "middle must be positive", middle)):
            if not ok:
                return f"{{}} TSE {what}, got: {{}}", f"{name} TSE {what}, got: {value}"
        return None
    if rule == "default":
        return None if len(words) == 1 else (
            "{} default rule should only have one parameter: ['default'], got {}",
            f"{name} default rule should only have one parameter: ['default'], got {len(words)}")
    values = _floats(rest)
    for ok, what in (
        (bool(rest), f"requires at least one bucket value: ['{custom}', value1, ...]"),
        (values is not None, "bucket values must be numeric"),
        (
            values is not None and len(set(values)) == len(values),
            "bucket values should not contain duplicates",
        ),
        (
            values is not None and all(v >= 0 for v in values),
            "bucket values should be non-negative",
        ),
    ):
        if not ok:
            return f"{{}} {custom} rule {what}", f"{name} {custom} rule {what}"
    return None


def _buckets(ctx: LaunchContext) -> tuple[str, str, str] | None:
    """(field, site message, message) of the first bucket rule SGLang refuses."""
    custom = "custom" if ctx.version >= (0, 5, 3, 0) else "customer"
    for field_name, option in _BUCKET_FLAGS:
        value = ctx.get(field_name)
        if isinstance(value, list) and value:
            problem = _bucket_problem([str(v) for v in value], option, custom)
            if problem:
                return field_name, *problem
    return None


def _bucket_entry(site_message: str, versions: VersionRange) -> Refusal:
    return Refusal("validate_buckets_rule: "
                   f"{site_message}", lambda ctx: (_buckets(ctx) or ("",))[0],
                   lambda ctx: (_buckets(ctx) or ("", "", ""))[1] == site_message,
                   lambda ctx: (_buckets(ctx) or ("", "", ""))[2], versions)


_BUCKET_SITES_0_5_2 = (
    "{} TSE rule requires exactly 4 parameters: ['tse', middle, base, count], got {}",
    "{} TSE rule parameters must be: ['tse', <float:middle>, <float:base>, <int:count>]",
    "{} TSE base must be larger than 1, got: {}",
    "{} TSE count must be positive, got: {}",
    "{} TSE middle must be positive, got: {}",
    "{} default rule should only have one parameter: ['default'], got {}",
)
_BUCKET_SITES_CUSTOM = ("Unsupported {} rule type: '{}'. Must be one of: 'tse', 'default', '%s'",
                        "{} %s rule requires at least one bucket value: ['%s', value1, ...]",
                        "{} %s rule bucket values must be numeric",
                        "{} %s rule bucket values should not contain duplicates",
                        "{} %s rule bucket values should be non-negative")


def _custom_site(template: str, word: str) -> str:
    return template.replace("%s", word)


METRICS = (
    Refusal(
        "check_server_args: --export-metrics-to-file-dir is required when "
        "--export-metrics-to-file is enabled",
        "export_metrics_to_file",
        lambda ctx: (
            ctx.on("export_metrics_to_file") and ctx.get("export_metrics_to_file_dir") is None
        ),
        "--export-metrics-to-file-dir is required when --export-metrics-to-file is enabled",
        VersionRange(since="0.5.7"),
        hint="set export_metrics_to_file_dir to a directory on the host",
    ),
    Refusal(
        "handle_request_metrics_exporters: --export-metrics-to-file-dir is required when "
        "--export-metrics-to-file is enabled",
        "export_metrics_to_file",
        lambda ctx: (
            ctx.on("export_metrics_to_file") and ctx.get("export_metrics_to_file_dir") is None
        ),
        "--export-metrics-to-file-dir is required when --export-metrics-to-file is enabled",
        VersionRange(since="0.5.5.post3", until="0.5.7"),
        hint="set export_metrics_to_file_dir to a directory on the host",
    ),
    Refusal(
        "check_server_args: Please set --tokenizer-metrics-custom-labels-header when setting "
        "--tokenizer-metrics-allowed-custom-labels.",
        "tokenizer_metrics_allowed_custom_labels",
        lambda ctx: (
            bool(ctx.get("tokenizer_metrics_allowed_custom_labels"))
            and not ctx.get("tokenizer_metrics_custom_labels_header")
        ),
        "Please set --tokenizer-metrics-custom-labels-header when setting "
        "--tokenizer-metrics-allowed-custom-labels.",
        VersionRange(since="0.5.7"),
    ),
    Refusal(
        "handle_metrics_labels: Please set --tokenizer-metrics-custom-labels-header when "
        "setting "
        "--tokenizer-metrics-allowed-custom-labels.",
        "tokenizer_metrics_allowed_custom_labels",
        lambda ctx: (
            bool(ctx.get("tokenizer_metrics_allowed_custom_labels"))
            and not ctx.get("tokenizer_metrics_custom_labels_header")
        ),
        "Please set --tokenizer-metrics-custom-labels-header when setting "
        "--tokenizer-metrics-allowed-custom-labels.",
        VersionRange(since="0.5.3", until="0.5.7"),
    ),
    *(_bucket_entry(m, VersionRange(since="0.5.2")) for m in _BUCKET_SITES_0_5_2),
    *(
        _bucket_entry(_custom_site(m, "custom"), VersionRange(since="0.5.3"))
        for m in _BUCKET_SITES_CUSTOM
    ),
    *(
        _bucket_entry(_custom_site(m, "customer"), VersionRange(since="0.5.2", until="0.5.3"))
        for m in _BUCKET_SITES_CUSTOM
    ),
)

refusal_rule("SGD531", "metrics-options", "Metrics options SGLang checks: the export directory, "
             "the custom labels header, histogram bucket "
             "rules.", "complete the metrics options as the message says", METRICS)


_NATIVE_GRPC = VersionRange(since="0.5.16")


_NOT_JSON = object()  # argparse's json.loads refuses the value before any check runs


def _decoded(value: object) -> object:
    """A JSON-typed flag's value as SGLang's json.loads gives it (a table stays a table)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return _NOT_JSON
    return value


def _legacy_grpc(ctx: LaunchContext) -> bool:
    return ctx.on("smg_grpc_mode") or ctx.on("grpc_mode")


def _grpc_port(ctx: LaunchContext) -> int | None:
    """The gRPC port SGLang resolves: the flag, else SGLANG_GRPC_PORT, else --port + 10000 in legacy
    gRPC mode (0.5.16 and later); 0.5.11 to 0.5.15 always derive it, from the env or --port +
    10000."""
    value = ctx.get("grpc_port") if ctx.has_flag("grpc_port") else None
    env = ctx.env.get("SGLANG_GRPC_PORT", "").strip()
    if value is None and env.lstrip("-").isdigit():
        value = int(env)
    if value is None and (_legacy_grpc(ctx) or ctx.version < (0, 5, 16, 0)):
        value = ctx.int("port", 30000) + 10000
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _native_grpc(ctx: LaunchContext) -> bool:
    return _grpc_port(ctx) is not None and not _legacy_grpc(ctx)


def _port_out_of_range(ctx: LaunchContext) -> bool:
    port = _grpc_port(ctx)
    return port is not None and not 1 <= port <= 65535


GRPC = (
    Refusal(
        "handle_deprecated_args: SGLANG_GRPC_PORT ({}) must be between 1 and 65535",
        "port",
        _port_out_of_range,
        lambda ctx: f"SGLANG_GRPC_PORT ({_grpc_port(ctx)}) must be between 1 and 65535",
        VersionRange(since="0.5.11", until="0.5.16"),
        hint="SGLang derives the gRPC port as port + 10000 unless SGLANG_GRPC_PORT is set: "
        "keep port at 55535 or below, or set SGLANG_GRPC_PORT",
    ),
    Refusal(
        "check_server_args: SGLANG_GRPC_PORT ({}) must differ from --port ({})",
        "port",
        lambda ctx: (
            bool(ctx.env_true("SGLANG_ENABLE_GRPC")) and _grpc_port(ctx) == ctx.int("port", 30000)
        ),
        lambda ctx: (
            f"SGLANG_GRPC_PORT ({_grpc_port(ctx)}) must differ from --port "
            f"({ctx.int('port', 30000)})"
        ),
        VersionRange(since="0.5.11", until="0.5.16"),
    ),
    Refusal(
        "handle_deprecated_args: --grpc-port / SGLANG_GRPC_PORT ({}) must be between 1 and 65535",
        "grpc_port",
        _port_out_of_range,
        lambda ctx: (
            f"--grpc-port / SGLANG_GRPC_PORT ({_grpc_port(ctx)}) must be between 1 and 65535"
        ),
        _NATIVE_GRPC,
    ),
    Refusal(
        "handle_deprecated_args: --grpc-response-timeout-secs must be positive",
        "grpc_response_timeout_secs",
        lambda ctx: ctx.int("grpc_response_timeout_secs", 300) <= 0,
        "--grpc-response-timeout-secs must be positive",
        VersionRange(since="0.5.21"),
    ),
    Refusal(
        "handle_deprecated_args: SGLANG_GRPC_WORKER_THREADS ({}) must be >= 1",
        "grpc_port",
        lambda ctx: (
            _grpc_port(ctx) is not None
            and ctx.env.get("SGLANG_GRPC_WORKER_THREADS", "").strip().lstrip("-").isdigit()
            and int(ctx.env["SGLANG_GRPC_WORKER_THREADS"]) < 1
        ),
        lambda ctx: (
            f"SGLANG_GRPC_WORKER_THREADS ({ctx.env.get('SGLANG_GRPC_WORKER_THREADS')}) must be >= 1"
        ),
        _NATIVE_GRPC,
    ),
    Refusal(
        "handle_deprecated_args: --sidecar-args requires --sidecar.",
        "sidecar_args",
        lambda ctx: ctx.get("sidecar_args") is not None and ctx.get("sidecar") is None,
        "--sidecar-args requires --sidecar.",
        _NATIVE_GRPC,
    ),
    Refusal(
        "handle_deprecated_args: --sidecar-args must be a JSON array of strings.",
        "sidecar_args",
        lambda ctx: (
            ctx.get("sidecar_args") is not None
            and ctx.get("sidecar") is not None
            and (decoded := _decoded(ctx.get("sidecar_args"))) is not _NOT_JSON
            and not (isinstance(decoded, list) and all(isinstance(a, str) for a in decoded))
        ),
        "--sidecar-args must be a JSON array of strings.",
        _NATIVE_GRPC,
    ),
    Refusal(
        "handle_deprecated_args: --sidecar is not yet supported with SGLANG_RUST_SERVER: "
        "Rust-server mode does not run the Python sidecar lifecycle.",
        "sidecar",
        lambda ctx: (
            bool(str(ctx.get("sidecar") or "").strip()) and bool(ctx.env_true("SGLANG_RUST_SERVER"))
        ),
        "--sidecar is not yet supported with SGLANG_RUST_SERVER: Rust-server mode does not run "
        "the Python sidecar lifecycle.",
        VersionRange(since="0.5.22", until="0.5.23"),
    ),
    Refusal(
        "handle_deprecated_args: --sidecar must not be empty.",
        "sidecar",
        lambda ctx: isinstance(ctx.get("sidecar"), str) and not ctx.get("sidecar").strip(),
        "--sidecar must not be empty.",
        _NATIVE_GRPC,
    ),
    Refusal(
        "handle_deprecated_args: --sidecar requires SGLang's native gRPC server; it cannot be "
        "combined with --smg-grpc-mode/--grpc-mode.",
        "sidecar",
        lambda ctx: bool(str(ctx.get("sidecar") or "").strip()) and _legacy_grpc(ctx),
        "--sidecar requires SGLang's native gRPC server; it cannot be combined with "
        "--smg-grpc-mode/--grpc-mode.",
        _NATIVE_GRPC,
    ),
    Refusal(
        "handle_deprecated_args: --sidecar requires --grpc-port or SGLANG_GRPC_PORT.",
        "sidecar",
        lambda ctx: (
            bool(str(ctx.get("sidecar") or "").strip())
            and not _legacy_grpc(ctx)
            and _grpc_port(ctx) is None
        ),
        "--sidecar requires --grpc-port or SGLANG_GRPC_PORT.",
        _NATIVE_GRPC,
    ),
    Refusal(
        "handle_deprecated_args: --grpc-port is not supported with --use-ray: the Ray serve "
        "launch path does not start the native gRPC "
        "server.",
        "use_ray",
        lambda ctx: _native_grpc(ctx) and ctx.on("use_ray"),
        "--grpc-port is not supported with --use-ray: the Ray serve launch path does not start "
        "the native gRPC server.",
        _NATIVE_GRPC,
    ),
    Refusal(
        "handle_deprecated_args: --grpc-port is not supported with --encoder-only: encoder "
        "disaggregation uses its own "
        "server.",
        "encoder_only",
        lambda ctx: _native_grpc(ctx) and ctx.on("encoder_only"),
        "--grpc-port is not supported with --encoder-only: encoder disaggregation uses its own "
        "server.",
        _NATIVE_GRPC,
    ),
    Refusal(
        "handle_deprecated_args: Native gRPC does not yet support --tokenizer-worker-num > 1. "
        "Unset --grpc-port or set --tokenizer-worker-num 1.",
        "tokenizer_worker_num",
        lambda ctx: _native_grpc(ctx) and ctx.int("tokenizer_worker_num", 1) > 1,
        "Native gRPC does not yet support --tokenizer-worker-num > 1. Unset --grpc-port or set "
        "--tokenizer-worker-num 1.",
        _NATIVE_GRPC,
    ),
    Refusal(
        "handle_deprecated_args: --grpc-port is incompatible with --api-key/--admin-api-key: "
        "the native gRPC listener bypasses HTTP auth middleware.",
        "grpc_port",
        lambda ctx: _native_grpc(ctx) and bool(ctx.get("api_key") or ctx.get("admin_api_key")),
        "--grpc-port is incompatible with --api-key/--admin-api-key: the native gRPC listener "
        "bypasses HTTP auth middleware.",
        _NATIVE_GRPC,
    ),
)

refusal_rule("SGD532", "grpc-options", "gRPC options SGLang checks: the resolved gRPC port, the "
             "sidecar, what the native gRPC server cannot run "
             "with.", "fix the gRPC options as the message says", GRPC)


def _device(ctx: LaunchContext) -> str:
    """The device SGLang resolves on the hosts sgdeploy deploys to (NVIDIA GPUs): cuda unless
    given."""
    value = ctx.get("device")
    return value if isinstance(value, str) and value else "cuda"


OTHER_DEVICES = (
    Refusal(
        "check_server_args: MindSpore model impl is only supported on Ascend npu.",
        "model_impl",
        lambda ctx: ctx.get("model_impl") == "mindspore",
        "MindSpore model impl is only supported on Ascend npu.",
        VersionRange(since="0.5.6"),
    ),
    Refusal(
        "check_server_args: Communications quantization is only used with tp_size != 1",
        "enable_quant_communications",
        lambda ctx: ctx.on("enable_quant_communications") and ctx.int("tp_size", 1) == 1,
        "Communications quantization is only used with tp_size != 1",
        VersionRange(since="0.5.11"),
    ),
    Refusal(
        "check_server_args: Communications quantization is only supported for NPU device",
        "enable_quant_communications",
        lambda ctx: (
            ctx.on("enable_quant_communications")
            and ctx.int("tp_size", 1) != 1
            and _device(ctx) != "npu"
        ),
        "Communications quantization is only supported for NPU device",
        VersionRange(since="0.5.11"),
    ),
    Refusal(
        "check_server_args: InstantTensor requires a CUDA-compatible device (including CUDA "
        "and ROCm); got {}.",
        "load_format",
        lambda ctx: ctx.get("load_format") == "instanttensor" and _device(ctx) != "cuda",
        lambda ctx: (
            "InstantTensor requires a CUDA-compatible device (including CUDA and "
            f"ROCm); got {_device(ctx)!r}."
        ),
        VersionRange(since="0.5.22"),
    ),
    Refusal(
        "validate_device_sampling_backend: --sampling-backend intel_xpu requires --device xpu, "
        "got --device {}",
        "sampling_backend",
        lambda ctx: ctx.get("sampling_backend") == "intel_xpu" and _device(ctx) != "xpu",
        lambda ctx: (
            f"--sampling-backend intel_xpu requires --device xpu, got --device {_device(ctx)}"
        ),
        VersionRange(since="0.5.21"),
    ),
)

refusal_rule("SGD533", "other-device-option", "An option SGLang accepts only on another device "
             "(Ascend NPU, Intel XPU) than the NVIDIA GPUs of the "
             "host.", "remove the option on a CUDA host", OTHER_DEVICES)


def _negative(name: str, default: float = 0) -> Callable[[LaunchContext], bool]:
    def check(ctx: LaunchContext) -> bool:
        value = ctx.get(name, default)
        return isinstance(value, int | float) and not isinstance(value, bool) and value < 0
    return check


def _not_positive(name: str, default: float) -> Callable[[LaunchContext], bool]:
    def check(ctx: LaunchContext) -> bool:
        value = ctx.get(name, default)
        return isinstance(value, int | float) and not isinstance(value, bool) and value <= 0
    return check


def _bad_modality(ctx: LaunchContext) -> str | None:
    value = ctx.get("limit_mm_data_per_request")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if isinstance(value, dict):
        return next((m for m in value if m not in ("image", "video", "audio")), None)
    return None


def _mm_config_problem(ctx: LaunchContext) -> str | None:
    value = ctx.get("mm_process_config")
    if value is None:
        return None
    if not isinstance(value, dict):
        return "mm_process_config must be a dict"
    bad = next(
        (k for k in ("image", "video", "audio") if k in value and not isinstance(value[k], dict)),
        None,
    )
    return f"mm_process_config['{bad}'] must be a dict" if bad else None


def _gc_threshold_bad(ctx: LaunchContext) -> bool:
    value = ctx.get("gc_threshold")
    return isinstance(value, list) and bool(value) and not 1 <= len(value) <= 3


def _decodes_to_non_object(value: object) -> bool:
    decoded = _decoded(value)
    return value is not None and decoded is not _NOT_JSON and not isinstance(decoded, dict)


# check_server_args' multi-item scoring asserts, before _handle_multi_item_scoring took them over.
_MULTI_ITEM_CHECKS = VersionRange(since="0.5.3.post1", until="0.5.11")

SERVING_VALUES = (
    Refusal(
        "handle_tokenizer_batching: Cannot enable both --enable-tokenizer-batch-encode and "
        "--enable-dynamic-batch-tokenizer. Please choose one tokenizer batching approach.",
        "enable_dynamic_batch_tokenizer",
        lambda ctx: (
            ctx.on("enable_tokenizer_batch_encode") and ctx.on("enable_dynamic_batch_tokenizer")
        ),
        "Cannot enable both --enable-tokenizer-batch-encode and "
        "--enable-dynamic-batch-tokenizer. Please choose one tokenizer batching "
        "approach.",
        VersionRange(since="0.5.3"),
    ),
    Refusal(
        "check_server_args: schedule_conservativeness must be non-negative",
        "schedule_conservativeness",
        _negative("schedule_conservativeness", 1.0),
        "schedule_conservativeness must be non-negative",
        VersionRange(since="0.5.5"),
    ),
    Refusal(
        "check_server_args: When setting gc_threshold, it must contain 1 to 3 integers.",
        "gc_threshold",
        _gc_threshold_bad,
        "When setting gc_threshold, it must contain 1 to 3 integers.",
        VersionRange(since="0.5.10"),
    ),
    Refusal(
        "check_server_args: Multimodal processor worker num must >= 0",
        "mm_processor_worker_num",
        _negative("mm_processor_worker_num"),
        "Multimodal processor worker num must >= 0",
        VersionRange(since="0.5.17"),
    ),
    Refusal(
        "check_server_args: Multimodal I/O worker num must >= 0",
        "mm_io_worker_num",
        _negative("mm_io_worker_num"),
        "Multimodal I/O worker num must >= 0",
        VersionRange(since="0.5.17"),
    ),
    Refusal(
        "check_server_args: --kv-canary-sweep-interval requires --kv-canary in {}",
        "kv_canary_sweep_interval",
        lambda ctx: (
            ctx.int("kv_canary_sweep_interval", 0) > 0 and ctx.get("kv_canary", "none") == "none"
        ),
        "--kv-canary-sweep-interval requires --kv-canary in {log, raise}",
        VersionRange(since="0.5.13"),
    ),
    Refusal(
        "check_server_args: pp_max_micro_batch_size must be a positive integer or None (for "
        "auto-compute). Got: {}",
        "pp_max_micro_batch_size",
        lambda ctx: (
            isinstance(ctx.get("pp_max_micro_batch_size"), int)
            and ctx.get("pp_max_micro_batch_size") < 1
        ),
        lambda ctx: (
            "pp_max_micro_batch_size must be a positive integer or None (for "
            "auto-compute). Got: "
            f"{ctx.get('pp_max_micro_batch_size')}"
        ),
        VersionRange(since="0.5.11"),
    ),
    Refusal(
        "handle_asr_validation: --asr-max-buffer-seconds must be positive (got {}).",
        "asr_max_buffer_seconds",
        _not_positive("asr_max_buffer_seconds", 60),
        lambda ctx: (
            f"--asr-max-buffer-seconds must be positive (got {ctx.get('asr_max_buffer_seconds')})."
        ),
        VersionRange(since="0.5.13"),
    ),
    Refusal(
        "handle_asr_validation: --asr-max-concurrent-sessions must be positive (got {}).",
        "asr_max_concurrent_sessions",
        _not_positive("asr_max_concurrent_sessions", 1),
        lambda ctx: (
            f"--asr-max-concurrent-sessions must be positive (got "
            f"{ctx.get('asr_max_concurrent_sessions')})."
        ),
        VersionRange(since="0.5.13"),
    ),
    Refusal(
        "handle_multimodal: mm_preprocess_cache_size_mb must be non-negative",
        "mm_preprocess_cache_size_mb",
        _negative("mm_preprocess_cache_size_mb"),
        "mm_preprocess_cache_size_mb must be non-negative",
        VersionRange(since="0.5.18"),
    ),
    Refusal(
        "handle_multimodal: mm_process_config must be a dict, but got {}",
        "mm_process_config",
        lambda ctx: _mm_config_problem(ctx) == "mm_process_config must be a dict",
        "mm_process_config must be a dict",
        VersionRange(since="0.5.11"),
    ),
    Refusal(
        "handle_multimodal: mm_process_config['{}'] must be a dict, but got {}",
        "mm_process_config",
        lambda ctx: str(_mm_config_problem(ctx)).startswith("mm_process_config["),
        lambda ctx: str(_mm_config_problem(ctx)),
        VersionRange(since="0.5.11"),
    ),
    Refusal(
        "handle_other_validations: Invalid modality '{}' in "
        "--limit-mm-data-per-request.Allowed modalities are: "
        "{}",
        "limit_mm_data_per_request",
        lambda ctx: _bad_modality(ctx) is not None,
        lambda ctx: (
            f"Invalid modality '{_bad_modality(ctx)}' in --limit-mm-data-per-request. "
            "Allowed modalities are: image, video, audio"
        ),
        VersionRange(since="0.5.7"),
    ),
    Refusal(
        "ServerArgs.__post_init__: --default-chat-template-kwargs must decode to a JSON object",
        "default_chat_template_kwargs",
        lambda ctx: _decodes_to_non_object(ctx.get("default_chat_template_kwargs")),
        "--default-chat-template-kwargs must decode to a JSON object",
        VersionRange(since="0.5.16", until="0.5.18"),
    ),
    Refusal(
        "handle_other_validations: --default-chat-template-kwargs must decode to a JSON object",
        "default_chat_template_kwargs",
        lambda ctx: _decodes_to_non_object(ctx.get("default_chat_template_kwargs")),
        "--default-chat-template-kwargs must decode to a JSON object",
        VersionRange(since="0.5.18"),
    ),
    Refusal(
        "check_server_args: Multi-item scoring requires radix cache to be disabled. Please set "
        "--disable-radix-cache when using --multi-item-scoring-delimiter.",
        "disable_radix_cache",
        lambda ctx: (
            ctx.get("multi_item_scoring_delimiter") is not None and not radix_cache_off(ctx)
        ),
        "Multi-item scoring requires radix cache to be disabled. Please set "
        "--disable-radix-cache when using --multi-item-scoring-delimiter.",
        _MULTI_ITEM_CHECKS,
    ),
    Refusal(
        "check_server_args: Multi-item scoring requires chunked prefill to be disabled. Please "
        "set --chunked-prefill-size -1 when using "
        "--multi-item-scoring-delimiter.",
        "chunked_prefill_size",
        lambda ctx: (
            ctx.get("multi_item_scoring_delimiter") is not None
            and ctx.get("chunked_prefill_size") != -1
        ),
        "Multi-item scoring requires chunked prefill to be disabled. Please set "
        "--chunked-prefill-size -1 when using "
        "--multi-item-scoring-delimiter.",
        _MULTI_ITEM_CHECKS,
    ),
    Refusal(
        "validate_prefill_decode_interval: --prefill-decode-interval must be non-negative.",
        "prefill_decode_interval",
        _negative("prefill_decode_interval"),
        "--prefill-decode-interval must be non-negative.",
        VersionRange(since="0.5.19"),
    ),
    Refusal(
        "validate_prefill_decode_interval: --prefill-decode-interval-min-bs must be non-negative.",
        "prefill_decode_interval_min_bs",
        _negative("prefill_decode_interval_min_bs"),
        "--prefill-decode-interval-min-bs must be non-negative.",
        VersionRange(since="0.5.23"),
    ),
    Refusal(
        "validate_sampling_mask_max_tokens: --sampling-mask-max-tokens must be positive (got {}).",
        "sampling_mask_max_tokens",
        _not_positive("sampling_mask_max_tokens", 4096),
        lambda ctx: (
            "--sampling-mask-max-tokens must be positive (got "
            f"{ctx.get('sampling_mask_max_tokens')})."
        ),
        VersionRange(since="0.5.20"),
    ),
    Refusal(
        "validate_sampling_mask_max_tokens: SGLANG_DISAGGREGATION_SAMPLING_MASK_MAX_TOKENS is "
        "no longer supported. Unset it. To enable sampling masks for disaggregated serving, "
        "set SGLANG_ENABLE_DISAGG_SAMPLING_MASK=1 and use the same positive "
        "--sampling-mask-max-tokens value on both prefill and decode "
        "servers.",
        "",
        lambda ctx: "SGLANG_DISAGGREGATION_SAMPLING_MASK_MAX_TOKENS" in ctx.env,
        "SGLANG_DISAGGREGATION_SAMPLING_MASK_MAX_TOKENS is no longer supported. Unset it.",
        VersionRange(since="0.5.20"),
        hint="remove "
        "SGLANG_DISAGGREGATION_SAMPLING_MASK_MAX_TOKENS from [env]; use "
        "SGLANG_ENABLE_DISAGG_SAMPLING_MASK=1 with sampling_mask_max_tokens",
    ),
    Refusal(
        "handle_deprecated_args: --disable-fast-image-processor conflicts with "
        "--image-processor-backend={}.",
        "image_processor_backend",
        lambda ctx: (
            ctx.on("disable_fast_image_processor")
            and ctx.get("image_processor_backend", "auto") not in ("auto", "pil")
        ),
        lambda ctx: (
            "--disable-fast-image-processor conflicts with "
            f"--image-processor-backend={ctx.get('image_processor_backend')}."
        ),
        VersionRange(since="0.5.18"),
    ),
)

refusal_rule("SGD534", "serving-values", "Scheduling, tokenizer, multimodal and API values SGLang "
             "refuses: ranges, shapes and options that exclude each "
             "other.", "fix the value as the message says",
             SERVING_VALUES)


# configure_media_url_security (utils/common.py, called by resolution from 0.5.18): the size limit
# and each allowed media domain, normalised to a bare hostname or IP address.
_MEDIA_URL_CHECKS = VersionRange(since="0.5.18")


def _media_domain_problem(domain: object) -> str | None:
    if not isinstance(domain, str):
        return "allowed media domains must be strings"
    name = domain.strip().rstrip(".")
    if not name:
        return "allowed media domains cannot be empty"
    if "://" in name or any(char in name for char in "/?#@"):
        return f"Invalid allowed media domain {name!r}: provide a hostname only"
    bare = name[1:-1] if name.startswith("[") and name.endswith("]") else name
    try:
        ipaddress.ip_address(bare)
    except ValueError:
        if ":" in bare:
            return f"Invalid allowed media domain {name!r}: ports are not supported"
    return None


@rule("SGD538", "media-url-options", ERROR,
      "media_url_max_file_size_mb must be non-negative and allowed_media_domains bare hostnames or "
      "IP addresses.",
      "give hostnames only (no scheme, path or port) and a size limit of 0 or "
      "more", _MEDIA_URL_CHECKS)
def media_url_options(ctx: LaunchContext) -> Iterator[Finding]:
    size = ctx.server.get("media_url_max_file_size_mb")
    if isinstance(size, int | float) and not isinstance(size, bool) and size < 0:
        yield Finding("server.media_url_max_file_size_mb", "SGLang 0.5.18 and later refuses: "
                      "'media_url_max_file_size_mb must be non-negative'")
    domains = ctx.server.get("allowed_media_domains")
    for domain in (
        domains if isinstance(domains, list) else [domains] if domains is not None else []
    ):
        problem = _media_domain_problem(domain)
        if problem:
            yield Finding("server.allowed_media_domains", "SGLang 0.5.18 and later refuses: "
                                                          f"'{problem}'")
            break


# DETERMINISTIC_ATTENTION_BACKEND_CHOICES per release, read from the wheels.
_DETERMINISTIC_BACKENDS = (
    (VersionRange(until="0.5.13"), ("flashinfer", "fa3", "triton")),
    (VersionRange(since="0.5.13", until="0.5.16"), ("flashinfer", "fa3", "triton", "ascend")),
    (
        VersionRange(since="0.5.16", until="0.5.19"),
        ("ascend", "fa3", "fa4", "flashinfer", "triton"),
    ),
    (VersionRange(since="0.5.19"), ("ascend", "fa3", "fa4", "flashinfer", "intel_xpu", "triton")),
)
_DETERMINISTIC_CHECK = VersionRange(since="0.5.3")
# 0.5.3.x refuses an unset attention backend; from 0.5.4 SGLang falls back to a deterministic one.
_UNSET_REFUSED = VersionRange(since="0.5.3", until="0.5.4")
# Until 0.5.15 the check runs after the attention backend is resolved (0.5.4.post1 and later resolve
# it in ServerArgs: equal prefill and decode backends, the default); from 0.5.15 it runs before the
# default, on what the profile and the model's own branch set (sgdeploy.sglang.rules.attention).
_DETERMINISTIC_AFTER_RESOLUTION = VersionRange(until="0.5.15")
# 0.5.7 to 0.5.14 resolve a missing attention backend to trtllm_mha on SM100/SM103 for MHA models
# without speculative decoding (_get_default_attn_backend), before the deterministic check reads it.
_DEFAULT_TRTLLM_MHA = VersionRange(since="0.5.7", until="0.5.15")


def _allowed_deterministic(ctx: LaunchContext) -> tuple[str, ...]:
    return next(names for versions, names in _DETERMINISTIC_BACKENDS if ctx.version in versions)


def _deterministic_reads(ctx: LaunchContext) -> tuple[str | None, bool]:
    """The attention_backend SGLang's deterministic check reads, and whether sgdeploy follows it
    exactly."""
    backends = resolve(ctx)
    value = (
        backends.attention if ctx.version in _DETERMINISTIC_AFTER_RESOLUTION else backends.branch
    )
    return value, backends.exact


def _given_backend(ctx: LaunchContext) -> bool:
    """The profile picks the backend the check reads (equal prefill and decode count until
    0.5.15)."""
    prefill, decode = ctx.get("prefill_attention_backend"), ctx.get("decode_attention_backend")
    return ctx.given("attention_backend") or (ctx.version in _DETERMINISTIC_AFTER_RESOLUTION
                                              and prefill is not None and prefill == decode)


def _picked_words(ctx: LaunchContext, backend: str) -> str:
    host = ctx.host
    where = f"{host.gpu} (SM{host.sm})" if host and host.gpu else "this GPU"
    return (f"SGLang {ctx.catalog.version} picks {backend} for {architecture(ctx) or 'this model'} "
            f"on {where}")


# _handle_deterministic_inference's DeepSeek / absorbed-MLA family (facts:
# deterministic_deepseek_archs, by architectures[0] alone, 0.5.4.post1+) takes a shorter list: fa3
# and triton, from 0.5.17 the radix-capable deterministic backends
# (RADIX_SUPPORTED_DETERMINISTIC_ATTENTION_BACKEND), fa4 only on SM100/SM110.
_DEEPSEEK_BACKENDS = (
    (VersionRange(until="0.5.17"), ("fa3", "triton")),
    (VersionRange(since="0.5.17"), ("ascend", "fa3", "fa4", "triton")),
)
_DEEPSEEK_FA4_SM = VersionRange(since="0.5.17")
_ABSORBED_MLA_WORDS = VersionRange(since="0.5.18")


def _deepseek_family(ctx: LaunchContext) -> Iterator[Finding]:
    family = fact("deterministic_deepseek_archs", ctx.version)
    if not family or architecture(ctx) not in family:
        return
    backends = resolve(ctx)
    # the check reads the backend after the deterministic fallback (before the default from 0.5.15)
    backend = (
        backends.attention
        if ctx.version in _DETERMINISTIC_AFTER_RESOLUTION
        else backends.before_default
    )
    if backend is None or not (backends.exact or _given_backend(ctx)):
        return
    models = "absorbed-MLA models" if ctx.version in _ABSORBED_MLA_WORDS else "DeepSeek models"
    allowed = next(names for versions, names in _DEEPSEEK_BACKENDS if ctx.version in versions)
    field = (
        "server.attention_backend"
        if ctx.given("attention_backend")
        else "server.enable_deterministic_inference"
    )
    if backend not in allowed:
        yield Finding(field, f"{architecture(ctx)} is one of the models SGLang "
                      f"{ctx.catalog.version} treats as {models} for deterministic inference: "
                      f"'Currently only {list(allowed)} attention backends are supported for "
                      f"deterministic inference with {models}. But you're using {backend}.'",
                      f"set attention_backend to one of {list(allowed)}")
    elif (
        backend == "fa4"
        and ctx.version in _DEEPSEEK_FA4_SM
        and ctx.host is not None
        and ctx.host.sm is not None
        and ctx.host.sm // 10 not in (10, 11)
    ):
        yield Finding(field, f"'Deterministic inference with {models} on the fa4 attention backend "
                      f"requires SM100/SM110' ({architecture(ctx)} on SM{ctx.host.sm}, SGLang "
                      "0.5.17 and later)",
                      "set attention_backend to fa3 or triton on this GPU")


@rule("SGD535", "deterministic-attention-backend", ERROR,
      "Deterministic inference works only with the attention backends SGLang lists for it in that "
      "release.",
      "set attention_backend to one of the backends the message lists", _DETERMINISTIC_CHECK)
def deterministic_attention_backend(ctx: LaunchContext) -> Iterator[Finding]:
    if not ctx.on("enable_deterministic_inference"):
        return
    backend, exact = _deterministic_reads(ctx)
    allowed = _allowed_deterministic(ctx)
    if backend is None:
        if exact and ctx.version in _UNSET_REFUSED:
            yield Finding("server.enable_deterministic_inference", "attention_backend is unset: "
                          f"'Currently only {list(allowed)} attention backends are supported for "
                          "deterministic inference.' (SGLang before 0.5.4)")
        return
    if backend in allowed:
        yield from _deepseek_family(ctx)
        return
    if _given_backend(ctx):
        where = (
            "attention_backend" if ctx.given("attention_backend") else "prefill_attention_backend"
        )
        yield Finding(server_field(where), f"Currently only {list(allowed)} attention backends are "
                      "supported for deterministic inference, but you explicitly specified "
                      f"'{backend}' (SGLang 0.5.3 and later)")
    elif exact:
        yield Finding("server.enable_deterministic_inference", f"{_picked_words(ctx, backend)} "
                      "when no attention backend is given, then refuses it: 'Currently only "
                      f"{list(allowed)} attention backends are supported for deterministic "
                      f"inference, but you explicitly specified '{backend}'.'",
                      "set attention_backend = \"triton\" (or another backend of the list)")


@rule("SGD536", "deterministic-default-backend", WARNING,
      "Deterministic inference without attention_backend on a Blackwell SM10x host, SGLang "
      "0.5.7-0.5.14: SGLang picks the backend itself, and for MHA models that is trtllm_mha, which "
      "the deterministic check refuses.",
      "set attention_backend explicitly to one of the deterministic backends (e.g. \"flashinfer\" "
      "or \"triton\")",
      _DEFAULT_TRTLLM_MHA)
def deterministic_default_backend(ctx: LaunchContext) -> Iterator[Finding]:
    if not ctx.on("enable_deterministic_inference") or _given_backend(ctx):
        return
    backends = resolve(ctx)
    sm10x = ctx.host is not None and ctx.host.sm is not None and ctx.host.sm // 10 == 10
    if not backends.exact and (sm10x or ctx.host is None or ctx.host.sm is None):
        yield Finding("server.enable_deterministic_inference", "attention_backend is unset: SGLang "
                      f"{ctx.catalog.version} resolves it by GPU, model and speculative settings "
                      "(trtllm_mha for MHA models on SM100, refused for deterministic inference: "
                      f"'Currently only {list(_allowed_deterministic(ctx))} attention backends are "
                      "supported for deterministic inference'); sgdeploy cannot follow that "
                      f"resolution here ({backends.why})")
