"""Options whose value is always a file (or folder) on the host that SGLang reads at start.

Read from the wheels' flag catalogs: the options whose help names a path or file SGLang opens,
never a name, a hub id or inline JSON. Excluded on purpose: `model_path`, `tokenizer_path`,
`speculative_draft_model_path`, `lora_paths`, `uno_lora_path` (hub ids), `chat_template` and
`completion_template` (built-in names), `decrypted_config_file` (a file of the model folder),
`deepep_config` (a path or inline JSON, read when the model loads), and the folders SGLang writes
(`crash_dump_folder`, `export_metrics_to_file_dir`, `download_dir`, ...).

A unit runs in `WorkingDirectory=` (`deploy.working_directory`; `/` when unset), so a relative
value names a file under it: SGD024 refuses one without a working directory, and at plan/apply
the facts round trip checks each path on the host as the unit's user (SGD713).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass

HOST_FILE_OPTIONS = (
    "ssl_keyfile", "ssl_certfile", "ssl_ca_certs",  # 0.5.10+ (SSL key file not found: ...)
    "quantization_param_path",  # the KV cache scaling factors (JSON)
    "speculative_adaptive_config",  # 0.5.11+
    "speculative_ngram_external_corpus_path",  # 0.5.11+
    "speculative_dspark_sps_table_path", "speculative_dspark_confidence_sts_path",  # 0.5.16+
    "lmcache_config_file",  # 0.5.13+
    "flexkv_config_file",  # 0.5.16+
    "pdmux_config_path",  # 0.5.3.post2+
    "ds_channel_config_path",
    "msprobe_dump_config",  # 0.5.11+
    "rl_quant_profile",  # 0.5.6.post2+
    "modelopt_checkpoint_restore_path",  # 0.5.3.post2+
    "kt_weight_path", "kt_amx_weight_path",
)
# A path or inline JSON: the value is JSON when it starts with "{" (after spaces), else a host file
# (0.5.2x check_watermark_server_args reads it at start: "failed to read watermark config JSON").
JSON_OR_FILE_OPTIONS = ("watermark_config",)


@dataclass(frozen=True)
class HostFile:
    """One option's file as the unit sees it."""

    key: str  # the [server] key
    value: str  # as the profile gives it
    path: str  # absolute, against the unit's working directory

    @property
    def relative(self) -> bool:
        return not self.value.startswith("/")


def host_files(server: Mapping[str, object], working_directory: str | None) -> list[HostFile]:
    """The host files a launch names, resolved the way the unit's process will open them."""
    base = working_directory or "/"
    found = []
    for key in HOST_FILE_OPTIONS:
        value = server.get(key)
        if isinstance(value, str) and value:
            found.append(HostFile(key, value, posixpath.normpath(posixpath.join(base, value))))
    for key in JSON_OR_FILE_OPTIONS:
        value = server.get(key)
        if isinstance(value, str) and value.strip() and not value.lstrip().startswith("{"):
            found.append(HostFile(key, value, posixpath.normpath(posixpath.join(base, value))))
    return found
