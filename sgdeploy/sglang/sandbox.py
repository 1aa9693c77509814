"""What a sandboxed SGLang server needs from its host: the folders it writes, the devices it opens.

`deploy.hardening = "strict"` renders a unit whose file system is read-only (systemd's
`ProtectSystem=strict`), whose home folders are hidden, and whose device list is closed. SGLang
still has to write its compile caches and whatever its flags point at, and to open the NVIDIA
device nodes; this module says which, from the launch alone, so that validation, `plan` and the
renderer agree.

Where the libraries of a SGLang server write when nothing is set (each under `$HOME`, which a
system user without a home folder does not have, except TorchInductor's, which `PrivateTmp=`
wipes at every restart): Triton `~/.triton/cache` (TRITON_CACHE_DIR), TorchInductor
`/tmp/torchinductor_USER` (TORCHINDUCTOR_CACHE_DIR), FlashInfer's JIT `~/.cache/flashinfer`
(FLASHINFER_WORKSPACE_BASE), DeepGEMM `~/.deep_gemm` (DG_JIT_CACHE_DIR), tvm-ffi and torch
extensions under `~/.cache`, the CUDA driver's PTX cache `~/.nv/ComputeCache` (CUDA_CACHE_PATH),
Hugging Face downloads `~/.cache/huggingface` (HF_HOME), outlines' disk cache `~/.cache/outlines`.
Pointing `HOME` and `XDG_CACHE_HOME` at the unit's own cache folder catches all of them, and the
folder outlives restarts, so compiled kernels are reused by the next start.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass

from sgdeploy.sglang.hostfiles import host_files

DEFAULT_SERVICE_USER = "sglang"

# Environment variables whose value is a folder the server (or a library it loads) writes to.
CACHE_ENV = (
    "HOME",
    "XDG_CACHE_HOME",
    "HF_HOME",
    "HF_HUB_CACHE",
    "HUGGINGFACE_HUB_CACHE",
    "TRANSFORMERS_CACHE",
    "TRITON_CACHE_DIR",
    "TRITON_HOME",
    "TORCHINDUCTOR_CACHE_DIR",
    "TORCH_EXTENSIONS_DIR",
    "DG_JIT_CACHE_DIR",
    "FLASHINFER_WORKSPACE_BASE",
    "CUDA_CACHE_PATH",
    "TMPDIR",
    "SGLANG_TORCH_PROFILER_DIR",
    "OUTLINES_CACHE_DIR",
    "VLLM_CACHE_ROOT",
)
# [server] options whose value is a folder or file SGLang writes (besides the `*_dir` and
# `*_folder` options, which all are).
WRITTEN_OPTIONS = (
    "download_dir", "file_storage_path", "modelopt_checkpoint_save_path", "modelopt_export_path",
)
_WRITTEN_SUFFIX = re.compile(r"_(dir|folder)$")

# /proc/devices groups of the NVIDIA driver: the GPUs and /dev/nvidiactl (major 195, named
# "nvidia-frontend", or "nvidia" by some driver builds), the unified memory nodes, the MIG
# capability nodes, NVLink and NVSwitch (HGX boards), and the IMEX channels (multi-node NVLink).
# systemd allows a whole group by name (`DeviceAllow=char-NAME`); a group the host's driver does
# not register allows nothing.
NVIDIA_DEVICE_GROUPS = ("nvidia-frontend", "nvidia", "nvidia-uvm", "nvidia-caps", "nvidia-nvlink",
                        "nvidia-nvswitch", "nvidia-caps-imex-channels")
# InfiniBand/RoCE for NCCL between nodes: the verbs nodes and the RDMA connection manager.
RDMA_DEVICE_GROUPS = ("infiniband_verbs",)
RDMA_DEVICE_PATHS = ("/dev/infiniband/rdma_cm",)

# Folders a service user cannot see under ProtectHome=; read-only is the most a unit can give.
HOME_ROOTS = ("/home", "/root", "/run/user")


def cache_directory(unit: str) -> str:
    """The unit's own cache folder (systemd's `CacheDirectory=sgdeploy/UNIT`)."""
    return f"/var/cache/sgdeploy/{unit}"


def cache_environment(unit: str) -> list[tuple[str, str]]:
    """The environment that sends every library's cache into the unit's cache folder."""
    base = cache_directory(unit)
    return [
        ("HOME", base),
        ("XDG_CACHE_HOME", base),
        ("TORCHINDUCTOR_CACHE_DIR", f"{base}/torchinductor"),
    ]


def inductor_cache_environment(unit: str, env: Mapping[str, str]) -> list[tuple[str, str]]:
    """A unit without the sandbox keeps the libraries' caches in its user's home, which outlives
    restarts, except TorchInductor's: its default, /tmp/torchinductor_USER, is gone after a reboot
    (and, in a weight-cache pair's private /tmp, with the daemon). The unit's cache folder keeps
    it; nothing when [env] names a folder itself."""
    if "TORCHINDUCTOR_CACHE_DIR" in env:
        return []
    return [("TORCHINDUCTOR_CACHE_DIR", f"{cache_directory(unit)}/torchinductor")]


@dataclass(frozen=True)
class WrittenPath:
    """A folder (or file) the launch writes: where the profile says so, and the path."""

    field: str  # dotted TOML key: server.download_dir, env.HF_HOME, deploy.writable_paths
    path: str


def written_paths(server: Mapping[str, object], env: Mapping[str, str]) -> list[WrittenPath]:
    """The absolute paths the launch's flags and environment make SGLang write."""
    found = []
    for key, value in server.items():
        if (key in WRITTEN_OPTIONS or _WRITTEN_SUFFIX.search(key)) and _absolute(value):
            found.append(WrittenPath(f"server.{key}", posixpath.normpath(str(value))))
    for key in CACHE_ENV:
        value = env.get(key)
        if _absolute(value):
            found.append(WrittenPath(f"env.{key}", posixpath.normpath(str(value))))
    return found


def read_paths(server: Mapping[str, object], python: str, working_directory: str | None,
               other_files: tuple[str | None, ...] = ()) -> list[str]:
    """The host paths a server reads: its interpreter, model and tokenizer folders, the files its
    flags name (sgdeploy.sglang.hostfiles), and `other_files` (secrets, environment file)."""
    paths = [python]
    for key in ("model_path", "tokenizer_path", "speculative_draft_model_path"):
        if _absolute(server.get(key)):
            paths.append(str(server[key]))
    paths.extend(f.path for f in host_files(server, working_directory))
    paths.extend(p for p in (working_directory, *other_files) if p)
    return paths


def under_home(path: str) -> str | None:
    """The home root `path` lies under (/home, /root, /run/user), or None."""
    return next((root for root in HOME_ROOTS if path == root or path.startswith(root + "/")), None)


def _absolute(value: object) -> bool:
    return isinstance(value, str) and value.startswith("/") and "\n" not in value
