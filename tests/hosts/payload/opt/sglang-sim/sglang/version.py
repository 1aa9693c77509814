import importlib.metadata as _md

__version__ = _md.version("sglang")
