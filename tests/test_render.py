"""Rendering a profile into its systemd unit (SPEC §2, §4 `render`, §5), without test hosts.

What is checked here: the reference unit against a reviewed snapshot, determinism, how each
kind of `[server]` value becomes words of ExecStart=, systemd quoting, the `render` command's
exit codes and streams, the header, and that secrets never reach a unit. Every profile in
`profiles/` is also checked with `systemd-analyze verify` for each host of its target.

Regenerate the snapshot with `SGDEPLOY_UPDATE_SNAPSHOTS=1 pytest tests/test_render.py`; the
test then reports itself as skipped with the path written, so an update is never silent.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sgdeploy import __version__, cli
from sgdeploy.deploy.render import (
    SYSTEMD_DEFAULT_PATH,
    env_assignment,
    exec_arg,
    exec_command,
    flag_args,
    launch_argv,
    path_value,
    render_unit,
    unit_environment,
    unit_path,
)
from sgdeploy.profile.inventory import load_inventory
from sgdeploy.profile.model import load_profile
from sgdeploy.profile.validate import InventoryContext, validate_loaded
from sgdeploy.sglang.catalog import Flag, load_catalog

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ROOT / "profiles"
REFERENCE = PROFILES / "qwen36-mtp3.toml"
INVENTORY = ROOT / "inventory.toml"
SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
UPDATE_ENV = "SGDEPLOY_UPDATE_SNAPSHOTS"

# ct129 of inventory.toml runs SGLang 0.5.11; h200-02 runs 0.5.23.
CT129_VERSION = "0.5.11"


# --------------------------------------------------------------------------- helpers
def toml_string(value: str) -> str:
    """A TOML basic string that reads back as exactly `value` (any control character too)."""
    out = ['"']
    for ch in value:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)  # inf, nan and exponents are valid TOML floats as Python writes them
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{" + ", ".join(f"{toml_string(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
        )
    raise TypeError(f"cannot write {value!r} as TOML")


def profile_toml(
    deploy: dict[str, Any], server: dict[str, Any], env: dict[str, Any] | None = None
) -> str:
    """A profile's text; every value goes through `toml_value`, keys keep their order."""
    parts = ["[deploy]"]
    parts += [f"{k} = {toml_value(v)}" for k, v in deploy.items()]
    if env:
        parts += ["", "[env]"] + [f"{k} = {toml_value(v)}" for k, v in env.items()]
    parts += ["", "[server]"] + [f"{toml_string(k)} = {toml_value(v)}" for k, v in server.items()]
    text = "\n".join(parts) + "\n"
    data = tomllib.loads(text)
    assert data["server"] == server and data.get("env", {}) == (env or {}), (
        "TOML writer lost a value"
    )
    return text


def base_deploy(**changes: Any) -> dict[str, Any]:
    return {"host": "ct129", "unit": "sglang", "python": "/root/ml-env/bin/python3", **changes}


def write_profile(
    folder: Path,
    server: dict[str, Any] | None = None,
    env: dict[str, Any] | None = None,
    name: str = "p.toml",
    **deploy: Any,
) -> Path:
    path = folder / name
    path.write_text(
        profile_toml(
            base_deploy(**deploy), {"model_path": "/root/models/Qwen3-8B", **(server or {})}, env
        ),
        encoding="utf-8",
    )
    return path


def render(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    """`sgdeploy render ...` in process: (exit code, stdout, stderr)."""
    capsys.readouterr()
    code = cli.main(["render", *(str(a) for a in args)])
    out, err = capsys.readouterr()
    return code, out, err


def run_cli(
    *args: str | Path, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environment = (
        env
        if env is not None
        else {k: v for k, v in os.environ.items() if k != "SGDEPLOY_INVENTORY"}
    )
    return subprocess.run(
        [sys.executable, "-m", "sgdeploy", *(str(a) for a in args)],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def unit_of(path: Path, host: str = "ct129", version: str = CT129_VERSION) -> tuple[str, list[str]]:
    """(unit text, argv) of a profile that must be valid."""
    loaded = load_profile(path)
    assert loaded.model is not None, loaded.diagnostics
    unit = render_unit(loaded, load_catalog(version), host)
    return unit.text, list(unit.argv)


def service_lines(text: str) -> list[str]:
    """The unit's setting lines (no comments, no blank lines)."""
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def exec_start(text: str) -> str:
    """The ExecStart= value as written (continuation lines included)."""
    match = re.search(r"^ExecStart=(.*?)(?<!\\)\n(?!    )", text, re.S | re.M)
    assert match, text
    return match.group(1)


@pytest.fixture(autouse=True)
def _no_inventory_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SGDEPLOY_INVENTORY", raising=False)


# --------------------------------------------------------------------------- snapshot
def test_reference_unit_matches_snapshot(capsys: pytest.CaptureFixture[str]) -> None:
    snapshot = SNAPSHOTS / "qwen36-mtp3.ct129.service"
    code, out, err = render(capsys, REFERENCE, "--inventory", INVENTORY, "--host", "ct129")
    assert (code, err) == (0, ""), err
    if os.environ.get(UPDATE_ENV) == "1":
        snapshot.parent.mkdir(parents=True, exist_ok=True)
        old = snapshot.read_text(encoding="utf-8") if snapshot.exists() else None
        if old != out:
            snapshot.write_text(out, encoding="utf-8")
            pytest.skip(
                f"{UPDATE_ENV}=1: wrote {snapshot.relative_to(ROOT)}; review it with git diff"
            )
    assert snapshot.exists(), (
        f"no snapshot at {snapshot}; create it with {UPDATE_ENV}=1 and review it"
    )
    expected = snapshot.read_text(encoding="utf-8")
    diff = "".join(
        difflib.unified_diff(
            expected.splitlines(True), out.splitlines(True), str(snapshot.name), "rendered"
        )
    )
    assert out == expected, f"the unit changed; if intended, rerun with {UPDATE_ENV}=1\n{diff}"


def test_reference_unit_says_what_the_profile_says() -> None:
    """Independently of the snapshot: the reference launch from the story behind the project."""
    text, argv = unit_of(REFERENCE)
    assert argv[:3] == ["/root/ml-env/bin/python3", "-m", "sglang.launch_server"]
    flags = " ".join(argv[3:])
    for part in (
        "--model-path /root/models/Qwen3.6-27B",
        "--tp-size 2",
        "--speculative-algorithm NEXTN",
        "--speculative-num-steps 3",
        "--speculative-eagle-topk 1",
        "--speculative-num-draft-tokens 4",
        "--enforce-piecewise-cuda-graph",
        "--enable-single-batch-overlap",
        "--trust-remote-code",
    ):
        assert part in flags
    assert 'Environment="SGLANG_ENABLE_SPEC_V2=1"' in service_lines(text)
    assert "[Service]" in text and "Type=exec" in text and "KillMode=control-group" in text
    assert "SyslogIdentifier=sglang" in text and "WantedBy=multi-user.target" in text


# --------------------------------------------------------------------------- determinism
def test_render_twice_is_byte_identical() -> None:
    first, _ = unit_of(REFERENCE)
    second, _ = unit_of(REFERENCE)
    assert first.encode() == second.encode()


def test_render_does_not_depend_on_process_environment(tmp_path: Path) -> None:
    """Locale, time zone, hash seed, the order of os.environ and the working directory change
    nothing: the output is the same bytes in every process."""
    copy = tmp_path / REFERENCE.name
    shutil.copyfile(REFERENCE, copy)
    base = {k: v for k, v in os.environ.items() if k != "SGDEPLOY_INVENTORY"}
    variants = [
        (ROOT, {**base, "LC_ALL": "C", "TZ": "UTC", "PYTHONHASHSEED": "0"}),
        (
            tmp_path,
            {
                **dict(reversed(list(base.items()))),
                "LC_ALL": "C.UTF-8",
                "TZ": "Asia/Kathmandu",
                "PYTHONHASHSEED": "4242",
                "SOURCE_DATE_EPOCH": "1",
            },
        ),
        (
            Path("/"),
            {
                **base,
                "LANG": "tr_TR.UTF-8",
                "LC_ALL": "",
                "TZ": "America/St_Johns",
                "PYTHONHASHSEED": "random",
                "PYTHONIOENCODING": "latin-1",
            },
        ),
    ]
    outputs = []
    for cwd, env in variants:
        done = run_cli("render", copy, "--inventory", INVENTORY, cwd=cwd, env=env)
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout.encode("utf-8"))
    in_process, _ = unit_of(REFERENCE)
    assert outputs == [in_process.encode()] * len(variants)
    for leaked in (str(tmp_path), str(ROOT), os.uname().nodename):
        assert leaked not in in_process
    assert not re.search(r"\b(19|20)\d\d-\d\d-\d\d\b|\b\d\d:\d\d:\d\d\b", in_process), (
        "a timestamp in the unit"
    )


def test_output_follows_profile_order_not_hashing(tmp_path: Path) -> None:
    server = {"served_model_name": "m", "port": 30001, "host": "127.0.0.1", "chat_template": "t"}
    env = {"B_VAR": "2", "A_VAR": "1", "C_VAR": "3"}
    text, argv = unit_of(write_profile(tmp_path, server, env))
    assert argv[3:] == [
        "--model-path",
        "/root/models/Qwen3-8B",
        "--served-model-name",
        "m",
        "--port",
        "30001",
        "--host",
        "127.0.0.1",
        "--chat-template",
        "t",
    ]
    envs = [line for line in service_lines(text) if line.startswith("Environment=")]
    assert envs == [
        'Environment="PYTHONUNBUFFERED=1"',
        f'Environment="PATH=/root/ml-env/bin:{SYSTEMD_DEFAULT_PATH}"',
        'Environment="B_VAR=2"',
        'Environment="A_VAR=1"',
        'Environment="C_VAR=3"',
        'Environment="TORCHINDUCTOR_CACHE_DIR=/var/cache/sgdeploy/sglang/torchinductor"',
    ]


def test_torchinductors_cache_outlives_a_reboot_in_the_units_cache_folder(tmp_path: Path) -> None:
    """Its default, /tmp/torchinductor_USER, is gone after a reboot; the unit's cache folder, which
    systemd creates for the unit's user, is not. [env] naming a folder itself keeps it, and a
    strict unit has its whole cache environment there already."""
    text, _ = unit_of(write_profile(tmp_path, {}, {}))
    lines = service_lines(text)
    assert 'Environment="TORCHINDUCTOR_CACHE_DIR=/var/cache/sgdeploy/sglang/torchinductor"' in lines
    assert "CacheDirectory=sgdeploy/sglang" in lines
    own, _ = unit_of(write_profile(tmp_path, {}, {"TORCHINDUCTOR_CACHE_DIR": "/data/inductor"}, name="own.toml"))
    assert 'Environment="TORCHINDUCTOR_CACHE_DIR=/data/inductor"' in service_lines(own)
    assert not any(line.startswith("CacheDirectory=") for line in service_lines(own))


# --------------------------------------------------------------------------- flag mapping
def test_store_true_switch(tmp_path: Path) -> None:
    _, on = unit_of(write_profile(tmp_path, {"trust_remote_code": True}, name="on.toml"))
    _, off = unit_of(write_profile(tmp_path, {"trust_remote_code": False}, name="off.toml"))
    assert "--trust-remote-code" in on
    assert off[3:] == ["--model-path", "/root/models/Qwen3-8B"]


def test_boolean_optional_switch(tmp_path: Path) -> None:
    catalog = load_catalog(CT129_VERSION)
    assert catalog.get("lora_strict_loading").boolean_optional  # type: ignore[union-attr]
    _, on = unit_of(write_profile(tmp_path, {"lora_strict_loading": True}, name="on.toml"))
    _, off = unit_of(write_profile(tmp_path, {"lora_strict_loading": False}, name="off.toml"))
    assert on[-1] == "--lora-strict-loading"
    assert off[-1] == "--no-lora-strict-loading"
    assert "--lora-strict-loading" not in off


def test_store_false_switch() -> None:
    flag = Flag.from_json(
        {
            "field": "use_x",
            "flags": ["--no-use-x"],
            "action": "_StoreFalseAction",
            "nargs": 0,
            "default": True,
        }
    )
    assert flag.is_switch and flag.store_false
    assert flag_args(flag, True) == []
    assert flag_args(flag, False) == ["--no-use-x"]


def test_list_values_follow_their_flag(tmp_path: Path) -> None:
    server = {
        "cuda_graph_bs": [1, 2, 4, 8],
        "log_requests_target": ["stdout", "/var/log/a b.log"],
        "uvicorn_access_log_exclude_prefixes": [],
        "bucket_e2e_request_latency": [0.5, 1.0, 2.5],
    }
    text, argv = unit_of(write_profile(tmp_path, server))
    assert argv[5:] == [
        "--cuda-graph-bs",
        "1",
        "2",
        "4",
        "8",
        "--log-requests-target",
        "stdout",
        "/var/log/a b.log",
        "--uvicorn-access-log-exclude-prefixes",
        "--bucket-e2e-request-latency",
        "0.5",
        "1.0",
        "2.5",
    ]
    # one group of words per line of ExecStart=
    assert '    "--cuda-graph-bs" "1" "2" "4" "8" \\' in text.splitlines()
    assert '    "--log-requests-target" "stdout" "/var/log/a b.log" \\' in text.splitlines()


def test_tables_render_as_one_json_string(tmp_path: Path) -> None:
    server = {
        "preferred_sampling_params": {"top_p": 0.9, "temperature": 0.7, "stop": ["</s>", "é"]},
        "forward_hooks": [{"name": "h", "target_modules": ["a.b"]}],
        "extra_metric_labels": '{"team": "ml"}',
    }
    _, argv = unit_of(write_profile(tmp_path, server))
    flags = argv[5:]
    assert flags[0] == "--preferred-sampling-params"
    assert flags[1] == '{"stop": ["</s>", "é"], "temperature": 0.7, "top_p": 0.9}'
    assert json.loads(flags[1]) == server["preferred_sampling_params"]
    assert flags[2:4] == ["--forward-hooks", '[{"name": "h", "target_modules": ["a.b"]}]']
    assert flags[4:] == ["--extra-metric-labels", '{"team": "ml"}']  # a JSON string goes as written


def test_scalars(tmp_path: Path) -> None:
    server = {
        "port": 30000,
        "mem_fraction_static": 0.85,
        "context_length": 131072,
        "served_model_name": "x",
    }
    _, argv = unit_of(write_profile(tmp_path, server))
    assert argv[5:] == [
        "--port",
        "30000",
        "--mem-fraction-static",
        "0.85",
        "--context-length",
        "131072",
        "--served-model-name",
        "x",
    ]


def test_option_spelling_when_the_field_has_another_name(tmp_path: Path) -> None:
    _, argv = unit_of(write_profile(tmp_path, {"fp8_gemm_runner_backend": "auto"}))
    assert argv[5:] == ["--fp8-gemm-backend", "auto"]


@pytest.mark.parametrize(
    ("gpus", "expected"),
    [
        ([1], "1"),
        ([0, 1], "0,1"),
        (
            ["GPU-0a1b2c3d-4e5f-6789-abcd-ef0123456789", "GPU-ffffffff-0000"],
            "GPU-0a1b2c3d-4e5f-6789-abcd-ef0123456789,GPU-ffffffff-0000",
        ),
    ],
)
def test_deploy_gpus_become_cuda_visible_devices(
    tmp_path: Path, gpus: list[Any], expected: str
) -> None:
    text, _ = unit_of(write_profile(tmp_path, gpus=gpus))
    assert f'Environment="CUDA_VISIBLE_DEVICES={expected}"' in service_lines(text)


def test_no_cuda_visible_devices_without_deploy_gpus(tmp_path: Path) -> None:
    text, _ = unit_of(write_profile(tmp_path))
    assert "CUDA_VISIBLE_DEVICES" not in text


def test_env_values(tmp_path: Path) -> None:
    env = {"FLAG_ON": True, "FLAG_OFF": False, "COUNT": 3, "RATIO": 0.25, "TEXT": "a b"}
    path = write_profile(tmp_path, env=env)
    text, _ = unit_of(path)
    loaded = load_profile(path)
    assert loaded.model is not None
    assert unit_environment(loaded.model) == [
        ("PYTHONUNBUFFERED", "1"),
        ("PATH", f"/root/ml-env/bin:{SYSTEMD_DEFAULT_PATH}"),
        ("FLAG_ON", "1"),
        ("FLAG_OFF", "0"),
        ("COUNT", "3"),
        ("RATIO", "0.25"),
        ("TEXT", "a b"),
    ]
    for line in ('"FLAG_ON=1"', '"FLAG_OFF=0"', '"COUNT=3"', '"RATIO=0.25"', '"TEXT=a b"'):
        assert f"Environment={line}" in service_lines(text)


def test_launch_argv_is_what_exec_start_says(tmp_path: Path) -> None:
    path = write_profile(tmp_path, {"served_model_name": "a b", "trust_remote_code": True})
    loaded = load_profile(path)
    assert loaded.model is not None
    text, argv = unit_of(path)
    assert argv == launch_argv(loaded.model, load_catalog(CT129_VERSION))
    assert exec_start(text) == " \\\n    ".join(
        " ".join(exec_arg(w) for w in group) for group in (argv[:3], argv[3:5], argv[5:7], argv[7:])
    )


# --------------------------------------------------------------------------- quoting
@pytest.mark.parametrize(
    ("value", "quoted"),
    [
        ("plain", '"plain"'),
        ("", '""'),
        ("a b", '"a b"'),
        ("  lead and trail  ", '"  lead and trail  "'),
        ("back\\slash", '"back\\\\slash"'),
        ("trailing\\", '"trailing\\\\"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("'single'", "\"'single'\""),
        ("100%", '"100%%"'),
        ("%n%i%%", '"%%n%%i%%%%"'),
        ("$HOME", '"$$HOME"'),
        ("${X}", '"$${X}"'),
        ("$$", '"$$$$"'),
        ("a;b", '"a;b"'),
        (";", '";"'),
        ("\\;", '"\\\\;"'),
        ("x && y || z | w", '"x && y || z | w"'),
        ("`id` $(id)", '"`id` $$(id)"'),
        ("é ü ✓ 😀 \u2028 \u0085", '"é ü ✓ 😀 \u2028 \u0085"'),
        ("tab\there", '"tab\\x09here"'),
        ("\x01\x1b\x7f", '"\\x01\\x1b\\x7f"'),
        ("#not a comment", '"#not a comment"'),
    ],
)
def test_exec_arg(value: str, quoted: str) -> None:
    assert exec_arg(value) == quoted


@pytest.mark.parametrize(
    ("pair", "quoted"),
    [
        (("K", "v"), '"K=v"'),
        (("K", ""), '"K="'),
        (("K", "a b"), '"K=a b"'),
        (("K", "$HOME ${X} $$"), '"K=$HOME ${X} $$"'),  # Environment= does not expand variables
        (("K", "50%"), '"K=50%%"'),
        (("K", "%n"), '"K=%%n"'),
        (("K", 'q"uote'), '"K=q\\"uote"'),
        (("K", "back\\"), '"K=back\\\\"'),
        (("K", "a;b && c | d `e`"), '"K=a;b && c | d `e`"'),
        (("K", "x=y=z"), '"K=x=y=z"'),
        (("K", "ü😀"), '"K=ü😀"'),
        (("K", "\t\x01\x7f"), '"K=\\x09\\x01\\x7f"'),
    ],
)
def test_env_assignment(pair: tuple[str, str], quoted: str) -> None:
    assert env_assignment(pair) == quoted


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ("/srv/models", "/srv/models"),
        ("/srv/my models", "/srv/my models"),
        ("/srv/100%", "/srv/100%%"),
        ("/srv/%n", "/srv/%%n"),
        ("/srv/$HOME", "/srv/$HOME"),
        ("/srv/a;b&&c", "/srv/a;b&&c"),
        ("/srv/ü😀", "/srv/ü😀"),
        ('/srv/"q"', '/srv/"q"'),
    ],
)
def test_path_value(value: str, written: str) -> None:
    assert path_value(value) == written


@pytest.mark.parametrize(
    "value", ["/srv/a\nExecStartPre=/bin/sh -c 'touch /pwned'", "/srv/a\\", "/srv/\x01"]
)
def test_path_value_cannot_break_the_line(value: str) -> None:
    try:
        written = path_value(value)
    except ValueError:
        return
    assert (
        "\n" not in written
        and not written.endswith("\\")
        and not re.search(r"[\x00-\x1f\x7f]", written)
    )


def test_exec_command_executable_keeps_dollar() -> None:
    line = exec_command([["/opt/env$1/bin/python3", "-m", "sglang.launch_server"], ["--x", "$y"]])
    assert line == '"/opt/env$1/bin/python3" "-m" "sglang.launch_server" \\\n    "--x" "$$y"'


# --------------------------------------------------------------------------- deploy paths
def test_env_file_becomes_environment_file(tmp_path: Path) -> None:
    text, _ = unit_of(
        write_profile(
            tmp_path, env_file="/etc/sglang/secrets %n.env", working_directory="/srv/sglang work"
        )
    )
    lines = service_lines(text)
    assert "EnvironmentFile=/etc/sglang/secrets %%n.env" in lines
    assert "WorkingDirectory=/srv/sglang work" in lines
    service = lines[lines.index("[Service]") :]
    assert service.index("EnvironmentFile=/etc/sglang/secrets %%n.env") < next(
        i for i, line in enumerate(service) if line.startswith("ExecStart=")
    )


def test_user_setting(tmp_path: Path) -> None:
    text, _ = unit_of(write_profile(tmp_path, user="sglang"))
    assert "User=sglang" in service_lines(text)
    text, _ = unit_of(write_profile(tmp_path, name="q.toml"))
    assert not any(line.startswith("User=") for line in service_lines(text))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("working_directory", "/srv\nExecStartPre=/bin/touch /pwned"),
        ("env_file", "/etc/x.env\nExecStartPre=/bin/touch /pwned"),
        ("working_directory", "/srv/a\\"),
        ("env_file", "/etc/x.env\\"),
    ],
)
def test_deploy_path_cannot_inject_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: str
) -> None:
    path = write_profile(tmp_path, **{key: value})
    code, out, _ = render(capsys, path, "--inventory", INVENTORY)
    if code == 1:
        assert out == ""
        return
    assert code == 0
    lines = service_lines(out)
    assert not any(line.startswith("ExecStartPre=") for line in lines)
    assert not any(
        line.endswith("\\") and not line.startswith(("ExecStart=", "    ")) for line in lines
    )
    assert 'Environment="PYTHONUNBUFFERED=1"' in lines


# --------------------------------------------------------------------------- header
def test_header_names_profile_hash_and_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = render(capsys, REFERENCE, "--inventory", INVENTORY)
    assert code == 0
    sha = hashlib.sha256(REFERENCE.read_bytes()).hexdigest()
    head = out.splitlines()[:4]
    assert head[0] == f"# sglang.service: SGLang server, managed by sgdeploy {__version__}."
    assert head[2] == f"# profile: qwen36-mtp3 (sha256 {sha})"
    assert head[3] == f"# target: host ct129, SGLang {CT129_VERSION}"
    assert "Description=SGLang server qwen36-mtp3 (sgdeploy)" in out.splitlines()
    # a one-byte change to the profile changes the hash and nothing else
    changed = tmp_path / REFERENCE.name
    changed.write_bytes(REFERENCE.read_bytes() + b"# reviewed\n")
    code, out2, _ = render(capsys, changed, "--inventory", INVENTORY)
    assert code == 0
    new_sha = hashlib.sha256(changed.read_bytes()).hexdigest()
    assert out2 == out.replace(sha, new_sha)


def test_header_hash_is_the_file_hash_for_crlf(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "crlf.toml"
    path.write_bytes(REFERENCE.read_bytes().replace(b"\n", b"\r\n"))
    code, out, _ = render(capsys, path, "--inventory", INVENTORY)
    assert code == 0
    assert f"(sha256 {hashlib.sha256(path.read_bytes()).hexdigest()})" in out


# --------------------------------------------------------------------------- CLI
def test_render_exit_0_stdout_only() -> None:
    done = run_cli("render", REFERENCE, "--inventory", INVENTORY)
    assert done.returncode == 0
    assert done.stderr == ""
    assert done.stdout.startswith("# sglang.service:") and done.stdout.endswith(
        "WantedBy=multi-user.target\n"
    )


def test_render_group_member_with_host(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_profile(tmp_path, {"tp_size": 2}, host="h200")
    code, out, err = render(capsys, path, "--inventory", INVENTORY, "--host", "h200-02")
    assert (code, err) == (0, "")
    assert "# target: host h200-02, SGLang 0.5.23" in out.splitlines()


def test_render_invalid_profile_exits_1(tmp_path: Path) -> None:
    path = write_profile(tmp_path, {"tp_size": 4})  # ct129 has 2 GPUs
    done = run_cli("render", path, "--inventory", INVENTORY)
    assert done.returncode == 1
    assert done.stdout == ""
    assert "SGD101" in done.stderr


def test_render_unknown_flag_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_profile(tmp_path, {"no_such_flag": True})
    code, out, err = render(capsys, path, "--inventory", INVENTORY)
    assert (code, out) == (1, "")
    assert "SGD010" in err


@pytest.mark.parametrize(
    ("server", "env", "rule"),
    [
        ({"served_model_name": "a\nb"}, None, "SGD020"),
        ({"chat_template": "a\rb"}, None, "SGD020"),
        ({"log_requests_target": ["ok", "a\x00b"]}, None, "SGD020"),
        ({"preferred_sampling_params": {"stop": ["\n"]}}, None, "SGD020"),
        ({}, {"SOME_VAR": "line1\nline2"}, "SGD020"),
        ({}, {"SOME_VAR": "nul\x00"}, "SGD020"),
    ],
)
def test_newline_and_nul_are_refused(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    server: dict[str, Any],
    env: dict[str, Any] | None,
    rule: str,
) -> None:
    path = write_profile(tmp_path, server, env)
    code, out, err = render(capsys, path, "--inventory", INVENTORY)
    assert (code, out) == (1, "")
    assert rule in err


@pytest.mark.parametrize(
    ("server", "env"),
    [
        ({"served_model_name": "a\ufffeb"}, None),
        ({"chat_template": "\ufdd0"}, None),
        ({}, {"SOME_VAR": "x\U0010ffff"}),
    ],
)
def test_noncharacters_are_refused(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    server: dict[str, Any],
    env: dict[str, Any] | None,
) -> None:
    path = write_profile(tmp_path, server, env)
    code, out, _ = render(capsys, path, "--inventory", INVENTORY)
    assert (code, out) == (1, "")


@pytest.mark.parametrize(
    ("server", "env", "secret"),
    [
        ({"api_key": "sk-live-0123456789abcdef"}, None, "sk-live-0123456789abcdef"),
        ({"admin_api_key": "adm-0123456789abcdef"}, None, "adm-0123456789abcdef"),
        ({}, {"HF_TOKEN": "hf_abcdefghijklmnop"}, "hf_abcdefghijklmnop"),
    ],
)
def test_secrets_are_refused_and_never_printed(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    server: dict[str, Any],
    env: dict[str, Any] | None,
    secret: str,
) -> None:
    path = write_profile(tmp_path, server, env, env_file="/etc/sglang/secrets.env")
    code, out, err = render(capsys, path, "--inventory", INVENTORY)
    assert (code, out) == (1, "")
    assert "SGD021" in err
    assert secret not in err


def test_missing_profile_exits_2(tmp_path: Path) -> None:
    done = run_cli("render", tmp_path / "nope.toml", "--inventory", INVENTORY)
    assert (done.returncode, done.stdout) == (2, "")
    assert "no such profile" in done.stderr


def test_usage_error_exits_2() -> None:
    done = run_cli("render")
    assert (done.returncode, done.stdout) == (2, "")


@pytest.mark.parametrize("host", ["h200-01", "nosuchhost"])
def test_host_outside_target_exits_2(capsys: pytest.CaptureFixture[str], host: str) -> None:
    code, out, err = render(capsys, REFERENCE, "--inventory", INVENTORY, "--host", host)
    assert (code, out) == (2, "")
    assert host in err


def test_group_without_host_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_profile(tmp_path, {"tp_size": 2}, host="h200")
    code, out, err = render(capsys, path, "--inventory", INVENTORY)
    assert (code, out) == (2, "")
    assert "--host" in err


# --------------------------------------------------------------------------- systemd-analyze verify
def profile_targets() -> list[tuple[Path, str]]:
    inventory = load_inventory(INVENTORY).model
    assert inventory is not None
    cases = []
    for path in sorted(PROFILES.glob("*.toml")):
        target = tomllib.loads(path.read_text(encoding="utf-8"))["deploy"]["host"]
        cases += [(path, host) for host in inventory.resolve(target) or []]
    return cases


def with_local_python(text: str) -> str:
    """The profile with deploy.python replaced by this interpreter (systemd-analyze verify checks
    that the ExecStart= binary exists)."""
    new, count = re.subn(
        r"(?m)^python\s*=.*$", lambda _: f"python = {toml_string(sys.executable)}", text
    )
    assert count == 1, "expected one python = line in the profile"
    return new


def verify(unit_text: str, unit_name: str, folder: Path) -> subprocess.CompletedProcess[str]:
    folder.mkdir(parents=True, exist_ok=True)
    unit_path = folder / f"{unit_name}.service"
    unit_path.write_text(unit_text, encoding="utf-8")
    return subprocess.run(
        ["systemd-analyze", "verify", str(unit_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "SYSTEMD_LOG_COLOR": "0"},
    )


needs_systemd_analyze = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed"
)


@needs_systemd_analyze
@pytest.mark.parametrize(
    ("profile", "host"), profile_targets(), ids=lambda v: v.stem if isinstance(v, Path) else v
)
def test_systemd_analyze_verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], profile: Path, host: str
) -> None:
    copy = tmp_path / profile.name
    copy.write_text(with_local_python(profile.read_text(encoding="utf-8")), encoding="utf-8")
    code, out, err = render(capsys, copy, "--inventory", INVENTORY, "--host", host)
    assert code == 0, err
    unit = tomllib.loads(copy.read_text(encoding="utf-8"))["deploy"].get("unit", "sglang")
    done = verify(out, unit, tmp_path / "units")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


@needs_systemd_analyze
def test_systemd_analyze_verify_with_every_setting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """User, WorkingDirectory, EnvironmentFile, CUDA_VISIBLE_DEVICES and hard values at once."""
    path = write_profile(
        tmp_path,
        {
            "served_model_name": 'm $x ${Y} %n ; && | `id` \\ " ü😀 \x01',
            "log_requests_target": ["a b", "%", "$$"],
            "preferred_sampling_params": {"k": 'v"\\%$'},
            "trust_remote_code": True,
        },
        {"A_VAR": 'x y $z %n \\ " \t', "B_VAR": True},
        python=sys.executable,
        user="root",
        working_directory="/tmp",
        env_file="/etc/sglang/x %n.env",
        gpus=[0, 1],
        unit="sglang-test",
    )
    code, out, err = render(capsys, path, "--inventory", INVENTORY)
    assert code == 0, err
    done = verify(out, "sglang-test", tmp_path / "units")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


@needs_systemd_analyze
def test_systemd_analyze_verify_profile_name_with_percent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "qwen%z.toml"
    path.write_text(with_local_python(REFERENCE.read_text(encoding="utf-8")), encoding="utf-8")
    code, out, err = render(capsys, path, "--inventory", INVENTORY)
    assert code == 0, err
    done = verify(out, "sglang", tmp_path / "units")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


@pytest.mark.parametrize("stem", ["trailing\\", "ctl\x01x"])
def test_profile_name_that_cannot_be_a_description(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], stem: str
) -> None:
    """The profile's file name lands in comments and Description=: a final backslash or a control
    character must neither crash render nor break the line."""
    path = tmp_path / f"{stem}.toml"
    path.write_text(REFERENCE.read_text(encoding="utf-8"), encoding="utf-8")
    try:
        code, out, err = render(capsys, path, "--inventory", INVENTORY)
    except Exception as exc:
        pytest.fail(f"render raised {exc!r}")
    assert code in (0, 1, 2)
    if code:
        assert out == "" and err
    else:
        assert not any(
            line.endswith("\\") for line in service_lines(out) if line.startswith("Desc")
        )


@needs_systemd_analyze
def test_working_directory_not_normalized(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_profile(tmp_path, python=sys.executable, working_directory="/srv/../tmp")
    assert_refused_or_verified(capsys, path, tmp_path)


@needs_systemd_analyze
@pytest.mark.parametrize("name", ["py'q", 'py"q', "py\\q", "py\x01", "py$1"])
def test_python_path_special_characters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    python = tmp_path / "bin" / name
    python.parent.mkdir()
    python.symlink_to(sys.executable)
    path = write_profile(tmp_path, python=str(python))
    assert_refused_or_verified(capsys, path, tmp_path)


def assert_refused_or_verified(capsys: pytest.CaptureFixture[str], path: Path, tmp_path: Path) -> None:
    """`render` either refuses the profile (exit 1, nothing printed) or prints a unit that
    `systemd-analyze verify` accepts without a word."""
    code, out, _ = render(capsys, path, "--inventory", INVENTORY)
    if code == 1:
        assert out == ""
        return
    done = verify(out, "sglang", tmp_path / "units")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


# --------------------------------------------------------------------------- refused characters
_UNSAFE_SERVER = [
    "served_model_name",
    "chat_template",
    "tokenizer_path",
    "revision",
    "download_dir",
]


@settings(max_examples=60, deadline=None)
@given(
    before=st.text(max_size=20),
    bad=st.sampled_from(["\n", "\r", "\x00", "\r\n"]),
    after=st.text(max_size=20),
    where=st.sampled_from([*_UNSAFE_SERVER, "log_requests_target", "env", "json"]),
)
def test_newline_cr_nul_anywhere_are_refused(before: str, bad: str, after: str, where: str) -> None:
    """Wherever a newline, CR or NUL hides in [server] or [env], validation refuses the profile
    (render exits 1 with nothing on stdout; checked through the same validation here)."""
    value = before + bad + after
    server: dict[str, Any] = {"model_path": "/m"}
    env: dict[str, Any] = {}
    if where == "env":
        env["SOME_VAR"] = value
    elif where == "json":
        server["preferred_sampling_params"] = {"stop": [value]}
    elif where == "log_requests_target":
        server[where] = ["stdout", value]
    else:
        server[where] = value
    text = profile_toml(base_deploy(), server, env)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "p.toml"
        path.write_text(text, encoding="utf-8")
        result = validate_loaded(load_profile(path), InventoryContext.load(INVENTORY))
    assert not result.ok
    assert "SGD020" in {d.rule for d in result.diagnostics if d.is_error}


def test_unit_path_puts_the_interpreters_bin_first(tmp_path: Path) -> None:
    """SGLang's JIT kernels run `ninja` from PATH: under systemd's PATH alone a venv's ninja is not
    found and a real server died capturing CUDA graphs (tests/fixtures/h200-real/)."""
    assert unit_path("/opt/sgl/bin/python3") == f"/opt/sgl/bin:{SYSTEMD_DEFAULT_PATH}"
    assert unit_path("/usr/bin/python3") == SYSTEMD_DEFAULT_PATH
    own = write_profile(tmp_path, env={"PATH": "/opt/cuda/bin:/usr/bin"})
    loaded = load_profile(own)
    assert loaded.model is not None
    assert [v for k, v in unit_environment(loaded.model) if k == "PATH"] == ["/opt/cuda/bin:/usr/bin"]
