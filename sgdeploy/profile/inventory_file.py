"""Where the inventory is, and a host's connection settings read from it before validation.

Apply connects while the CLI still imports pydantic and validates (sgdeploy/deploy/early.py); this
module lets it begin without either. What it reads is a guess: the connection is kept only if
the validated entry (sgdeploy/profile/inventory.py) has the same settings.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from sgdeploy.host.sshconfig import SshEntry

DEFAULT_INVENTORY = "inventory.toml"
INVENTORY_ENV = "SGDEPLOY_INVENTORY"

_TEXT_FIELDS = ("user", "identity_file", "known_hosts", "proxy_jump")
_FLAG_FIELDS = ("strict_host_key_checking",)


def inventory_path(explicit: str | None) -> Path:
    return Path(explicit or os.environ.get(INVENTORY_ENV) or DEFAULT_INVENTORY)


def placed(path: str | None, folder: Path) -> str | None:
    """A path the inventory names, read from the inventory's folder when relative (`~` stays)."""
    if path and not path.startswith("~") and not os.path.isabs(path):
        return str(folder / path)
    return path


def read_raw(path: str | Path) -> dict[str, Any] | None:
    """A TOML file's tables as written, or None when it cannot be read or parsed."""
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError):
        return None  # validation reads it again and says what is wrong


def unvalidated_ssh_entry(path: Path, name: str) -> SshEntry | None:
    """Host `name`'s connection settings as the inventory at `path` writes them; None where
    anything is not plainly what validation would accept, or a gateway is involved (apply then
    connects after validation, as it would without this)."""
    raw = read_raw(path)
    hosts = raw.get("hosts") if raw else None
    entry = hosts.get(name) if isinstance(hosts, dict) else None
    if raw is None or not isinstance(entry, dict) or "gateways" in raw or "gateway" in entry:
        return None
    address, become, port = entry.get("address"), entry.get("become"), entry.get("port")
    ssh_config = entry.get("ssh_config") or raw.get("ssh_config")
    texts = (ssh_config, *(entry.get(f) for f in _TEXT_FIELDS))
    flags = (become, *(entry.get(f) for f in _FLAG_FIELDS))
    if (not isinstance(address, str) or not all(isinstance(v, str | None) for v in texts)
            or not all(isinstance(v, bool | None) for v in flags)
            or not (port is None or (isinstance(port, int) and not isinstance(port, bool)))):
        return None
    return SshEntry.made(address, placed(ssh_config, path.parent), become, entry)
