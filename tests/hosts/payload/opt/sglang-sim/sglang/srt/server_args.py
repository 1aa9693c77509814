"""sglang.srt.server_args, simulated: the entry points the launchers (and sgdeploy's host check) call.

`prepare_server_args(argv)` parses argv against the version's flag catalog and returns a
`ServerArgs` dataclass. As in the real releases, up to 0.5.18 `ServerArgs.__post_init__` resolves
every default inside that call; from 0.5.19 `prepare_server_args` returns the raw input and
`ServerArgs.resolve_once()` resolves it (keeping the raw input in `_raw_input`).
`check_server_args()` makes the checks Engine runs just before the workers start. Resolution is
the simulated server's own (sglang_sim.server.resolve): the same refusals and adjustments.

Knobs (/etc/sglang-sim.toml): `broken_import` makes importing this module fail (a broken
install), `resolve_hang_s` makes resolution hang that long.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

import sim_gpu
from sglang_sim import server as _sim

_SETTINGS = _sim.load_settings()
if _SETTINGS.get("broken_import"):
    raise ImportError(_SETTINGS["broken_import"])

logger = logging.getLogger(__name__)
_FIELDS = list(dict.fromkeys(flag["field"] for flag in _sim.load_catalog()["flags"]))


class _Resolution:
    def _resolve(self) -> None:
        hang = float(_sim.load_settings().get("resolve_hang_s") or 0)
        if hang:
            time.sleep(hang)
        args = {name: getattr(self, name) for name in _FIELDS}
        early: list[str] = []
        try:
            cfg = _sim.model_config(args["model_path"], "serve")
            _sim.resolve(args, cfg, sim_gpu.config(), "serve", early)
        except _sim.Refusal as refusal:
            raise refusal.as_sglang_error() from None
        for line in early:
            logger.warning(line)
        for name, value in args.items():
            setattr(self, name, value)

    def check_server_args(self) -> None:
        tp, nnodes = int(getattr(self, "tp_size", 1) or 1), int(getattr(self, "nnodes", 1) or 1)
        assert tp % nnodes == 0, "tp_size must be divisible by number of nodes"


class _ResolvedInPostInit(_Resolution):
    def __post_init__(self) -> None:
        self._resolve()


class _ResolvedOnce(_Resolution):
    def resolve_once(self) -> None:
        if getattr(self, "_raw_input", None) is None:
            self._raw_input = {name: getattr(self, name) for name in _FIELDS}
            self._resolve()


ServerArgs = dataclasses.make_dataclass(
    "ServerArgs", [(name, Any, dataclasses.field(default=None)) for name in _FIELDS],
    bases=(_ResolvedOnce if _sim.V >= _sim.RESOLVE_ONCE else _ResolvedInPostInit,))


def prepare_server_args(argv: list[str]) -> Any:
    parser = _sim.build_parser(_sim.load_catalog())
    namespace = parser.parse_args(_sim.merge_config(argv, parser))
    if not namespace.model_path:
        parser.error("the following arguments are required: --model-path/--model")
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s", force=True)
    return ServerArgs(**{k: v for k, v in vars(namespace).items() if k in _FIELDS})
