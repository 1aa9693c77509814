"""Variants of the reference profile that end-to-end tests deploy to a test host.

Each module serves on its own free port (test hosts share this machine's network). The
`broken` variant names its server `broken`, so a test can make the simulated SGLang fail for it
alone: `hs.configure_sim(host, failure=..., fail_when_arg=[BROKEN])`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BROKEN = "--served-model-name=broken"


def reference(port: int) -> str:
    return (REPO / "profiles" / "qwen36-mtp3.toml").read_text().replace("port = 30000", f"port = {port}")


def write_variants(folder: Path, port: int, broken_timeout_s: int, **extra: str) -> dict[str, Path]:
    """good (the reference), other/third (another max_running_requests), broken, plus `extra`."""
    text = reference(port)
    variants = {
        "good": text,
        "other": text.replace("max_running_requests = 16", "max_running_requests = 12"),
        "third": text.replace("max_running_requests = 16", "max_running_requests = 8"),
        "broken": text.replace("[server]\n", '[server]\nserved_model_name = "broken"\n')
        .replace("ready_timeout_s = 1200", f"ready_timeout_s = {broken_timeout_s}"),
        **extra,
    }
    paths = {}
    for name, content in variants.items():
        paths[name] = folder / f"{name}.toml"
        paths[name].write_text(content)
    return paths


def sample_value(flag: Any) -> Any:
    """A value a catalog flag accepts, for a profile that gives it (a switch: true)."""
    if flag.is_switch:
        return True
    if flag.choices:
        return [flag.choices[0]] if flag.is_list else flag.choices[0]
    value: Any = {"int": 4, "float": 0.5, "json": "{}"}.get(flag.value_kind, "x")
    return [value] if flag.is_list else value
