"""Messages about bad input: `[deploy]`, `[env]` and the inventory, files that are no TOML text,
paths that are no files, hosts that cannot be reached. Each says file:line, the key, what is wrong
and how to fix it, as `[server]`'s findings do: never a regex, a codec's or pydantic's wording, a
traceback, or a secret's value."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from sgdeploy import cli
from sgdeploy.core.files import path_problem
from sgdeploy.profile.model import load_profile
from sgdeploy.profile.validate import InventoryContext, select_hosts

PROFILE = """\
[deploy]
host = "gpu1"
python = "/opt/sglang/bin/python3"

[server]
model_path = "/models/Qwen3-8B"
"""
INVENTORY = """\
[hosts.gpu1]
address = "10.0.0.5"
gpu = "H200"
gpu_count = 8
sglang_version = "0.5.11"
"""
# What none of these messages may show: a regex, pydantic's or a codec's words, Python's.
RAW = re.compile(r"String should|Input should|Value error|codec|\[Errno|Traceback|recursion|"
                 r"\^\[|\]\*\$|invalid value for ''")


@pytest.fixture(autouse=True)
def _no_inventory_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SGDEPLOY_INVENTORY", raising=False)


def validate(capsys: pytest.CaptureFixture[str], tmp_path: Path, profile: str | bytes,
             inventory: str = INVENTORY) -> tuple[int, str]:
    """`sgdeploy validate p.toml --inventory inventory.toml`: (exit code, its text)."""
    path = tmp_path / "p.toml"
    if isinstance(profile, bytes):
        path.write_bytes(profile)
    else:
        path.write_text(profile, encoding="utf-8")
    (tmp_path / "inventory.toml").write_text(inventory, encoding="utf-8")
    capsys.readouterr()
    code = cli.main(["validate", str(path), "--inventory", str(tmp_path / "inventory.toml")])
    out, err = capsys.readouterr()
    assert not RAW.search(out + err), out + err
    return code, out + err


def finding(text: str, rule: str) -> str:
    """The first finding line of `rule`."""
    return next(line for line in text.splitlines() if f": {rule} " in line)


# --------------------------------------------------------------------------- [deploy], [env]
def test_relative_python_says_it_is_no_absolute_path(capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path) -> None:
    code, text = validate(capsys, tmp_path, PROFILE.replace("/opt/sglang/bin/python3", "python3"))
    line = finding(text, "SGD003")
    assert code == 1 and line.startswith(f"{tmp_path}/p.toml:3: ")
    assert 'deploy.python = "python3" is not an absolute path' in line
    assert "starting with '/'" in line


def test_env_name_says_what_a_name_may_hold(capsys: pytest.CaptureFixture[str],
                                            tmp_path: Path) -> None:
    code, text = validate(capsys, tmp_path, PROFILE + '\n[env]\n"HF-HOME" = "/x"\n')
    line = finding(text, "SGD003")
    assert code == 1 and ":9: " in line
    assert "the key env.HF-HOME is not an environment variable name" in line and "rename" in line


def test_deploy_types_and_ranges_in_toml_words(capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path) -> None:
    text = PROFILE.replace("[server]", 'ready_timeout_s = 0\ngpus = [-1, "x"]\n\n[server]')
    code, out = validate(capsys, tmp_path, text)
    assert code == 1
    assert "deploy.ready_timeout_s = 0 is out of range: it must be more than 0" in out
    assert "deploy.gpus[0] = -1 is out of range" in out
    assert 'deploy.gpus[1] = "x" is not a GPU index (0, 1, ...) or UUID' in out


def test_a_missing_key_says_how_to_write_it(capsys: pytest.CaptureFixture[str],
                                            tmp_path: Path) -> None:
    without = PROFILE.replace('python = "/opt/sglang/bin/python3"\n', "")
    code, text = validate(capsys, tmp_path, without)
    line = finding(text, "SGD003")
    assert code == 1 and "missing required key 'deploy.python'" in line
    assert 'add python = "/opt/sglang/bin/python3" under [deploy]' in line


def test_empty_file_says_it_is_empty(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, text = validate(capsys, tmp_path, "")
    line = finding(text, "SGD003")
    assert code == 1 and "the file is empty: it needs [deploy]" in line
    assert "add a [deploy] table with host = " in line and "top level" not in line


# --------------------------------------------------------------------------- the inventory
def test_bad_group_member_is_shown_at_its_inventory_line(capsys: pytest.CaptureFixture[str],
                                                         tmp_path: Path) -> None:
    inventory = INVENTORY + '\n[groups]\nall = ["gpu1", "gpu2"]\n'
    code, text = validate(capsys, tmp_path, PROFILE, inventory)
    assert code == 1
    assert finding(text, "SGD033").startswith(f"{tmp_path}/p.toml:2: ")
    member = finding(text, "SGD003")
    assert member.startswith(f"{tmp_path}/inventory.toml:8: ")
    assert "groups.all[1]: \"gpu2\" is no host of this inventory; did you mean 'gpu1'?" in member


def test_inventory_findings_carry_their_file_in_json(capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path) -> None:
    (tmp_path / "inventory.toml").write_text(INVENTORY.replace('"10.0.0.5"', '"root@10.0.0.5"'))
    for name in ("a.toml", "b.toml"):
        (tmp_path / name).write_text(PROFILE)
    code = cli.main(["validate", str(tmp_path / "a.toml"), str(tmp_path / "b.toml"), "--inventory",
                     str(tmp_path / "inventory.toml"), "--format", "json"])
    first, second = json.loads(capsys.readouterr().out)["profiles"]
    (address,) = [d for d in first["diagnostics"] if "path" in d]
    assert code == 1 and address["path"] == str(tmp_path / "inventory.toml")
    assert address["line"] == 2 and address["field"] == "hosts.gpu1.address"
    assert "no user@" in address["hint"]
    # the second profile names the inventory's lines, without repeating its findings
    assert [d["rule"] for d in second["diagnostics"]] == ["SGD033"]
    assert "at line 2" in second["diagnostics"][0]["message"]


def test_sglang_version_latest_is_shown_at_the_inventory(capsys: pytest.CaptureFixture[str],
                                                         tmp_path: Path) -> None:
    code, text = validate(capsys, tmp_path, PROFILE, INVENTORY.replace('"0.5.11"', '"latest"'))
    line = finding(text, "SGD032")
    assert code == 1 and line.startswith(f"{tmp_path}/inventory.toml:5: ")
    assert 'hosts.gpu1.sglang_version = "latest" is not an SGLang version' in line
    assert "build_catalogs" not in line and "sglang.__version__" in line


def test_a_secret_value_never_appears(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    token = "hf_0123456789abcdefSECRET"
    profile = PROFILE + f'\n[env]\nHF_TOKEN = ["{token}"]\n\n[secrets]\nfile = "/etc/s.yaml"\n' \
        f'keys = ["api_key"]\napi_key = "{token}"\n'
    inventory = INVENTORY + f'\n[gateways.g]\nurl = "http://10.0.0.2:30000"\napi_key = "{token}"\n'
    code, text = validate(capsys, tmp_path, profile, inventory)
    assert code == 1 and "env.HF_TOKEN takes a string" in text and token not in text


# --------------------------------------------------------------------------- not TOML text
def test_binary_file_says_it_is_binary(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, text = validate(capsys, tmp_path, bytes(range(256)) * 4)
    assert code == 2 and "the file is binary data, not text" in finding(text, "SGD004")


def test_utf16_file_says_utf16(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, text = validate(capsys, tmp_path, PROFILE.encode("utf-16"))
    line = finding(text, "SGD004")
    assert code == 2 and "the file is UTF-16 text; TOML files are UTF-8" in line and "iconv" in line


def test_latin1_byte_is_shown_at_its_line(capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
    code, text = validate(capsys, tmp_path, PROFILE.encode() + b"# caf\xe9\n")
    line = finding(text, "SGD004")
    assert code == 2 and line.startswith(f"{tmp_path}/p.toml:7: ")
    assert "byte 0xE9 at line 7, column 6 is not UTF-8" in line


def test_2000_nested_arrays_say_too_deep(capsys: pytest.CaptureFixture[str],
                                         tmp_path: Path) -> None:
    code, text = validate(capsys, tmp_path, PROFILE + "x = " + "[" * 2000 + "]" * 2000 + "\n")
    line = finding(text, "SGD001")
    assert code == 1 and line.startswith(f"{tmp_path}/p.toml:7: ")
    assert "tables or arrays nest more than 100 levels deep" in line


def test_2000_nested_tables_say_too_deep(capsys: pytest.CaptureFixture[str],
                                         tmp_path: Path) -> None:
    header = ".".join(["server", "json_model_override_args", *["x"] * 2000])
    code, text = validate(capsys, tmp_path, PROFILE + f"\n[{header}]\ny = 1\n")
    line = finding(text, "SGD001")
    assert code == 1 and line.startswith(f"{tmp_path}/p.toml:8: ")
    assert "tables or arrays nest more than 100 levels deep" in line


# --------------------------------------------------------------------------- no files
def test_a_directory_is_named_a_directory(tmp_path: Path) -> None:
    problem = path_problem(tmp_path, "profile", "*.toml")
    assert problem is not None and problem.message == f"{tmp_path} is a directory, not a profile"
    assert problem.hint == f"name a profile in it, e.g. {tmp_path}/*.toml"
    (message,) = [d.message for d in load_profile(tmp_path).diagnostics]
    assert message == problem.message


def test_a_dangling_link_names_where_it_points(tmp_path: Path) -> None:
    (tmp_path / "p.toml").symlink_to("gone.toml")
    (d,) = load_profile(tmp_path / "p.toml").diagnostics
    assert d.rule == "SGD004"
    assert d.message == f"{tmp_path}/p.toml is a symbolic link to gone.toml, which does not exist"


def test_a_link_loop_is_named_a_loop(tmp_path: Path) -> None:
    os.symlink("b.toml", tmp_path / "a.toml")
    os.symlink("a.toml", tmp_path / "b.toml")
    (d,) = load_profile(tmp_path / "a.toml").diagnostics
    assert d.message == f"{tmp_path}/a.toml is a symbolic link that loops ({tmp_path}/a.toml -> " \
        "b.toml -> a.toml)"


def test_a_missing_file_offers_the_one_beside_it(tmp_path: Path) -> None:
    (tmp_path / "qwen3.toml").write_text(PROFILE)
    problem = path_problem(tmp_path / "qwen.toml", "profile")
    assert problem is not None
    assert problem.message == (f"no such profile: {tmp_path}/qwen.toml; did you mean "
                               f"{tmp_path}/qwen3.toml?")


# --------------------------------------------------------------------------- connections
def test_connection_refused_says_nothing_listens(capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path) -> None:
    (tmp_path / "inventory.toml").write_text('[hosts.gpu1]\naddress = "127.0.0.1"\nport = 1\n')
    code = cli.main(["history", "--host", "gpu1", "--unit", "sglang", "--inventory",
                     str(tmp_path / "inventory.toml")])
    err = capsys.readouterr().err
    assert code == 2 and not RAW.search(err), err
    assert "cannot connect to 127.0.0.1:1: connection refused: nothing listens on port 1" in err


def test_commands_on_hosts_name_the_inventory_s_first_finding(tmp_path: Path) -> None:
    path = tmp_path / "inventory.toml"
    path.write_text(INVENTORY + '\n[groups]\nall = ["gpu1", "gpu3"]\n')
    with pytest.raises(LookupError) as refused:
        select_hosts("gpu1", InventoryContext.load(path))
    assert f"the inventory {path} is invalid (1 error(s)" in str(refused.value)
    assert f"the first: {path}:8: SGD003 error: groups.all[1]: \"gpu3\"" in str(refused.value)


def test_a_dangling_inventory_link_is_named(tmp_path: Path) -> None:
    (tmp_path / "inventory.toml").symlink_to("gone.toml")
    note = InventoryContext.load(tmp_path / "inventory.toml").unusable()
    assert note == (f"{tmp_path}/inventory.toml is a symbolic link to gone.toml, which does not "
                    "exist")
