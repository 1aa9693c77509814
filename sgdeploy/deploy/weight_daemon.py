"""The weight-cache daemon as a unit of its own (docs/weight-cache.md): what it runs and how the
server's unit depends on it. Pure: no I/O.

A profile whose `[server]` sets `weight_cache_mode = "client"` (SGLang 0.5.17+, one node) gets a
second unit, `<unit>-weights.service`, running `python -m sglang.srt.weight_cache.daemon` with
the launch's weight-deciding flags. Its start returns only once every daemon of the node wrote
its `.ready` file (`ExecStartPost=`), and the server's unit `Requires=` and comes `After=` it:
systemd starts a missing daemon before the server and never starts the server beside a daemon
still loading, while restarting the server leaves the daemon and its resident weights alone.

Where the two meet: from 0.5.19 each daemon's socket is found by its GPU's UUID through two path
templates, which both units set to a folder under /run. 0.5.17 and 0.5.18 fix the paths at
/tmp/sglang_weight_cache_rank<N>.sock: both units get PrivateTmp=yes and the server's unit
JoinsNamespaceOf= the daemon's, so the pair shares one /tmp of its own (two deployments on a host
would otherwise both claim rank 0's socket).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sgdeploy.host.facts import GpuHolder, GpuInfo, GpuProcess, gpu_strangers
from sgdeploy.sglang.rules.weight_cache import (
    DAEMON_OWN_FLAGS,
    DAEMON_OWN_PARSER,
    RANK_READY_TEMPLATE,
    WEIGHT_CACHE,
    WEIGHT_FIELDS,
)
from sgdeploy.sglang.shutdown import CRASH_DIAGNOSTICS_ENV
from sgdeploy.sglang.versions import VersionRange, parse_version

if TYPE_CHECKING:  # the plan's records name the daemon's unit without loading pydantic
    from sgdeploy.profile.model import Profile

DAEMON_MODULE = "sglang.srt.weight_cache.daemon"
# Environment the daemon refuses (expandable segments cannot be exported over CUDA IPC)
_ALLOCATOR_VARIABLES = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


def daemon_unit_name(unit: str) -> str:
    return f"{unit}-weights"


def deployment_strangers(
    gpus: Sequence[GpuInfo],
    processes: Sequence[GpuProcess],
    selected: Iterable[int | str] | None,
    unit: str,
    own_pids: Iterable[int] = (),
    unit_active: bool = True,
) -> tuple[tuple[GpuHolder, ...], tuple[GpuHolder, ...]]:
    """`gpu_strangers` of a deployment: its daemon unit's processes (the resident weights) are
    its own, as the server unit's are."""
    return gpu_strangers(gpus, processes, selected, unit, own_pids, unit_active,
                         own_units=(daemon_unit_name(unit),))


def runtime_folder(unit: str) -> str:
    """Where the daemons' sockets and ready files live: systemd's RuntimeDirectory of the daemon
    unit, outside any PrivateTmp= of either unit."""
    return f"/run/sgdeploy-weights/{unit}"


def _in(versions: VersionRange, sglang_version: str) -> bool:
    try:
        return parse_version(sglang_version) in versions
    except ValueError:
        return False


def shares_private_tmp(sglang_version: str) -> bool:
    """Whether the pair meets in a /tmp of its own (0.5.17, 0.5.18: socket paths fixed under /tmp,
    and a daemon with its own parser) instead of under /run through the path templates."""
    return _in(DAEMON_OWN_PARSER, sglang_version)


def template_environment(unit: str, sglang_version: str) -> tuple[tuple[str, str], ...]:
    """The two templates both units must agree on: each rank finds its GPU's daemon by them
    (0.5.19+; none before, where the paths are fixed)."""
    if shares_private_tmp(sglang_version):
        return ()
    folder = runtime_folder(unit)
    return (("SGLANG_WEIGHT_CACHE_SOCKET_TEMPLATE", f"{folder}/{{device_uuid}}.sock"),
            ("SGLANG_WEIGHT_CACHE_READY_TEMPLATE", f"{folder}/{{device_uuid}}.ready"))


def owns_daemon(profile: Profile, sglang_version: str) -> bool:
    """Whether sgdeploy runs a daemon unit for this launch: a client of the weight cache on a
    release whose socket paths it can place (0.5.17 and 0.5.18 fix them under /tmp, per rank)."""
    if (
        profile.server.get("weight_cache_mode") != "client"
        or int(str(profile.server.get("nnodes") or 1)) > 1
    ):
        # multi-node daemons need their own rendezvous (--dist-init-method): not rendered yet
        return False
    return _in(WEIGHT_CACHE, sglang_version)


def daemon_server_settings(profile: Profile, sglang_version: str) -> dict[str, object]:
    """The `[server]` keys the daemon is started with: the ones its weights depend on (before
    0.5.19, of those, the ones its own parser has a flag for; SGD546 refuses the others)."""
    own_parser = _in(DAEMON_OWN_PARSER, sglang_version)
    return {key: value for key, value in profile.server.items()
            if key in WEIGHT_FIELDS and (not own_parser or key in DAEMON_OWN_FLAGS)}


def ranks_on_node(profile: Profile) -> int:
    """How many daemons the launcher starts on this node: its share of the PP x TP ranks."""
    server = profile.server
    tp, pp, nnodes = (int(str(server.get(key) or 1)) for key in ("tp_size", "pp_size", "nnodes"))
    return max(1, (tp * pp) // max(1, nnodes))


def daemon_environment(environment: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The server unit's environment as the daemon gets it: without an allocator setting that
    asks for expandable segments, which SGLang's daemon refuses (SGD542), and without the crash
    diagnostics of the server's stop (sgdeploy.sglang.shutdown), which the daemon does not run:
    its unit stays the same text, and its weights kept, whatever they say."""
    return [
        (k, v)
        for k, v in environment
        if k not in CRASH_DIAGNOSTICS_ENV and not (
            k in _ALLOCATOR_VARIABLES and "expandable_segments:true" in v.replace(" ", "").lower()
        )
    ]


def ready_wait_command(unit: str, ranks: int, sglang_version: str) -> list[str]:
    """ExecStartPost=: wait until every daemon of the node has written its ready file (the
    launcher does not tell systemd; TimeoutStartSec= bounds the wait, a daemon that dies fails
    it)."""
    folder, name = runtime_folder(unit), "*.ready"
    if shares_private_tmp(sglang_version):
        folder, _, name = RANK_READY_TEMPLATE.format(global_rank="*").rpartition("/")
    script = (f'until [ "$(find {folder} -maxdepth 1 -name "{name}" | wc -l)" -ge {ranks} ]; '
              "do sleep 1; done")
    return ["/bin/sh", "-c", script]


@dataclass(frozen=True)
class DaemonUnit:
    """The daemon unit a deployment carries beside its server unit."""

    unit: str  # `<unit>-weights`
    text: str

    @property
    def file_name(self) -> str:
        return f"{self.unit}.service"


@dataclass(frozen=True)
class DaemonFiles:
    """Where a deployment's daemon unit lies on the host, for the shell that installs it."""

    unit: str  # `<unit>-weights`
    live: str  # /etc/systemd/system/<unit>-weights.service
    staged: str  # written by the staging step beside it
    owned: bool  # the new deployment runs a daemon

    def install_sh(self) -> str:
        """Put the daemon unit in place; `$wkeep` is 1 when the running one stays (same text: same
        weights), `$wdrop` 1 when the new deployment has none and an old one must go."""
        live, staged = shlex.quote(self.live), shlex.quote(self.staged)
        if self.owned:
            return (f"wdrop=0; if cmp -s {staged} {live}; then rm -f {staged}; wkeep=1; "
                    f"else mv -f {staged} {live}; wkeep=0; fi")
        return f"wkeep=0; wdrop=0; [ ! -e {live} ] || wdrop=1"

    def stop_sh(self) -> str:
        """After the server's stop: stop a daemon being replaced, remove one no longer wanted."""
        unit_q, live = shlex.quote(f"{self.unit}.service"), shlex.quote(self.live)
        return (f'[ "$wkeep" = 1 ] || systemctl stop {unit_q} 2>/dev/null || true; '
                f"systemctl reset-failed {unit_q} 2>/dev/null || true; "
                f'if [ "$wdrop" = 1 ]; then systemctl disable --quiet {unit_q} 2>/dev/null; '
                f"rm -f {live}; systemctl daemon-reload; fi")

    def kept_pids_sh(self) -> str:
        """The pids of a daemon kept running (their GPU memory is the next server's weights)."""
        unit_q = shlex.quote(f"{self.unit}.service")
        # cgroup v2, or the unified and systemd trees of a hybrid (v1) layout
        return (f'if [ "$wkeep" = 1 ]; then cg=$(systemctl show -p ControlGroup --value {unit_q}); '
                'for f in "/sys/fs/cgroup$cg" "/sys/fs/cgroup/unified$cg" '
                '"/sys/fs/cgroup/systemd$cg"; do '
                '[ -n "$cg" ] && [ -r "$f/cgroup.procs" ] && { cat "$f/cgroup.procs"; break; }; '
                "done; fi")
