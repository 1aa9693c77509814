"""What a change does to each server: two revisions of the profiles and inventory, compared per
host.

For every profile that changed, or whose hosts changed in the inventory, and for every host it
targets on either side: the effective launch before and after (flags, environment, `[deploy]`
settings, SGLang version and GPU facts), the findings that appear or clear, and the unit diff.
Removed flags come first everywhere: a restart that silently loses `--speculative-num-steps 3`
halves throughput, and nothing else a diff shows costs as much. A secret never reaches the result:
values, findings and unit lines are compared as written and kept as `sgdeploy.sglang.secrets`
shows them. Pure: texts in, data out.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from typing import Any, Literal

from sgdeploy.core.diagnostics import Diagnostic
from sgdeploy.core.tomlfile import TomlDocument, parse_toml_text
from sgdeploy.deploy.render import render_unit, unit_environment
from sgdeploy.profile.inventory import Inventory
from sgdeploy.profile.model import LoadedProfile, profile_from_text
from sgdeploy.profile.validate import InventoryContext, TargetVerdict, verdicts_by_target
from sgdeploy.review.revisions import Snapshot
from sgdeploy.sglang.catalog import Catalog, load_catalog
from sgdeploy.sglang.secrets import redact, shown

FACTS = ("sglang_version", "gpu", "compute_capability", "gpu_count", "gpu_memory_gib")
ChangeKind = Literal["removed", "changed", "added"]
_ORDER: dict[str, int] = {"removed": 0, "changed": 1, "added": 2}


@dataclass(frozen=True)
class Change:
    """One setting that differs: a `[server]` flag, an `[env]` variable, a `[deploy]` key, a host
    fact."""

    kind: ChangeKind
    name: str
    before: Any = None
    after: Any = None
    option: str | None = None  # the command-line spelling of a flag
    default: Any = None  # what SGLang uses once a flag is removed

    def as_dict(self) -> dict[str, Any]:
        out = {"kind": self.kind, "name": self.name, "before": self.before, "after": self.after}
        if self.option is not None:
            out |= {"option": self.option, "default": self.default}
        return out


@dataclass(frozen=True)
class Launch:
    """What one revision of a profile runs on one host."""

    host: str
    facts: dict[str, Any]
    server: dict[str, Any]
    environment: dict[str, str]
    deploy: dict[str, Any]
    diagnostics: list[Diagnostic]
    unit_text: str | None


@dataclass
class TargetDiff:
    """A profile on one host: before and after (None where the side does not deploy there)."""

    host: str
    before: Launch | None
    after: Launch | None
    flags: list[Change] = field(default_factory=list)
    environment: list[Change] = field(default_factory=list)
    deploy: list[Change] = field(default_factory=list)
    facts: list[Change] = field(default_factory=list)
    new_findings: list[Diagnostic] = field(default_factory=list)
    cleared_findings: list[Diagnostic] = field(default_factory=list)
    unit_diff: str = ""
    unit_note: str = ""  # why there is no unit diff where a side deploys but cannot be rendered

    @property
    def removed_flags(self) -> list[Change]:
        return [c for c in self.flags if c.kind == "removed"]

    @property
    def new_errors(self) -> list[Diagnostic]:
        return [d for d in self.new_findings if d.is_error]

    @property
    def changed(self) -> bool:
        return bool(
            self.flags
            or self.environment
            or self.deploy
            or self.facts
            or self.new_findings
            or self.cleared_findings
            or self.unit_diff
            or (self.before is None) != (self.after is None)
        )


@dataclass
class ProfileDiff:
    """One profile file across the two revisions."""

    path: str
    status: Literal["added", "removed", "changed", "hosts changed"]
    targets: list[TargetDiff]
    new_findings: list[Diagnostic] = field(default_factory=list)  # about the file, not a host
    cleared_findings: list[Diagnostic] = field(default_factory=list)


@dataclass
class DiffResult:
    before: str
    after: str
    profiles: list[ProfileDiff]

    def removals(self) -> list[tuple[ProfileDiff, TargetDiff, Change]]:
        """Every removed flag, by profile and host: what a reader must see first."""
        return [(p, t, c) for p in self.profiles for t in p.targets for c in t.removed_flags]

    def new_errors(self) -> list[tuple[ProfileDiff, str | None, Diagnostic]]:
        found: list[tuple[ProfileDiff, str | None, Diagnostic]] = [
            (p, None, d) for p in self.profiles for d in p.new_findings if d.is_error]
        found += [(p, t.host, d) for p in self.profiles for t in p.targets for d in t.new_errors]
        return found


# --------------------------------------------------------------------------- reading a side
@dataclass(frozen=True)
class _Side:
    inventory: InventoryContext
    profiles: dict[str, LoadedProfile]


def _read_side(snapshot: Snapshot) -> _Side:
    if snapshot.inventory_text is None:
        inventory = InventoryContext(snapshot.inventory_path, None)
    else:
        document: TomlDocument[Inventory] = TomlDocument(
            path=snapshot.inventory_path, text=snapshot.inventory_text
        )
        inventory = InventoryContext(snapshot.inventory_path, parse_toml_text(document, Inventory))
    profiles = {}
    for path, text in snapshot.profiles.items():
        profiles[path] = profile_from_text(path, text)
    return _Side(inventory, profiles)


def _host_entries(inventory: InventoryContext, loaded: LoadedProfile | None) -> dict[str, Any]:
    """The inventory entries a profile deploys to (what makes 'its hosts changed')."""
    model = inventory.inventory
    if loaded is None or loaded.model is None or model is None:
        return {}
    names = model.resolve(loaded.model.deploy.host) or []
    return {name: model.hosts[name].model_dump() for name in names}


# --------------------------------------------------------------------------- one launch
def _launch(loaded: LoadedProfile, verdict: TargetVerdict, host_name: str) -> Launch:
    profile = loaded.model
    assert profile is not None
    facts = {name: getattr(verdict.host, name) for name in FACTS} if verdict.host else {}
    facts["sglang_version"] = verdict.version
    unit_text = None
    if verdict.version is not None:
        try:
            unit_text = render_unit(loaded, load_catalog(verdict.version), host_name).text
        except (KeyError, ValueError):
            unit_text = None  # a flag this SGLang lacks: the findings say which
    return Launch(
        host=host_name,
        facts=facts,
        server=dict(profile.server),
        environment=dict(unit_environment(profile, verdict.version)),
        deploy=profile.deploy.model_dump(exclude_none=True),
        diagnostics=verdict.diagnostics,
        unit_text=unit_text,
    )


def _by_host(
    loaded: LoadedProfile | None, inventory: InventoryContext
) -> tuple[list[Diagnostic], dict[str, Launch]]:
    if loaded is None:
        return [], {}
    own, verdicts = verdicts_by_target(loaded, inventory)
    if loaded.model is None:  # its flags alone were checked, if any
        return [*own, *(d for verdict in verdicts for d in verdict.diagnostics)], {}
    launches = {}
    for verdict in verdicts:
        name = verdict.host.name if verdict.host else loaded.model.deploy.host
        launches[name] = _launch(loaded, verdict, name)
    return own, launches


# --------------------------------------------------------------------------- comparing
def _mapping_changes(before: dict[str, Any], after: dict[str, Any]) -> list[Change]:
    """What differs, compared as written and kept as it may be shown (a secret as <redacted>)."""
    changes = [Change("removed", k, before=shown(k, before[k])) for k in before if k not in after]
    changes += [Change("changed", k, before=shown(k, before[k]), after=shown(k, after[k]))
                for k in before if k in after and before[k] != after[k]]
    changes += [Change("added", k, after=shown(k, after[k])) for k in after if k not in before]
    return changes


def _flag_changes(before: Launch | None, after: Launch | None) -> list[Change]:
    # a launch's version is always one with a bundled catalog (validation chose it)
    catalogs: list[Catalog] = [
        load_catalog(launch.facts["sglang_version"])
        for launch in (after, before)
        if launch is not None and launch.facts.get("sglang_version")
    ]

    def described(change: Change) -> Change:
        flag = next((f for c in catalogs if (f := c.lookup(change.name)) is not None), None)
        if flag is None:
            return Change(
                change.kind, change.name, change.before, change.after, option=f"--{change.name}"
            )
        # the default SGLang falls back to is the one of the version that runs after the change
        default = catalogs[0].default(change.name) if change.kind == "removed" else None
        return Change(
            change.kind,
            change.name,
            change.before,
            change.after,
            option=flag.option,
            default=default,
        )

    changes = _mapping_changes(before.server if before else {}, after.server if after else {})
    return sorted((described(c) for c in changes), key=lambda c: _ORDER[c.kind])


def _finding_key(d: Diagnostic) -> tuple[str, str, str | None, str]:
    return (d.rule, d.severity.value, d.field, d.message)


def _shown_finding(d: Diagnostic) -> Diagnostic:
    return dataclasses.replace(d, message=redact(d.message), hint=redact(d.hint))


def _finding_changes(
    before: list[Diagnostic], after: list[Diagnostic]
) -> tuple[list[Diagnostic], list[Diagnostic]]:
    old = {_finding_key(d) for d in before}
    new = {_finding_key(d) for d in after}
    appeared = [_shown_finding(d) for d in after if _finding_key(d) not in old]
    cleared = [_shown_finding(d) for d in before if _finding_key(d) not in new]
    severity = {"error": 0, "warning": 1, "info": 2}
    return (sorted(appeared, key=lambda d: severity[d.severity.value]),
            sorted(cleared, key=lambda d: severity[d.severity.value]))


def _unit_note(before: Launch | None, after: Launch | None, labels: tuple[str, str]) -> str:
    unrendered = [label for launch, label in zip((before, after), labels, strict=True)
                  if launch is not None and launch.unit_text is None]
    return (f"no unit for {' and '.join(unrendered)}: the profile has errors "
            "there") if unrendered else ""


def _unit_diff(before: Launch | None, after: Launch | None, labels: tuple[str, str]) -> str:
    if _unit_note(before, after, labels):
        return ""
    old = before.unit_text if before and before.unit_text else ""
    new = after.unit_text if after and after.unit_text else ""
    if old == new:
        return ""
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                 fromfile=labels[0], tofile=labels[1], n=1)
    return "".join(redact(line if line.endswith("\n") else line + "\n") for line in lines)


def _target_diff(
    host: str, before: Launch | None, after: Launch | None, labels: tuple[str, str]
) -> TargetDiff:
    diff = TargetDiff(host, before, after)
    diff.flags = _flag_changes(before, after)
    diff.environment = _mapping_changes(
        before.environment if before else {}, after.environment if after else {}
    )
    diff.deploy = _mapping_changes(before.deploy if before else {}, after.deploy if after else {})
    if before and after:
        diff.facts = _mapping_changes(before.facts, after.facts)
    diff.new_findings, diff.cleared_findings = _finding_changes(
        before.diagnostics if before else [], after.diagnostics if after else [])
    diff.unit_diff = _unit_diff(before, after, labels)
    diff.unit_note = _unit_note(before, after, labels)
    return diff


def _profile_diff(path: str, old: _Side, new: _Side, labels: tuple[str, str]) -> ProfileDiff | None:
    before, after = old.profiles.get(path), new.profiles.get(path)
    same_text = before is not None and after is not None and before.text == after.text
    if same_text and _host_entries(old.inventory, before) == _host_entries(new.inventory, after):
        return None
    old_own, old_launches = _by_host(before, old.inventory)
    new_own, new_launches = _by_host(after, new.inventory)
    targets = [_target_diff(host, old_launches.get(host), new_launches.get(host), labels)
               for host in dict.fromkeys([*new_launches, *old_launches])]
    new_findings, cleared = _finding_changes(old_own, new_own)
    status: Literal["added", "removed", "changed", "hosts changed"] = (
        "added"
        if before is None
        else "removed"
        if after is None
        else "hosts changed"
        if same_text
        else "changed"
    )
    diff = ProfileDiff(path, status, [t for t in targets if t.changed], new_findings, cleared)
    if not diff.targets and not new_findings and not cleared and status != "changed":
        return None
    # the targets that lose a flag come first
    diff.targets.sort(key=lambda t: (not t.removed_flags, not t.new_errors))
    return diff


def _attention(p: ProfileDiff) -> tuple[bool, bool]:
    """Sort key: profiles that lose a flag first, then those with new errors."""
    loses = any(t.removed_flags for t in p.targets)
    errors = any(t.new_errors for t in p.targets) or any(d.is_error for d in p.new_findings)
    return (not loses, not errors)


def diff_snapshots(before: Snapshot, after: Snapshot) -> DiffResult:
    """Compare two revisions profile by profile and host by host."""
    old, new = _read_side(before), _read_side(after)
    labels = (before.label, after.label)
    paths = list(dict.fromkeys([*after.profiles, *before.profiles]))
    profiles = [d for path in paths if (d := _profile_diff(path, old, new, labels)) is not None]
    profiles.sort(key=_attention)
    return DiffResult(before.label, after.label, profiles)
