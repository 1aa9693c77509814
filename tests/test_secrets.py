"""Secret SGLang arguments (sgdeploy.deploy.secret_args): the profile shape, the unit per SGLang release,
the host check's script and verdicts, and the redaction of SGLang's own argument lines."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sgdeploy.deploy.render import render_unit
from sgdeploy.deploy.secret_args import (
    SecretCheck,
    check_argv,
    check_command,
    check_diagnostics,
    key_source,
    parse_check,
    redacting_launcher,
    without_secrets,
)
from sgdeploy.host.unitfile import parse_service
from sgdeploy.profile.model import load_profile
from sgdeploy.sglang.catalog import load_catalog
from sgdeploy.sglang.secrets import redact

PROFILE = """\
[deploy]
host = "ct129"
unit = "qwen"
python = "{python}"

[server]
model_path = "/models/Qwen3-8B"
{extra}
[secrets]
file = "{file}"
keys = ["api_key"]
"""
VALUE = "sk-" + "test-0123456789abcdef"


def write(tmp_path: Path, extra: str = "", file: str = "/etc/sglang/qwen.secrets.yaml",
          python: str = "/root/ml-env/bin/python3") -> Path:
    path = tmp_path / "qwen.toml"
    path.write_text(PROFILE.format(extra=extra, file=file, python=python))
    return path


def unit(tmp_path: Path, version: str, extra: str = "") -> str:
    return render_unit(load_profile(write(tmp_path, extra)), load_catalog(version), None).text


def test_a_value_in_secrets_is_refused_without_echoing_it(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(PROFILE.format(extra="", file="/etc/s.yaml", python="/x") + f'api_key = "{VALUE}"\n')
    loaded = load_profile(path)
    assert loaded.model is None
    text = " ".join(d.message + d.hint for d in loaded.diagnostics)
    assert "never into the profile" in text and VALUE not in text


def test_config_releases_pass_the_file_with_config(tmp_path: Path) -> None:
    text = unit(tmp_path, "0.5.23")
    assert '"--config" "/etc/sglang/qwen.secrets.yaml"' in text
    assert "\nEnvironmentFile=" not in text and "api-key" not in text


def test_own_config_is_merged_in_the_runtime_directory(tmp_path: Path) -> None:
    text = unit(tmp_path, "0.5.11", 'config = "/etc/sglang/base.yaml"\n')
    assert text.count('"--config"') == 1 and '"--config" "/run/sgdeploy-qwen/config.yaml"' in text
    assert "RuntimeDirectory=sgdeploy-qwen\nRuntimeDirectoryMode=0700\n" in text
    assert '"/etc/sglang/base.yaml" "/etc/sglang/qwen.secrets.yaml" "/run/sgdeploy-qwen/config.yaml"' in text


def test_releases_without_config_expand_from_the_environment_file(tmp_path: Path) -> None:
    text = unit(tmp_path, "0.5.2")
    assert "EnvironmentFile=/etc/sglang/qwen.secrets.yaml\n" in text
    assert '"--api-key" "${api_key}"' in text and "process list" in text


# A stand-in sglang.launch_server: logs its arguments the way SGLang's engine does (f-strings
# through the module logger, after basicConfig on stderr), then reports how it was run.
_LAUNCH_SERVER = r"""
import json, logging, sys
logging.basicConfig(level=logging.INFO, format="[%(asctime)s TP0] %(message)s", force=True)
logger = logging.getLogger("sglang.srt.entrypoints.engine")
for key in (sys.argv[-1], "it's", 'both \' "quotes\\'):
    logger.info(f"server_args=ServerArgs(model_path='/m', api_key={key!r}, admin_api_key=None, port=1)")
    logger.info(f"server_args={ {'model_path': '/m', 'api_key': key, 'tp_size': 2} }")
logger.info("api_key is %s", "set")
print(json.dumps({"argv": sys.argv, "path0": sys.path[0], "spec": __spec__.name, "name": __name__,
                  "globals": sorted(k for k in globals() if not k.startswith("__"))}))
"""


def test_launcher_redacts_sglang_log_lines_and_runs_it_as_dash_m(tmp_path: Path) -> None:
    package = tmp_path / "sglang"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "launch_server.py").write_text(_LAUNCH_SERVER)
    python = sys.executable
    env = {**os.environ, "PYTHONPATH": ""}
    plain = subprocess.run([python, "-m", "sglang.launch_server", "--port", "1", VALUE], cwd=tmp_path,
                           capture_output=True, text=True, check=True, env=env)
    launched = subprocess.run([python, "-c", redacting_launcher(["api_key"]), "-m", "sglang.launch_server",
                               "--port", "1", VALUE], cwd=tmp_path, capture_output=True, text=True, check=True,
                              env=env)
    assert json.loads(launched.stdout) == json.loads(plain.stdout)  # argv, sys.path[0], __main__, its globals
    assert VALUE in plain.stderr and VALUE not in launched.stderr and "quotes" not in launched.stderr
    lines = launched.stderr.splitlines()
    assert len(lines) == len(plain.stderr.splitlines()) == 7
    assert all(line.startswith("[") and " TP0] " in line for line in lines)  # SGLang's own format
    assert lines[0].endswith("server_args=ServerArgs(model_path='/m', api_key='<redacted>', admin_api_key=None, "
                             "port=1)")
    assert lines[1].endswith("server_args={'model_path': '/m', 'api_key': '<redacted>', 'tp_size': 2}")
    assert lines[-1].endswith("api_key is set")


def test_unit_runs_sglang_through_the_launcher(tmp_path: Path) -> None:
    for version, extra in (("0.5.23", ""), ("0.5.11", 'config = "/etc/sglang/base.yaml"\n'), ("0.5.2", "")):
        rendered = render_unit(load_profile(write(tmp_path, extra)), load_catalog(version), None)
        words = parse_service(rendered.text).exec_start  # systemd's own word splitting
        assert words[:5] == ["/root/ml-env/bin/python3", "-c", redacting_launcher(["api_key"]), "-m",
                             "sglang.launch_server"], version
        assert rendered.argv[:3] == ("/root/ml-env/bin/python3", "-m", "sglang.launch_server")
        assert words[5:] == list(rendered.argv[3:]) or version == "0.5.2"  # ${api_key} is systemd's to expand
    path = write(tmp_path)
    path.write_text(path.read_text().split("[secrets]")[0])
    plain = parse_service(render_unit(load_profile(path), load_catalog("0.5.23"), None).text).exec_start
    assert plain[1:3] == ["-m", "sglang.launch_server"]  # without secrets, SGLang runs as it is


def test_sglang_check_reads_the_profile_config_before_the_merge(tmp_path: Path) -> None:
    loaded = load_profile(write(tmp_path, 'config = "/etc/sglang/base.yaml"\n'))
    assert loaded.model is not None
    flags = list(render_unit(loaded, load_catalog("0.5.23"), None).argv[3:])
    assert "/run/sgdeploy-qwen/config.yaml" in flags
    assert check_argv(loaded.model, flags) == [w.replace("/run/sgdeploy-qwen/config.yaml", "/etc/sglang/base.yaml")
                                               for w in flags]


def test_redact_server_args_lines() -> None:
    old = f"[2026-01-01 00:00:00] server_args=ServerArgs(model_path='/m', api_key='{VALUE}', admin_api_key=None)"
    new = f"[2026-01-01 00:00:00] server_args={{'model_path': '/m', 'api_key': '{VALUE}', 'port': 1}}"
    argv = f"launch_command: python -m sglang.launch_server --api-key {VALUE} --port 1"
    for line in (old, new, argv):
        assert VALUE not in redact(line) and "<redacted>" in redact(line)
    assert "admin_api_key=None" in redact(old)
    assert without_secrets({"api_key": VALUE, "port": 1}) == {"port": 1}


def test_key_source_follows_the_release() -> None:
    text = PROFILE.format(extra="", file="/etc/s.yaml", python="/py")
    config = key_source(text, "qwen", "0.5.23")
    env = key_source(text, "qwen", "0.5.2")
    assert config is not None and config.format == "yaml" and "api-key" in config.spellings
    assert env is not None and env.format == "env" and env.spellings == ("api_key",)
    assert key_source(text.replace('["api_key"]', '["admin_api_key"]'), "qwen", "0.5.23") is None


def run_check(tmp_path: Path, content: str | None, mode: int = 0o600, version: str = "0.5.23",
              python: str = "/usr/bin/python3") -> SecretCheck:
    secrets = tmp_path / "qwen.secrets.yaml"
    if content is not None:
        secrets.write_text(content)
        os.chmod(secrets, mode)
    loaded = load_profile(write(tmp_path, file=str(secrets), python=python))
    assert loaded.model is not None
    cmd = check_command(loaded.model, load_catalog(version))
    result = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, check=False)
    assert VALUE not in result.stdout
    return parse_check(result.stdout, result.returncode)


def messages(tmp_path: Path, check: SecretCheck, version: str = "0.5.23") -> list[str]:
    loaded = load_profile(tmp_path / "qwen.toml")
    found = check_diagnostics(loaded, check, "ct129", load_catalog(version))
    assert all(VALUE not in d.message + d.hint for d in found)
    return [f"{d.rule} {d.severity.value}: {d.message}" for d in found]


def _yaml_python() -> str | None:
    python = shutil.which("python3")
    if python and subprocess.run([python, "-c", "import yaml"], capture_output=True, check=False).returncode == 0:
        return python
    return None


needs_yaml = pytest.mark.skipif(_yaml_python() is None, reason="no python3 with PyYAML here")


@needs_yaml
@pytest.mark.parametrize(("content", "mode", "expect"), [
    (f"api-key: {VALUE}\n", 0o600, []),
    (None, 0o600, ["does not exist"]),
    ("api-key: ''\n", 0o600, ["gives an empty value for api-key"]),
    ("api-key:\n", 0o600, ["gives an empty value for api-key"]),
    (f"api_key: {VALUE}\n", 0o600, ["spells api_key with underscores"]),
    (f"api-key: {VALUE}\n", 0o644, ["has mode 0644"]),
    (f"api-key: [{VALUE}]\n", 0o600, ["gives no single value"]),
    (f"api-key: {VALUE}\nport: 1\n", 0o600, ["also sets port"]),
    (f"api-key: '{VALUE}\n", 0o600, ["is not valid YAML (line"]),
    ("- just a list\n", 0o600, ["is not a YAML mapping"]),
])
def test_host_check_of_a_yaml_file(tmp_path: Path, content: str | None, mode: int, expect: list[str]) -> None:
    check = run_check(tmp_path, content, mode, python=str(_yaml_python()))
    found = messages(tmp_path, check)
    if os.geteuid() == 0 and not expect:
        assert found == [], found
    for text in expect:
        assert any(text in m for m in found), found


def test_host_check_of_an_environment_file(tmp_path: Path) -> None:
    check = run_check(tmp_path, f"# the key\napi_key=\"{VALUE}\"\n", version="0.5.2")
    assert check.raw["keys"] == {"api_key": "ok"}
    check = run_check(tmp_path, "api_key=\n", version="0.5.2")
    assert any("gives an empty value for api_key" in m for m in messages(tmp_path, check, "0.5.2"))


def test_a_check_that_did_not_run_is_a_refusal(tmp_path: Path) -> None:
    write(tmp_path)
    found = messages(tmp_path, parse_check("sh: 1: /nope: not found", 127))
    assert found and found[0].startswith("SGD709 error: cannot check the secrets file")


def test_env_file_names_sglang_ignores_are_a_warning(tmp_path: Path) -> None:
    env = tmp_path / "secrets.env"
    env.write_text(f"SGLANG_API_KEY={VALUE}\nHF_TOKEN=x\n")
    check = SecretCheck({"state": "file", "owner": "root", "mode": "0600", "keys": {"api_key": "ok"},
                         "env_file_names": json.loads(json.dumps(["HF_TOKEN", "SGLANG_API_KEY"]))})
    write(tmp_path)
    found = messages(tmp_path, check)
    assert any("SGD709 warning: deploy.env_file on ct129 sets SGLANG_API_KEY" in m for m in found)
    assert not any("HF_TOKEN" in m for m in found)


def test_other_servers_command_lines_are_shown_without_their_keys() -> None:
    from types import SimpleNamespace

    from sgdeploy.deploy.adopt import describe
    from sgdeploy.host.facts import PortHolder

    holder = PortHolder(7, "root", f"/v/python3 -m sglang.launch_server --api-key {VALUE} --port 30000")
    assert VALUE not in holder.describe() and "--port 30000" in holder.describe()
    argv = ("/v/python3", "-c", redacting_launcher(["api_key"]), "-m", "sglang.launch_server", "--api-key=" + VALUE)
    server = SimpleNamespace(process=SimpleNamespace(pid=9, unit="qwen", argv=argv), gpus=(0,))
    shown = describe(server)
    assert shown == "pid 9 (unit qwen, GPUs 0): /v/python3 -c ... -m sglang.launch_server --api-key=<redacted>"
