"""A model's config.json, read the way SGLang reads the parts its checks depend on.

Rules that need it (context length, attention heads against tp, DSA models, Mamba state, the
checkpoint's quantization) see a `ModelConfig` when one is known: read on the host at plan/apply,
or offline from `validate --model-config DIR` or `deploy.model_config`. Nothing here is loaded
unless a profile or the command line names a config.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Where multimodal and wrapper configs keep the language model's own config (SGLang's
# get_hf_text_config reads the first of these that is present).
_TEXT_CONFIG_KEYS = ("text_config", "llm_config", "language_config", "thinker_config")
# SGLang's CONTEXT_LENGTH_KEYS, in its order of preference.
CONTEXT_LENGTH_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length",
                       "max_position_embeddings")
# What marks Mamba / linear-attention layers in a config, beyond the architecture's name.
_HYBRID_LAYER_TYPES = {
    "mamba",
    "mamba2",
    "linear_attention",
    "linear",
    "ssm",
    "gated_deltanet",
    "gdn",
}
_HYBRID_KEYS = (
    "mamba_d_state",
    "mamba_num_heads",
    "ssm_state_size",
    "mamba_expand",
    "linear_num_value_heads",
    "linear_num_key_heads",
    "hybrid_override_pattern",
    "linear_conv_kernel_dim",
    "state_size",
)
# Architectures SGLang treats as DeepSeek sparse attention when the config has index_topk.
DSA_ARCHITECTURES = frozenset(
    {
        "DeepseekV3ForCausalLM",
        "DeepseekV32ForCausalLM",
        "DeepseekV3ForCausalLMNextN",
        "MistralLarge3ForCausalLM",
        "PixtralForConditionalGeneration",
        "GlmMoeDsaForCausalLM",
    }
)
MAX_BYTES = 4 * 1024 * 1024


class ModelConfigError(ValueError):
    """A config.json that cannot be read: the message says which file and why."""


@dataclass(frozen=True)
class ModelConfig:
    """The parsed config.json of the model a launch serves, and where it came from."""

    raw: Mapping[str, Any]
    source: str
    # the checkpoint's weights beside config.json: the safetensors index's total_size, else the
    # size of its .safetensors files; None when neither is known
    weights_bytes: int | None = None

    @property
    def architecture(self) -> str | None:
        names = self.raw.get("architectures")
        return names[0] if isinstance(names, list) and names and isinstance(names[0], str) else None

    @property
    def text(self) -> Mapping[str, Any]:
        for key in _TEXT_CONFIG_KEYS:
            value = self.raw.get(key)
            if isinstance(value, dict):
                return value
        return self.raw

    def value(self, key: str) -> Any:
        """A key of the language model's config, falling back to the top level."""
        return self.text.get(key, self.raw.get(key))

    def context_length(self) -> int:
        """SGLang's derived context length: the first length key, times the rope scaling factor
        (1 when rope scaling keeps original_max_position_embeddings or is llama3's)."""
        rope = self.text.get("rope_scaling")
        factor: float = 1
        if isinstance(rope, dict) and rope:
            factor = rope.get("factor", 1) if isinstance(rope.get("factor", 1), int | float) else 1
            if "original_max_position_embeddings" in rope or rope.get("rope_type") == "llama3":
                factor = 1
        for key in CONTEXT_LENGTH_KEYS:
            length = self.text.get(key)
            if isinstance(length, int | float) and not isinstance(length, bool):
                return int(factor * length)
        return 2048

    def count(self, key: str) -> int | None:
        value = self.value(key)
        return (
            value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
        )

    @property
    def attention_heads(self) -> int | None:
        return self.count("num_attention_heads")

    @property
    def kv_heads(self) -> int | None:
        return self.count("num_key_value_heads") or self.attention_heads

    @property
    def is_dsa(self) -> bool:
        return self.architecture in DSA_ARCHITECTURES and self.value("index_topk") is not None

    @property
    def quant_method(self) -> str | None:
        quant = self.value("quantization_config")
        method = quant.get("quant_method") if isinstance(quant, dict) else None
        return method.lower() if isinstance(method, str) and method else None

    @property
    def has_hybrid_layers(self) -> bool:
        """The config declares Mamba / linear-attention layers (whatever the architecture is
        named)."""
        for key in ("layer_types", "layers_block_type"):
            kinds = self.value(key)
            if isinstance(kinds, list) and any(
                str(k).lower() in _HYBRID_LAYER_TYPES for k in kinds
            ):
                return True
        return any(self.value(key) is not None for key in _HYBRID_KEYS)


def parse_model_config(text: str, source: str, weights_bytes: int | None = None) -> ModelConfig:
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise ModelConfigError(f"{source}: not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise ModelConfigError(f"{source}: a model config is a JSON object")
    return ModelConfig(raw, source, weights_bytes)


SAFETENSORS_INDEX = "model.safetensors.index.json"


def weights_size(folder: Path) -> int | None:
    """The checkpoint's size in bytes: the safetensors index's metadata.total_size, else the sum of
    the folder's .safetensors files; None when the folder has neither."""
    try:
        index = json.loads((folder / SAFETENSORS_INDEX).read_text(encoding="utf-8"))
        total = index.get("metadata", {}).get("total_size") if isinstance(index, dict) else None
        if isinstance(total, int) and not isinstance(total, bool) and total > 0:
            return total
    except (OSError, ValueError, AttributeError):
        pass
    try:
        return sum(p.stat().st_size for p in folder.glob("*.safetensors")) or None
    except OSError:
        return None


def load_model_config(path: str | Path) -> ModelConfig:
    """config.json of a model folder (or the file itself). Raises ModelConfigError."""
    file = Path(path)
    if file.is_dir():
        file = file / "config.json"
    try:
        with file.open("rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ModelConfigError(f"{file}: cannot read the model config "
                               f"({exc.strerror or exc})") from None
    if len(data) > MAX_BYTES:
        raise ModelConfigError(f"{file}: larger than {MAX_BYTES // (1024 * 1024)} MiB; not a "
                               "config.json")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ModelConfigError(f"{file}: not UTF-8") from None
    return parse_model_config(text, str(file), weights_size(file.parent))
