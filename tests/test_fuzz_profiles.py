"""Fuzzing `sgdeploy validate`: whatever the profile or inventory file holds, no traceback.

For every input: `cli.main(["validate", ...])` returns 0, 1 or 2, and every diagnostic that has a
line points inside the file it is about.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sgdeploy import cli
from sgdeploy.profile.inventory import load_inventory

ROOT = Path(__file__).resolve().parent.parent
REFERENCE_TEXT = (ROOT / "profiles" / "qwen36-mtp3.toml").read_text(encoding="utf-8")
RULES_INVENTORY = ROOT / "tests" / "inventory.rules.toml"
GOOD_PROFILE = """\
[deploy]
host = "a6000"
python = "/opt/sglang/bin/python3"

[server]
model_path = "/models/Qwen3-8B"
tp_size = 2
"""

# SGDEPLOY_FUZZ_EXAMPLES raises the count for a longer hunt; the default keeps the file under 20 s.
EXAMPLES = int(os.environ.get("SGDEPLOY_FUZZ_EXAMPLES", "50"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_SCRATCH = Path(tempfile.mkdtemp(prefix="sgdeploy-fuzz-"))


# --------------------------------------------------------------------------- running
def line_count(data: bytes) -> int:
    """Lines as TOML counts them (only '\\n' ends a line); a last line without '\\n' counts."""
    if not data:
        return 0
    return data.count(b"\n") + (0 if data.endswith(b"\n") else 1)


def validate(profile: bytes, inventory: bytes | None = None) -> tuple[int, dict[str, Any] | None]:
    """Run the CLI on these bytes; return the exit code and the JSON document (None on exit 2)."""
    profile_path = _SCRATCH / "profile.toml"
    profile_path.write_bytes(profile)
    inventory_path = RULES_INVENTORY
    if inventory is not None:
        inventory_path = _SCRATCH / "inventory.toml"
        inventory_path.write_bytes(inventory)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(
            ["validate", str(profile_path), "--inventory", str(inventory_path), "--format", "json"]
        )
    assert code in (0, 1, 2), (code, err.getvalue())
    if code == 2 and not out.getvalue():
        assert err.getvalue()
        return code, None
    if code == 2:  # unreadable input: still one JSON document naming it (SGD004)
        document = json.loads(out.getvalue())
        assert any(d["rule"] == "SGD004" for p in document["profiles"] for d in p["diagnostics"])
        return code, document
    document = json.loads(out.getvalue())
    return code, document


def check_profile(data: bytes, inventory: bytes | None = None) -> dict[str, Any] | None:
    code, document = validate(data, inventory)
    if document is None:
        return None
    (result,) = document["profiles"]
    unreadable = any(d["rule"] == "SGD004" for d in result["diagnostics"])
    assert code == (2 if unreadable else 0 if result["ok"] else 1)
    for diagnostic in result["diagnostics"]:
        line = diagnostic["line"]
        # a finding of the inventory says so, and its line is the inventory's
        lines = line_count(data if "path" not in diagnostic else inventory or b"")
        assert line is None or 1 <= line <= lines, (diagnostic, lines)
        assert diagnostic["rule"].startswith("SGD") and diagnostic["message"]
    return result


# --------------------------------------------------------------------------- TOML writer
def toml_key(key: str) -> str:
    return json.dumps(key, ensure_ascii=False)


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(value)


def toml_document(tables: dict[str, Any]) -> str:
    """Scalars first, then `[table]`, `[[array of tables]]` and nested `[a.b]` sections."""
    lines: list[str] = []

    def emit(prefix: list[str], table: dict[str, Any]) -> None:
        nested = []
        for key, value in table.items():
            if isinstance(value, dict) and value and len(prefix) < 3:
                nested.append((key, value, False))
            elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                nested.append((key, value, True))
            else:
                lines.append(f"{toml_key(key)} = {toml_value(value)}")
        for key, value, is_array in nested:
            path = ".".join(toml_key(p) for p in [*prefix, key])
            if is_array:
                for item in value:
                    lines.append(f"\n[[{path}]]")
                    for k, v in item.items():
                        lines.append(f"{toml_key(k)} = {toml_value(v)}")
            else:
                lines.append(f"\n[{path}]")
                emit([*prefix, key], value)

    emit([], tables)
    return "\n".join(lines) + "\n"


FLAG_NAMES = [
    "model_path",
    "tp_size",
    "pp_size",
    "dp_size",
    "nnodes",
    "node_rank",
    "port",
    "grpc_port",
    "page_size",
    "mem_fraction_static",
    "chunked_prefill_size",
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "language_only",
    "encoder_urls",
    "enable_nccl_nvls",
    "attention_backend",
    "served_model_name",
    "cuda_graph_config",
    "lora_paths",
    "mamba_scheduler_strategy",
    "enforce_piecewise_cuda_graph",
    "json_model_override_args",
    "api_key",
]
DEPLOY_KEYS = [
    "host",
    "unit",
    "python",
    "ready_timeout_s",
    "user",
    "gpus",
    "env_file",
    "model_architecture",
]

keys = st.one_of(st.text(min_size=0, max_size=12), st.sampled_from(FLAG_NAMES + DEPLOY_KEYS))
scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.integers(
        min_value=2**63, max_value=10**40
    ),  # beyond TOML's 64 bits: tomllib still reads them
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(
        ["a6000", "h200", "NEXTN", "MTP", "/opt/sglang/bin/python3", "0.5.11", "", "GPU-1a2b"]
    ),
    st.datetimes(timezones=st.none() | st.just(dt.UTC)),
    st.dates(),
    st.times(),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=12,
)
tables = st.dictionaries(keys, values, max_size=6)
profiles_data = st.fixed_dictionaries(
    {},
    optional={
        "deploy": st.dictionaries(st.sampled_from(DEPLOY_KEYS) | keys, values, max_size=6),
        "env": st.dictionaries(keys, values, max_size=3),
        "server": st.dictionaries(st.sampled_from(FLAG_NAMES) | keys, values, max_size=8),
        "extra": tables,
        "servers": st.lists(tables, min_size=1, max_size=2),
    },
)

TOKENS = st.sampled_from(list("[]{}=\"'.,#=\n\t -+:_01239eEaxz\\é\u2028\r")) | st.sampled_from(
    [
        "[deploy]",
        "[server]",
        "[env]",
        "[[server]]",
        "host",
        "tp_size",
        " = ",
        '"""',
        "'''",
        "true",
        "1979-05-27",
    ]
)
TOMLISH = st.lists(TOKENS, max_size=80).map("".join)


# --------------------------------------------------------------------------- profiles
@FUZZ
@given(TOMLISH)
def test_tomlish_text(text: str) -> None:
    check_profile(text.encode("utf-8"))


@FUZZ
@given(st.binary(max_size=300))
def test_byte_garbage(data: bytes) -> None:
    check_profile(data)


@FUZZ
@given(st.binary(max_size=60))
def test_reference_with_garbage_appended(data: bytes) -> None:
    check_profile(REFERENCE_TEXT.encode("utf-8") + data)


@FUZZ
@given(profiles_data)
def test_valid_toml_of_any_shape(data: dict[str, Any]) -> None:
    check_profile(toml_document(data).encode("utf-8"))


@FUZZ
@given(
    st.fixed_dictionaries(
        {"host": st.sampled_from(["a6000", "h200", "h200-new", "a6000-new", "h200s"])}
    ),
    st.dictionaries(st.sampled_from(FLAG_NAMES), values, max_size=8),
)
def test_valid_profile_with_random_flag_values(
    deploy: dict[str, Any], server: dict[str, Any]
) -> None:
    data = {"deploy": {**deploy, "python": "/opt/sglang/bin/python3"}, "server": server}
    check_profile(toml_document(data).encode("utf-8"))


REFERENCE_LINES = REFERENCE_TEXT.splitlines()


@st.composite
def mutated_reference(draw: st.DrawFn) -> str:
    lines = list(REFERENCE_LINES)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        index = draw(st.integers(min_value=0, max_value=len(lines) - 1)) if lines else 0
        action = draw(st.sampled_from(["delete", "duplicate", "retype", "insert"]))
        if not lines:
            lines.append(draw(st.text(max_size=20)))
        elif action == "delete":
            del lines[index]
        elif action == "duplicate":
            lines.insert(draw(st.integers(min_value=0, max_value=len(lines))), lines[index])
        elif action == "retype" and "=" in lines[index]:
            key = lines[index].split("=", 1)[0].rstrip()
            lines[index] = f"{key} = {toml_value(draw(values))}"
        else:
            key = draw(st.sampled_from(FLAG_NAMES) | keys)
            lines.insert(index, f"{toml_key(key)} = {toml_value(draw(values))}")
    return "\n".join(lines) + draw(st.sampled_from(["\n", "", "\r\n"]))


@FUZZ
@given(mutated_reference())
def test_mutations_of_the_reference_profile(text: str) -> None:
    check_profile(text.encode("utf-8"))


# --------------------------------------------------------------------------- inventories
HOST_KEYS = [
    "address",
    "port",
    "user",
    "gpu",
    "compute_capability",
    "gpu_count",
    "gpu_memory_gib",
    "sglang_version",
    "identity_file",
    "known_hosts",
    "strict_host_key_checking",
]
inventories_data = st.fixed_dictionaries(
    {},
    optional={
        "hosts": st.dictionaries(
            st.sampled_from(["a6000", "h200", "x"]) | keys,
            st.dictionaries(st.sampled_from(HOST_KEYS) | keys, values, max_size=6) | values,
            max_size=3,
        ),
        "groups": st.dictionaries(
            keys, st.lists(st.sampled_from(["a6000", "h200", "nope"]) | keys) | values
        ),
        "extra": values,
    },
)


def check_inventory(data: bytes) -> None:
    inventory_path = _SCRATCH / "inventory-alone.toml"
    inventory_path.write_bytes(data)
    document = load_inventory(inventory_path)
    lines = line_count(data)
    for diagnostic in document.diagnostics:
        assert diagnostic.line is None or 1 <= diagnostic.line <= lines, (diagnostic, lines)
    result = check_profile(GOOD_PROFILE.encode("utf-8"), data)
    if result is None:  # exit 2
        return
    rules = {d["rule"] for d in result["diagnostics"]}
    if document.model is None:
        (broken,) = [d for d in result["diagnostics"] if d["rule"] == "SGD033"]
        assert broken["field"] == "deploy.host" and broken["line"] == 2
        assert not result["ok"]
    else:
        assert "SGD033" not in rules


@FUZZ
@given(inventories_data)
def test_random_inventories(data: dict[str, Any]) -> None:
    check_inventory(toml_document(data).encode("utf-8"))


@FUZZ
@given(TOMLISH)
def test_tomlish_inventories(text: str) -> None:
    check_inventory(text.encode("utf-8"))


@FUZZ
@given(st.binary(max_size=200))
def test_garbage_inventories(data: bytes) -> None:
    check_inventory(data)


# --------------------------------------------------------------------------- regressions
# A lone CR is no line break in TOML: the file must be read as bytes, not with universal newlines.
@pytest.mark.parametrize(
    "text", ["\r]", '[deploy]\rhost = "a6000"\rpython = "/x/python3"\r[server]\rmodel_path = 1\n']
)
def test_lone_carriage_return_lines(text: str) -> None:
    result = check_profile(text.encode("utf-8"))
    assert result is not None
    assert [d["rule"] for d in result["diagnostics"]] == ["SGD001"]
