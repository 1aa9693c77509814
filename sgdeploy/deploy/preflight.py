"""Preflight: is this profile runnable on this host, judged from live host facts?

Runs before anything on the host changes. It repeats the validation with what the host
really has (GPU count and generation, installed SGLang version, the model's architecture) and
adds the checks only a live host can answer (interpreter, model path, port, nvidia-smi).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from sgdeploy.core.diagnostics import Diagnostic, Severity
from sgdeploy.deploy.hardening import unit_sandbox
from sgdeploy.deploy.weight_daemon import deployment_strangers
from sgdeploy.host.facts import GpuHolder, HostFacts
from sgdeploy.profile.model import LoadedProfile
from sgdeploy.profile.validate import check_launch
from sgdeploy.sglang.catalog import UnknownVersionError, load_catalog
from sgdeploy.sglang.hostfiles import HostFile, host_files
from sgdeploy.sglang.model_config import ModelConfig, ModelConfigError, parse_model_config
from sgdeploy.sglang.target import HostTarget


def host_model_config(facts: HostFacts, name: str, model_path: object) -> ModelConfig | None:
    """The model's config.json as the host sent it (None when it did not, or it does not parse)."""
    if facts.model_config_json is None:
        return None
    try:
        return parse_model_config(facts.model_config_json, f"{name}:{model_path}/config.json",
                                  facts.model_weights_bytes)
    except ModelConfigError:
        return None


def host_target(name: str, facts: HostFacts, declared: HostTarget | None) -> HostTarget:
    """What validation should assume about the host: live facts first, the inventory second."""
    gpu = facts.gpus[0] if facts.gpus else None
    return HostTarget(
        name=name,
        gpu=gpu.name if gpu else (declared.gpu if declared else None),
        compute_capability=(gpu.compute_capability if gpu and gpu.compute_capability
                            else declared.compute_capability if declared else None),
        gpu_count=len(facts.gpus) if facts.gpus else (declared.gpu_count if declared else None),
        gpu_memory_gib=(round(gpu.memory_total_mib / 1024, 1) if gpu and gpu.memory_total_mib
                        else declared.gpu_memory_gib if declared else None),
        sglang_version=facts.sglang_version or (declared.sglang_version if declared else None),
        address=declared.address if declared else None,
    )


@dataclass(frozen=True)
class Preflight:
    """What the checks before the stop found on the host."""

    diagnostics: list[Diagnostic]
    host: HostTarget  # the host as its facts show it (the inventory's declaration fills gaps)
    # the SGLang release to check the launch against; None when the launch cannot be checked (no
    # SGLang, or no catalog for it and no `host_check`: SGLang's own check on the host, which
    # then decides alone)
    sglang_version: str | None


def preflight(
    loaded: LoadedProfile,
    name: str,
    facts: HostFacts,
    declared: HostTarget | None,
    host_check: bool = False,
) -> Preflight:
    """The checks before the stop: running `loaded` on the host with these facts."""
    profile = loaded.model
    assert profile is not None
    found: list[Diagnostic] = []

    def add(
        rule: str, message: str, dotted: str | None, hint: str, severity: Severity = Severity.ERROR
    ) -> None:
        found.append(loaded.diagnostic(rule, message, dotted=dotted, hint=hint, severity=severity))

    target = host_target(name, facts, declared)
    if facts.user_exists is False:
        user = profile.deploy.run_as
        add("SGD715", f"user {user}, who runs the server, does not exist on {name}", "deploy.user",
            f"create it as root: useradd --system --no-create-home --home-dir /nonexistent --shell "
            f"/usr/sbin/nologin {user} (or set deploy.user to an existing account)")
        return Preflight(found, target, None)
    if not facts.python_ok:
        error = facts.error("python")
        add("SGD701", f"{profile.deploy.python} does not run on {name}"
            + (f" ({error.message})" if error else ""), "deploy.python", "point deploy.python at "
            "the interpreter of the environment that has sglang installed")
    elif facts.sglang_version is None:
        add("SGD702", f"sglang is not installed for {profile.deploy.python} on "
                      f"{name}", "deploy.python",
            "install sglang into that environment or fix deploy.python")
    if not facts.gpus:
        add(
            "SGD706",
            f"no GPU found on {name}"
            + (" (nvidia-smi is missing)" if facts.nvidia_smi_found is False else ""),
            "deploy.host",
            "check the NVIDIA driver",
        )
    if facts.model_config_present is False:
        add("SGD704", f"{profile.server.get('model_path')} has no config.json on "
                      f"{name}", "server.model_path",
            "copy the model to the host or fix model_path")
    elif (unreadable := facts.error("model")) is not None:
        reader = f"user {profile.deploy.run_as}" if profile.deploy.run_as else "root"
        add("SGD704", f"{profile.server.get('model_path')}/config.json on {name} cannot be read by "
            f"{reader}, who runs the server: {unreadable.message}", "server.model_path",
            "make the model readable by deploy.user (or fix deploy.user), or repair config.json")
    elif (shut := facts.model_unreadable_weights)[0]:
        reader = f"user {profile.deploy.run_as}" if profile.deploy.run_as else "root"
        folder = profile.server.get("model_path")
        more = f" and {shut[0] - len(shut[1])} more" if shut[0] > len(shut[1]) else ""
        add("SGD704", f"{shut[0]} weight file(s) in {folder} on {name} cannot be read by {reader}, "
            f"who runs the server ({', '.join(shut[1])}{more}); SGLang would fail after the stop "
            "with 'No such file or directory'", "server.model_path",
            f"make them readable, e.g. chmod a+r {folder}/* (or chown them to that user)")
    found.extend(_host_file_problems(loaded, name, facts))
    if facts.port_listening and not (facts.unit and facts.unit.active):
        holders = "; ".join(h.describe() for h in facts.port_holders) or "a process"
        add("SGD705", f"port {facts.port} is already in use on {name} by {holders} outside the "
                      "unit",
            "server.port", "stop that process or choose another port; if it is the SGLang server "
            "this profile imports, `apply --adopt` stops it and takes over")
    if declared is not None:
        found.extend(_mismatches(loaded, declared, target))

    version = target.sglang_version if facts.sglang_version else None
    if version is not None:
        try:
            version = load_catalog(version).version
        except (UnknownVersionError, ValueError):
            if host_check:
                add("SGD703", f"{name} runs SGLang {version}, for which no flag catalog is "
                    "bundled: its flags and cross-flag rules were not checked offline; SGLang's "
                    "own check on the host decides",
                    "deploy.host", "upgrade sgdeploy, or build a catalog "
                    "(scripts/build_catalogs.py) into "
                    "SGDEPLOY_CATALOG_PATH", severity=Severity.WARNING)
                return Preflight(found, target, version)
            add("SGD703", f"{name} runs SGLang {version}, for which no flag catalog is bundled, "
                "and SGLang's own check on the host is off; refusing to validate against another "
                "version", "deploy.host",
                "drop --no-sglang-check, upgrade sgdeploy, or build a catalog "
                "(scripts/build_catalogs.py) into SGDEPLOY_CATALOG_PATH")
            version = None
    if version is not None:
        found.extend(
            check_launch(
                loaded,
                target,
                version,
                architecture=facts.model_architecture,
                model_config=host_model_config(facts, name, profile.server.get("model_path")),
            )
        )
    return Preflight(found, target, version)


class CheckedPath(NamedTuple):
    """A path the facts round trip checks as the unit's user, and the key that names it."""

    dotted: str
    file: HostFile
    written: bool  # a folder a strict unit writes (ReadWritePaths=), not a file SGLang reads


def launch_paths(loaded: LoadedProfile) -> list[CheckedPath]:
    """The host files the launch opens (sgdeploy.sglang.hostfiles) and, for a strict unit, the
    folders it may write: a missing one would leave SGLang a read-only file system."""
    profile = loaded.model
    assert profile is not None
    paths = [CheckedPath(f"server.{f.key}", f, False)
             for f in host_files(profile.server, profile.deploy.working_directory)]
    sandbox = unit_sandbox(profile)
    if sandbox is not None:
        paths += [
            CheckedPath(w.field, HostFile(w.field, w.path, w.path), True) for w in sandbox.writable
        ]
    return paths


def host_file_paths(loaded: LoadedProfile) -> tuple[str, ...]:
    """The absolute paths the facts round trip checks for this launch; a path no file can have (a
    newline, a NUL byte) is left to SGLang's own error."""
    return tuple(
        p.file.path
        for p in launch_paths(loaded)
        if "\n" not in p.file.path and "\0" not in p.file.path
    )


def _host_file_problems(loaded: LoadedProfile, name: str, facts: HostFacts) -> list[Diagnostic]:
    """SGD713: each host file the launch names that the unit's user cannot open."""
    profile = loaded.model
    assert profile is not None
    reader = f"user {profile.deploy.run_as}" if profile.deploy.run_as else "root"
    found = []
    for dotted, host_file, written in launch_paths(loaded):
        status = facts.host_files.get(host_file.path)
        if status not in ("missing", "unreadable"):
            continue
        shown = (
            host_file.path
            if host_file.path == host_file.value
            else f"{host_file.value!r} ({host_file.path})"
        )
        what = "does not exist" if status == "missing" else (f"cannot be read by {reader}, who "
                                                             "runs the server")
        found.append(loaded.diagnostic(
            "SGD713", f"{host_file.key}: {shown} {what} on {name}", dotted=dotted,
            hint="copy the file to the host, fix the path, or make it readable by deploy.user"
            + ("; a folder a strict unit writes must exist before the start" if written else "")))
    return found


def gpu_holders(
    loaded: LoadedProfile, name: str, facts: HostFacts, gpus: tuple[int | str, ...],
    own_pids: tuple[int, ...] = (), waiting_s: float | None = None,
) -> tuple[list[Diagnostic], tuple[GpuHolder, ...]]:
    """SGD710: processes outside the unit on the GPUs the launch uses, decided before the stop.

    Returns the diagnostics and the strangers; with `waiting_s` (`--wait-for-gpus`) they are a
    note and apply waits for them to leave before it stops anything.
    """
    profile = loaded.model
    assert profile is not None
    unit = facts.unit
    active = bool(unit and unit.active)
    own = (*own_pids, *((unit.main_pid,) if unit and unit.main_pid else ()))
    strangers, undecided = deployment_strangers(
        facts.gpus, facts.gpu_processes, gpus, profile.deploy.unit, own, active
    )
    found: list[Diagnostic] = []
    if strangers:
        held = "; ".join(h.describe() for h in strangers)
        if waiting_s is None:
            found.append(loaded.diagnostic(
                "SGD710", f"processes outside {profile.deploy.unit}.service hold the GPUs this "
                f"launch uses on {name}: {held}; nothing was "
                "stopped", dotted="deploy.gpus" if profile.deploy.gpus else "deploy.host",
                hint="stop them, choose other GPUs (deploy.gpus), or wait for them with "
                "--wait-for-gpus SECONDS"))
        else:
            found.append(
                loaded.diagnostic(
                    "SGD710",
                    f"{held}: waiting up to {waiting_s:.0f} s for them to leave before "
                    "anything stops",
                    dotted="deploy.host",
                    hint="they are not part of the unit",
                    severity=Severity.WARNING,
                )
            )
    if undecided:
        found.append(loaded.diagnostic(
            "SGD710", "cannot tell whose these GPU processes are (no /proc entry: another PID "
                      "namespace?): "
            + "; ".join(h.describe() for h in undecided), dotted="deploy.host",
            hint="if they are not the unit's server, the new server will not "
            "fit", severity=Severity.WARNING))
    return found, strangers


def _mismatches(loaded: LoadedProfile, declared: HostTarget, seen: HostTarget) -> list[Diagnostic]:
    notes = []
    for what, expected, actual in (
        ("GPU count", declared.gpu_count, seen.gpu_count),
        ("compute capability", declared.compute_capability, seen.compute_capability),
        ("SGLang version", declared.sglang_version, seen.sglang_version),
    ):
        if expected is not None and actual is not None and str(expected) != str(actual):
            notes.append(loaded.diagnostic(
                "SGD707", f"the inventory says {what} {expected} for {declared.name}, the host has "
                f"{actual}; validated against the "
                "host", dotted="deploy.host", hint="update inventory.toml",
                severity=Severity.WARNING))
    return notes
