"""What each rule written as code rests on in SGLang's sources, release by release.

A Refusal table (`sites.py`) names its check site entry by entry. The other rules are code, and
their release ranges (the rule's `versions`, the version lines inside it such as `V1X` or
`TBO_NEEDS_A2A`) would be claims no test reads. Here each such rule lists its evidence:

- `Site(key, versions)`: a check site of catalogs/checks/ (a raise, an assert, a logged warning
  or a field SGLang overrides), present in exactly the releases `versions` names;
- `Flag(name, versions)`: a flag of the catalogs, present in exactly those releases;
- `Fact(name, versions)`: a fact of catalogs/facts.json (an allow-list, a GPU gate, a text of
  SGLang's sources outside the inventory), recorded in exactly those releases; `NEVER` for a
  text no release has (an environment variable no code reads);
- `ARGPARSE`: what each release's own parser accepts, read from its catalog (SGD01x);
- `Own(reason)`: sgdeploy's own check (the profile's shape, the unit, the inventory, the live
  host, or a policy stricter than SGLang); its docs entry says "sgdeploy's own".

tests/test_rule_claims.py holds every claim against the inventories, catalogs and facts, each
bound of a rule's `versions` against its claims, and its docs/rules.md entry against both. A
claim with `cited=False` is evidence the docs entry need not spell out release by release.
"""

from __future__ import annotations

from dataclasses import dataclass

from sgdeploy.sglang.rules.common import (
    LANGUAGE_ONLY_REFUSED,
    MIXED_CHUNK_BY_ALGORITHM,
    PIECEWISE_DEFAULT_ON,
    PP_SPEC_ON_PREFILL,
    TBO_NEEDS_A2A,
    V2X,
)
from sgdeploy.sglang.rules.memory import CHUNKED_PREFILL_DECODE_EXEMPT, MAMBA_SPEC_REFUSED
from sgdeploy.sglang.rules.model import DSA_KV_CHECK, MAMBA_STATE_CHECK
from sgdeploy.sglang.rules.parallelism import (
    CONTEXT_PARALLEL,
    CP_MOE_DP_MISMATCH,
    DP_LM_HEAD_RESET,
    FLASHINFER_A2A_RUNNERS,
    FLASHINFER_A2A_TOPOLOGY,
    MOE_DENSE_TP_SIZE_ALLOWS_TP,
    PREFILL_CP_STRATEGY,
)
from sgdeploy.sglang.rules.speculative import (
    SPEC_V2_ENV_DEFAULT_ON,
    SPEC_V2_ENV_READ,
    SPEC_V2_REMOVAL_NOTICE,
)
from sgdeploy.sglang.versions import ALL_VERSIONS, VersionRange


@dataclass(frozen=True)
class Site:
    key: str
    versions: VersionRange = ALL_VERSIONS
    cited: bool = True


@dataclass(frozen=True)
class Flag:
    name: str
    versions: VersionRange = ALL_VERSIONS
    cited: bool = True


@dataclass(frozen=True)
class Fact:
    name: str
    versions: VersionRange | None = ALL_VERSIONS  # None: no release has it
    cited: bool = True


@dataclass(frozen=True)
class Own:
    reason: str


@dataclass(frozen=True)
class Argparse:
    """The release's own argparse, as its catalog records it (every bundled release)."""


Claim = Site | Flag | Fact | Own | Argparse
ARGPARSE = Argparse()
NEVER = None


def _since(version: str) -> VersionRange:
    return VersionRange(since=version)


def _range(since: str | None, until: str | None) -> VersionRange:
    return VersionRange(since=since, until=until)


_FORMAT = Own("the profile's and inventory's own format: the file never reaches SGLang")
_HOST = Own("a preflight check of the live host, before anything changes")
_UNIT = Own("what a systemd unit and a root-only secrets file can carry")
_POD = Own("what a Kubernetes pod of `sgdeploy export` has and can carry (docs/kubernetes.md)")
_FLASHINFER_RUNNERS = dict((names, versions) for versions, names in FLASHINFER_A2A_RUNNERS)

CLAIMS: dict[str, tuple[Claim, ...]] = {
    # ------------------------------------------------------------------ files, flags, values
    "SGD001": (_FORMAT,),
    "SGD002": (_FORMAT,),
    "SGD003": (_FORMAT,),
    "SGD004": (_FORMAT,),
    "SGD005": (_FORMAT,),
    "SGD010": (ARGPARSE,),
    "SGD011": (
        ARGPARSE,
        Fact("option:mamba_scheduler_strategy", _range("0.5.14", "0.5.20")),
        Fact("option:enable_expert_distribution_metrics", _range("0.5.18", "0.5.20")),
        Fact("option:enforce_piecewise_cuda_graph", _range("0.5.14", "0.5.20")),
    ),
    "SGD012": (ARGPARSE,),
    "SGD013": (ARGPARSE,),
    "SGD014": (ARGPARSE,),
    "SGD015": (
        ARGPARSE,
        Site("DeprecatedAction.__call__: {}", _range("0.5.3", "0.5.4.post1")),
        Fact("option:stream_output", _range("0.5.10", "0.5.20")),
        Fact("option:enable_piecewise_cuda_graph", _range("0.5.10", "0.5.14")),
    ),
    "SGD016": (ARGPARSE, Flag("model_path", cited=False)),
    "SGD017": (ARGPARSE, Flag("disable_piecewise_cuda_graph", _range("0.5.10", "0.5.14"))),
    "SGD020": (_UNIT,),
    "SGD029": (_UNIT,),
    "SGD021": (
        _UNIT,
        Fact("source:api_key_env", NEVER, cited=False),
        Flag("config", _since("0.5.3")),
    ),
    "SGD022": (
        _UNIT,
        Flag("config", _since("0.5.3")),
        Fact("source:config_file_yaml_suffix", _since("0.5.3")),
    ),
    "SGD023": (_UNIT, Fact("source:api_key_env", NEVER, cited=False)),
    "SGD024": (
        Own(
            "a policy: the unit's working directory is / unless deploy.working_directory "
            "says otherwise, so a relative path names a file under /; SGLang only fails "
            "when it opens it"
        ),
        Flag("ssl_keyfile", _since("0.5.10"), cited=False),
    ),
    **{
        rule_id: (
            Own(
                'a policy of the unit sgdeploy renders for deploy.hardening = "strict" '
                "(docs/hardening.md); SGLang itself has no "
                "sandbox"
            ),
        )
        for rule_id in ("SGD025", "SGD026", "SGD027")
    },
    "SGD030": (_FORMAT,),
    "SGD031": (_FORMAT,),
    "SGD032": (Own("no bundled catalog: SGLang on the host decides (SGD711)"),),
    "SGD033": (_FORMAT,),
    "SGD034": (_FORMAT,),
    "SGD035": (_FORMAT,),
    "SGD036": (_FORMAT,),
    # ------------------------------------------------------------------ parallelism
    "SGD101": (
        Own("SGLang's argument checks count no GPUs: a worker without one fails when it starts"),
    ),
    "SGD102": (Own("the unit reserves the GPUs of deploy.gpus: SGLang uses the ones it needs"),),
    "SGD103": (Own("CUDA_VISIBLE_DEVICES in the unit: SGLang sees only the GPUs it names"),),
    "SGD104": (
        Site("check_server_args: tp_size must be divisible by number of nodes", cited=False),
    ),
    "SGD105": (
        Own("SGLang checks no rendezvous address: every node waits on its own loopback"),
        Flag("dist_init_addr", cited=False),
    ),
    "SGD106": (
        Own("a policy stricter than SGLang, which accepts any node_rank"),
        Flag("node_rank", cited=False),
    ),
    "SGD107": (
        Site(
            "check_server_args: multi-node data parallel is not supported unless dp attention!",
            _range(None, "0.5.22"),
        ),
        Site(
            "check_server_args: multi-node data-parallel replicas are not supported; use "
            "attention DP (--attn-dp-size) across nodes",
            _since("0.5.22"),
        ),
    ),
    "SGD108": (
        Site(
            "ServerArgs.__post_init__: Please enable dp attention when setting enable_dp_lm_head.",
            _range(None, "0.5.3"),
            cited=False,
        ),
        Site(
            "handle_data_parallelism: Please enable dp attention when setting enable_dp_lm_head.",
            _range("0.5.3", "0.5.15"),
            cited=False,
        ),
        Site(
            "dp_lm_head_validation: Please enable dp attention when setting enable_dp_lm_head.",
            _range("0.5.15", "0.5.22"),
        ),
        Site(
            "dp_lm_head_validation: --enable-dp-lm-head requires attention DP (--attn-dp-size).",
            _since("0.5.22"),
        ),
        Flag("attn_dp_size", _since("0.5.22")),
    ),
    "SGD109": (
        Own("one node per host of deploy.host's group, as sgdeploy deploys a multi-node launch"),
    ),
    "SGD110": (Own("sgdeploy numbers node_rank from the group's order"),),
    "SGD111": (
        Site(
            "handle_data_parallelism: enable_dp_lm_head",
            _range(DP_LM_HEAD_RESET.since, "0.5.15"),
            cited=False,
        ),
        Site("data_parallelism_defaults: enable_dp_lm_head", _since("0.5.15"), cited=False),
        Flag("attn_dp_size", _since("0.5.22")),
    ),
    "SGD112": (
        Site("ServerArgs.__post_init__: assert ep_size > 1", _range(None, "0.5.3"), cited=False),
        Site(
            "handle_eplb_and_dispatch: assert ep_size > 1", _range("0.5.3", "0.5.15"), cited=False
        ),
        Site(
            "handle_eplb_and_dispatch: assert _resolved().ep_size > 1",
            _range("0.5.15", "0.5.19"),
            cited=False,
        ),
        Site(
            "handle_eplb_and_dispatch: assert resolved_view(server_args).ep_size > 1",
            _since("0.5.19"),
            cited=False,
        ),
    ),
    "SGD113": (
        Site(
            "ServerArgs.__post_init__: assert tp_size % dp_size == 0",
            _range(None, "0.5.3"),
            cited=False,
        ),
        Site(
            "handle_data_parallelism: assert tp_size % dp_size == 0",
            _range("0.5.3", "0.5.22"),
            cited=False,
        ),
        Site("handle_data_parallelism: assert tp_size % attn_dp_size == 0", _since("0.5.22")),
    ),
    "SGD114": (
        Site(
            "handle_context_parallelism: tp_size must be divisible by attn_cp_size",
            CONTEXT_PARALLEL,
        ),
        Site(
            "handle_context_parallelism: tp_size must be divisible by dp_size * attn_cp_size",
            _range(CONTEXT_PARALLEL.since, "0.5.22"),
        ),
        Site(
            "handle_context_parallelism: tp_size must be divisible by moe_dp_size", CONTEXT_PARALLEL
        ),
        Site(
            "handle_context_parallelism: attn_cp_size != moe_dp_size is only supported "
            "when moe_dp_size == 1",
            CP_MOE_DP_MISMATCH,
        ),
        Site(
            "handle_context_parallelism: --cp-strategy must be set when "
            "--enable-prefill-cp is enabled.",
            PREFILL_CP_STRATEGY,
        ),
        Site(
            "handle_context_parallelism: tp_size must be divisible by attn_dp_size * attn_cp_size",
            _since("0.5.22"),
        ),
    ),
    "SGD115": (
        Site(
            "handle_a2a_moe: Flashinfer MoE A2A is only supported with flashinfer_cutlass "
            "moe runner backend",
            _range("0.5.9", _FLASHINFER_RUNNERS[("flashinfer_cutlass",)].until),
            cited=False,
        ),
        Site(
            "handle_a2a_moe: Flashinfer MoE A2A is only supported with dp_size == tp_size "
            "and --enable-dp-attention",
            _range(FLASHINFER_A2A_TOPOLOGY.since, "0.5.22"),
        ),
        Site(
            "handle_a2a_moe: Flashinfer MoE A2A is only supported with flashinfer_cutlass "
            "or flashinfer_cutedsl moe runner backend",
            _FLASHINFER_RUNNERS[("flashinfer_cutlass", "flashinfer_cutedsl")],
        ),
        Site(
            "handle_a2a_moe: Flashinfer MoE A2A is only supported with flashinfer_cutlass, "
            "flashinfer_cutedsl or flashinfer_trtllm_routed moe runner backend",
            _FLASHINFER_RUNNERS[
                ("flashinfer_cutlass", "flashinfer_cutedsl", "flashinfer_trtllm_routed")
            ],
        ),
        Site(
            "handle_a2a_moe: FlashInfer MoE A2A is supported with flashinfer_cutlass, "
            "flashinfer_cutedsl, flashinfer_trtllm, flashinfer_trtllm_routed, or "
            "deep_gemm.",
            _FLASHINFER_RUNNERS[
                (
                    "flashinfer_cutlass",
                    "flashinfer_cutedsl",
                    "flashinfer_trtllm",
                    "flashinfer_trtllm_routed",
                    "deep_gemm",
                )
            ],
        ),
        Site(
            "handle_a2a_moe: Flashinfer MoE A2A is only supported with --attn-dp-size "
            "equal to --tp-size",
            _range("0.5.22", "0.5.23"),
        ),
        Site(
            "handle_a2a_moe: Flashinfer MoE A2A requires --attn-dp-size equal to "
            "--tp-size, except for Muse Spark TP4/EP4 or TP8/EP8 prefill sequence "
            "parallelism.",
            _since("0.5.23"),
        ),
    ),
    "SGD116": (
        Site(
            "dp_lm_head_validation: Please enable dp attention when setting "
            "enable_tp_lm_head_all_to_all.",
            _range("0.5.18", "0.5.22"),
        ),
        Site(
            "dp_lm_head_validation: --enable-tp-lm-head-all-to-all uses a TP-sharded LM "
            "head and is incompatible with --enable-dp-lm-head.",
            _since("0.5.18"),
        ),
        Site(
            "dp_lm_head_validation: --enable-tp-lm-head-all-to-all currently requires "
            "attn_cp_size == 1, got {}.",
            _since("0.5.18"),
        ),
        Site(
            "dp_lm_head_validation: --enable-tp-lm-head-all-to-all requires attention DP "
            "(--attn-dp-size).",
            _since("0.5.22"),
        ),
    ),
    # ------------------------------------------------------------------ speculative decoding
    "SGD201": (
        ARGPARSE,
        Fact("source:unknown_speculative_algorithm", _since("0.5.8"), cited=False),
        Flag("speculative_algorithm", cited=False),
    ),
    "SGD202": (
        Site(
            "ServerArgs.__post_init__: assert speculative_eagle_topk is None and "
            "speculative_num_draft_tokens is None",
            _range(None, "0.5.3"),
            cited=False,
        ),
        Site(
            "handle_speculative_decoding: assert speculative_eagle_topk is None and "
            "speculative_num_draft_tokens is None",
            _range("0.5.3", "0.5.13"),
            cited=False,
        ),
        Site(
            "handle_eagle_family: assert speculative_eagle_topk is None and "
            "speculative_num_draft_tokens is None",
            _since("0.5.13"),
            cited=False,
        ),
    ),
    "SGD203": (
        Site(
            "ServerArgs.__post_init__: speculative_num_draft_tokens is adjusted to "
            "speculative_num_steps + 1 when speculative_eagle_topk == "
            "1",
            _range(None, "0.5.3"),
            cited=False,
        ),
        Site(
            "handle_speculative_decoding: speculative_num_draft_tokens is adjusted to "
            "speculative_num_steps + 1 when speculative_eagle_topk == "
            "1",
            _range("0.5.3", "0.5.13"),
            cited=False,
        ),
        Site(
            "handle_eagle_family: speculative_num_draft_tokens is adjusted to "
            "speculative_num_steps + 1 when speculative_eagle_topk == "
            "1",
            _since("0.5.13"),
            cited=False,
        ),
    ),
    "SGD204": (
        Fact("source:spec_v2_env", SPEC_V2_ENV_READ),
        Site(
            "handle_speculative_decoding: SGLANG_ENABLE_SPEC_V2 has been removed: "
            "speculative decoding always runs the V2 worker. Use "
            "--disable-overlap-schedule to select the non-overlap (synchronous) "
            "path.",
            SPEC_V2_REMOVAL_NOTICE,
        ),
    ),
    "SGD205": (
        Fact("source:spec_v2_env", SPEC_V2_ENV_READ),
        Site(
            "handle_speculative_decoding: Spec v1 is used for eagle/eagle3/standalone "
            "speculative decoding because "
            "%s.",
            _range(SPEC_V2_ENV_DEFAULT_ON.since, "0.5.13"),
        ),
        Site(
            "handle_speculative_decoding: Spec v2 currently only supports topk = 1 for "
            "speculative decoding.",
            _range("0.5.7", SPEC_V2_ENV_DEFAULT_ON.since),
        ),
    ),
    "SGD206": (
        Site(
            "check_server_args: Pipeline parallelism is not compatible with overlap "
            "schedule, speculative decoding, mixed chunked "
            "prefill.",
            _range(None, "0.5.11"),
            cited=False,
        ),
        Site(
            "check_server_args: Pipeline parallelism is not compatible with overlap "
            "schedule, speculative decoding",
            _range("0.5.11", PP_SPEC_ON_PREFILL.since),
        ),
        Site(
            "check_pipeline_parallel_compat: PP + speculative decoding (MTP) is only "
            "supported on prefill nodes "
            "(disaggregation-mode=prefill)",
            PP_SPEC_ON_PREFILL,
        ),
    ),
    "SGD207": (
        Site(
            "ServerArgs.__post_init__: trtllm_mha backend only supports topk = 1 for "
            "speculative decoding.",
            _range(None, "0.5.3"),
            cited=False,
        ),
        Site(
            "handle_speculative_decoding: trtllm_mha backend only supports topk = 1 for "
            "speculative decoding.",
            _range("0.5.3", "0.5.13"),
            cited=False,
        ),
        Site(
            "handle_eagle_family: trtllm_mha backend only supports topk = 1 for "
            "speculative decoding.",
            _since("0.5.13"),
            cited=False,
        ),
    ),
    "SGD208": (
        Site(
            "handle_speculative_decoding: DFLASH speculative decoding requires setting "
            "--speculative-draft-model-path.",
            _range("0.5.11", "0.5.13"),
        ),
        Site(
            "handle_dflash: DFLASH speculative decoding requires setting "
            "--speculative-draft-model-path.",
            _since("0.5.13"),
            cited=False,
        ),
    ),
    "SGD209": (
        Site(
            "ServerArgs.__post_init__: Currently standalone speculative decoding does not "
            "support dp attention.",
            _range("0.5.2", "0.5.3"),
        ),
        Site(
            "handle_speculative_decoding: Currently ngram speculative decoding does not "
            "support dp attention.",
            _range("0.5.3", "0.5.13"),
            cited=False,
        ),
        Site(
            "handle_eagle_family: Currently standalone speculative decoding does not "
            "support dp attention.",
            _since("0.5.13"),
            cited=False,
        ),
        Flag("attn_dp_size", _since("0.5.22")),
    ),
    "SGD210": (Fact("paged_topk_backends", _since("0.5.2")),),
    "SGD211": (
        Site(
            "handle_speculative_decoding: Mixed chunked prefill is disabled because of "
            "using eagle speculative decoding.",
            _range("0.5.3", "0.5.13"),
            cited=False,
        ),
        Site(
            "handle_eagle_family: Mixed chunked prefill is disabled because of using eagle "
            "speculative "
            "decoding.",
            _range("0.5.13", MIXED_CHUNK_BY_ALGORITHM.since),
            cited=False,
        ),
        Site(
            "handle_eagle_family: Mixed chunked prefill is disabled: %s speculative "
            "decoding does not support it.",
            MIXED_CHUNK_BY_ALGORITHM,
        ),
        Fact("mixed_chunk_speculative_algorithms", MIXED_CHUNK_BY_ALGORITHM),
    ),
    "SGD212": (
        Site(
            "handle_speculative_decoding: Max running requests is reset to 48 for "
            "speculative decoding.",
            _range("0.5.4", "0.5.4.post1"),
        ),
        Site(
            "handle_eagle_family: Max running requests is reset to 48 for speculative "
            "decoding. You can override this by explicitly setting "
            "--max-running-requests.",
            _since("0.5.13"),
            cited=False,
        ),
    ),
    "SGD213": (
        Site(
            "handle_speculative_decoding: --speculative-skip-dp-mlp-sync is only supported "
            "with speculative_algorithm == EAGLE, got {}.",
            _range("0.5.11", "0.5.23"),
        ),
    ),
    "SGD214": (
        Site(
            "handle_speculative_decoding: Currently speculative MoE runner backend cannot "
            "be flashinfer_trtllm for risk in some draft "
            "models.",
            _range("0.5.7", "0.5.10"),
        ),
        Site(
            "handle_speculative_decoding: Currently speculative MoE runner backend doesn't "
            "support flashinfer_trtllm, please use triton or auto backend for speculative "
            "moe runner instead.",
            _range("0.5.10", "0.5.12"),
        ),
    ),
    # ------------------------------------------------------------------ disaggregation
    "SGD301": (
        Site(
            "handle_encoder_disaggregation: requires at least one encoder urls to be set "
            "via --encoder-urls",
            _range("0.5.7", LANGUAGE_ONLY_REFUSED.until),
        ),
    ),
    "SGD302": (
        Site(
            "handle_encoder_disaggregation: Cannot set --encoder-only and --language-only together",
            _since("0.5.7"),
        ),
    ),
    "SGD303": (
        Fact("encoder_disagg_archs", _since("0.5.10")),
        Flag("encoder_only", _since("0.5.7")),
    ),
    "SGD304": (
        Site(
            "handle_encoder_disaggregation: --enable-prefix-mm-cache requires "
            "--encoder-only to be enabled",
            _since("0.5.7"),
        ),
    ),
    "SGD305": (
        Site(
            "handle_encoder_disaggregation: Cannot set --encoder-only and "
            "--disaggregation-mode prefill/decode together",
            _since("0.5.7"),
        ),
    ),
    "SGD306": (
        Own("SGLang counts the URLs only: an empty one passes, and multimodal requests fail"),
        Flag("encoder_urls", _since("0.5.7")),
        Fact("source:encoder_url_receive", _since("0.5.7")),
    ),
    "SGD307": (
        Site(
            "check_server_args: PD-Multiplexing is only supported with pipeline "
            "parallelism disabled (pp_size=1).",
            _since("0.5.3.post2"),
        ),
        Site(
            "check_server_args: PD-Multiplexing is not compatible with overlap schedule.",
            _since("0.5.3.post2"),
            cited=False,
        ),
    ),
    # ------------------------------------------------------------------ GPU generation
    "SGD401": (
        Own(
            "SGLang checks no GPU generation for NVLS: it exports NCCL_NVLS_ENABLE and NCCL "
            "falls back"
        ),
        Fact("source:nccl_nvls_env", cited=False),
    ),
    "SGD402": (Fact("sm_gate:allreduce_fusion", V2X),),
    "SGD403": (Fact("sm_gate:allreduce_fusion", V2X),),
    "SGD404": (
        Fact("sm_gate:trtllm_mla", cited=False),
        Fact("sm_gate:megamoe_a2a", _since("0.5.21")),
    ),
    "SGD409": (
        Own(
            "a note where sgdeploy cannot follow SGLang's own pick of the attention "
            "backends (sgdeploy.sglang.rules.attention); the checks that read the pick are "
            "then not made"
        ),
    ),
    "SGD405": (
        Site(
            "handle_multi_item_scoring: Multi-item scoring requires flashinfer attention "
            "backend for custom attention mask support. Please set --attention-backend "
            "flashinfer when using --enable-mis. Current backends: prefill={}, "
            "decode={}",
            _since("0.5.11"),
        ),
        Flag("enable_mis", _since("0.5.11")),
    ),
    # ------------------------------------------------------------------ memory, scheduling, serving
    "SGD501": (
        Own("a policy: SGLang checks no range, and fails when it sizes the KV cache"),
        Flag("mem_fraction_static", cited=False),
    ),
    "SGD502": (
        Site("check_server_args: chunked_prefill_size must be divisible by page_size", cited=False),
        Fact("source:chunked_prefill_decode_exempt", CHUNKED_PREFILL_DECODE_EXEMPT),
    ),
    "SGD503": (
        Site(
            "check_server_args: served_model_name cannot contain a colon (':') character. "
            "The colon is reserved for the 'model:adapter' syntax used in LoRA adapter "
            "specification. Invalid value: '{}'",
            _since("0.5.5.post1"),
        ),
    ),
    "SGD504": (
        Site("check_server_args: --grpc-port ({}) must differ from --port ({})", _since("0.5.16")),
        Flag("grpc_port", _since("0.5.16")),
    ),
    "SGD505": (
        Site(
            "check_server_args: When enabling two batch overlap, moe_a2a_backend cannot be 'none'.",
            TBO_NEEDS_A2A,
        ),
        Site(
            "check_two_batch_overlap: When enabling two batch overlap without an EP a2a "
            "backend (moe_a2a_backend='none'), --enable-dp-attention is required "
            "(DeepSeek-V4 non-EP DP TBO path).",
            _range(TBO_NEEDS_A2A.until, "0.5.22"),
        ),
        Site(
            "check_two_batch_overlap: When enabling two batch overlap without an EP a2a "
            "backend (moe_a2a_backend='none'), attention DP (--attn-dp-size) is required "
            "(DeepSeek-V4 non-EP DP TBO path).",
            _since("0.5.22"),
        ),
        Flag("enable_two_batch_overlap", cited=False),
    ),
    "SGD506": (
        Site("check_server_args: base_gpu_id must be non-negative", cited=False),
        Site("check_server_args: gpu_id_step must be positive", cited=False),
        Site("check_server_args: Tokenizer worker num must >= 1", _since("0.5.2")),
        Site("check_server_args: Detokenizer worker num must >= 1", _since("0.5.12")),
        Site(
            "handle_data_parallelism: --attn-dp-size must be positive (got {}).", _since("0.5.22")
        ),
        Own(
            "a policy for the sizes SGLang does not check (tp_size, pp_size, dp_size, "
            "nnodes, page_size): they fail when the workers start"
        ),
    ),
    "SGD507": (
        Site(
            "check_server_args: moe_dense_tp_size only support 1 and None currently",
            _range(None, MOE_DENSE_TP_SIZE_ALLOWS_TP.since),
        ),
        Site(
            "check_server_args: moe_dense_tp_size only supports None, 1, or tp_size currently",
            MOE_DENSE_TP_SIZE_ALLOWS_TP,
        ),
    ),
    "SGD508": (
        Site(
            "check_server_args: To use priority scheduling, schedule_policy must be 'fcfs' "
            "or 'lof'. '{}' is not supported.",
            _since("0.5.3"),
        ),
        Site(
            "check_server_args: --retraction-policy priority requires --enable-priority-scheduling",
            _since("0.5.16"),
        ),
    ),
    "SGD509": (
        Site(
            "handle_mamba_radix_cache: Speculative decoding for {} is not compatible with "
            "radix cache when using --mamba-scheduler-strategy no_buffer.To use radix "
            "cache with speculative decoding, please use --mamba-scheduler-strategy "
            "extra_buffer and set SGLANG_ENABLE_SPEC_V2=1.",
            MAMBA_SPEC_REFUSED,
        ),
        Fact("mamba_radix_cache_archs", _range("0.5.9", "0.5.15"), cited=False),
    ),
    "SGD510": (
        Site(
            "handle_mamba_radix_cache: mamba_track_interval {} must be divisible by page_size {}",
            _range("0.5.9", V2X.since),
        ),
        Site("validate_mamba_extra_buffer: assert mamba_track_interval % page_size == 0", V2X),
        Site(
            "handle_mamba_radix_cache: mamba extra_buffer is not compatible with "
            "--disable-radix-cache Overlap scheduling is already supported with no_buffer "
            "+ disable_radix_cache. Please use --mamba-scheduler-strategy no_buffer "
            "instead.",
            _range("0.5.10", "0.5.13"),
            cited=False,
        ),
        Fact("mamba_extra_buffer_archs", V2X),
    ),
    "SGD535": (
        Site(
            "handle_deterministic_inference: Currently only {} attention backends are "
            "supported for deterministic inference.",
            _range("0.5.3", "0.5.4"),
        ),
        Site(
            "deterministic_attention_backend: Currently only {} attention backends are "
            "supported for deterministic inference, but you explicitly specified "
            "'{}'.",
            _since("0.5.15"),
        ),
        # the DeepSeek / absorbed-MLA family's own list, by architectures[0]
        Site(
            "handle_deterministic_inference: Currently only fa3 and triton attention "
            "backends are supported for deterministic inference with DeepSeek models. But "
            "you're using {}.",
            _range("0.5.4.post1", "0.5.4.post2"),
        ),
        Site(
            "handle_deterministic_inference: Currently only {} attention backends are "
            "supported for deterministic inference with DeepSeek models. But you're using "
            "{}.",
            _range("0.5.4.post2", "0.5.18"),
        ),
        Site(
            "handle_deterministic_inference: Currently only {} attention backends are "
            "supported for deterministic inference with absorbed-MLA models. But you're "
            "using {}.",
            _since("0.5.18"),
        ),
        Site(
            "handle_deterministic_inference: Deterministic inference with DeepSeek models "
            "on the fa4 attention backend requires SM100/SM110: it runs absorbed MLA, "
            "whose qv argument flash_attn.cute only implements on those "
            "archs.",
            _range("0.5.17", "0.5.18"),
        ),
        Site(
            "handle_deterministic_inference: Deterministic inference with absorbed-MLA "
            "models on the fa4 attention backend requires SM100/SM110: it runs absorbed "
            "MLA, whose qv argument flash_attn.cute only implements on those "
            "archs.",
            _since("0.5.18"),
        ),
        Fact("deterministic_deepseek_archs", _since("0.5.4.post1")),
    ),
    "SGD536": (
        Site(
            "handle_deterministic_inference: Currently only {} attention backends are "
            "supported for deterministic inference, but you explicitly specified "
            "'{}'.",
            _range("0.5.4", "0.5.15"),
        ),
        Fact("source:trtllm_mha_default_sm10x", _since("0.5.7")),
    ),
    "SGD537": (
        Own("a policy: SGLang accepts any integer port and fails or binds a random port"),
        Flag("port", cited=False),
    ),
    "SGD538": (
        Fact("source:media_url_domains", _since("0.5.18")),
        Flag("allowed_media_domains", _since("0.5.18")),
    ),
    # ---------------------------------------------------------- the weight-cache daemon (load time)
    "SGD541": (
        Fact("source:weight_cache_quant_allowlist", _since("0.5.17")),
        Flag("weight_cache_mode", _since("0.5.17"), cited=False),
    ),
    "SGD542": (
        Fact("source:weight_cache_expandable_segments", _since("0.5.17")),
        Fact("source:weight_cache_timeout_positive", _since("0.5.22")),
        Flag("weight_cache_timeout", _since("0.5.17"), cited=False),
    ),
    "SGD543": (
        Fact("source:weight_cache_config_mismatch", _since("0.5.17")),
        Fact("source:weight_cache_daemon_mode_no_fallback", _since("0.5.17"), cited=False),
        Fact("source:weight_cache_socket_template_env", _since("0.5.19")),
        Fact("source:weight_cache_device_uuid_placeholder", _since("0.5.19"), cited=False),
        Flag("weight_cache_socket", _since("0.5.17"), cited=False),
    ),
    "SGD544": (
        Fact("source:weight_cache_cpu_backup_off", _since("0.5.17")),
        Flag("weight_cache_socket", _since("0.5.17"), cited=False),
        Flag("weight_cache_timeout", _since("0.5.17"), cited=False),
        Flag("enable_weights_cpu_backup", _since("0.5.3"), cited=False),
    ),
    "SGD545": (
        Own(
            'a unit sgdeploy renders for deploy.hardening = "strict" has PrivateTmp=yes '
            "(docs/hardening.md)"
        ),
        Fact("source:weight_cache_socket_not_found", _since("0.5.17")),
    ),
    "SGD546": (
        Own(
            "the out-of-band daemon of 0.5.17 and 0.5.18 parses a fixed set of flags of its "
            "own (sglang/srt/weight_cache/daemon.py __main__); from 0.5.19 it takes the "
            "server's argv"
        ),
        Flag("weight_cache_mode", _since("0.5.17"), cited=False),
        # the release that also moved the sockets to the GPU-UUID templates
        Fact("source:weight_cache_socket_template_env", _since("0.5.19"), cited=False),
    ),
    # ------------------------------------------------------------------ the model's config.json
    "SGD511": (
        Own(
            "SGLang checks no size: it runs out of memory loading the weights or sizing the "
            "KV cache"
        ),
    ),
    "SGD580": (Own("a note on the checks sgdeploy skipped without config.json"),),
    "SGD581": (Fact("source:context_length_above_derived", cited=False),),
    "SGD582": (Fact("source:ensure_divisibility", cited=False),),
    "SGD583": (
        Site(
            "handle_model_specific_adjustments: DeepSeek DSA only supports bf16/bfloat16 "
            "or fp8_e4m3 kv_cache_dtype",
            _range(DSA_KV_CHECK.since, "0.5.9"),
        ),
        Site(
            "dsa_kv_cache_dtype_default: DeepSeek DSA only supports bf16/bfloat16 or "
            "fp8_e4m3 kv_cache_dtype",
            _since("0.5.15"),
            cited=False,
        ),
    ),
    "SGD584": (
        Site(
            "handle_mamba_radix_cache: --mamba-radix-cache-strategy {} needs mamba state, got {}.",
            MAMBA_STATE_CHECK,
        ),
    ),
    "SGD585": (Fact("source:quantization_differs", cited=False),),
    "SGD586": (Fact("source:quantization_differs", cited=False),),
    "SGD588": (Fact("source:json_model_override_args", cited=False),),
    "SGD593": (Fact("quantization_methods"),),
    "SGD589": (
        Flag("dllm_algorithm", _since("0.5.6")),
        Site(
            "handle_dllm_inference: Setting page size to {} for diffusion LLM inference",
            _range("0.5.10", "0.5.15"),
        ),
    ),
    "SGD590": (
        Flag("quantize_and_serve", _since("0.5.4")),
        Fact("source:quantize_and_serve_disabled", _since("0.5.4"), cited=False),
    ),
    # ------------------------------------------------------------------ CUDA graphs
    "SGD601": (
        Flag("enforce_piecewise_cuda_graph", PIECEWISE_DEFAULT_ON),
        Flag("cuda_graph_backend_prefill", V2X),
    ),
    "SGD602": (
        Flag("enforce_piecewise_cuda_graph", PIECEWISE_DEFAULT_ON),
        Site(
            "handle_piecewise_cuda_graph: disable_piecewise_cuda_graph",
            PIECEWISE_DEFAULT_ON,
            cited=False,
        ),
    ),
    "SGD603": (
        Fact("piecewise_prefill_graph_archs", V2X, cited=False),
        Fact("breakable_prefill_graph_archs", _since("0.5.16")),
        Flag("cuda_graph_backend_prefill", V2X),
    ),
    "SGD604": (
        Site(
            "ServerArgs.__post_init__: Pipeline parallelism is incompatible with overlap schedule.",
            _range(None, "0.5.3"),
            cited=False,
        ),
        Site(
            "handle_pipeline_parallelism: Pipeline parallelism is incompatible with "
            "overlap schedule.",
            _range("0.5.3", "0.5.15"),
            cited=False,
        ),
        Site(
            "pipeline_parallel_overlap_disable: Pipeline parallelism is incompatible with "
            "overlap schedule.",
            _since("0.5.15"),
            cited=False,
        ),
    ),
    # ------------------------------------------------------------------ the live host
    **{
        rule_id: (_HOST,)
        for rule_id in (
            "SGD701",
            "SGD702",
            "SGD703",
            "SGD704",
            "SGD705",
            "SGD706",
            "SGD707",
            "SGD708",
            "SGD709",
            "SGD710",
        )
    },
    "SGD711": (Own("SGLang's own parse, resolution and checks, run on the host"),),
    "SGD712": (_HOST,),
    "SGD713": (_HOST,),
    "SGD715": (_HOST,),
    # ------------------------------------------------------------------ a Kubernetes cluster
    **{rule_id: (_POD,) for rule_id in ("SGD801", "SGD802", "SGD803", "SGD804", "SGD805")},
}
