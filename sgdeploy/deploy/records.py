"""Deployment records read back: a record folder's files as the host prints them, and the
deployment (or probe figures) they hold. Pure: the round trips are `HostSession`'s."""

from __future__ import annotations

import base64
import binascii
import json
import re
import tomllib
from typing import Any

from sgdeploy.deploy.plan import DEFAULT_PORT, Deployment, gpus_for, new_deployment_id
from sgdeploy.sglang.catalog import newest_version

RECORD_FILES = ("meta.json", "profile.toml", "unit.service")
WEIGHTS_FILE = "weights.service"  # the weight-cache daemon's unit, in the records of its clients


def record_files_sh(folder: str) -> str:
    """sh printing a record's files in `folder` (a shell word) for `split_files`."""
    return (f"for f in {' '.join(RECORD_FILES)}; do printf '@@file %s@@\\n' $f; "
            f"base64 {folder}/$f 2>/dev/null || exit 1; done; "
            f"[ ! -e {folder}/{WEIGHTS_FILE} ] || {{ printf '@@file %s@@\\n' {WEIGHTS_FILE}; "
            f"base64 {folder}/{WEIGHTS_FILE}; }}")


def split_files(output: str) -> dict[str, str] | None:
    """The files `record_files_sh` printed; None when one is missing or does not decode."""
    files: dict[str, str] = {}
    name: str | None = None
    chunks: list[str] = []
    for line in [*output.splitlines(), "@@file @@"]:
        if line.startswith("@@file ") and line.endswith("@@"):
            if name:
                try:
                    files[name] = base64.b64decode("".join(chunks)).decode("utf-8", "replace")
                except (binascii.Error, ValueError):
                    return None
            name, chunks = line[7:-2], []
        else:
            chunks.append(line.strip())
    return files if set(RECORD_FILES) <= files.keys() else None


def exec_port(unit_text: str) -> int | None:
    """The --port of a unit's ExecStart= (quoted or not), for a unit sgdeploy did not render."""
    match = re.search(r'"?--port"?(?:\s+|=)"?(\d{1,5})"?', unit_text)
    return int(match.group(1)) if match else None


def running_port(unit_text: str | None, active: bool) -> int | None:
    """The port the server of an installed unit listens on; None when the unit does not run."""
    return (exec_port(unit_text) or DEFAULT_PORT) if active and unit_text else None


def deployment_from_files(
    unit: str, deployment_id: str, files: dict[str, str]
) -> Deployment | None:
    """A recorded deployment from its files, to start again; None if they are corrupt."""
    try:
        meta = json.loads(files["meta.json"])
        profile = tomllib.loads(files["profile.toml"]) if files["profile.toml"] else {}
    except (ValueError, tomllib.TOMLDecodeError):
        return None
    if not isinstance(meta, dict):
        return None
    server = profile.get("server", {}) if isinstance(profile.get("server"), dict) else {}
    deploy = profile.get("deploy", {}) if isinstance(profile.get("deploy"), dict) else {}
    expect: tuple[str, ...] | None = None
    if not server:  # a restored hand-made unit has no profile: its unit says the port
        port = exec_port(files["unit.service"])
        server, expect = ({"port": port} if port else {}), ("ready",)
    timeout = deploy.get("ready_timeout_s", 1200)
    gpus = deploy.get("gpus") if isinstance(deploy.get("gpus"), list) else None
    return Deployment(
        id=new_deployment_id(str(meta.get("profile_sha256") or "0" * 8)),
        unit=unit,
        unit_text=files["unit.service"],
        daemon_text=files.get(WEIGHTS_FILE),
        profile_name=str(meta.get("profile", "")),
        profile_sha256=str(meta.get("profile_sha256", "")),
        profile_text=files["profile.toml"],
        # a record from before versions were kept
        sglang_version=str(meta.get("sglang_version") or newest_version()),
        server=server,
        gpus=gpus_for(server, gpus),
        ready_timeout_s=timeout if isinstance(timeout, int) and timeout > 0 else 1200,
        rollback_of=deployment_id,
        probe_settings=profile.get("probe") if isinstance(profile.get("probe"), dict) else None,
        expect=expect,
    )


def recorded_probe(files: dict[str, str]) -> dict[str, Any] | None:
    """The throughput figures a deployment record holds, if it has any."""
    try:
        meta = json.loads(files["meta.json"])
    except ValueError:
        return None
    probe = meta.get("probe") if isinstance(meta, dict) else None
    return probe if isinstance(probe, dict) else None


def recorded_server(files: dict[str, str]) -> dict[str, Any] | None:
    """The `[server]` table of a record's profile ({} for a unit found on the host); None if
    corrupt."""
    try:
        server = (
            tomllib.loads(files["profile.toml"]).get("server", {}) if files["profile.toml"] else {}
        )
    except ValueError:
        return None
    return server if isinstance(server, dict) else {}


def recorded_startup_s(files: dict[str, str] | None) -> float | None:
    """How long a recorded deployment took from its start to ready (`meta.json`'s startup_s)."""
    try:
        meta = json.loads((files or {}).get("meta.json") or "null")
    except ValueError:
        return None
    value = meta.get("startup_s") if isinstance(meta, dict) else None
    return (
        float(value)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0
        else None
    )
