"""GPU models by name as nvidia-smi or an inventory writes them: compute capability and memory.

SGLang's hardware checks compare compute capabilities (SM90+ for NVLS, FlashInfer all-reduce
fusion, FA3); an inventory may name only the GPU, and this table fills in the rest."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuModel:
    """A GPU model: compute capability and memory sizes (first is the usual one)."""

    name: str
    compute_capability: str
    memory_gib: tuple[int, ...]


def _models(*rows: tuple[str, str, tuple[int, ...]]) -> dict[str, GpuModel]:
    return {name: GpuModel(name, cc, mem) for name, cc, mem in rows}


# Keys are normalized names (see _normalize); the longest key that prefixes a name wins, so
# "H100 NVL" beats "H100" and "RTX 6000 ADA" beats the Turing "RTX 6000".
GPU_MODELS: dict[str, GpuModel] = _models(
    ("V100", "7.0", (32, 16)),
    ("T4", "7.5", (16,)),
    ("RTX 6000", "7.5", (24,)),
    ("RTX 8000", "7.5", (48,)),
    ("TITAN RTX", "7.5", (24,)),
    ("RTX 2080 TI", "7.5", (11,)),
    ("A100", "8.0", (80, 40)),
    ("A800", "8.0", (80, 40)),
    ("A30", "8.0", (24,)),
    ("A10", "8.6", (24,)),
    ("A10G", "8.6", (24,)),
    ("A16", "8.6", (16,)),
    ("A2", "8.6", (16,)),
    ("A40", "8.6", (48,)),
    ("RTX A4000", "8.6", (16,)),
    ("RTX A4500", "8.6", (20,)),
    ("RTX A5000", "8.6", (24,)),
    ("RTX A6000", "8.6", (48,)),
    ("RTX 3080", "8.6", (10, 12)),
    ("RTX 3090", "8.6", (24,)),
    ("RTX 3090 TI", "8.6", (24,)),
    ("L4", "8.9", (24,)),
    ("L20", "8.9", (48,)),
    ("L40", "8.9", (48,)),
    ("L40S", "8.9", (48,)),
    ("RTX 4000 ADA", "8.9", (20,)),
    ("RTX 5000 ADA", "8.9", (32,)),
    ("RTX 6000 ADA", "8.9", (48,)),
    ("RTX 4080", "8.9", (16,)),
    ("RTX 4090", "8.9", (24,)),
    ("H100", "9.0", (80, 94)),
    ("H100 NVL", "9.0", (94,)),
    ("H800", "9.0", (80,)),
    ("H20", "9.0", (96,)),
    ("H200", "9.0", (141,)),
    ("GH200", "9.0", (96, 144)),
    ("B200", "10.0", (180,)),
    ("GB200", "10.0", (186,)),
    ("B300", "10.3", (288,)),
    ("RTX 5090", "12.0", (32,)),
    ("RTX PRO 6000", "12.0", (96,)),
)

# Words that name a variant (board form, memory type, brand) rather than the chip.
_NOISE = re.compile(
    r"^(NVIDIA|GEFORCE|TESLA|QUADRO|SXM\d*|PCIE|HBM\d*E?|\d+GB|GENERATION|"
    r"EDITION|SERVER|WORKSTATION|MAX-Q|BLACKWELL)$"
)
_ALIASES = {"A6000": "RTX A6000", "A5000": "RTX A5000", "A4000": "RTX A4000"}
_SIZE = re.compile(r"(\d+)\s*GB", re.IGNORECASE)


def _normalize(name: str) -> str:
    words = re.split(r"[\s_-]+", name.upper())
    kept = " ".join(w for w in words if w and not _NOISE.match(w))
    return next(
        (v + kept[len(k) :] for k, v in _ALIASES.items() if (kept + " ").startswith(k + " ")),
        kept,
    )


def gpu_model_for(name: str) -> GpuModel | None:
    """The table entry for a GPU name as nvidia-smi or an inventory writes it."""
    norm = _normalize(name)
    matches = [k for k in GPU_MODELS if (norm + " ").startswith(k + " ")]
    return GPU_MODELS[max(matches, key=len)] if matches else None


def compute_capability_for(name: str) -> str | None:
    """Compute capability ("8.6") of a GPU model name, or None when the table lacks it."""
    model = gpu_model_for(name)
    return model.compute_capability if model else None


def gpu_memory_gib_for(name: str) -> int | None:
    """Memory of a GPU model in GiB; a size in the name ("A100-SXM4-40GB") picks the variant."""
    model = gpu_model_for(name)
    if model is None:
        return None
    sizes = [int(s) for s in _SIZE.findall(name)]
    return next((s for s in sizes if s in model.memory_gib), model.memory_gib[0])
