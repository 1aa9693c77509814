"""Which kind of restart a change of launch needs: the weights kept by the weight-cache daemon,
the compile caches warm (the weights load again, the kernels the running server compiled are
reused), or cold.

SGLang's weight-cache daemon (0.5.17+, docs/weight-cache.md) keeps a launch's post-quantization,
TP-sharded weights resident on the GPUs; a server started with `weight_cache_mode = "client"`
maps them instead of loading them from disk. It serves them only to a server whose `CacheConfig`
equals its own (sglang/srt/weight_cache/protocol.py: model, architecture, TP/PP/DP/EP/CP layout,
quantization, dtype, revision, compute capability, torch), and what the daemon loaded depends on a
few more of its arguments (load format, loader config, remote code, overrides of the model
config, EPLB). `WEIGHT_FIELDS` are the [server] keys that decide it; a change to any of them, to
the GPUs or to the SGLang release needs a new daemon, hence a cold start. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sgdeploy.host.unitfile import UnitFileError, parse_service
from sgdeploy.sglang.argv import launch_entry, parse_server_argv
from sgdeploy.sglang.catalog import Catalog, UnknownVersionError, load_catalog
from sgdeploy.sglang.rules.weight_cache import WEIGHT_FIELDS
from sgdeploy.sglang.sandbox import CACHE_ENV

WEIGHTS_KEPT = "weights kept"
CACHES_WARM = "caches warm"
COLD = "cold"
# The header line of every unit sgdeploy renders (templates/sglang.service.j2)
_RELEASE_LINE = re.compile(r"^# target: host .*, SGLang (\S+)$", re.MULTILINE)

# Environment the daemon and the client must agree on (where a rank finds its daemon).
# and which physical GPUs the ranks land on (a daemon serves the GPU it runs on).
WEIGHT_ENV = ("SGLANG_WEIGHT_CACHE_SOCKET_TEMPLATE", "CUDA_VISIBLE_DEVICES")


@dataclass(frozen=True)
class Restart:
    kind: str  # WEIGHTS_KEPT, CACHES_WARM or COLD
    why: str

    @property
    def keeps_weights(self) -> bool:
        return self.kind == WEIGHTS_KEPT


def restart_kind(
    old: Mapping[str, Any] | None,
    new: Mapping[str, Any],
    *,
    default: Callable[[str], Any] = lambda name: None,
    old_version: str | None = None,
    new_version: str | None = None,
    old_gpus: Sequence[int | str] | None = None,
    new_gpus: Sequence[int | str] | None = None,
    old_env: Mapping[str, str] | None = None,
    new_env: Mapping[str, str] | None = None,
) -> Restart:
    """The restart going from the running launch `old` ([server] flags; None: nothing runs) to
    `new`.

    `default` gives SGLang's default of a flag the launch does not set (the catalog's), so that
    writing a default out is no change. Versions, GPUs and environment are compared when given.
    """
    if old is None:
        return Restart(COLD, "nothing runs yet: the first start loads the weights")

    def value(server: Mapping[str, Any], name: str) -> Any:
        return server[name] if name in server else default(name)

    modes = (value(old, "weight_cache_mode") or "off", value(new, "weight_cache_mode") or "off")
    if modes != ("client", "client"):
        return Restart(COLD, f"weight_cache_mode is {modes[0]!r} -> {modes[1]!r}: only a server in "
                       "'client' mode replaced by one in 'client' mode finds its weights in a "
                       "running daemon")
    changed = [name for name in WEIGHT_FIELDS if value(old, name) != value(new, name)]
    if old_version != new_version:
        changed.append(f"SGLang {old_version} -> {new_version}")
    if old_gpus is not None and new_gpus is not None and tuple(old_gpus) != tuple(new_gpus):
        changed.append("deploy.gpus")
    if old_env is not None and new_env is not None:
        changed += [f"env.{name}" for name in WEIGHT_ENV if old_env.get(name) != new_env.get(name)]
    if changed:
        return Restart(COLD, f"{', '.join(changed)} changed: the daemon's weights no longer match, "
                       "so it is restarted and the weights load from disk")
    return Restart(WEIGHTS_KEPT, "the daemon keeps the weights: the new server maps them over CUDA "
                                 "IPC")


@dataclass(frozen=True)
class UnitLaunch:
    """The [server] flags and Environment= of the SGLang launch a unit file runs."""

    server: dict[str, Any]
    env: dict[str, str]


def unit_launch(text: str | None, catalog: Catalog) -> UnitLaunch | None:
    """The launch of a unit file's ExecStart=, read with the release's flags; None when there is
    none."""
    if text is None:
        return None
    try:
        service = parse_service(text)
    except UnitFileError:
        return None
    found = launch_entry(service.exec_start)
    if found is None:
        return None
    parsed = parse_server_argv(list(service.exec_start[found.flags_at:]), catalog)
    return UnitLaunch(parsed.server, dict(service.environment))


def restart_between_units(old_text: str | None, new_text: str, catalog: Catalog) -> Restart | None:
    """The restart from the unit on the host to the new one, when either uses the weight cache; else
    None (without the weight cache every restart is cold, and plan says nothing)."""
    new = unit_launch(new_text, catalog)
    if new is None:
        return None
    old = unit_launch(old_text, catalog)
    if "client" not in (
        new.server.get("weight_cache_mode"),
        old.server.get("weight_cache_mode") if old else None,
    ):
        return None
    return restart_kind(old.server if old else None, new.server, default=catalog.default,
                        old_env=old.env if old else None, new_env=new.env)


def restart_for(old_text: str | None, new_text: str, sglang_version: str | None) -> Restart | None:
    """restart_between_units with the release's catalog; None when no unit names the weight cache or
    no catalog is bundled for the release."""
    if "--weight-cache-mode" not in new_text and "--weight-cache-mode" not in (old_text or ""):
        return None
    try:
        catalog = load_catalog(sglang_version or "")
    except (UnknownVersionError, ValueError):
        return None
    return restart_between_units(old_text, new_text, catalog)


def as_the_swap_decides(
    predicted: Restart | None, live_daemon: str | None, new_daemon: str | None
) -> Restart | None:
    """The restart as the transaction will make it: a running daemon is kept exactly when its
    unit's text stays the same (`DaemonFiles.install_sh`). `predicted` (from the two launches)
    says why; the daemon unit on the host against the new one overrules it."""
    if predicted is None or new_daemon is None or live_daemon is None:
        return predicted
    same = live_daemon == new_daemon
    if predicted.keeps_weights and not same:
        return Restart(COLD, "the daemon's unit on the host differs from the one this launch "
                       "renders (its environment or flags changed, or it was edited by hand): the "
                       "daemon is replaced and loads the weights again")
    if not predicted.keeps_weights and same:
        return Restart(WEIGHTS_KEPT, "the daemon's unit stays as it is on the host: the running "
                       "daemon keeps its weights for the new server")
    return predicted


def unit_release(text: str) -> str | None:
    """The SGLang release a unit sgdeploy rendered names in its header; None for any other unit."""
    found = _RELEASE_LINE.search(text)
    return found[1] if found else None


def compile_cache_restart(old_text: str | None, new_text: str) -> Restart:
    """Whether the new server finds the kernels the running one compiled: Triton, TorchInductor,
    FlashInfer and DeepGEMM key their caches by release and put them under the user's home or the
    folders CACHE_ENV names, so the same release, interpreter, user and cache folders reuse them."""
    if old_text is None:
        return Restart(COLD, "nothing runs yet: the first start loads the weights and compiles "
                       "what no earlier server of this release and user left in its cache folders")
    try:
        old, new = parse_service(old_text), parse_service(new_text)
    except UnitFileError:
        return Restart(COLD, "the unit on the host cannot be read: its compile caches are not "
                       "known")
    changed = []
    old_release, new_release = unit_release(old_text), unit_release(new_text)
    if old_release is None:
        changed.append("the SGLang release (the unit on the host does not name it)")
    elif old_release != new_release:
        changed.append(f"SGLang {old_release} -> {new_release}")
    if old.exec_start[:1] != new.exec_start[:1]:
        changed.append("the interpreter")
    if old.user != new.user:
        changed.append(f"User= {old.user or 'root'} -> {new.user or 'root'}")
    changed += [f"env.{name}" for name in CACHE_ENV
                if old.environment.get(name) != new.environment.get(name)]
    if changed:
        return Restart(COLD, f"{', '.join(changed)}: the kernels the running server compiled may "
                       "not be the new one's, so they compile again, and the weights load again")
    return Restart(CACHES_WARM, "the same SGLang release, interpreter, user and cache folders as "
                   "the running server: the kernels it compiled are reused; the weights load again")


def restart_of(weights: Restart | None, caches: Restart) -> Restart:
    """The one kind plan names: weights kept, else caches warm (why the weights load again, where
    the weight cache says), else cold."""
    if weights is None:
        return caches
    if weights.keeps_weights or caches.kind != CACHES_WARM:
        return weights
    return Restart(CACHES_WARM, f"{caches.why}; {weights.why}")
