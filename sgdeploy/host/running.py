"""The SGLang servers running on a host, read in one round trip.

`SCRIPT` (POSIX sh, fed on stdin so that its own command line matches nothing) lists every
process whose command line runs SGLang, with its exact argv and environment (base64, NULs
kept), working directory, user, cgroup, interpreter and that interpreter's SGLang version, plus
the process tree and nvidia-smi's view of the GPUs. `parse_servers` turns the output into
`Server` objects: the main process of each launch (not its scheduler and detokenizer children,
which share or rewrite its command line) and the GPUs its process tree holds. Pure apart from
`read_servers`, which runs the script over a `RemoteHost`.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, field
from shlex import quote
from typing import TYPE_CHECKING

from sgdeploy.host.facts import (
    APPS_QUERY_FIELDS,
    GPU_QUERY_FIELDS,
    FactParseError,
    GpuInfo,
    GpuProcess,
    parse_compute_apps,
    parse_query_gpu,
)
from sgdeploy.sglang.argv import launch_entry

if TYPE_CHECKING:
    from sgdeploy.host.remote import RemoteHost

_SGLANG_PROBE = 'import importlib.metadata as m; print(m.version("sglang"))'

SCRIPT = r"""
sgd_pid=$1; sgd_unit=$2
sgd_b64() { base64 -w0 2>/dev/null || base64 | tr -d '\n'; }
sgd_match() {
  case $(tr '\0' ' ' < "$1/cmdline" 2>/dev/null) in
    *sglang.launch_server*|*sglang/launch_server.py*|*"sglang serve"*) return 0 ;;
  esac
  return 1
}
if [ -n "$sgd_unit" ]; then
  sgd_pid=$(systemctl show -p MainPID --value "$sgd_unit" 2>/dev/null)
  printf '@@unit %s %s@@\n' "$sgd_unit" "${sgd_pid:-0}"
  if [ "${sgd_pid:-0}" = 0 ]; then
    printf 'unitfile=%s\n' "$(systemctl cat "$sgd_unit" 2>/dev/null | sgd_b64)"
    echo '@@end@@'; exit 0
  fi
fi
echo '@@tree@@'
for sgd_s in /proc/[0-9]*/stat; do
  read -r sgd_l < "$sgd_s" 2>/dev/null && printf '%s\n' "$sgd_l"
done
for sgd_d in /proc/[0-9]*; do
  sgd_p=${sgd_d#/proc/}
  [ "$sgd_p" != "$$" ] || continue
  if [ -n "$sgd_pid" ]; then [ "$sgd_p" = "$sgd_pid" ] || sgd_match "$sgd_d" || continue
  else sgd_match "$sgd_d" || continue; fi
  printf '@@proc %s@@\n' "$sgd_p"
  printf 'cmdline=%s\n' "$(sgd_b64 < "$sgd_d/cmdline" 2>/dev/null)"
  printf 'environ=%s\n' "$(sgd_b64 < "$sgd_d/environ" 2>/dev/null)"
  printf 'cwd=%s\n' "$(readlink "$sgd_d/cwd" 2>/dev/null | sgd_b64)"
  printf 'cgroup=%s\n' "$(sgd_b64 < "$sgd_d/cgroup" 2>/dev/null)"
  printf 'user=%s\n' "$(stat -c %U "$sgd_d" 2>/dev/null)"
  sgd_u=$(sed -n 's|.*/\([^/]*\.service\)$|\1|p' "$sgd_d/cgroup" 2>/dev/null | tail -n 1)
  [ -z "$sgd_u" ] || printf 'mainpid=%s\n' "$(systemctl show -p MainPID --value "$sgd_u" 2>/dev/null)"
  # model folders named in the argv: their config.json says the architecture (words are paths
  # relative to the process's working directory, or absolute)
  sgd_cwd=$(readlink "$sgd_d/cwd" 2>/dev/null)
  tr '\0' '\n' < "$sgd_d/cmdline" 2>/dev/null | while IFS= read -r sgd_w; do
    case $sgd_w in --*=*) sgd_w=${sgd_w#*=} ;; esac
    case $sgd_w in /*) sgd_f=$sgd_w ;; *) sgd_f=$sgd_cwd/$sgd_w ;; esac
    [ -n "$sgd_w" ] && [ -f "$sgd_f/config.json" ] || continue
    printf 'config=%s:%s\n' "$(printf '%s' "$sgd_w" | sgd_b64)" "$(head -c 262144 "$sgd_f/config.json" | sgd_b64)"
  done
  read -r sgd_l < "$sgd_d/stat" 2>/dev/null || continue
  sgd_pp=${sgd_l##*) }; sgd_pp=${sgd_pp#* }; sgd_pp=${sgd_pp%% *}
  sgd_a0=$(tr '\0' '\n' < "$sgd_d/cmdline" 2>/dev/null | sed -n 1p)
  # a child of the same interpreter shares its SGLang; a shell (`bash -c '... launch_server ...'`)
  # or `timeout` above it does not
  [ "$(tr '\0' '\n' < "/proc/$sgd_pp/cmdline" 2>/dev/null | sed -n 1p)" != "$sgd_a0" ] \
    || ! sgd_match "/proc/$sgd_pp" || continue
  case $sgd_a0 in
    /*) sgd_py=$sgd_a0 ;;
    */*) sgd_py=$(readlink "$sgd_d/cwd")/$sgd_a0 ;;
    *) sgd_path=$(tr '\0' '\n' < "$sgd_d/environ" 2>/dev/null | sed -n 's/^PATH=//p')
       sgd_py=$(PATH=${sgd_path:-$PATH}; command -v "$sgd_a0") ;;
  esac
  [ -n "$sgd_py" ] || continue
  printf 'python=%s\n' "$(printf '%s' "$sgd_py" | sgd_b64)"
  sgd_v=$(timeout 60 "$sgd_py" -c @PROBE@ 2>/dev/null </dev/null) && printf 'sglang=%s\n' "$sgd_v"
done
echo '@@gpus@@'
timeout 30 nvidia-smi --query-gpu=@GPU_FIELDS@ --format=csv,noheader,nounits 2>/dev/null
echo '@@apps@@'
timeout 30 nvidia-smi --query-compute-apps=@APPS_FIELDS@ --format=csv,noheader,nounits 2>/dev/null
echo '@@end@@'
exit 0
"""  # noqa: E501 (shell lines kept as they run)


def script() -> str:
    return (SCRIPT.replace("@PROBE@", quote(_SGLANG_PROBE))
            .replace("@GPU_FIELDS@", ",".join(GPU_QUERY_FIELDS))
            .replace("@APPS_FIELDS@", ",".join(APPS_QUERY_FIELDS)).lstrip("\n"))


@dataclass(frozen=True)
class Process:
    """One process whose command line runs SGLang, as the script saw it."""

    pid: int
    ppid: int | None
    argv: tuple[str, ...]
    environ: dict[str, str]
    cwd: str | None
    user: str | None
    unit: str | None
    python: str | None = None
    sglang_version: str | None = None
    model_configs: dict[str, str] = field(default_factory=dict)  # argv word -> its config.json


@dataclass(frozen=True)
class Server:
    """The main process of one SGLang launch, and the GPUs its process tree holds."""

    process: Process
    children: tuple[int, ...] = ()
    gpus: tuple[int, ...] = ()
    # the command of the parent that started it, when it is no shell or init
    wrapper: str | None = None


@dataclass
class HostServers:
    """Every SGLang launch found on a host, with its GPUs."""

    servers: list[Server] = field(default_factory=list)
    gpus: tuple[GpuInfo, ...] = ()
    gpu_apps: tuple[GpuProcess, ...] = ()
    unit: str | None = None  # with --unit: the unit asked for
    unit_pid: int | None = None  # its MainPID (0 or None: not running)
    unit_file: str | None = None  # `systemctl cat` of the unit, when it does not run
    complete: bool = True  # False when the output was cut off
    problems: list[str] = field(default_factory=list)


def _decode(value: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return b""


def _words(raw: bytes) -> tuple[str, ...]:
    """NUL-separated words (cmdline, environ); empty words inside are kept, the final NUL is not."""
    if not raw:
        return ()
    return tuple(raw.decode("utf-8", "surrogateescape").removesuffix("\0").split("\0"))


def _unit_of(cgroup: str) -> str | None:
    """The systemd service of a process, from /proc/PID/cgroup (v2 `0::/...` or v1
    `name=systemd`)."""
    for line in cgroup.splitlines():
        path = line.split(":", 2)[-1]
        for part in reversed(path.split("/")):
            if part.endswith(".service"):
                return part.removesuffix(".service")
    return None


def _tree(lines: list[str]) -> dict[int, tuple[int, str]]:
    """pid -> (ppid, comm) from /proc/*/stat lines (comm may hold spaces and parentheses)."""
    tree = {}
    for line in lines:
        head, sep, rest = line.rpartition(") ")
        pid_text, _, comm = head.partition(" (")
        fields = rest.split()
        if sep and pid_text.strip().isdigit() and len(fields) > 1 and fields[1].isdigit():
            tree[int(pid_text)] = (int(fields[1]), comm)
    return tree


# Processes a user's login runs under: a server started from one is run by hand, even when its
# cgroup is ssh.service (sshd without PAM sessions puts logins there).
_LOGIN = re.compile(r"^(sshd.*|login|su|sudo|tmux.*|screen|SCREEN|cron)$")


def _owning_unit(pid: int, cgroup_unit: str | None, main_pid: int | None,
                 tree: dict[int, tuple[int, str]]) -> str | None:
    """The service that runs the process: its cgroup's unit, when that unit's main process is it
    or an ancestor reached without passing through a login (sshd, tmux, su)."""
    if cgroup_unit is None or not main_pid:
        return None
    current = pid
    for _ in range(64):
        if current == main_pid:
            return cgroup_unit
        parent, comm = tree.get(current, (0, ""))
        if current != pid and _LOGIN.match(comm):
            return None
        if not parent:
            return None
        current = parent
    return None


def _process(pid: int, values: dict[str, str], tree: dict[int, tuple[int, str]]) -> Process:
    environ = {}
    for item in _words(_decode(values.get("environ", ""))):
        key, sep, value = item.partition("=")
        if sep:
            environ[key] = value
    cwd = _decode(values.get("cwd", "")).decode("utf-8", "surrogateescape").rstrip("\n") or None
    python = _decode(values.get("python", "")).decode("utf-8", "surrogateescape") or None
    configs = {}
    for line in values.get("config", "").splitlines():
        word, _, config = line.partition(":")
        configs[_decode(word).decode("utf-8", "surrogateescape")] = _decode(config).decode(
            "utf-8", "replace"
        )
    return Process(
        pid=pid,
        ppid=tree.get(pid, (None, ""))[0],
        argv=_words(_decode(values.get("cmdline", ""))),
        environ=environ,
        cwd=cwd,
        user=values.get("user") or None,
        unit=_owning_unit(
            pid,
            _unit_of(_decode(values.get("cgroup", "")).decode("utf-8", "replace")),
            int(values["mainpid"]) if values.get("mainpid", "").isdigit() else None,
            tree,
        ),
        python=python,
        sglang_version=values.get("sglang") or None,
        model_configs=configs,
    )


_SHELLS = {
    "sh",
    "bash",
    "dash",
    "zsh",
    "fish",
    "tmux: server",
    "screen",
    "sshd",
    "systemd",
    "init",
    "nohup",
}


def parse_servers(output: str) -> HostServers:
    """The launches in the script's output; each process that exited mid-way is simply absent."""
    found = HostServers(complete="@@end@@" in output)
    section, tree_lines, gpu_text, app_text = "", [], [], []
    procs: dict[int, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in output.splitlines():
        if m := re.fullmatch(r"@@unit (\S+) (\d*)@@", line):
            found.unit, found.unit_pid = m[1], int(m[2] or 0)
        elif m := re.fullmatch(r"@@proc (\d+)@@", line):
            section, current = "proc", procs.setdefault(int(m[1]), {})
        elif line.startswith("unitfile=") and found.unit is not None:
            found.unit_file = _decode(line[9:]).decode("utf-8", "replace") or None
        elif m := re.fullmatch(r"@@(tree|gpus|apps|end)@@", line):
            section, current = m[1], None
        elif section == "tree":
            tree_lines.append(line)
        elif section == "gpus":
            gpu_text.append(line)
        elif section == "apps":
            app_text.append(line)
        elif section == "proc" and current is not None and "=" in line:
            key, _, value = line.partition("=")
            if key == "config":
                current["config"] = current.get("config", "") + value + "\n"
            else:
                current[key] = value
    tree = _tree(tree_lines)
    try:
        found.gpus = parse_query_gpu("\n".join(gpu_text))
        found.gpu_apps = parse_compute_apps("\n".join(app_text))
    except FactParseError as exc:
        found.problems.append(f"nvidia-smi: {exc}")
    processes = {
        pid: _process(pid, values, tree) for pid, values in procs.items() if values.get("cmdline")
    }
    # A launch's main process runs SGLang's entry point itself; its parent does not. A shell whose
    # `-c` string mentions the launch (`ssh host 'nohup python -m sglang.launch_server ... &'`)
    # only matched the script's search: it is the parent, not the server.
    launching = {pid for pid, p in processes.items() if launch_entry(p.argv) is not None}
    mains = [p for pid, p in processes.items() if pid in launching and p.ppid not in launching]
    by_uuid = {g.uuid: g.index for g in found.gpus}
    for main in sorted(mains, key=lambda p: p.pid):
        family = _descendants(main.pid, tree)
        gpus = sorted({by_uuid[a.gpu_uuid] for a in found.gpu_apps
                       if a.gpu_uuid in by_uuid and (a.pid in family or a.pid == main.pid)})
        parent = tree.get(main.ppid or 0, (0, ""))[1]
        wrapper = parent if parent and parent not in _SHELLS and main.ppid not in (0, 1) else None
        found.servers.append(Server(main, tuple(sorted(family)), tuple(gpus), wrapper))
    return found


def _descendants(pid: int, tree: dict[int, tuple[int, str]]) -> set[int]:
    children: dict[int, list[int]] = {}
    for child, (parent, _) in tree.items():
        children.setdefault(parent, []).append(child)
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def read_servers(
    remote: RemoteHost, pid: int | None = None, unit: str | None = None
) -> HostServers:
    """Run the script on the host (one round trip) and parse what it printed."""
    args = f"{quote(str(pid) if pid else '')} {quote(unit or '')}"
    result = remote.run(f"sh -s -- {args}", timeout=180, stdin=script().encode())
    return parse_servers(result.stdout)
