"""`sgdeploy validate` and `sgdeploy schema` end to end: exit codes, formats, defaults (SPEC §4)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from sgdeploy import cli
from sgdeploy.sglang.catalog import newest_version

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "profiles" / "qwen36-mtp3.toml"
REPO_INVENTORY = ROOT / "inventory.toml"
RULES_INVENTORY = ROOT / "tests" / "inventory.rules.toml"
RULES_DIR = ROOT / "tests" / "rules"

GITHUB_LINE = re.compile(r"^::(error|warning|notice) file=[^,]+(,line=\d+)?,title=SGD\d{3}::.+$")
TEXT_LINE = re.compile(
    r"^(?P<path>.+?)(:(?P<line>\d+))?: (?P<rule>SGD\d{3}) (?P<sev>error|warning|info): (?P<msg>.+)$"
)

PROFILE = """\
[deploy]
host = "{host}"
python = "/opt/sglang/bin/python3"

[server]
model_path = "/models/Qwen3-8B"
tp_size = {tp}
"""


def profile(
    tmp_path: Path, name: str = "p.toml", host: str = "a6000", tp: int = 2, extra: str = ""
) -> Path:
    path = tmp_path / name
    path.write_text(PROFILE.format(host=host, tp=tp) + extra, encoding="utf-8")
    return path


def run(
    *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "SGDEPLOY_INVENTORY"}
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "sgdeploy", *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def _no_inventory_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SGDEPLOY_INVENTORY", raising=False)


# --------------------------------------------------------------------------- exit codes
def test_valid_profile_exits_0() -> None:
    done = run("validate", str(REFERENCE), "--inventory", str(REPO_INVENTORY))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 valid, 0 with errors" in done.stdout


def test_console_script_runs() -> None:
    script = Path(sys.executable).with_name("sgdeploy")
    if not script.exists():
        pytest.skip("no console script next to the interpreter")
    done = subprocess.run(
        [str(script), "validate", str(REFERENCE), "--inventory", str(REPO_INVENTORY)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_warnings_alone_exit_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = profile(tmp_path, tp=1, extra="enable_flashinfer_allreduce_fusion = true\n")
    code, out, _ = main(capsys, "validate", str(path), "--inventory", str(RULES_INVENTORY))
    assert code == 0
    assert "SGD403 warning" in out


def test_profile_with_an_error_exits_1(tmp_path: Path) -> None:
    path = profile(tmp_path, tp=4)
    done = run("validate", str(path), "--inventory", str(RULES_INVENTORY))
    assert done.returncode == 1
    assert re.search(rf"{re.escape(str(path))}:7: SGD101 error: .+ \(hint: .+\)", done.stdout)


def test_one_bad_profile_among_good_ones_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, bad = profile(tmp_path, "good.toml"), profile(tmp_path, "bad.toml", tp=4)
    code, out, _ = main(
        capsys, "validate", str(good), str(bad), "--inventory", str(RULES_INVENTORY)
    )
    assert code == 1
    assert "2 profile(s) checked: 1 valid, 1 with errors" in out


def test_missing_profile_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = main(
        capsys, "validate", str(tmp_path / "nope.toml"), "--inventory", str(RULES_INVENTORY)
    )
    assert code == 2
    assert "nope.toml" in err and out == ""


def test_missing_inventory_flag_file_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = main(
        capsys, "validate", str(profile(tmp_path)), "--inventory", str(tmp_path / "inv.toml")
    )
    assert code == 2
    assert "inv.toml" in err and out == ""


def test_unknown_sglang_version_exits_2(tmp_path: Path) -> None:
    done = run(
        "validate", str(profile(tmp_path)), "--inventory", str(RULES_INVENTORY), "--sglang", "0.4.0"
    )
    assert done.returncode == 2
    assert "0.4.0" in done.stderr and done.stdout == ""


def test_garbage_sglang_version_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = main(capsys, "validate", str(profile(tmp_path)), "--sglang", "banana")
    assert code == 2 and "banana" in err


def test_no_profiles_found_exits_2(tmp_path: Path) -> None:
    done = run("validate", cwd=tmp_path)
    assert done.returncode == 2
    assert "profiles" in done.stderr and done.stdout == ""


def test_unknown_format_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["validate", str(profile(tmp_path)), "--format", "xml"])
    assert exc.value.code == 2


def test_sglang_override_is_used(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = main(
        capsys,
        "validate",
        str(REFERENCE),
        "--inventory",
        str(REPO_INVENTORY),
        "--sglang",
        "0.5.23",
        "--format",
        "json",
    )
    assert code == 1
    result = json.loads(out)["profiles"][0]
    assert result["sglang_versions"] == ["0.5.23"]
    assert {d["rule"] for d in result["diagnostics"]} >= {"SGD011"}


# --------------------------------------------------------------------------- defaults
def test_default_is_profiles_glob_from_repo_root() -> None:
    done = run("validate", "--inventory", "inventory.toml", "--format", "json", cwd=ROOT)
    document = json.loads(done.stdout)
    paths = [p["path"] for p in document["profiles"]]
    assert paths == sorted(str(p.relative_to(ROOT)) for p in (ROOT / "profiles").glob("*.toml"))
    assert "profiles/qwen36-mtp3.toml" in paths
    assert done.returncode == (0 if all(p["ok"] for p in document["profiles"]) else 1)


def test_default_inventory_is_cwd_inventory_toml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "inventory.toml").write_text(RULES_INVENTORY.read_text())
    path = profile(tmp_path, tp=4)
    monkeypatch.chdir(tmp_path)
    code, out, _ = main(capsys, "validate", path.name)
    assert code == 1 and "SGD101" in out


def test_inventory_env_var_is_honoured(tmp_path: Path) -> None:
    path = profile(tmp_path, tp=4)
    without = run("validate", str(path), "--format", "json", cwd=tmp_path)
    rules = {d["rule"] for d in json.loads(without.stdout)["profiles"][0]["diagnostics"]}
    assert "SGD034" in rules and "SGD101" not in rules
    with_env = run(
        "validate",
        str(path),
        "--format",
        "json",
        cwd=tmp_path,
        env={"SGDEPLOY_INVENTORY": str(RULES_INVENTORY)},
    )
    assert with_env.returncode == 1
    result = json.loads(with_env.stdout)["profiles"][0]
    assert {d["rule"] for d in result["diagnostics"]} - {"SGD580"} == {"SGD101"}  # SGD580: notes what went unchecked
    assert result["host"] == "a6000"


def test_inventory_flag_wins_over_env_var(tmp_path: Path) -> None:
    path = profile(tmp_path, host="ct129", tp=2)
    done = run(
        "validate",
        str(path),
        "--inventory",
        str(REPO_INVENTORY),
        cwd=tmp_path,
        env={"SGDEPLOY_INVENTORY": str(RULES_INVENTORY)},
    )
    assert done.returncode == 0, done.stdout


# --------------------------------------------------------------------------- --format json
def test_json_is_one_document_with_the_spec_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = RULES_DIR / "SGD301-language-only-without-encoders.toml"
    code, out, _ = main(
        capsys,
        "validate",
        str(REFERENCE),
        str(bad),
        "--inventory",
        str(RULES_INVENTORY),
        "--format",
        "json",
    )
    assert code == 1
    document = json.loads(out)  # the whole of stdout is one JSON document
    assert set(document) == {"profiles"}
    first, second = document["profiles"]
    for result in (first, second):
        assert {"path", "ok", "host", "diagnostics"} <= set(result)
        assert isinstance(result["ok"], bool)
    assert first["path"] == str(REFERENCE) and second["path"] == str(bad)
    assert second["ok"] is False and second["host"] == "a6000"
    (diagnostic,) = [d for d in second["diagnostics"] if d["rule"] != "SGD580"]  # not the note
    assert set(diagnostic) == {"rule", "severity", "field", "line", "message", "hint"}
    assert diagnostic["rule"] == "SGD301" and diagnostic["severity"] == "error"
    assert diagnostic["field"] == "server.language_only"
    assert isinstance(diagnostic["line"], int) and diagnostic["message"] and diagnostic["hint"]
    assert bad.read_text().splitlines()[diagnostic["line"] - 1].startswith("language_only")


def test_json_line_is_null_without_a_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b"# caf\xe9\n")
    code, out, _ = main(
        capsys, "validate", str(path), "--format", "json", "--inventory", str(RULES_INVENTORY)
    )
    assert code in (1, 2)
    if code == 1:
        (diagnostic,) = json.loads(out)["profiles"][0]["diagnostics"]
        assert (
            diagnostic["rule"] == "SGD004"
            and diagnostic["line"] is None
            and diagnostic["field"] is None
        )


def test_json_on_usage_error_keeps_stdout_clean(tmp_path: Path) -> None:
    done = run("validate", str(tmp_path / "missing.toml"), "--format", "json")
    assert done.returncode == 2 and done.stdout == ""


# --------------------------------------------------------------------------- --format github
def _unescape_data(text: str) -> str:
    return text.replace("%0A", "\n").replace("%0D", "\r").replace("%25", "%")


def _unescape_property(text: str) -> str:
    return _unescape_data(text.replace("%3A", ":").replace("%2C", ","))


def test_github_lines_are_workflow_commands(capsys: pytest.CaptureFixture[str]) -> None:
    paths = sorted(str(p) for p in RULES_DIR.glob("SGD*.toml") if not p.name.endswith(".ok.toml"))
    paths = [p for p in paths if not any(i in p for i in ("SGD004", "SGD033", "SGD034"))]
    code, out, _ = main(
        capsys, "validate", *paths, "--inventory", str(RULES_INVENTORY), "--format", "github"
    )
    assert code == 1
    lines = out.splitlines()
    assert len(lines) >= len(paths)
    for line in lines:
        assert GITHUB_LINE.match(line), line
    levels = {line.split(" ", 1)[0] for line in lines}
    assert levels == {"::error", "::warning", "::notice"}


def test_github_escapes_percent_colon_comma_and_newlines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = profile(tmp_path, name="odd,name:1.toml", tp=4, extra='"100%,done:\\nnow" = 1\n')
    code, out, _ = main(
        capsys, "validate", str(path), "--inventory", str(RULES_INVENTORY), "--format", "github"
    )
    assert code == 1
    lines = out.splitlines()
    assert lines and all(GITHUB_LINE.match(line) for line in lines), lines
    for line in lines:
        head, _, message = line.partition("::")[2].partition("::")
        props = dict(p.split("=", 1) for p in head.split(" ", 1)[1].split(","))
        assert _unescape_property(props["file"]) == str(path)
        assert "\n" not in message and "\r" not in message
        assert re.fullmatch(r"([^%]|%25|%0A|%0D)*", message), message
    unknown = next(line for line in lines if "title=SGD010" in line)
    message = _unescape_data(unknown.split("::", 2)[2])
    assert "100%,done:\nnow" in message
    assert "%25,done:%0Anow" in unknown


def test_github_line_number_present_when_known(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = profile(tmp_path, tp=4)
    code, out, _ = main(
        capsys, "validate", str(path), "--inventory", str(RULES_INVENTORY), "--format", "github"
    )
    assert code == 1
    assert out.startswith(f"::error file={path},line=7,title=SGD101::")


# --------------------------------------------------------------------------- text
def test_text_lines_follow_the_finding_format(capsys: pytest.CaptureFixture[str]) -> None:
    bad = RULES_DIR / "SGD510-mamba-extra-buffer-constraints.toml"
    code, out, _ = main(capsys, "validate", str(bad), "--inventory", str(RULES_INVENTORY))
    assert code == 1
    first, summary = [line for line in out.splitlines() if " SGD580 " not in line]  # not the note
    match = TEXT_LINE.match(first)
    assert (
        match
        and match["path"] == str(bad)
        and match["rule"] == "SGD510"
        and match["sev"] == "error"
    )
    assert match["line"] and "(hint: " in match["msg"]
    assert summary.startswith("1 profile(s) checked")


# --------------------------------------------------------------------------- schema
def _check(schema: dict[str, Any], value: Any, defs: dict[str, Any], where: str) -> list[str]:
    """Check a value against a JSON Schema subset (type, properties, enum, items, $ref, anyOf)."""
    if "$ref" in schema:
        schema = defs[schema["$ref"].rsplit("/", 1)[-1]]
    if "anyOf" in schema:
        if any(not _check(s, value, defs, where) for s in schema["anyOf"]):
            return []
        return [f"{where}: matches no anyOf branch"]
    problems = []
    types = schema.get("type")
    if types:
        kinds = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}
        allowed = types if isinstance(types, list) else [types]
        ok = any(
            (t == "integer" and isinstance(value, int) and not isinstance(value, bool))
            or (t == "number" and isinstance(value, int | float) and not isinstance(value, bool))
            or (t in kinds and isinstance(value, kinds[t]))
            for t in allowed
        )
        if not ok:
            return [f"{where}: {value!r} is not {allowed}"]
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{where}: {value!r} not in enum")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                problems.append(f"{where}: missing {key}")
        for key, item in value.items():
            if key in props:
                problems += _check(props[key], item, defs, f"{where}.{key}")
            elif schema.get("additionalProperties") is False:
                problems.append(f"{where}: unexpected {key}")
            elif isinstance(schema.get("additionalProperties"), dict):
                problems += _check(schema["additionalProperties"], item, defs, f"{where}.{key}")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            problems += _check(schema["items"], item, defs, f"{where}[{i}]")
    return problems


def test_schema_prints_json_schema_with_server_flags() -> None:
    done = run("schema")
    assert done.returncode == 0
    schema = json.loads(done.stdout)
    assert schema["type"] == "object"
    assert schema["properties"]["server"]["properties"]["tp_size"]["type"] == "integer"
    assert "deploy" in schema["required"]
    assert schema["properties"]["server"]["additionalProperties"] is False


def test_schema_validates_the_reference_profile(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = main(capsys, "schema", "--sglang", "0.5.11")
    assert code == 0
    schema = json.loads(out)
    data = tomllib.loads(REFERENCE.read_text())
    try:
        import jsonschema  # type: ignore[import-untyped]
    except ImportError:
        assert _check(schema, data, schema.get("$defs", {}), "profile") == []
    else:
        jsonschema.validate(data, schema)
    data["server"]["tp_size"] = "two"
    data["server"]["no_such_flag"] = 1
    problems = _check(schema, data, schema.get("$defs", {}), "profile")
    assert any("tp_size" in p for p in problems) and any("no_such_flag" in p for p in problems)


def test_schema_with_unknown_version_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = main(capsys, "schema", "--sglang", "0.4.0")
    assert code == 2 and out == ""


# --------------------------------------------------------------------------- example profiles
EXAMPLES = ["qwen36-mtp3.toml", "deepseek-v3-h200.toml", "qwen3-8b-dense.toml"]


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_profile_is_valid_without_warnings(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = ROOT / "profiles" / name
    code, out, _ = main(
        capsys, "validate", str(path), "--inventory", str(REPO_INVENTORY), "--format", "json"
    )
    assert code == 0, out
    (result,) = json.loads(out)["profiles"]
    # Info notes (checks skipped for want of the model's config.json) are neither errors nor warnings.
    assert result["ok"] and [d for d in result["diagnostics"] if d["severity"] != "info"] == []


def test_deepseek_example_uses_nextn_right() -> None:
    server = tomllib.loads((ROOT / "profiles" / "deepseek-v3-h200.toml").read_text())["server"]
    assert server["speculative_algorithm"] == "NEXTN" and server["tp_size"] == 8
    assert server["speculative_num_draft_tokens"] == server["speculative_num_steps"] + 1
    assert server["speculative_eagle_topk"] == 1 and "speculative_draft_model_path" not in server
    assert 0.7 <= server["mem_fraction_static"] <= 0.9


def test_an_invalid_profile_still_has_its_flags_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A first profile missing deploy.python, with a misspelt flag and a port that is no number:
    one run names all three, each at its line, and says what waits for the fix; a [server] value
    whose own shape is wrong keeps the error it has, not a second one."""
    path = tmp_path / "first.toml"
    path.write_text('[deploy]\nhost = "a6000"\n\n[server]\nmodel_path = "/models/Qwen3-8B"\n'
                    'port = "abc"\ntensor_paralel_size = 2\nattention_backend = { name = "fa3" }\n',
                    encoding="utf-8")
    code, out, _ = main(capsys, "validate", str(path), "--inventory", str(RULES_INVENTORY), "--sglang", "0.5.11")
    found = [(m["rule"], m["line"]) for m in map(TEXT_LINE.match, out.splitlines()[:-1]) if m]
    assert code == 1 and ("SGD003", "1") in found, out
    assert ("SGD013", "6") in found and ("SGD010", "7") in found, out
    assert [line for rule, line in found if line == "8"] == ["8"], out  # the table's shape error alone
    assert "SGLang 0.5.11" in out and "every other check wait for the errors above" in out, out
    code, out, _ = main(capsys, "validate", str(path), "--inventory", str(RULES_INVENTORY), "--json")
    checked = json.loads(out)["profiles"][0]
    assert checked["sglang_versions"] == [newest_version()] and not checked["ok"], checked
