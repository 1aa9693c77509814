"""Validating profiles: shape, flags of the target SGLang version, and cross-flag rules.

`validate_paths` is what `sgdeploy validate` runs; `check_launch` is the part that depends on
a host, reused by `apply` with live host facts instead of the inventory's.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sgdeploy.core.diagnostics import Diagnostic, Severity, finding_line
from sgdeploy.core.explain import shown
from sgdeploy.core.files import path_problem
from sgdeploy.core.tomlfile import RULE_UNREADABLE, TomlDocument, did_you_mean
from sgdeploy.profile.cluster import cluster_findings, nnodes
from sgdeploy.profile.inventory import Inventory, cluster_target, host_target, load_inventory
from sgdeploy.profile.model import LoadedProfile, load_profile
from sgdeploy.sglang.catalog import (
    Catalog,
    UnknownVersionError,
    load_catalog,
    nearest_version,
    newest_version,
)
from sgdeploy.sglang.flags import valid_server_values
from sgdeploy.sglang.model_config import ModelConfig, ModelConfigError, load_model_config
from sgdeploy.sglang.rule import LaunchContext, Rule
from sgdeploy.sglang.rules import RULES
from sgdeploy.sglang.rules.registry import UNCHECKED
from sgdeploy.sglang.target import HostTarget
from sgdeploy.sglang.versions import parse_version


@dataclass
class ValidationResult:
    """The verdict on one profile file."""

    path: str
    host: str | None = None
    sglang_versions: list[str] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(d.is_error for d in self.diagnostics)

    @property
    def strict_failures(self) -> list[Diagnostic]:
        """What `validate --strict` fails on: errors, warnings, and every check that did not run."""
        return [
            d for d in self.diagnostics if d.severity is not Severity.INFO or d.rule in UNCHECKED
        ]

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "ok": self.ok,
            "host": self.host,
            "sglang_versions": self.sglang_versions,
            "diagnostics": [self._finding(d) for d in self.diagnostics],
        }

    def _finding(self, d: Diagnostic) -> dict[str, object]:
        """A finding; one in another file (the inventory) says which."""
        return d.as_dict() if d.path in (None, self.path) else {**d.as_dict(), "path": d.path}


@dataclass
class InventoryContext:
    """The inventory as loaded once for a whole run (it may be absent or broken)."""

    path: str
    document: TomlDocument[Inventory] | None
    findings_shown: bool = False  # a broken inventory's own findings go with the first profile only

    @property
    def inventory(self) -> Inventory | None:
        return self.document.model if self.document else None

    @classmethod
    def load(cls, path: Path) -> InventoryContext:
        if not path.exists():
            return cls(str(path), None)
        return cls(str(path), load_inventory(path))

    def needed_to_reach_hosts(self) -> str:
        """Why a command that goes to a host cannot, and how to give it an inventory."""
        fix = (" (describe the host with `sgdeploy init HOST --address ADDR`, or pass --inventory "
               "FILE or set SGDEPLOY_INVENTORY)" if self.document is None else "")
        return f"{self.unusable() or self.path}; an inventory is needed to reach the host{fix}"

    def unusable(self) -> str:
        """Why no host can be looked up here, in one line; '' when one can."""
        if self.document is None:
            problem = path_problem(self.path, "inventory") if os.path.islink(self.path) else None
            return problem.message if problem else f"no inventory at {self.path}"
        errors = [d for d in self.document.diagnostics if d.is_error]
        if self.inventory is not None or not errors:
            return ""
        return (f"the inventory {self.path} is invalid ({len(errors)} error(s); `sgdeploy "
                f"validate` lists them), the first: {finding_line(errors[0])}")


def validate_paths(
    paths: Sequence[str],
    inventory: InventoryContext,
    sglang: str | None = None,
    model_config: str | None = None,
    cluster: str | None = None,
) -> list[ValidationResult]:
    return [validate_file(path, inventory, sglang, model_config, cluster) for path in paths]


def validate_file(
    path: str,
    inventory: InventoryContext,
    sglang: str | None = None,
    model_config: str | None = None,
    cluster: str | None = None,
) -> ValidationResult:
    return validate_loaded(load_profile(path), inventory, sglang, model_config, cluster)


@dataclass(frozen=True)
class TargetVerdict:
    """The verdict on a profile for one host of its target (host None: no inventory)."""

    host: HostTarget | None
    version: str | None
    diagnostics: list[Diagnostic]


def validate_loaded(
    loaded: LoadedProfile,
    inventory: InventoryContext,
    sglang: str | None = None,
    model_config: str | None = None,
    cluster: str | None = None,
) -> ValidationResult:
    """Validate a profile already read, against every host of its target (or, with `cluster`, the
    inventory's `[clusters.NAME]` instead). `model_config` (a model folder or config.json, e.g.
    from --model-config) wins over the profile's deploy.model_config."""
    result = ValidationResult(
        path=loaded.path, host=cluster or (loaded.model.deploy.host if loaded.model else None)
    )
    found, verdicts = verdicts_by_target(loaded, inventory, sglang, model_config, cluster)
    result.diagnostics.extend(found)
    result.diagnostics.extend(_across_group(verdicts) if len(verdicts) > 1 else
                              [d for v in verdicts for d in v.diagnostics])
    for verdict in verdicts:
        if verdict.version is not None and verdict.version not in result.sglang_versions:
            result.sglang_versions.append(verdict.version)
    result.diagnostics = _unique(result.diagnostics)
    return result


def _across_group(verdicts: list[TargetVerdict]) -> list[Diagnostic]:
    """A group's findings: each names the members it holds for, with their release, once for all
    of them; a hint naming an option some member's release lacks says so."""
    merged: dict[tuple[str, str | None, str, str], Diagnostic] = {}
    catalogs = {v.version: load_catalog(v.version) for v in verdicts if v.version is not None}
    for verdict in verdicts:
        label = _member_label(verdict)
        for d in verdict.diagnostics:
            key = (d.rule, d.field, d.message, d.hint)
            seen = merged.get(key)
            merged[key] = dataclasses.replace(d, hosts=(*seen.hosts, label) if seen else (label,))
    return [dataclasses.replace(d, hint=_hint_for_every_member(d.hint, verdicts, catalogs))
            for d in merged.values()]


def _member_label(verdict: TargetVerdict) -> str:
    name = verdict.host.name if verdict.host else "?"
    return f"{name} (SGLang {verdict.version})" if verdict.version else name


_OPTION = re.compile(r"(?<![\w-])--([a-z0-9][a-z0-9-]*)")


def _hint_for_every_member(
    hint: str, verdicts: list[TargetVerdict], catalogs: dict[str, Catalog]
) -> str:
    """`hint`, saying which members' releases lack an option it suggests."""
    lacking = []
    for option in dict.fromkeys(_OPTION.findall(hint)):
        without = [v.host.name for v in verdicts if v.host and v.version
                   and catalogs[v.version].lookup(option.replace("-", "_")) is None]
        if without:
            lacking.append(f"--{option} is not an option of SGLang on {', '.join(without)}")
    return hint + (f" ({'; '.join(lacking)})" if lacking else "")


def verdicts_by_target(
    loaded: LoadedProfile,
    inventory: InventoryContext,
    sglang: str | None = None,
    model_config: str | None = None,
    cluster: str | None = None,
) -> tuple[list[Diagnostic], list[TargetVerdict]]:
    """The profile's own findings (shape, target), then one verdict per host of its target. A
    cluster (`cluster`, or deploy.host naming one) is one target: a GPU node of it, with the
    image's SGLang, over which a launch of `nnodes` spans that many nodes."""
    if loaded.model is None:
        alone = flags_alone(loaded, sglang)
        return list(loaded.diagnostics), [alone] if alone else []
    targets, found = _targets(loaded, inventory, cluster)
    config, about_config = profile_model_config(loaded, model_config)
    found.extend(about_config)
    clusters = inventory.inventory.clusters if inventory.inventory is not None else {}
    verdicts = []
    for target in targets:
        on_cluster = target is not None and target.name in clusters
        version, about_version = _version_for(loaded, target, sglang, inventory, on_cluster)
        about_version += _missing_facts(loaded, target, on_cluster)
        # a cluster's launch group has exactly nnodes pods, each told its rank and rank 0's address
        spans = (
            nnodes(loaded)
            if on_cluster
            else len(targets)
            if inventory.inventory is not None
            else None
        )
        launch = [] if version is None else check_launch(loaded, target, version, node_count=spans,
                                                         model_config=config)
        if on_cluster:
            assert target is not None
            launch += cluster_findings(loaded, target.name, clusters[target.name])
        runs = target.sglang_version if target else None
        launch = checked_against(launch, sglang or runs, version)
        # an upgrade check, not what it runs
        if target and sglang and runs and version and runs != version:
            launch = _noted(launch, f" [validated for SGLang {version} (--sglang); {target.name} "
                                    f"runs {runs}]")
        verdicts.append(TargetVerdict(target, version, [*about_version, *launch]))
    return [*loaded.diagnostics, *found], verdicts


def check_launch(
    loaded: LoadedProfile,
    host: HostTarget | None,
    version: str,
    architecture: str | None = None,
    node_count: int | None = None,
    model_config: ModelConfig | None = None,
) -> list[Diagnostic]:
    """Run every rule for one (profile, host, SGLang version); `version` must have a catalog."""
    profile = loaded.model
    assert profile is not None
    catalog = load_catalog(version)
    ctx = LaunchContext(
        server=valid_server_values(profile.server, catalog),
        raw_server=profile.server,
        env=profile.env,
        catalog=catalog,
        host=host,
        architecture=architecture or profile.deploy.model_architecture
        or (model_config.architecture if model_config else None),
        gpus=tuple(profile.deploy.gpus) if profile.deploy.gpus else None,
        node_count=node_count,
        model_config=model_config,
        secret_file=profile.secrets.file if profile.secrets else None,
        secret_keys=tuple(profile.secrets.keys) if profile.secrets else (),
        working_directory=profile.deploy.working_directory,
        hardening=profile.deploy.hardening,
        service_user=profile.deploy.run_as,
        python=profile.deploy.python,
        env_file=profile.deploy.env_file,
    )
    return _findings(loaded, ctx, RULES)


def _findings(loaded: LoadedProfile, ctx: LaunchContext, rules: Iterable[Rule]) -> list[Diagnostic]:
    """What `rules` find in the launch, located in the profile."""
    found = []
    for rule in rules:
        for finding in rule.run(ctx):
            found.append(loaded.diagnostic(rule.id, finding.message, dotted=finding.field,
                                           hint=finding.hint or rule.hint, severity=rule.severity))
    return found


def flags_alone(loaded: LoadedProfile, sglang: str | None = None) -> TargetVerdict | None:
    """A profile invalid in its shape: its [server] flags against the catalog alone (the SGD01x
    rules), so that one round of fixes sees them too, and a note that the other checks wait.
    Keys whose own shape is wrong are left to the error already given for them."""
    data = loaded.data if isinstance(loaded.data, dict) else {}
    server, env = data.get("server"), data.get("env")
    if not isinstance(server, dict) or not server:
        return None
    misshapen = {d.field.split(".")[1] for d in loaded.diagnostics
                 if d.field and d.field.startswith("server.") and "." in d.field}
    raw = {k: v for k, v in server.items() if k not in misshapen}
    version = sglang or newest_version()
    try:
        catalog = load_catalog(version)
    except UnknownVersionError:
        return None  # --sglang names no bundled release: the shape errors come first
    ctx = LaunchContext(
        server=valid_server_values(raw, catalog),
        raw_server=raw,
        env={k: str(v) for k, v in env.items()} if isinstance(env, dict) else {},
        catalog=catalog,
    )
    found = _findings(loaded, ctx, (rule for rule in RULES if rule.id.startswith("SGD01")))
    return TargetVerdict(None, version, [*found, loaded.diagnostic(
        "SGD031", f"the profile is invalid, so its [server] flags alone were checked, against "
                  f"SGLang {version}; the host's facts and every other check wait for the errors "
                  "above", dotted=None, hint="fix the errors above and validate again",
        severity=Severity.INFO)])


def profile_model_config(
    loaded: LoadedProfile, override: str | None = None
) -> tuple[ModelConfig | None, list[Diagnostic]]:
    """The model config a validation reads: `override` (relative to the working directory), else
    deploy.model_config (relative to the profile's folder); None when neither names one."""
    profile = loaded.model
    named = override or (profile.deploy.model_config_file if profile else None)
    if named is None:
        return None, []
    path = Path(named).expanduser()
    if override is None and not path.is_absolute():
        path = Path(loaded.path).parent / path
    try:
        return load_model_config(path), []
    except ModelConfigError as exc:
        where = "--model-config" if override else "deploy.model_config"
        return None, [loaded.diagnostic("SGD035", f"{where}: "
                                                  f"{exc}", dotted=None if override else where,
                                        hint="point it at the model's folder or its config.json")]


def select_hosts(
    target: str, inventory: InventoryContext, wanted: Sequence[str] = ()
) -> list[HostTarget]:
    """The hosts a command acts on: those named in `wanted` (each must belong to `target`), or
    every host of `target`. Raises LookupError with a message for the user."""
    model = inventory.inventory
    if model is None:
        raise LookupError(inventory.unusable() or f"no usable inventory at {inventory.path}")
    if target in model.clusters:
        raise LookupError(f"deploy.host '{target}' is a Kubernetes cluster of {inventory.path}: "
                          "sgdeploy reaches no host there; `sgdeploy export PROFILE` writes its "
                          "manifests for kubectl apply")
    members = model.resolve(target) or []
    for name in wanted:
        if name not in model.hosts:
            raise LookupError(f"--host {name} is not a host of {inventory.path}")
        if name not in members:
            raise LookupError(f"--host {name} is not in the profile's target '{target}' "
                              f"({', '.join(members)})")
    chosen = list(dict.fromkeys(wanted)) or members
    return [host_target(name, model.hosts[name]) for name in chosen]


def select_host(target: str, inventory: InventoryContext, wanted: str | None) -> HostTarget | None:
    """The one host a single-host command acts on (None without an inventory, when allowed)."""
    if inventory.inventory is None and not wanted:
        return None
    hosts = select_hosts(target, inventory, [wanted] if wanted else [])
    if len(hosts) != 1:
        raise LookupError(f"'{target}' is a group of {len(hosts)} hosts: choose one with --host")
    return hosts[0]


def _targets(loaded: LoadedProfile, inventory: InventoryContext, cluster: str | None = None
             ) -> tuple[list[HostTarget | None], list[Diagnostic]]:
    profile = loaded.model
    assert profile is not None
    host_name = cluster or profile.deploy.host
    if inventory.document is None:
        note = loaded.diagnostic("SGD034", f"{inventory.unusable()}: host facts (GPUs, SGLang "
                                 "version) were not checked", dotted="deploy.host",
                                 hint="pass --inventory FILE or set "
                                 "SGDEPLOY_INVENTORY", severity=Severity.INFO)
        return [None], [note]
    model = inventory.inventory
    if model is None:
        return [], _invalid_inventory(loaded, inventory)
    if host_name in model.clusters:
        return [cluster_target(host_name, model.clusters[host_name])], []
    names = None if cluster else model.resolve(host_name)
    if names is None:
        what = "cluster" if cluster else "host, group or cluster"
        known = [*model.clusters] if cluster else [*model.hosts, *model.groups, *model.clusters]
        suggestion = did_you_mean(host_name, known)
        return [], [loaded.diagnostic(
            "SGD030", f"{'--cluster' if cluster else 'deploy.host'} '{host_name}' is no {what} of "
                      f"{inventory.path}"
            + (f"; did you mean '{suggestion}'?" if suggestion else ""),
            dotted="deploy.host", hint=f"add [{'clusters' if cluster else 'hosts'}.{host_name}] to "
            "the inventory or fix the name")]
    return [host_target(n, model.hosts[n]) for n in names], []


def _invalid_inventory(loaded: LoadedProfile, inventory: InventoryContext) -> list[Diagnostic]:
    """SGD033 on deploy.host, then the inventory's own findings at their lines, once a run."""
    assert inventory.document is not None
    errors = [d for d in inventory.document.diagnostics if d.is_error]
    unreadable = next((d for d in errors if d.rule == RULE_UNREADABLE), None)
    if unreadable is not None:  # the profile's verdict stays an error, not a usage error
        about, errors = unreadable.message, []
    else:
        lines = ", ".join(str(d.line) for d in errors if d.line is not None)
        about = f"{len(errors)} error(s)" + (f", at line {lines}" if lines else "")
        errors, inventory.findings_shown = ([] if inventory.findings_shown else errors), True
    host = loaded.model.deploy.host if loaded.model else "?"
    follow = ": its findings follow" if errors else ""
    summary = loaded.diagnostic("SGD033", f"the inventory {inventory.path} is invalid ({about}): "
                                f"deploy.host '{host}' was not looked up", dotted="deploy.host",
                                hint=f"fix {inventory.path} first{follow}")
    return [summary, *errors]


def _version_for(
    loaded: LoadedProfile, target: HostTarget | None, override: str | None,
    inventory: InventoryContext, on_cluster: bool = False,
) -> tuple[str | None, list[Diagnostic]]:
    wanted = override or (target.sglang_version if target else None)
    if wanted is None:
        newest = newest_version()
        where = f"host {target.name} has no sglang_version" if target else "no host facts"
        note = loaded.diagnostic("SGD031", f"{where}: validated against the newest bundled SGLang, "
                                           f"{newest}",
                                 dotted="deploy.host", hint="set sglang_version in the inventory",
                                 severity=Severity.INFO)
        return newest, [note]
    try:
        return load_catalog(wanted).version, []
    except UnknownVersionError as exc:
        return _nearest_older(loaded, wanted, exc)
    except ValueError:
        return None, [
            _not_a_version(loaded, target if not override else None, wanted, inventory, on_cluster)
        ]


def _not_a_version(loaded: LoadedProfile, target: HostTarget | None, wanted: str,
                   inventory: InventoryContext, on_cluster: bool = False) -> Diagnostic:
    """A release that is no release number: at the inventory's line when the inventory says it."""
    what = f"{shown(wanted)} is not an SGLang version (a release number such as 0.5.11 is)"
    if target is None or inventory.document is None:
        return loaded.diagnostic("SGD032", f"--sglang {what}", dotted="deploy.host",
                                 hint="pass --sglang with a release number, e.g. --sglang 0.5.11")
    dotted = f"{'clusters' if on_cluster else 'hosts'}.{target.name}.sglang_version"
    return inventory.document.diagnostic(
        "SGD032", f"{dotted} = {what}", dotted=dotted,
        hint="write the release installed on the host, e.g. \"0.5.11\" (there: python3 -c "
             "'import sglang; print(sglang.__version__)')")


UNKNOWN_FLAG = "SGD010"  # sglang/rules/flags.py


def _missing_facts(
    loaded: LoadedProfile, target: HostTarget | None, on_cluster: bool = False
) -> list[Diagnostic]:
    """SGD036: the inventory facts a host lacks, and the checks that therefore did not run."""
    if target is None:
        return []  # no inventory at all: SGD034 says so
    lacking, skipped = [], []
    if target.gpu_count is None:
        lacking.append("gpu_count")
        skipped.append("the GPU count a launch needs (SGD101)")
    if target.compute_capability is None:
        lacking.append(f"compute_capability (sgdeploy's GPU table does not know '{target.gpu}')"
                       if target.gpu else "gpu and compute_capability")
        skipped.append("the GPU generation rules (SGD4xx)")
    if not lacking:
        return []
    return [loaded.diagnostic(
        "SGD036", f"{'cluster' if on_cluster else 'host'} {target.name} has no "
        f"{', no '.join(lacking)} in the inventory: not checked: "
        f"{'; '.join(skipped)}", dotted="deploy.host", severity=Severity.INFO,
        hint=f"add them to [clusters.{target.name}] (nvidia-smi on one of its GPU nodes says "
        "them)" if on_cluster
        else f"add them to [hosts.{target.name}] (`sgdeploy plan` shows what the host reports)")]


def _nearest_older(loaded: LoadedProfile, wanted: str, missing: UnknownVersionError
                   ) -> tuple[str | None, list[Diagnostic]]:
    """A release without a bundled catalog (newer than this sgdeploy, or a dev build) is checked
    against the nearest older one, and every finding says so; older than every catalog, nothing
    is checked. Either way apply and plan also ask the host's own SGLang (SGD711)."""
    hint = (f"upgrade sgdeploy for a catalog of SGLang {wanted}, or pass --sglang VERSION to "
            "validate for a bundled release")
    nearest = nearest_version(wanted)
    if parse_version(nearest) > parse_version(wanted):
        return None, [loaded.diagnostic(
            "SGD032", f"{missing}: its flags and cross-flag rules were not checked; apply and plan "
            "ask that SGLang on the host "
            "instead", dotted="deploy.host", hint=hint, severity=Severity.WARNING)]
    return nearest, [loaded.diagnostic(
        "SGD032", f"{missing}: checked against the nearest older release, {nearest}; options new "
        f"in {wanted} read as unknown, and its own checks may differ (apply and plan ask that "
        "SGLang on the host as well)", dotted="deploy.host", hint=hint, severity=Severity.WARNING)]


def checked_against(
    found: list[Diagnostic], wanted: str | None, version: str | None
) -> list[Diagnostic]:
    """Each finding of a launch checked against another release's catalog, saying which."""
    if wanted is None or version is None or wanted == version:
        return found
    note = f" [checked against SGLang {version}'s catalog: none is bundled for {wanted}]"
    # an option the older catalog lacks may be new in `wanted`: said, not refused
    return [
        dataclasses.replace(d, severity=Severity.WARNING if d.rule == UNKNOWN_FLAG else d.severity)
        for d in _noted(found, note)
    ]


def _noted(found: list[Diagnostic], note: str) -> list[Diagnostic]:
    return [dataclasses.replace(d, message=d.message + note) for d in found]


def _unique(diagnostics: Iterable[Diagnostic]) -> list[Diagnostic]:
    seen: set[tuple[str, str | None, str]] = set()
    out = []
    for d in diagnostics:
        key = (d.rule, d.field, d.message)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out
