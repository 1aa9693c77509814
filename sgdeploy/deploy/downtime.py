"""Where a restart's downtime went, on the host's clock: the spans between the swap's own steps
(`HostSession.swap`) and journald's stamps of the server's first and ready lines. Light to import:
the report that prints the spans loads nothing else of deploy/."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sgdeploy.deploy.journal import StartupResult

# (key, the moment it starts, the moment it ends, how a report names it), in the order they pass
DOWNTIME_SPANS = (
    ("stop_s", "stop", "stopped", "old server's stop"),
    ("gpu_release_s", "stopped", "gpus_idle", "GPUs released"),
    ("unit_start_s", "gpus_idle", "started", "systemd start"),
    ("to_first_line_s", "started", "first_line", "to SGLang's first line"),
    ("to_ready_s", "first_line", "ready", "to ready"),
)


def downtime(startup: StartupResult) -> dict[str, float]:
    """The old server's stop (and a replaced weight-cache daemon's), the GPUs' release, systemd's
    start, the server's own start to its first journal line (Python importing SGLang) and from
    there to ready. Only the spans whose ends are known; `downtime_s` from the stop (or a first
    start) to the ready line."""
    t = dict(startup.host_times)
    if startup.first_line_at is not None:
        t["first_line"] = startup.first_line_at
    if startup.ready and startup.ready_at is not None:
        t["ready"] = startup.ready_at
    out = {key: round(t[b] - t[a], 3) for key, a, b, _ in DOWNTIME_SPANS if a in t and b in t}
    begin = t.get("stop", t.get("gpus_idle"))
    if begin is not None and "ready" in t:
        out["downtime_s"] = round(t["ready"] - begin, 3)
    return out
