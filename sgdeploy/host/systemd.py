"""Shell for systemd on the host that more than one step needs."""

from __future__ import annotations

import shlex


def stop_sh(unit: str, disable: bool = False) -> str:
    """`systemctl stop` (or `disable --now`) of `unit`, and its failed state cleared when the server
    ended itself by a signal during that stop. SGLang does on every stop: on SIGTERM it drains and
    then SIGKILLs its own process tree (seen with 0.5.11 on an H200: "Main process exited,
    code=killed, status=9/KILL", "Failed with result 'signal'"), so each intended stop would
    otherwise leave the unit failed, in `systemctl --failed` and in monitoring. A stop that timed
    out (Result=timeout) or a crash outside a stop keeps its failed state."""
    q = shlex.quote(unit if unit.endswith(".service") else f"{unit}.service")
    verb = "disable --now" if disable else "stop"
    return (f'systemctl {verb} {q}; [ "$(systemctl show -p Result --value {q})" != signal ] '
            f"|| systemctl reset-failed {q}")
