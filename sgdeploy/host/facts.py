"""Host facts: what `plan` and `apply` need to know about a GPU host, as typed objects.

One shell command (`facts_command`) gathers everything in a single SSH round trip and prints
it as marked sections; `parse_facts` turns that output into a `HostFacts`. Every other
function here is a pure parser or decision fed by captured command output, so the whole
module is tested without a host. Nothing here connects, runs a command or prints.

Sections on the wire (one per probe, each independent of the others):

    @@sgdeploy:begin NAME@@
    |a line the probe wrote to stdout
    !a line the probe wrote to stderr
    @@sgdeploy:end NAME rc=N@@

Prefixing every captured line means no output a host produces can be mistaken for a marker.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from sgdeploy.sglang.gpus import compute_capability_for
from sgdeploy.sglang.secrets import redact  # another server's --api-key is no less a secret

# --- layout on the host (SPEC §5) -------------------------------------------------------------

STATE_ROOT = "/var/lib/sgdeploy"
LAST_GOOD_NAME = "last_good"
LOCK_NAME = "lock"
UNIT_DIR = "/etc/systemd/system"

#: Idle H200s report 0 MiB used through nvidia-smi; NVML's v1 memory call counts the driver's
#: reservation (615 MiB on an H200) as used. 1 GiB sits above both and far below anything a
#: model server leaves behind, so "used > baseline with no process" means memory is really held.
DEFAULT_IDLE_BASELINE_MIB = 1024

GPU_QUERY_FIELDS: tuple[str, ...] = (
    "index",
    "uuid",
    "name",
    "compute_cap",
    "memory.total",
    "memory.used",
    "pci.bus_id",
)
# Drivers before compute_cap existed (R510) reject the whole query; this is the retry.
GPU_QUERY_FIELDS_LEGACY: tuple[str, ...] = tuple(f for f in GPU_QUERY_FIELDS if f != "compute_cap")
APPS_QUERY_FIELDS: tuple[str, ...] = ("pid", "process_name", "used_memory", "gpu_uuid")

UNIT_PROPERTIES: tuple[str, ...] = (
    "ActiveState",
    "SubState",
    "MainPID",
    "ExecMainStatus",
    "ExecMainCode",
    "LoadState",
    "FragmentPath",
    "ActiveEnterTimestampMonotonic",
    "InvocationID",
    "NRestarts",
)

# Exit status the sglang probe uses for "interpreter fine, sglang not installed".
_SGLANG_MISSING_RC = 3
_NOT_FOUND_RC = 127
_TIMEOUT_RC = 124


class FactParseError(ValueError):
    """Captured output does not have the shape its parser expects."""


# --- facts ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as nvidia-smi lists it."""

    index: int
    uuid: str
    name: str
    compute_capability: str | None  # "9.0"; from the table when the driver cannot say
    memory_total_mib: int | None
    memory_used_mib: int | None
    pci_bus_id: str | None = None


@dataclass(frozen=True)
class GpuProcess:
    """A compute process holding memory on a GPU."""

    pid: int
    process_name: str
    used_memory_mib: int | None  # None where the driver cannot attribute memory ([N/A])
    gpu_uuid: str
    user: str | None = None  # who owns it (/proc/PID); None: cannot tell
    cgroup: str | None = None  # its systemd cgroup path; None: no such pid here (another namespace)

    @property
    def unit(self) -> str | None:
        """The systemd unit (service or scope) whose cgroup holds the process."""
        return owner_unit(self.cgroup)


@dataclass(frozen=True)
class SystemdUnitState:
    """The properties of one unit that `systemctl show` reports."""

    load_state: str
    active_state: str | None = None
    sub_state: str | None = None
    main_pid: int | None = None
    exec_main_status: int | None = None
    exec_main_code: int | None = None
    fragment_path: str | None = None
    active_enter_timestamp_monotonic: int | None = None
    invocation_id: str | None = None
    n_restarts: int | None = None

    @property
    def exists(self) -> bool:
        """Whether systemd knows a unit file for it."""
        return self.load_state not in ("not-found", "")

    @property
    def active(self) -> bool:
        """Whether the unit is active or on its way there (a start counts as running)."""
        return self.active_state in ("active", "activating", "reloading")


@dataclass(frozen=True)
class FactError:
    """A probe that failed; the other facts stay valid."""

    section: str
    message: str


@dataclass(frozen=True)
class HostFacts:
    """Everything one facts round trip learned about a host.

    `None` means "could not tell" (the probe failed or was not run), never "no".
    """

    hostname: str | None = None
    kernel: str | None = None
    nvidia_smi_found: bool | None = None
    gpus: tuple[GpuInfo, ...] = ()
    gpu_processes: tuple[GpuProcess, ...] = ()
    python_ok: bool = False
    python_version: str | None = None
    sglang_version: str | None = None
    model_dir_present: bool | None = None
    model_config_present: bool | None = None
    model_architectures: tuple[str, ...] = ()
    model_architecture: str | None = None
    # the model's config.json (up to 256 KiB), for rules that read it
    model_config_json: str | None = None
    model_weights_bytes: int | None = None  # the checkpoint beside it (safetensors index or files)
    # How many of the checkpoint's weight files the unit's user cannot open, and the first names
    model_unreadable_weights: tuple[int, tuple[str, ...]] = (0, ())
    port: int | None = None
    listening_ports: frozenset[int] | None = None
    port_listening: bool | None = None
    # what listens on `port` (ss -p; empty: none or cannot tell)
    port_holders: tuple[PortHolder, ...] = ()
    unit: SystemdUnitState | None = None
    deployments: tuple[str, ...] = ()
    last_good: str | None = None
    lock_present: bool = False  # the lock file exists (a lock may still be free)
    locked: bool | None = False  # a process holds a kernel lock on it; None: cannot tell
    lock_pid: int | None = None
    lock_holder: str | None = None  # what the holder wrote into the lock file
    unit_dir_free_bytes: int | None = None
    # The launch's host files (sgdeploy.sglang.hostfiles) as the unit's user sees them: path ->
    # "ok", "missing" or "unreadable"; a path the probe did not report is not in it.
    host_files: Mapping[str, str] = field(default_factory=dict)
    # Whether the unit's User= exists on the host (None: root, or not asked)
    user_exists: bool | None = None
    errors: tuple[FactError, ...] = ()

    def error(self, section: str) -> FactError | None:
        """The failure of one section, if it failed."""
        return next((e for e in self.errors if e.section == section), None)


# --- nvidia-smi csv ---------------------------------------------------------------------------

# Header cells name the field, some differently from the query ("used_gpu_memory [MiB]").
_FIELD_ALIASES = {
    "used_gpu_memory": "used_memory",
    "gpu_name": "name",
    "gpu_bus_id": "pci.bus_id",
}
_HEADER_CELL = re.compile(r"[a-z][a-z0-9_.]*(?: \[[^\]]*\])?")
_MIB = re.compile(r"(\d+)(?:\s*MiB)?")
# Fields whose values are free text and may themselves contain ", ".
_FREE_TEXT_FIELDS = ("process_name", "name")


def _is_header(cells: Sequence[str], fields: Sequence[str]) -> bool:
    # Field-like cells, at least one of them a field we asked for: a lone lowercase word that
    # a broken tool printed is data (and fails to parse), not a header.
    return all(_HEADER_CELL.fullmatch(c) for c in cells) and any(
        _field_name(c) in fields for c in cells
    )


def _field_name(header_cell: str) -> str:
    name = header_cell.split(" [", 1)[0]
    return _FIELD_ALIASES.get(name, name)


def _csv_rows(text: str, fields: Sequence[str]) -> Iterator[dict[str, str | None]]:
    """Yield each data row of nvidia-smi csv as field -> value (None for [N/A] and friends)."""
    lines = [line for line in text.splitlines() if line.strip()]
    for number, line in enumerate(lines):
        cells = [c.strip() for c in line.split(",")]
        if number == 0 and _is_header(cells, fields):
            fields = [_field_name(c) for c in cells]
            continue
        yield dict(zip(fields, _fit_cells(cells, fields), strict=True))


def _fit_cells(cells: list[str], fields: Sequence[str]) -> list[str | None]:
    # nvidia-smi does not quote: a process name with ", " in it splits into extra cells.
    extra = len(cells) - len(fields)
    free = next((i for i, f in enumerate(fields) if f in _FREE_TEXT_FIELDS), None)
    if extra > 0 and free is not None:
        end = free + extra + 1
        cells = [*cells[:free], ", ".join(cells[free:end]), *cells[end:]]
    if len(cells) != len(fields):
        raise FactParseError(f"expected {len(fields)} csv fields, got {len(cells)}: {cells!r}")
    return [_value(c) for c in cells]


def _value(cell: str) -> str | None:
    # "[N/A]", "[Not Supported]", "[Insufficient Permissions]", ... all mean "no value".
    if not cell or cell == "N/A" or (cell.startswith("[") and cell.endswith("]")):
        return None
    return cell


def _mib(value: str | None) -> int | None:
    if value is None:
        return None
    m = _MIB.fullmatch(value)
    if m is None:
        raise FactParseError(f"not a MiB amount: {value!r}")
    return int(m.group(1))


def _required(row: Mapping[str, str | None], key: str) -> str:
    value = row.get(key)
    if value is None:
        raise FactParseError(f"row has no {key}: {dict(row)!r}")
    return value


def _int(value: str, what: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise FactParseError(f"{what} is not an integer: {value!r}") from None


def parse_query_gpu(csv_text: str, fields: Sequence[str] = GPU_QUERY_FIELDS) -> tuple[GpuInfo, ...]:
    """Parse `nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]`.

    A header line, when present, names the columns; otherwise `fields` does. Fields beyond
    those GpuInfo holds are ignored; a missing compute_cap is looked up in the GPU table.
    """
    gpus = []
    for row in _csv_rows(csv_text, fields):
        name = _required(row, "name")
        gpus.append(
            GpuInfo(
                index=_int(_required(row, "index"), "index"),
                uuid=_required(row, "uuid"),
                name=name,
                compute_capability=row.get("compute_cap") or compute_capability_for(name),
                memory_total_mib=_mib(row.get("memory.total")),
                memory_used_mib=_mib(row.get("memory.used")),
                pci_bus_id=row.get("pci.bus_id"),
            )
        )
    return tuple(gpus)


def parse_compute_apps(
    csv_text: str, fields: Sequence[str] = APPS_QUERY_FIELDS
) -> tuple[GpuProcess, ...]:
    """Parse `nvidia-smi --query-compute-apps=... --format=csv[,noheader][,nounits]`."""
    return tuple(
        GpuProcess(
            pid=_int(_required(row, "pid"), "pid"),
            process_name=row.get("process_name") or "",
            used_memory_mib=_mib(row.get("used_memory")),
            gpu_uuid=_required(row, "gpu_uuid"),
        )
        for row in _csv_rows(csv_text, fields)
    )


# Who owns each compute process: `pid<TAB>user<TAB>cgroup` per pid of a compute-apps CSV file
# (its first column), read from /proc. A pid with no /proc entry here (another PID namespace)
# prints empty fields. The systemd cgroup is the v2 line (`0::/...`) or v1's `name=systemd`.
GPU_OWNERS_SH = (
    "sgd_owners() { while IFS=, read -r sgd_p sgd_rest || [ -n \"$sgd_p\" ]; do case $sgd_p in "
    "''|*[!0-9]*) continue ;; esac; sgd_u=$(stat -c %U /proc/$sgd_p 2>/dev/null) || sgd_u=; "
    "sgd_c=$(sed -n 's/^0:://p; s/^[0-9]*:name=systemd://p' /proc/$sgd_p/cgroup 2>/dev/null | head "
    "-n 1); printf '%s\\t%s\\t%s\\n' \"$sgd_p\" \"$sgd_u\" \"$sgd_c\"; done <\"$1\"; }; sgd_owners"
)


def parse_gpu_owners(text: str) -> dict[int, tuple[str | None, str | None]]:
    """`GPU_OWNERS_SH` output -> {pid: (user, cgroup)}; empty fields are None."""
    owners: dict[int, tuple[str | None, str | None]] = {}
    for line in text.splitlines():
        pid, _, rest = line.partition("\t")
        user, _, cgroup = rest.partition("\t")
        if pid.strip().isdigit():
            owners[int(pid)] = (user.strip() or None, cgroup.strip() or None)
    return owners


def with_owners(processes: Sequence[GpuProcess],
                owners: Mapping[int, tuple[str | None, str | None]]) -> tuple[GpuProcess, ...]:
    """The processes with their user and cgroup filled in from `parse_gpu_owners`."""
    return tuple(
        dataclasses.replace(p, user=owners[p.pid][0], cgroup=owners[p.pid][1])
        if p.pid in owners
        else p
        for p in processes
    )


def owner_unit(cgroup: str | None) -> str | None:
    """`/system.slice/sglang.service/x` -> `sglang.service`: the innermost service or scope."""
    parts = [p for p in (cgroup or "").split("/") if p.endswith((".service", ".scope"))]
    return parts[-1] if parts else None


# --- systemctl show ---------------------------------------------------------------------------


def parse_key_values(text: str) -> dict[str, str]:
    """Parse `Key=value` lines (`systemctl show`, probe output) into a dict; later keys win."""
    props: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key and " " not in key:
            props[key] = value
    return props


def _opt_int(value: str | None) -> int | None:
    # systemd prints "[not set]" or nothing for absent numbers.
    if value is None or not value.strip().lstrip("-").isdigit():
        return None
    return int(value)


def parse_unit_state(text: str) -> SystemdUnitState:
    """Build a SystemdUnitState from `systemctl show UNIT -p ...` output.

    MainPID 0 and a zero activation timestamp mean "none" and become None.
    """
    p = parse_key_values(text)
    if "LoadState" not in p:
        raise FactParseError("systemctl show output has no LoadState")
    return SystemdUnitState(
        load_state=p["LoadState"],
        active_state=p.get("ActiveState") or None,
        sub_state=p.get("SubState") or None,
        main_pid=_opt_int(p.get("MainPID")) or None,
        exec_main_status=_opt_int(p.get("ExecMainStatus")),
        exec_main_code=_opt_int(p.get("ExecMainCode")),
        fragment_path=p.get("FragmentPath") or None,
        active_enter_timestamp_monotonic=_opt_int(p.get("ActiveEnterTimestampMonotonic")) or None,
        invocation_id=p.get("InvocationID") or None,
        n_restarts=_opt_int(p.get("NRestarts")),
    )


# --- listening sockets ------------------------------------------------------------------------

_TCP_LISTEN = "0A"  # include/net/tcp_states.h: TCP_LISTEN = 10


def listening_ports_ss(text: str) -> frozenset[int]:
    """TCP ports in LISTEN state from `ss -Hltn` (a header line, if any, is skipped)."""
    ports = set()
    for line in text.splitlines():
        cols = line.split()
        if len(cols) < 4 or cols[0] != "LISTEN":
            continue
        _, _, port = cols[3].rpartition(":")
        if port.isdigit():
            ports.add(int(port))
    return frozenset(ports)


@dataclass(frozen=True)
class PortHolder:
    """A process listening on the server's port."""

    pid: int
    user: str | None
    command: str  # its command line (/proc/PID/cmdline, NULs as spaces)

    def describe(self) -> str:
        return (f"pid {self.pid} "
                f"({redact(self.command) or '?'}{', user ' + self.user if self.user else ''})")


def parse_port_holders(text: str) -> tuple[PortHolder, ...]:
    """`pid=N user=U` lines, each followed by `cmd=...` (the port_holders section)."""
    holders: list[PortHolder] = []
    pid: int | None = None
    user: str | None = None
    for line in text.splitlines():
        if line.startswith("pid="):
            head = dict(word.split("=", 1) for word in line.split() if "=" in word)
            pid = int(head["pid"]) if head.get("pid", "").isdigit() else None
            user = head.get("user") or None
        elif line.startswith("cmd=") and pid is not None:
            holders.append(PortHolder(pid, user, line[4:].strip()))
            pid = None
    return tuple(holders)


def listening_ports_proc(text: str) -> frozenset[int]:
    """TCP ports in LISTEN state from /proc/net/tcp and /proc/net/tcp6 (concatenated)."""
    ports = set()
    for line in text.splitlines():
        cols = line.split()
        if len(cols) < 4 or cols[3] != _TCP_LISTEN:
            continue
        _, _, port_hex = cols[1].rpartition(":")
        try:
            ports.add(int(port_hex, 16))
        except ValueError:
            continue
    return frozenset(ports)


# --- kernel locks -----------------------------------------------------------------------------


def _stat_id(text: str) -> tuple[int, int, int] | None:
    # `stat -c %D:%i`: st_dev in hex, split the way Linux encodes dev_t (kdev_t.h).
    dev_hex, _, inode = text.partition(":")
    try:
        dev = int(dev_hex, 16)
        major = ((dev >> 8) & 0xFFF) | ((dev >> 32) & ~0xFFF)
        minor = (dev & 0xFF) | ((dev >> 12) & ~0xFF)
        return major, minor, int(inode)
    except ValueError:
        return None


def _proc_locks_id(text: str) -> tuple[int, int, int] | None:
    # /proc/locks writes MAJOR:MINOR:INODE, major and minor in hex.
    parts = text.split(":")
    try:
        return int(parts[0], 16), int(parts[1], 16), int(parts[2])
    except (IndexError, ValueError):
        return None


def lock_holder_pid(proc_locks: str, file_id: str) -> int | None:
    """PID holding a lock on a file, from /proc/locks; None when no lock is held.

    `file_id` is `stat -c %D:%i` of the file (st_dev in hex, inode). Waiters (`->` lines)
    are not holders. An OFD lock has no owning process and gives -1.
    """
    wanted = _stat_id(file_id)
    for line in proc_locks.splitlines():
        cols = line.split()
        if wanted is None or len(cols) < 6 or cols[1] == "->":
            continue
        if _proc_locks_id(cols[5]) == wanted:
            return int(cols[4]) if cols[4].lstrip("-").isdigit() else -1
    return None


# --- df ---------------------------------------------------------------------------------------


def parse_df_available(text: str) -> int:
    """Free bytes from `df -Pk PATH` (POSIX format: header, then one line per file system)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 2:
        raise FactParseError("df printed no file system line")
    cols = lines[-1].split()
    # A file system name with spaces shifts columns from the left; count from the right.
    if len(cols) < 6 or not cols[-3].isdigit():
        raise FactParseError(f"unexpected df line: {lines[-1]!r}")
    return int(cols[-3]) * 1024


# --- the facts command ------------------------------------------------------------------------

# The files of a checkpoint that hold its weights (what SGLang reads when the model loads)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")

_MODEL_PROBE = """\
import json, sys
try:
    with open(sys.argv[1], encoding="utf-8") as f:
        config = json.load(f)
    print("architectures=" + json.dumps(config.get("architectures")))
    text = json.dumps(config, separators=(",", ":"))
    if len(text) <= 262144:
        print("config_json=" + text)
except Exception as e:
    print("config_error=" + json.dumps("%s: %s" % (type(e).__name__, e)))
try:
    import os
    folder = os.path.dirname(sys.argv[1])
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as f:
            size = json.load(f)["metadata"]["total_size"]
    else:
        size = sum(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder)
                   if n.endswith(".safetensors"))
    if isinstance(size, int) and size > 0:
        print("weights_bytes=%d" % size)
except Exception:
    pass
try:
    # the weight files this user may not open: safetensors reports one as "No such file"
    shut = sorted(n for n in os.listdir(folder) if n.endswith(@WEIGHT_SUFFIXES@)
                  and not os.access(os.path.join(folder, n), os.R_OK))
    if shut:
        print("unreadable_count=%d" % len(shut))
        print("unreadable_weights=" + json.dumps(shut[:3]))
except Exception:
    pass
""".replace("@WEIGHT_SUFFIXES@", repr(WEIGHT_SUFFIXES))

_SGLANG_PROBE = f"""\
import importlib.metadata as m, sys
try:
    print(m.version("sglang"))
except m.PackageNotFoundError:
    sys.exit({_SGLANG_MISSING_RC})
"""

_PYTHON_PROBE = 'import sys; print("%d.%d.%d" % sys.version_info[:3])'

# The driver runs this with `sh -c`; it must stay POSIX (dash, busybox). Every probe runs in a
# subshell with stdin closed so none can read the SSH channel or end the script.
_SCRIPT = r"""
sgd_tmp=$(mktemp -d 2>/dev/null) || {
  sgd_tmp=/tmp/sgdeploy-facts.$$; mkdir -m 700 "$sgd_tmp" 2>/dev/null || sgd_tmp=; }
if [ -z "$sgd_tmp" ]; then echo '@@sgdeploy:fatal no temporary directory@@'; exit 0; fi
trap 'rm -rf "$sgd_tmp"' EXIT
sgd_lines() {
  while IFS= read -r sgd_l || [ -n "$sgd_l" ]; do printf '%s%s\n' "$1" "$sgd_l"; done <"$2"
}
sgd_section() {
  sgd_name=$1; shift
  ("$@") </dev/null >"$sgd_tmp/$sgd_name.out" 2>"$sgd_tmp/$sgd_name.err"
  sgd_rc=$?
  printf '@@sgdeploy:begin %s@@\n' "$sgd_name"
  sgd_lines '|' "$sgd_tmp/$sgd_name.out"; sgd_lines '!' "$sgd_tmp/$sgd_name.err"
  printf '@@sgdeploy:end %s rc=%s@@\n' "$sgd_name" "$sgd_rc"
  return "$sgd_rc"
}
sgd_t() {
  if command -v timeout >/dev/null 2>&1; then timeout "$@"; else shift; "$@"; fi
}
s_request() { printf 'port=%s\n' "$sgd_port"; }
s_host() { uname -a; hostname; }
s_user() { if id -u "$sgd_user" >/dev/null 2>&1; then echo exists=1; else echo exists=0; fi; }
sgd_smi() { sgd_t 30 nvidia-smi "$@" --format=csv,noheader,nounits; }
s_gpus() { sgd_smi --query-gpu=@GPU_FIELDS@; }
s_gpus_legacy() { sgd_smi --query-gpu=@GPU_FIELDS_LEGACY@; }
s_gpu_apps() { sgd_smi --query-compute-apps=@APPS_FIELDS@; }
s_gpu_owners() { @OWNERS@ "$sgd_tmp/gpu_apps.out"; }
# The interpreter and the model are probed as the unit's User= (sgd_user) would see them.
sgd_as=
if [ -n "$sgd_user" ] && [ "$(id -un 2>/dev/null)" != "$sgd_user" ]; then
  if command -v runuser >/dev/null 2>&1; then sgd_as="runuser -u $sgd_user --"
  else sgd_as="sudo -n -u $sgd_user --"; fi
fi
s_python() {
  command -v "$sgd_py" || { echo "interpreter not found: $sgd_py" >&2; exit 127; }
  sgd_t 30 $sgd_as "$sgd_py" -c @PYTHON_PROBE@
}
s_sglang() { sgd_t 60 $sgd_as "$sgd_py" -c @SGLANG_PROBE@; }
s_model() {
  if [ -d "$sgd_model" ]; then echo dir=1; else echo dir=0; fi
  [ -f "$sgd_model/config.json" ] || { echo config=0; exit 0; }
  echo config=1
  [ "$sgd_pyok" = 1 ] || exit 0
  sgd_t 30 $sgd_as "$sgd_py" -c @MODEL_PROBE@ "$sgd_model/config.json"
}
# Each host file the launch names: missing, or readable (a folder: listable) by the unit's user.
s_files() {
  printf '%s\n' "$sgd_files" | while IFS= read -r f; do
    [ -n "$f" ] || continue
    if [ ! -e "$f" ]; then s=missing; elif $sgd_as test -r "$f"; then s=ok; else s=unreadable; fi
    printf '%s %s\n' "$s" "$f"
  done
}
s_listen_ss() { ss -Hltn; }
s_listen_proc() { cat /proc/net/tcp || exit; [ ! -r /proc/net/tcp6 ] || cat /proc/net/tcp6; }
s_port_holders() {
  ss -Hltnp "sport = :$sgd_port" | tr ',' '\n' | sed -n 's/^pid=\([0-9]*\).*/\1/p' | sort -u |
  while read -r p; do
    printf 'pid=%s user=%s\n' "$p" "$(stat -c %U "/proc/$p" 2>/dev/null)"
    printf 'cmd=%s\n' "$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-300)"
  done
}
s_unit() { sgd_t 30 systemctl show "$sgd_unit" -p @UNIT_PROPS@ --no-pager; }
s_state() { [ -e "$sgd_state" ] || exit 0; ls -1Ap "$sgd_state"; }
s_last_good() {
  if [ -L "$sgd_state/@LAST_GOOD@" ]; then readlink "$sgd_state/@LAST_GOOD@"
  elif [ -e "$sgd_state/@LAST_GOOD@" ]; then cat "$sgd_state/@LAST_GOOD@"; fi
}
s_lock() {
  [ -e "$sgd_state/@LOCK@" ] || exit 0
  stat -c 'id=%D:%i' "$sgd_state/@LOCK@" || echo id=
  echo --; cat "$sgd_state/@LOCK@"
}
s_proc_locks() { cat /proc/locks; }
s_disk() { df -Pk @UNIT_DIR@; }
# Within a group too, what does not need another section's answer runs beside it.
g_gpu() {
  [ "$sgd_gpu" = 1 ] || return 0
  sgd_section gpu_apps s_gpu_apps >"$sgd_tmp/g_apps" 2>&1 &
  sgd_apps=$!
  sgd_section gpus s_gpus
  case $? in 0|127) ;; *) sgd_section gpus_legacy s_gpus_legacy ;; esac
  wait "$sgd_apps"; sgd_apps_rc=$?
  cat "$sgd_tmp/g_apps"
  [ "$sgd_apps_rc" != 0 ] || sgd_section gpu_owners s_gpu_owners
}
g_python() {
  sgd_pyok=0
  sgd_section python s_python && sgd_pyok=1
  [ "$sgd_pyok" = 0 ] || sgd_section sglang s_sglang >"$sgd_tmp/g_sglang" 2>&1 &
  sgd_section model s_model
  [ -z "$sgd_files" ] || sgd_section files s_files
  wait
  [ ! -e "$sgd_tmp/g_sglang" ] || cat "$sgd_tmp/g_sglang"
}
g_system() {
  sgd_section request s_request
  sgd_section host s_host
  [ -z "$sgd_user" ] || sgd_section user s_user
  sgd_section listen_ss s_listen_ss || sgd_section listen_proc s_listen_proc
  sgd_section port_holders s_port_holders
  sgd_section unit s_unit
  sgd_section state s_state
  sgd_section last_good s_last_good
  sgd_section lock s_lock
  [ ! -e "$sgd_state/@LOCK@" ] || sgd_section proc_locks s_proc_locks
  sgd_section disk s_disk
}
# nvidia-smi and the interpreter starts take most of the time: the three groups run side by
# side (background jobs do not inherit the EXIT trap), each into its own file.
g_gpu >"$sgd_tmp/g_gpu" 2>&1 &
g_python >"$sgd_tmp/g_python" 2>&1 &
g_system >"$sgd_tmp/g_system" 2>&1
wait
cat "$sgd_tmp/g_system" "$sgd_tmp/g_gpu" "$sgd_tmp/g_python"
exit 0
"""


# systemd's unit name alphabet; anything else (a "/" above all) is refused, not quoted, since
# the name also becomes a folder under STATE_ROOT.
_UNIT_NAME = re.compile(r"[A-Za-z0-9:_.@\\-]{1,255}")
_USER_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}\$?")  # as deploy.user allows


def check_unit_name(unit: str) -> str:
    """Return `unit` if it is a valid systemd unit name; raise ValueError otherwise."""
    if not _UNIT_NAME.fullmatch(unit) or _unit_stem(unit).strip(".") == "":
        raise ValueError(f"not a valid systemd unit name: {unit!r}")
    return unit


def _service_name(unit: str) -> str:
    return unit if "." in unit else f"{unit}.service"


def _unit_stem(unit: str) -> str:
    return unit.removesuffix(".service")


def state_dir(unit: str) -> str:
    """The host folder holding a unit's deployments, `last_good` and lock."""
    return f"{STATE_ROOT}/{_unit_stem(check_unit_name(unit))}"


def facts_command(
    unit: str,
    python: str,
    model_path: str,
    port: int,
    gpu_query: bool = True,
    user: str | None = None,
    files: Sequence[str] = (),
) -> str:
    """The one POSIX sh command that prints every section `parse_facts` reads.

    `unit` is a unit name with or without `.service`. Values reach the shell only through
    shlex.quote'd variable assignments, so no value can change the script. `user` is the
    unit's `User=` (None: root): the interpreter and the model's config.json are probed as that
    user, with the rights the server will have, and so are `files` (absolute paths the launch
    opens: each is reported missing, unreadable or ok). Raises ValueError for an invalid unit or
    user name, a port outside 1-65535, a NUL byte (no path can hold one) or a newline in a file.
    """
    if not 0 < port < 65536:
        raise ValueError(f"port out of range: {port}")
    if user is not None and not _USER_NAME.fullmatch(user):
        raise ValueError(f"not a valid user name: {user!r}")
    if "\0" in python + model_path + "".join(files):
        raise ValueError("python, model_path and files cannot contain NUL bytes")
    if any("\n" in f or not f.startswith("/") for f in files):
        raise ValueError("files must be absolute paths without newlines")
    assignments = {
        "sgd_unit": _service_name(unit),
        "sgd_state": state_dir(unit),
        "sgd_py": python,
        "sgd_model": model_path,
        "sgd_port": str(port),
        "sgd_gpu": "1" if gpu_query else "0",
        "sgd_user": user or "",
        "sgd_files": "\n".join(files),
    }
    head = "".join(f"{k}={shlex.quote(v)}\n" for k, v in assignments.items())
    return head + _render_script()


def _render_script() -> str:
    constants = {
        "@GPU_FIELDS@": ",".join(GPU_QUERY_FIELDS),
        "@GPU_FIELDS_LEGACY@": ",".join(GPU_QUERY_FIELDS_LEGACY),
        "@APPS_FIELDS@": ",".join(APPS_QUERY_FIELDS),
        "@OWNERS@": GPU_OWNERS_SH,
        "@UNIT_PROPS@": ",".join(UNIT_PROPERTIES),
        "@PYTHON_PROBE@": shlex.quote(_PYTHON_PROBE),
        "@SGLANG_PROBE@": shlex.quote(_SGLANG_PROBE),
        "@MODEL_PROBE@": shlex.quote(_MODEL_PROBE),
        "@LAST_GOOD@": LAST_GOOD_NAME,
        "@LOCK@": LOCK_NAME,
        "@UNIT_DIR@": shlex.quote(UNIT_DIR),
    }
    script = _SCRIPT
    for placeholder, value in constants.items():
        script = script.replace(placeholder, value)
    return script.lstrip("\n")


# --- parsing the facts output -----------------------------------------------------------------

_BEGIN = re.compile(r"@@sgdeploy:begin (?P<name>[a-z_]+)@@")
_END = re.compile(r"@@sgdeploy:end (?P<name>[a-z_]+) rc=(?P<rc>\d+)@@")
_FATAL = re.compile(r"@@sgdeploy:fatal (?P<msg>.*)@@")


@dataclass(frozen=True)
class Section:
    """The captured output of one probe."""

    name: str
    rc: int | None  # None: the section was cut off before its end marker
    stdout: str = ""
    stderr: str = ""

    @property
    def ok(self) -> bool:
        """Whether the probe ran to the end and exited 0."""
        return self.rc == 0


@dataclass
class _Open:
    name: str
    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)

    def close(self, rc: int | None) -> Section:
        return Section(self.name, rc, _joined(self.out), _joined(self.err))


def _joined(lines: list[str]) -> str:
    return "".join(f"{line}\n" for line in lines)


def split_sections(output: str) -> tuple[dict[str, Section], tuple[str, ...]]:
    """Split facts output into sections by name, plus any fatal messages.

    Lines outside sections (login banners, shell noise) are ignored. A section cut off by
    the end of the output, or by the next begin marker, is kept with rc None.
    """
    sections: dict[str, Section] = {}
    fatal: list[str] = []
    current: _Open | None = None
    for line in output.splitlines():
        if current is not None and line[:1] in ("|", "!"):
            (current.out if line[0] == "|" else current.err).append(line[1:])
        elif m := _BEGIN.fullmatch(line):
            if current is not None:
                sections[current.name] = current.close(None)
            current = _Open(m["name"])
        elif (m := _END.fullmatch(line)) and current is not None and m["name"] == current.name:
            sections[current.name] = current.close(int(m["rc"]))
            current = None
        elif m := _FATAL.fullmatch(line):
            fatal.append(m["msg"])
    if current is not None:
        sections[current.name] = current.close(None)
    return sections, tuple(fatal)


def _failure(section: Section) -> str:
    if section.rc is None:
        return "output cut off before the section ended"
    if section.rc == _TIMEOUT_RC:
        return "timed out"
    # nvidia-smi reports its errors on stdout, other tools on stderr. Short messages are kept
    # whole (systemctl's first line is the useful one); of a traceback, the last line.
    lines = [ln.strip() for ln in (section.stderr or section.stdout).splitlines() if ln.strip()]
    detail = " ".join(lines) if len(lines) <= 3 else lines[-1]
    if section.rc == _NOT_FOUND_RC:
        return f"command not found: {detail or 'no output'}"
    return f"exit status {section.rc}: {detail or 'no output'}"


def _not_found(section: Section) -> bool:
    return section.rc == _NOT_FOUND_RC


class _Builder:
    """Collects facts section by section; a parser error in one only records an error."""

    def __init__(self, sections: Mapping[str, Section]) -> None:
        self.sections = sections
        self.values: dict[str, object] = {}
        self.errors: list[FactError] = []

    def fail(self, name: str, message: str) -> None:
        self.errors.append(FactError(name, message))

    def ok(self, name: str) -> Section | None:
        """The section if it succeeded; records the failure otherwise."""
        section = self.sections.get(name)
        if section is None:
            return None
        if not section.ok:
            self.fail(name, _failure(section))
            return None
        return section


def _facts_request(b: _Builder) -> None:
    if (s := b.ok("request")) is not None:
        port = parse_key_values(s.stdout).get("port", "")
        b.values["port"] = int(port) if port.isdigit() else None


def _facts_user(b: _Builder) -> None:
    if (s := b.ok("user")) is not None:
        b.values["user_exists"] = parse_key_values(s.stdout).get("exists") == "1"


def _facts_host(b: _Builder) -> None:
    if (s := b.ok("host")) is not None:
        lines = [*s.stdout.splitlines(), "", ""]
        b.values["kernel"] = lines[0].strip() or None
        b.values["hostname"] = lines[1].strip() or None


def _facts_gpus(b: _Builder) -> None:
    main = b.sections.get("gpus")
    if main is None:
        return
    b.values["nvidia_smi_found"] = not _not_found(main)
    legacy = b.sections.get("gpus_legacy")
    if main.ok:
        b.values["gpus"] = parse_query_gpu(main.stdout, GPU_QUERY_FIELDS)
    elif legacy is not None and legacy.ok:
        b.values["gpus"] = parse_query_gpu(legacy.stdout, GPU_QUERY_FIELDS_LEGACY)
    else:
        b.fail("gpus", "nvidia-smi not found" if _not_found(main) else _failure(main))
    apps = b.sections.get("gpu_apps")
    if apps is not None and apps.ok:
        owners = b.sections.get("gpu_owners")
        b.values["gpu_processes"] = with_owners(
            parse_compute_apps(apps.stdout, APPS_QUERY_FIELDS),
            parse_gpu_owners(owners.stdout) if owners and owners.ok else {},
        )
    elif apps is not None and not _not_found(apps):
        b.fail("gpu_apps", _failure(apps))


def _facts_python(b: _Builder) -> None:
    python = b.sections.get("python")
    if python is None:
        return
    if not python.ok:
        b.fail("python", _failure(python))
        return
    lines = python.stdout.splitlines()
    b.values["python_ok"] = True
    b.values["python_version"] = lines[-1].strip() if len(lines) > 1 else None
    sglang = b.sections.get("sglang")
    if sglang is None or sglang.rc == _SGLANG_MISSING_RC:
        return
    if sglang.ok and sglang.stdout.strip():
        b.values["sglang_version"] = sglang.stdout.strip().splitlines()[-1].strip()
    else:
        b.fail("sglang", _failure(sglang))


def _facts_model(b: _Builder) -> None:
    if (s := b.ok("model")) is None:
        return
    kv = parse_key_values(s.stdout)
    b.values["model_dir_present"] = kv.get("dir") == "1"
    b.values["model_config_present"] = kv.get("config") == "1"
    if "config_error" in kv:
        b.fail("model", f"config.json unreadable: {json.loads(kv['config_error'])}")
    archs = json.loads(kv["architectures"]) if "architectures" in kv else None
    if isinstance(archs, list):
        names = tuple(a for a in archs if isinstance(a, str))
        b.values["model_architectures"] = names
        b.values["model_architecture"] = names[0] if names else None
    if "config_json" in kv:
        b.values["model_config_json"] = kv["config_json"]
    if kv.get("weights_bytes", "").isdigit():
        b.values["model_weights_bytes"] = int(kv["weights_bytes"])
    if kv.get("unreadable_count", "").isdigit():
        b.values["model_unreadable_weights"] = (
            int(kv["unreadable_count"]),
            tuple(json.loads(kv.get("unreadable_weights", "[]"))),
        )


def _facts_files(b: _Builder) -> None:
    if (s := b.ok("files")) is None:
        return
    found = {}
    for line in s.stdout.splitlines():
        status, _, path = line.partition(" ")
        if status in ("ok", "missing", "unreadable") and path:
            found[path] = status
    b.values["host_files"] = found


def _facts_listen(b: _Builder) -> None:
    ss = b.sections.get("listen_ss")
    proc = b.sections.get("listen_proc")
    if (holders := b.sections.get("port_holders")) is not None and holders.ok:
        b.values["port_holders"] = parse_port_holders(holders.stdout)
    if ss is not None and ss.ok:
        b.values["listening_ports"] = listening_ports_ss(ss.stdout)
    elif proc is not None and proc.ok:
        b.values["listening_ports"] = listening_ports_proc(proc.stdout)
    elif proc is not None:
        b.fail("listen", _failure(proc))
    elif ss is not None:
        b.fail("listen", _failure(ss))


def _facts_unit(b: _Builder) -> None:
    if (s := b.ok("unit")) is not None:
        b.values["unit"] = parse_unit_state(s.stdout)


def _facts_state(b: _Builder) -> None:
    if (s := b.ok("state")) is not None:
        b.values["deployments"] = tuple(
            sorted(e.rstrip("/") for e in s.stdout.splitlines() if e.endswith("/"))
        )
    if (s := b.ok("last_good")) is not None and s.stdout.strip():
        # A file holding the id, or a link to the deployment's folder: the id is the last part.
        b.values["last_good"] = s.stdout.strip().splitlines()[0].rstrip("/").rpartition("/")[2]
    _facts_lock(b)


def _facts_lock(b: _Builder) -> None:
    if (s := b.ok("lock")) is None or not s.stdout:
        return
    head, _, content = s.stdout.partition("--\n")
    b.values["lock_present"] = True
    b.values["lock_holder"] = content.strip() or None
    file_id = parse_key_values(head).get("id", "")
    locks = b.ok("proc_locks")
    if not file_id or locks is None:
        b.values["locked"] = None
        return
    pid = lock_holder_pid(locks.stdout, file_id)
    b.values["locked"] = pid is not None
    b.values["lock_pid"] = pid if pid and pid > 0 else None


def _facts_disk(b: _Builder) -> None:
    if (s := b.ok("disk")) is not None:
        b.values["unit_dir_free_bytes"] = parse_df_available(s.stdout)


_STEPS = (
    ("request", _facts_request),
    ("host", _facts_host),
    ("user", _facts_user),
    ("gpus", _facts_gpus),
    ("python", _facts_python),
    ("model", _facts_model),
    ("files", _facts_files),
    ("listen", _facts_listen),
    ("unit", _facts_unit),
    ("state", _facts_state),
    ("disk", _facts_disk),
)


def parse_facts(output: str) -> HostFacts:
    """Build HostFacts from the stdout of `facts_command`.

    A section that failed, is missing or cannot be parsed leaves its facts at "unknown" and
    adds a FactError; it never affects the other sections.
    """
    sections, fatal = split_sections(output)
    b = _Builder(sections)
    b.errors.extend(FactError("script", msg) for msg in fatal)
    if not sections and not fatal:
        b.fail("script", "no facts sections in the output")
    for name, step in _STEPS:
        try:
            step(b)
        except (FactParseError, ValueError) as exc:  # json errors are ValueErrors too
            b.fail(name, f"unparseable output: {exc}")
    port, ports = b.values.get("port"), b.values.get("listening_ports")
    if isinstance(port, int) and isinstance(ports, frozenset):
        b.values["port_listening"] = port in ports
    return HostFacts(**b.values, errors=tuple(b.errors))  # type: ignore[arg-type]


# --- GPU idleness -----------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuHolder:
    """A process holding memory on one of the GPUs a deployment needs."""

    pid: int
    process_name: str
    used_memory_mib: int | None
    gpu_index: int | None
    gpu_uuid: str
    user: str | None = None
    unit: str | None = None  # the systemd unit it runs in (`sglang.service`, `session-3.scope`)

    def describe(self) -> str:
        """`GPU 1: pid 480 (python3, user alice, session-3.scope) holds 5000 MiB`."""
        owner = ", ".join(x for x in (self.process_name or "?", "user "
                                                                f"{self.user}" if self.user else "",
                                      self.unit or "") if x)
        memory = "?" if self.used_memory_mib is None else self.used_memory_mib
        gpu = self.gpu_index if self.gpu_index is not None else self.gpu_uuid
        return f"GPU {gpu}: pid {self.pid} ({owner}) holds {memory} MiB"


@dataclass(frozen=True)
class GpuResidue:
    """A GPU whose memory is above baseline while no process is listed on it.

    Seen while the driver is still tearing down an exited process, or when the holder lives
    in a PID namespace nvidia-smi cannot see (another container).
    """

    gpu_index: int
    gpu_uuid: str
    memory_used_mib: int
    baseline_mib: int


@dataclass(frozen=True)
class IdleVerdict:
    """Whether the selected GPUs are free for a new server, and if not, who holds them."""

    idle: bool
    holders: tuple[GpuHolder, ...] = ()
    residue: tuple[GpuResidue, ...] = ()
    unknown: tuple[str, ...] = ()  # selectors that match no GPU on the host

    def describe(self) -> str:
        """One line naming what keeps the GPUs busy (empty when idle)."""
        parts = [h.describe() for h in self.holders]
        parts += [
            f"GPU {r.gpu_index}: {r.memory_used_mib} MiB used by no listed process "
            f"(baseline {r.baseline_mib} MiB)"
            for r in self.residue
        ]
        parts += [f"no GPU {u} on this host" for u in self.unknown]
        return "; ".join(parts)


def _select(
    gpus: Sequence[GpuInfo], selectors: Iterable[int | str] | None
) -> tuple[list[GpuInfo], tuple[str, ...]]:
    if selectors is None:
        return list(gpus), ()
    chosen: list[GpuInfo] = []
    unknown: list[str] = []
    for sel in selectors:
        key = str(sel).strip()
        match = next((g for g in gpus if key in (str(g.index), g.uuid)), None)
        if match is None:
            unknown.append(key)
        elif match not in chosen:
            chosen.append(match)
    return chosen, tuple(unknown)


def gpus_idle(
    gpus: HostFacts | Sequence[GpuInfo],
    processes: Sequence[GpuProcess] | None = None,
    selected: Iterable[int | str] | None = None,
    baseline_mib: int = DEFAULT_IDLE_BASELINE_MIB,
    kept_pids: Iterable[int] = (),
) -> IdleVerdict:
    """Decide whether the selected GPUs (indices or UUIDs; None: all) are idle.

    Idle means: no compute process on any of them, and each one's used memory at or below
    `baseline_mib` (unknown memory is not held against it). Given HostFacts, the processes
    default to the ones it lists. `kept_pids` stay on purpose (a weight-cache daemon that keeps
    the weights for the next server): neither they nor the memory they hold count.
    """
    if isinstance(gpus, HostFacts):
        processes = gpus.gpu_processes if processes is None else processes
        gpus = gpus.gpus
    chosen, unknown = _select(gpus, selected)
    by_uuid = {g.uuid: g for g in chosen}
    kept = set(kept_pids)
    kept_mib = {
        uuid: sum(
            p.used_memory_mib or 0 for p in processes or () if p.pid in kept and p.gpu_uuid == uuid
        )
        for uuid in by_uuid
    }
    holders = tuple(
        GpuHolder(
            p.pid,
            p.process_name,
            p.used_memory_mib,
            by_uuid[p.gpu_uuid].index,
            p.gpu_uuid,
            p.user,
            p.unit,
        )
        for p in processes or ()
        if p.gpu_uuid in by_uuid and p.pid not in kept
    )
    held = {h.gpu_uuid for h in holders}
    residue = tuple(
        GpuResidue(g.index, g.uuid, g.memory_used_mib - kept_mib[g.uuid], baseline_mib)
        for g in chosen
        if g.uuid not in held and g.memory_used_mib is not None
        and g.memory_used_mib - kept_mib[g.uuid] > baseline_mib
    )
    return IdleVerdict(not (holders or residue or unknown), holders, residue, unknown)


# `gpus_idle`'s verdict on the host, for a decision that cannot wait a round trip (start right
# after the stop): exit 0 when idle. $1 is `--query-gpu=GPU_QUERY_FIELDS` output, $2
# `--query-compute-apps=APPS_QUERY_FIELDS` output, $3 (optional) the pids kept on purpose, one a
# line (read before $2); memory.used is the next-to-last column and gpu_uuid the last, so a GPU or
# process name with a comma in it changes nothing. A kept process's memory is taken off its GPU's.
_IDLE_AWK = r"""
function trim(s) { gsub(/^[ \t]+|[ \t\r]+$/, "", s); return s }
BEGIN { n = split(want, w, " "); for (i = 1; i <= n; i++) need[w[i]] = 1; busy = 0 }
FILENAME == ARGV[1] {
  if (NF < 3) next
  idx = trim($1); id = trim($2); mem = trim($(NF - 1))
  if (n > 0 && !(idx in need) && !(id in need)) next
  chosen[id] = 1; found[idx] = 1; found[id] = 1
  if (mem ~ /^[0-9]+(\.[0-9]+)?$/) used[id] = mem + 0
  next
}
FILENAME == ARGV[2] { kept[trim($0)] = 1; next }
NF >= 2 && (trim($NF) in chosen) {
  if (trim($1) in kept) { m = trim($(NF - 1)); if (m ~ /^[0-9]+$/) used[trim($NF)] -= m; next }
  busy = 1
}
END {
  for (id in used) if (used[id] > base) busy = 1
  for (k in need) if (!(k in found)) busy = 1
  exit busy
}
"""


def idle_check_sh(
    selected: Iterable[int | str] | None, baseline_mib: int = DEFAULT_IDLE_BASELINE_MIB
) -> str:
    """A shell function `sgd_idle GPUS_FILE APPS_FILE` deciding as `gpus_idle` does (exit 0:
    idle)."""
    want = " ".join(str(s).strip() for s in selected or ())
    if not re.fullmatch(r"[A-Za-z0-9 -]*", want):
        raise ValueError(f"not a GPU index or UUID: {want!r}")
    return (f"sgd_idle() {{ awk -F, -v want={shlex.quote(want)} -v base={int(baseline_mib)} "
            f"{shlex.quote(_IDLE_AWK)} \"$1\" \"${{3:-/dev/null}}\" \"$2\"; }}")


def gpu_strangers(
    gpus: Sequence[GpuInfo],
    processes: Sequence[GpuProcess],
    selected: Iterable[int | str] | None,
    unit: str,
    own_pids: Iterable[int] = (),
    unit_active: bool = True,
    own_units: Iterable[str] = (),
) -> tuple[tuple[GpuHolder, ...], tuple[GpuHolder, ...]]:
    """Processes on the selected GPUs that are not the unit's own: (strangers, undecided).

    A process is the unit's own when its cgroup is the unit's, or its pid is in `own_pids`
    (the unit's main pid, servers `--adopt` stops). One whose cgroup cannot be read here (a
    pid of another PID namespace) is a stranger when the unit is not running, else undecided:
    it may be the unit's own server seen through a container boundary.
    """
    service = _service_name(unit)
    # the deployment's other units (its daemon)
    services = {service, *(_service_name(u) for u in own_units)}
    own = set(own_pids)
    strangers: list[GpuHolder] = []
    undecided: list[GpuHolder] = []
    for holder in gpus_idle(gpus, processes, selected).holders:
        if holder.pid in own or holder.unit in services:
            continue
        process = next(
            p for p in processes if p.pid == holder.pid and p.gpu_uuid == holder.gpu_uuid
        )
        (undecided if process.cgroup is None and unit_active else strangers).append(holder)
    return tuple(strangers), tuple(undecided)
