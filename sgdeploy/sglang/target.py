"""The host as a rule sees it: GPU model, compute capability, count and memory, SGLang version.

Filled from the inventory's declared facts or from the facts read on the host; the rules know
nothing of inventories or connections.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HostTarget:
    """What validation knows about one target host, from the inventory or from live facts."""

    name: str
    gpu: str | None = None
    compute_capability: str | None = None
    gpu_count: int | None = None
    gpu_memory_gib: float | None = None
    sglang_version: str | None = None
    address: str | None = None

    @property
    def sm(self) -> int | None:
        """Compute capability as SGLang compares it: "8.6" -> 86."""
        if not self.compute_capability:
            return None
        major, _, minor = self.compute_capability.partition(".")
        return int(major) * 10 + int(minor or 0)
