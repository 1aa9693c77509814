"""SGLang, simulated for sgdeploy's test hosts (no torch, no GPU)."""

import importlib.metadata as _md

__version__ = _md.version("sglang")
