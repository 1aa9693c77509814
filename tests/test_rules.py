"""Rule tests: every rule id has a failing profile in tests/rules/ (and usually a fixed twin).

A failing profile is `tests/rules/SGDxxx-<short>.toml`. Its leading comments say what it shows
and what the test expects:

    # <what it demonstrates>
    # expect: server.tp_size        the diagnostic's field ("-" for none)
    # expect-line: 11               only when the line is not that of the key (syntax errors)
    # inventory: inventories/x.toml another inventory, relative to tests/rules ("none": no file)
    # also: SGD031                  other rule ids the profile may produce

Every other profile is validated against tests/inventory.rules.toml. `SGDxxx-<short>.ok.toml` is
the same launch written correctly: no error, and not that rule.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sgdeploy import cli
from sgdeploy.core.diagnostics import Severity
from sgdeploy.profile.validate import InventoryContext, ValidationResult, validate_file
from sgdeploy.sglang.rules import HOST_RULES, RULES, STRUCTURAL_RULES, rule_ids

ROOT = Path(__file__).resolve().parent.parent
RULES_DIR = ROOT / "tests" / "rules"
RULES_INVENTORY = ROOT / "tests" / "inventory.rules.toml"
REPO_INVENTORY = ROOT / "inventory.toml"
REFERENCE = ROOT / "profiles" / "qwen36-mtp3.toml"
DOCS = ROOT / "docs" / "rules.md"

RULE_ID = re.compile(r"^SGD\d{3}$")
INFO_RULES = {"SGD031", "SGD034", "SGD036", "SGD708"}  # structural notes, not problems
WARNING_RULES = {"SGD005", "SGD707", "SGD032", "SGD712", "SGD804"}  # a BOM read without it; facts the host disputes

FAILING = sorted(p for p in RULES_DIR.glob("SGD*.toml") if not p.name.endswith(".ok.toml"))
FIXED = sorted(RULES_DIR.glob("SGD*.ok.toml"))


# --------------------------------------------------------------------------- helpers
def directives(path: Path) -> dict[str, str]:
    """`# key: value` lines among the leading comments of a rule profile."""
    found: dict[str, str] = {}
    for raw in path.read_bytes().decode("utf-8", "replace").removeprefix("\ufeff").splitlines():
        if not raw.startswith("#"):
            break
        match = re.match(r"#\s*([a-z-]+):\s*(.*\S)\s*$", raw)
        if match and match.group(1) in {"expect", "expect-line", "inventory", "also"}:
            found[match.group(1)] = match.group(2)
    return found


def key_line(text: str, dotted: str) -> int | None:
    """The 1-based line of `key = ...` under `[table]` (how the test profiles are written)."""
    table, _, key = dotted.partition(".")
    current = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        header = re.match(r"^\[([A-Za-z0-9_.-]+)\]", line)
        if header:
            current = header.group(1)
            if current == table and not key:
                return number
            continue
        if current == table and key and re.match(rf"^{re.escape(key)}\s*=", line):
            return number
    return None


def rule_id_of(path: Path) -> str:
    return path.name.split("-", 1)[0]


def inventory_for(path: Path) -> Path:
    choice = directives(path).get("inventory")
    if choice is None:
        return RULES_INVENTORY
    if choice == "none":
        return RULES_DIR / "inventories" / "does-not-exist.toml"
    return RULES_DIR / choice


def validate(
    path: Path, inventory: Path = RULES_INVENTORY, sglang: str | None = None
) -> ValidationResult:
    return validate_file(str(path), InventoryContext.load(inventory), sglang)


def severity_of(rule_id: str) -> Severity:
    if rule_id in STRUCTURAL_RULES:
        if rule_id in WARNING_RULES:
            return Severity.WARNING
        return Severity.INFO if rule_id in INFO_RULES else Severity.ERROR
    return RULES.by_id(rule_id).severity


def ids(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


# --------------------------------------------------------------------------- the folder
@pytest.mark.parametrize("path", FAILING, ids=ids(FAILING))
def test_failing_profile_reports_its_rule(path: Path) -> None:
    rule_id = rule_id_of(path)
    wanted = directives(path)
    assert "expect" in wanted, f"{path.name} has no '# expect: FIELD' line"
    field = None if wanted["expect"] == "-" else wanted["expect"]
    text = path.read_bytes().decode("utf-8", "replace")
    line = (
        int(wanted["expect-line"])
        if "expect-line" in wanted
        else key_line(text, field)
        if field
        else None
    )
    if field:
        assert line is not None, f"{path.name}: the test cannot find {field} in the file"

    result = validate(path, inventory_for(path))

    found = [(d.rule, d.field, d.line) for d in result.diagnostics]
    assert (rule_id, field, line) in found, (
        f"{path.name}: expected {rule_id} at {field}:{line}, got {found}"
    )
    allowed = {rule_id, *wanted.get("also", "").split()}
    # SGD580 notes what could not be checked without the model's config.json: not a finding
    reported = {d.rule for d in result.diagnostics if d.rule != "SGD580" or rule_id == "SGD580"}
    assert reported <= allowed, f"{path.name}: unexpected {found}"
    ours = [d for d in result.diagnostics if d.rule == rule_id]
    assert all(d.severity is severity_of(rule_id) for d in ours)
    assert all(d.message and d.hint for d in ours)
    assert result.ok is (severity_of(rule_id) is not Severity.ERROR)


@pytest.mark.parametrize("path", FIXED, ids=ids(FIXED))
def test_fixed_twin_is_clean(path: Path) -> None:
    rule_id = rule_id_of(path)
    result = validate(path, inventory_for(path))
    assert result.ok, [(d.rule, d.message) for d in result.diagnostics]
    assert rule_id not in {d.rule for d in result.diagnostics}


@pytest.mark.parametrize("path", FIXED, ids=ids(FIXED))
def test_fixed_twin_has_a_failing_profile(path: Path) -> None:
    assert path.with_name(path.name.replace(".ok.toml", ".toml")).is_file()


@pytest.mark.parametrize("path", [*FAILING, *FIXED], ids=ids([*FAILING, *FIXED]))
def test_rule_profile_says_what_it_demonstrates(path: Path) -> None:
    first = path.read_bytes().split(b"\n", 1)[0].decode("utf-8", "replace").removeprefix("\ufeff")
    assert first.startswith("# ") and len(first) > 12
    assert rule_id_of(path) in rule_ids(), f"{path.name} names no rule"


def test_every_rule_has_a_failing_profile() -> None:
    covered = {rule_id_of(p) for p in FAILING}
    # Host preflight rules need a live host: tests/test_apply_hosts.py covers them. A secret in a
    # manifest is refused by export itself, after SGD021: tests/test_kubernetes.py covers it.
    assert sorted(set(rule_ids()) - covered - set(HOST_RULES) - {"SGD801"}) == []


# --------------------------------------------------------------------------- the registry
def test_rule_ids_are_unique_and_well_formed() -> None:
    registered = [r.id for r in RULES]
    assert len(registered) == len(set(registered))
    assert not set(registered) & set(STRUCTURAL_RULES)
    assert len(rule_ids()) == len(set(rule_ids()))
    assert all(RULE_ID.match(rule_id) for rule_id in rule_ids())


def test_rule_names_are_unique() -> None:
    names = [r.name for r in RULES] + [name for name, _ in STRUCTURAL_RULES.values()]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("rule", list(RULES), ids=[r.id for r in RULES])
def test_rule_has_summary_and_hint(rule) -> None:  # type: ignore[no-untyped-def]
    assert rule.name and re.match(r"^[a-z0-9-]+$", rule.name)
    assert rule.summary.strip() and rule.hint.strip()
    assert rule.severity in (Severity.ERROR, Severity.WARNING, Severity.INFO)


@pytest.mark.parametrize("rule_id", sorted(STRUCTURAL_RULES))
def test_structural_rule_has_name_and_summary(rule_id: str) -> None:
    name, summary = STRUCTURAL_RULES[rule_id]
    assert name.strip() and summary.strip()


@pytest.mark.parametrize("rule_id", rule_ids())
def test_rule_is_documented(rule_id: str) -> None:
    text = DOCS.read_text(encoding="utf-8")
    match = re.search(rf"^## {rule_id}\b.*$", text, re.M)
    assert match, f"docs/rules.md has no '## {rule_id}' section"
    section = text[match.end() :].split("\n## ", 1)[0]
    name = (
        RULES.by_id(rule_id).name
        if rule_id not in STRUCTURAL_RULES
        else STRUCTURAL_RULES[rule_id][0]
    )
    assert name in match.group(0) + section
    assert severity_of(rule_id).value in section.lower()


# --------------------------------------------------------------------------- the reference launch
def write_variant(tmp_path: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    path = tmp_path / "variant.toml"
    path.write_text(edit(REFERENCE.read_text(encoding="utf-8")), encoding="utf-8")
    return path


def test_reference_profile_is_valid_on_ct129() -> None:
    result = validate(REFERENCE, REPO_INVENTORY)
    assert result.host == "ct129"
    assert result.sglang_versions == ["0.5.11"]
    assert result.ok
    assert [d for d in result.diagnostics if d.severity is not Severity.INFO] == []


def test_language_only_without_encoders(tmp_path: Path) -> None:
    path = write_variant(tmp_path, lambda text: text + "language_only = true\n")
    result = validate(path, REPO_INVENTORY)
    assert not result.ok
    hit = [d for d in result.diagnostics if d.rule == "SGD301"]
    assert len(hit) == 1
    assert hit[0].field == "server.language_only"
    assert (
        hit[0].line
        == key_line(path.read_text(), "server.language_only")
        == len(path.read_text().splitlines())
    )
    assert hit[0].severity is Severity.ERROR


def test_language_only_with_encoder_urls_is_accepted(tmp_path: Path) -> None:
    path = write_variant(
        tmp_path,
        lambda text: text + 'language_only = true\nencoder_urls = ["http://10.0.0.5:30002"]\n',
    )
    assert validate(path, REPO_INVENTORY).ok


def _nvls(host: str):  # type: ignore[no-untyped-def]
    def edit(text: str) -> str:
        return text.replace('host = "ct129"', f'host = "{host}"', 1) + "enable_nccl_nvls = true\n"

    return edit


def test_nccl_nvls_is_a_warning_on_a6000(tmp_path: Path) -> None:
    # SGLang accepts it and NCCL falls back silently without NVSwitch: nothing to refuse.
    path = write_variant(tmp_path, _nvls("ct129"))
    result = validate(path, REPO_INVENTORY)
    assert result.ok
    hit = [d for d in result.diagnostics if d.rule == "SGD401"]
    assert [(d.field, d.line, d.severity) for d in hit] == [
        (
            "server.enable_nccl_nvls",
            key_line(path.read_text(), "server.enable_nccl_nvls"),
            Severity.WARNING,
        )
    ]


def test_nccl_nvls_is_valid_on_h200_with_0_5_11(tmp_path: Path) -> None:
    path = write_variant(tmp_path, _nvls("h200-01"))
    result = validate(path, REPO_INVENTORY)
    assert result.sglang_versions == ["0.5.11"]
    assert result.ok, [(d.rule, d.message) for d in result.diagnostics]
    assert "SGD401" not in {d.rule for d in result.diagnostics}


def test_reference_against_0_5_23_lists_removed_flags_with_replacements() -> None:
    result = validate(REFERENCE, REPO_INVENTORY, sglang="0.5.23")
    assert result.sglang_versions == ["0.5.23"]
    assert not result.ok
    removed = {d.field: d for d in result.diagnostics if d.rule == "SGD011"}
    assert set(removed) == {
        "server.mamba_scheduler_strategy",
        "server.enforce_piecewise_cuda_graph",
    }
    assert "mamba_radix_cache_strategy" in removed["server.mamba_scheduler_strategy"].hint
    assert (
        'cuda_graph_backend_prefill = "breakable"'
        in removed["server.enforce_piecewise_cuda_graph"].hint
    )
    text = REFERENCE.read_text()
    for field, d in removed.items():
        assert d.line == key_line(text, field)
        assert d.severity is Severity.ERROR


def test_reference_without_enforce_warns_about_the_piecewise_graph(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def drop_enforce(text: str) -> str:
        kept = [line for line in text.splitlines() if not line.startswith("enforce_piecewise")]
        return "\n".join(kept) + "\n"

    path = write_variant(tmp_path, drop_enforce)
    result = validate(path, REPO_INVENTORY)
    warnings = [d for d in result.diagnostics if d.rule == "SGD602"]
    assert len(warnings) == 1 and warnings[0].severity is Severity.WARNING
    assert "Qwen3_5ForConditionalGeneration" in warnings[0].message
    assert "multimodal" in warnings[0].message
    assert warnings[0].field == "server"
    assert warnings[0].line == key_line(path.read_text(), "server")
    assert result.ok
    assert cli.main(["validate", str(path), "--inventory", str(REPO_INVENTORY)]) == 0
    assert "SGD602 warning" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("sglang", "dp_size", "fires"),
    [("0.5.11", 1, False), ("0.5.11", 2, True), ("0.5.21", 1, False), ("0.5.21", 2, True), ("0.5.22", 1, False),
     ("0.5.23", 1, False), ("0.5.23", 2, True)],
)
def test_standalone_dp_attention_follows_each_versions_check(
    tmp_path: Path, sglang: str, dp_size: int, fires: bool
) -> None:
    """SGLang checks DP attention after it has resolved the data-parallel layout: with dp_size 1 it
    has switched enable_dp_attention off (every release; 0.5.22+ resolve the deprecated flag to
    attn_dp_size = dp_size), so only more than one attention-DP rank is refused (0.5.11 and 0.5.23
    measured with SGLang's own resolution)."""
    path = tmp_path / "standalone.toml"
    text = (RULES_DIR / "SGD209-standalone-with-dp-attention.ok.toml").read_text(encoding="utf-8")
    path.write_text(text + f"enable_dp_attention = true\ndp_size = {dp_size}\n", encoding="utf-8")
    result = validate(path, sglang=sglang)
    found = [(d.rule, d.message) for d in result.diagnostics]
    assert ("SGD209" in {rule for rule, _ in found}) is fires, found
