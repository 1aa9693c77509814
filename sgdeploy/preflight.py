"""Preflight: is this profile runnable on this host, judged from live host facts?

Runs before anything on the host changes. It repeats the validation with what the host
really has (GPU count and generation, installed SGLang version, the model's architecture) and
adds the checks only a live host can answer (interpreter, model path, port, nvidia-smi).
"""

from __future__ import annotations

from sgdeploy.diagnostics import Diagnostic, Severity
from sgdeploy.facts import HostFacts
from sgdeploy.inventory import HostTarget
from sgdeploy.profile import LoadedProfile
from sgdeploy.sglang.catalog import UnknownVersionError, load_catalog
from sgdeploy.sglang.model_config import ModelConfig, ModelConfigError, parse_model_config
from sgdeploy.validate import check_launch


def host_model_config(facts: HostFacts, name: str, model_path: object) -> ModelConfig | None:
    """The model's config.json as the host sent it (None when it did not, or it does not parse)."""
    if facts.model_config_json is None:
        return None
    try:
        return parse_model_config(facts.model_config_json, f"{name}:{model_path}/config.json")
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


def preflight(
    loaded: LoadedProfile, name: str, facts: HostFacts, declared: HostTarget | None
) -> tuple[list[Diagnostic], HostTarget, str | None]:
    """Diagnostics for running `loaded` on the host, the host as seen, and the SGLang version.

    The version is None when the launch cannot be checked (no SGLang, or no catalog for it).
    """
    profile = loaded.model
    assert profile is not None
    found: list[Diagnostic] = []

    def add(rule: str, message: str, dotted: str | None, hint: str, severity: Severity = Severity.ERROR) -> None:
        found.append(loaded.diagnostic(rule, message, dotted=dotted, hint=hint, severity=severity))

    target = host_target(name, facts, declared)
    if not facts.python_ok:
        error = facts.error("python")
        add("SGD701", f"{profile.deploy.python} does not run on {name}"
            + (f" ({error.message})" if error else ""), "deploy.python", "point deploy.python at the "
            "interpreter of the environment that has sglang installed")
    elif facts.sglang_version is None:
        add("SGD702", f"sglang is not installed for {profile.deploy.python} on {name}", "deploy.python",
            "install sglang into that environment or fix deploy.python")
    if not facts.gpus:
        add("SGD706", f"no GPU found on {name}" + (" (nvidia-smi is missing)" if facts.nvidia_smi_found is False
                                                    else ""), "deploy.host", "check the NVIDIA driver")
    if facts.model_config_present is False:
        add("SGD704", f"{profile.server.get('model_path')} has no config.json on {name}", "server.model_path",
            "copy the model to the host or fix model_path")
    if facts.port_listening and not (facts.unit and facts.unit.active):
        add("SGD705", f"port {facts.port} is already in use on {name} by a process outside the unit",
            "server.port", "stop that process or choose another port; if it is the SGLang server this profile "
            "imports, `apply --adopt` stops it and takes over")
    if declared is not None:
        found.extend(_mismatches(loaded, declared, target))

    version = target.sglang_version if facts.sglang_version else None
    if version is not None:
        try:
            version = load_catalog(version).version
        except (UnknownVersionError, ValueError):
            add("SGD703", f"{name} runs SGLang {version}, for which no flag catalog is bundled; "
                "refusing to validate against another version", "deploy.host",
                "upgrade sgdeploy, or build a catalog (scripts/build_catalogs.py) into SGDEPLOY_CATALOG_PATH")
            version = None
    if version is not None:
        found.extend(check_launch(loaded, target, version, architecture=facts.model_architecture,
                                  model_config=host_model_config(facts, name, profile.server.get("model_path"))))
    return found, target, version


def _mismatches(loaded: LoadedProfile, declared: HostTarget, seen: HostTarget) -> list[Diagnostic]:
    notes = []
    for what, expected, actual in (
        ("GPU count", declared.gpu_count, seen.gpu_count),
        ("compute capability", declared.compute_capability, seen.compute_capability),
        ("SGLang version", declared.sglang_version, seen.sglang_version),
    ):
        if expected is not None and actual is not None and str(expected) != str(actual):
            notes.append(loaded.diagnostic(
                "SGD707", f"the inventory says {what} {expected} for {declared.name}, the host has {actual}; "
                "validated against the host", dotted="deploy.host", hint="update inventory.toml",
                severity=Severity.WARNING))
    return notes
