"""SGLang's own refusals written as data, for the many checks that are one condition each.

A `Refusal` mirrors one check site of SGLang (its key in `catalogs/checks/`, see
docs/catalogs.md): the releases it exists in, when it fires on a launch, the key to change and
SGLang's own message. `refusal_rule` turns a table of them into one rule. Because every entry
names its site, tests/test_site_refusals.py can hold each one against the inventories read from
the wheels: the site must exist in every release the entry claims, and check_sites.toml must map
it to the entry's rule.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from sgdeploy.core.diagnostics import Severity
from sgdeploy.sglang.rule import Finding, LaunchContext, Rule
from sgdeploy.sglang.rules.common import server_field
from sgdeploy.sglang.rules.registry import ERROR, RULES
from sgdeploy.sglang.versions import ALL_VERSIONS, Version, VersionRange

Condition = Callable[[LaunchContext], bool]
Message = str | Callable[[LaunchContext], str]


@dataclass(frozen=True)
class Refusal:
    """One SGLang check: `fires` says whether SGLang would raise on this launch."""

    site: str  # the check-site key: "<function>: <message with {} placeholders>"
    # the [server] key to change ("" for the launch as a whole)
    field: str | Callable[[LaunchContext], str]
    fires: Condition
    message: Message  # SGLang's own words, with the launch's values filled in
    versions: VersionRange = ALL_VERSIONS
    hint: str | None = None
    # The releases whose inventory lists the site, when narrower than `versions`: the check moved
    # somewhere the inventory does not follow (argparse actions outside ServerArgs).
    inventoried: VersionRange | None = None

    def text(self, ctx: LaunchContext) -> str:
        return self.message if isinstance(self.message, str) else self.message(ctx)

    def where(self, ctx: LaunchContext) -> str:
        name = self.field if isinstance(self.field, str) else self.field(ctx)
        return server_field(name) if name else "server"


def version_words(versions: VersionRange) -> str:
    """The releases a check exists in, as a finding says it."""
    if versions.since and versions.until:
        return f"SGLang from {versions.since}, before {versions.until},"
    if versions.since:
        return f"SGLang {versions.since} and later"
    if versions.until:
        return f"SGLang before {versions.until}"
    return "SGLang (all releases)"


def findings(
    ctx: LaunchContext, refusals: Sequence[Refusal], said: str = "refuses"
) -> Iterator[Finding]:
    """The findings of the entries that fire; `refusals` holds only entries for ctx's release."""
    for refusal in refusals:
        if refusal.fires(ctx):
            yield Finding(refusal.where(ctx), f"{version_words(refusal.versions)} {said}: "
                                              f"'{refusal.text(ctx)}'",
                          refusal.hint)


# Every table registered through refusal_rule, by rule id (what the tests read).
TABLES: dict[str, tuple[Refusal, ...]] = {}


def refusal_rule(
    rule_id: str,
    name: str,
    summary: str,
    hint: str,
    refusals: Sequence[Refusal],
    severity: Severity = ERROR,
    versions: VersionRange = ALL_VERSIONS,
) -> Rule:
    """Register one rule that reports every entry of `refusals` that fires."""
    table = tuple(refusals)
    TABLES[rule_id] = table
    said = "refuses" if severity is ERROR else "changes"
    # The entries of each release, picked once: a table is long and most entries are for other
    # releases.
    by_version: dict[Version, tuple[Refusal, ...]] = {}

    def check(ctx: LaunchContext) -> Iterator[Finding]:
        entries = by_version.get(ctx.version)
        if entries is None:
            entries = by_version[ctx.version] = tuple(r for r in table if ctx.version in r.versions)
        yield from findings(ctx, entries, said)

    return RULES.add(Rule(rule_id, name, severity, summary, hint, check, versions))


# Small readings of a launch that many entries share.
def on(name: str) -> Condition:
    return lambda ctx: ctx.on(name)


def given(name: str) -> Condition:
    """The profile sets the flag to something other than off/empty."""
    return lambda ctx: ctx.given(name) and ctx.server[name] not in (None, False, "", [], {})


def both(*conditions: Condition) -> Condition:
    return lambda ctx: all(c(ctx) for c in conditions)


def number(ctx: LaunchContext, name: str) -> float | None:
    """A numeric flag's value (profile or default); None when unset or not a number."""
    value = ctx.get(name)
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def below(name: str, minimum: float, strict: bool = True) -> Condition:
    """The value is below `minimum` (or at most it, with strict=False)."""
    def check(ctx: LaunchContext) -> bool:
        value = number(ctx, name)
        return value is not None and (value < minimum if strict else value <= minimum)
    return check
