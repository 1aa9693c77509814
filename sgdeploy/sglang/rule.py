"""The machinery of validation rules: what a rule is, what it sees, what it reports.

A rule is a small named object (stable id, severity, one-line summary, fix hint, the SGLang
versions it applies to) around a pure check function. The check reads a `LaunchContext` — the
profile's `[server]` flags and `[env]`, the target version's catalog, and what is known about
the host — and yields findings. `sgdeploy.sglang.rules` holds every rule, by topic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from sgdeploy.core.diagnostics import Severity
from sgdeploy.sglang.catalog import Catalog
from sgdeploy.sglang.model_config import ModelConfig
from sgdeploy.sglang.target import HostTarget
from sgdeploy.sglang.versions import ALL_VERSIONS, Version, VersionRange


@dataclass(frozen=True)
class Finding:
    """One problem a rule found: the dotted key it is about and what is wrong."""

    field: str | None
    message: str
    hint: str | None = None  # overrides the rule's hint when the fix depends on the values


@dataclass(frozen=True)
class LaunchContext:
    """Everything a rule may look at. `server` holds only values that passed the flag checks."""

    server: Mapping[str, Any]
    env: Mapping[str, str]
    catalog: Catalog
    host: HostTarget | None = None
    architecture: str | None = None
    gpus: tuple[int | str, ...] | None = None
    raw_server: Mapping[str, Any] = field(default_factory=dict)
    node_count: int | None = None  # hosts in the profile's target (a multi-node launch spans them)
    # the model's config.json, when known (host, file or profile)
    model_config: ModelConfig | None = None
    # [secrets] file on the host (no value: sgdeploy.deploy.secret_args)
    secret_file: str | None = None
    secret_keys: tuple[str, ...] = ()  # [secrets] keys: ServerArgs fields the file provides
    # the unit's WorkingDirectory= (deploy.working_directory); None: "/"
    working_directory: str | None = None
    # deploy.hardening: "strict" sandboxes the unit (sgdeploy.sglang.sandbox)
    hardening: str = "none"
    service_user: str | None = None  # the unit's User= (deploy.run_as); None: root
    python: str | None = None  # deploy.python
    env_file: str | None = None  # deploy.env_file

    @property
    def version(self) -> Version:
        return self.catalog.parsed_version

    def given(self, name: str) -> bool:
        return name in self.server

    def get(self, name: str, default: Any = None) -> Any:
        """The value SGLang starts from: the profile's, else the catalog default."""
        if name in self.server:
            return self.server[name]
        value = self.catalog.default(name)
        return default if value is None else value

    def on(self, name: str) -> bool:
        return bool(self.get(name, False))

    def int(self, name: str, default: int = 0) -> int:
        value = self.get(name, default)
        return value if isinstance(value, int) and not isinstance(value, bool) else default

    def has_flag(self, name: str) -> bool:
        return name in self.catalog

    def env_true(self, name: str) -> bool | None:
        """SGLang's EnvBool reading of an environment variable; None when unset."""
        if name not in self.env:
            return None
        return self.env[name].strip().lower() in {"1", "true", "yes", "y", "on"}


Check = Callable[[LaunchContext], Iterable[Finding]]


@dataclass(frozen=True)
class Rule:
    id: str
    name: str
    severity: Severity
    summary: str
    hint: str
    check: Check
    versions: VersionRange = ALL_VERSIONS

    def applies_to(self, version: Version) -> bool:
        return version in self.versions

    def run(self, ctx: LaunchContext) -> Iterator[Finding]:
        if self.applies_to(ctx.version):
            yield from self.check(ctx)


class RuleRegistry:
    """The one list of rules; they run and report in id order, whichever module registered them."""

    def __init__(self) -> None:
        self._rules: list[Rule] = []

    def __iter__(self) -> Iterator[Rule]:
        return iter(sorted(self._rules, key=lambda r: r.id))

    def __len__(self) -> int:
        return len(self._rules)

    def by_id(self, rule_id: str) -> Rule:
        return next(r for r in self._rules if r.id == rule_id)

    def add(self, rule: Rule) -> Rule:
        if any(r.id == rule.id for r in self._rules):
            raise ValueError(f"duplicate rule id {rule.id}")
        self._rules.append(rule)
        return rule

    def rule(
        self,
        rule_id: str,
        name: str,
        severity: Severity,
        summary: str,
        hint: str,
        versions: VersionRange = ALL_VERSIONS,
    ) -> Callable[[Check], Rule]:
        """Decorator: register a check function as a rule."""

        def register(check: Check) -> Rule:
            return self.add(Rule(rule_id, name, severity, summary, hint, check, versions))

        return register
