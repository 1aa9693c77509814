"""`sgdeploy init`: a host's inventory entry and a starting profile, read from the host itself.

One connection: the interpreter that has SGLang (the one given, else that of a running SGLang
server, else `python3` on the PATH), then the facts round trip `plan` makes (GPUs, compute
capability, memory, SGLang's version). What could not be read is said, never guessed.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from sgdeploy.deploy.plan import DEFAULT_PORT
from sgdeploy.host.facts import HostFacts, facts_command, parse_facts
from sgdeploy.host.remote import RemoteHost
from sgdeploy.host.running import read_servers
from sgdeploy.profile.inventory import HostEntry

MIB_PER_GIB = 1024
# Prints the first candidate interpreter that imports SGLang, as an absolute path (not resolved:
# a venv's bin/python3 is a link to the system's, which lacks the venv's packages).
_FIND_PYTHON = """\
for p in "$@"; do
  [ -n "$p" ] || continue
  path=$(command -v "$p" 2>/dev/null) || continue
  "$path" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("sglang") is None)' \\
    >/dev/null 2>&1 && { echo "$path"; exit 0; }
done
exit 1
"""


@dataclass(frozen=True)
class HostReading:
    """What one connection to a new host found: the interpreter with SGLang and the facts."""

    name: str
    address: str
    user: str | None
    python: str | None
    facts: HostFacts

    @property
    def problems(self) -> list[str]:
        """What could not be read, each with what to do about it."""
        found = []
        if not self.facts.nvidia_smi_found:
            found.append("nvidia-smi was not found: install the NVIDIA driver; the GPU facts are "
                         "left out")
        elif not self.facts.gpus:
            found.append("nvidia-smi lists no GPU; the GPU facts are left out")
        if self.python is None:
            found.append("no interpreter with SGLang was found: pass --python "
                         "/path/to/venv/bin/python3")
        elif not self.facts.sglang_version:
            found.append(f"{self.python} has no SGLang: install it there, or pass --python")
        return found

    def inventory_entry(self) -> dict[str, object]:
        """The `[hosts.NAME]` keys, in the order docs/reference.md lists them."""
        entry: dict[str, object] = {"address": self.address}
        if self.user:
            entry["user"] = self.user
        gpus = self.facts.gpus
        if gpus:
            first = gpus[0]
            entry["gpu"] = first.name
            if first.compute_capability:
                entry["compute_capability"] = first.compute_capability
            entry["gpu_count"] = len(gpus)
            if first.memory_total_mib:
                entry["gpu_memory_gib"] = round(first.memory_total_mib / MIB_PER_GIB)
        if self.facts.sglang_version:
            entry["sglang_version"] = self.facts.sglang_version
        return entry


def read_new_host(name: str, entry: HostEntry, python: str | None = None) -> HostReading:
    """Connect to a host not yet described and read what its inventory entry needs."""
    with RemoteHost(name, entry).connect() as remote:
        found = python or _python_with_sglang(remote)
        command = facts_command("sglang", found or "python3", "", DEFAULT_PORT)
        facts = parse_facts(remote.run(command).stdout)
    return HostReading(name, entry.address, entry.user, found, facts)


def _python_with_sglang(remote: RemoteHost) -> str | None:
    running = [s.process.python for s in read_servers(remote).servers if s.process.python]
    candidates = [*dict.fromkeys(running), "python3", "python"]
    result = remote.run("sh -s -- " + " ".join(shlex.quote(c) for c in candidates),
                        stdin=_FIND_PYTHON.encode())
    found = result.stdout.strip()
    return found if result.exit_code == 0 and found else None


def toml_value(value: object) -> str:
    """A TOML scalar: JSON's string escapes are TOML's basic-string escapes."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)


def entry_text(name: str, entry: dict[str, object]) -> str:
    keys = "".join(f"{key} = {toml_value(value)}\n" for key, value in entry.items())
    return f"[hosts.{name}]\n{keys}"


def starting_profile(reading: HostReading, model_path: str, unit: str = "sglang") -> str:
    """A profile that serves `model_path` on every GPU of the host, to edit from there."""
    gpus = len(reading.facts.gpus) or 1
    lines = [
        f"# A starting profile for {reading.name}, written by `sgdeploy init`: every GPU in one",
        "# server. Edit [server] with SGLang's ServerArgs names (docs/reference.md); validate.",
        "[deploy]",
        f"host = {toml_value(reading.name)}",
        f"unit = {toml_value(unit)}",
        f"python = {toml_value(reading.python or '/path/to/venv/bin/python3')}",
        "",
        "[server]",
        f"model_path = {toml_value(model_path)}",
        'host = "0.0.0.0"  # reachable from other machines; "127.0.0.1" keeps it on the host',
        f"port = {DEFAULT_PORT}",
        f"tp_size = {gpus}",
    ]
    return "\n".join(lines) + "\n"


def host_in_inventory(path: Path, name: str) -> bool:
    """The inventory already has `[hosts.NAME]` (read as text: a broken inventory is no reason
    not to say so)."""
    if not path.is_file():
        return False
    header = f"[hosts.{name}]"
    return any(line.strip() == header for line in path.read_text(encoding="utf-8").splitlines())


def append_entry(path: Path, name: str, entry: dict[str, object]) -> None:
    """Add the entry at the end of the inventory, creating the file when there is none."""
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    gap = "" if not text else "\n" if text.endswith("\n") else "\n\n"
    path.write_text(text + gap + entry_text(name, entry), encoding="utf-8")
