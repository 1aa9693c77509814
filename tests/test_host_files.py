"""The files a launch names on the host: relative paths (SGD024) and the facts round trip's check
that each exists and is readable by the unit's user (SGD713)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sgdeploy.core.tomlfile import parse_toml_text
from sgdeploy.deploy.preflight import host_file_paths, preflight
from sgdeploy.host.facts import HostFacts, facts_command, parse_facts
from sgdeploy.profile.model import LoadedProfile, Profile
from sgdeploy.sglang.hostfiles import host_files
from tests.test_facts import fake_path, run_facts

PROFILE = """\
[deploy]
host = "gpu1"
unit = "sglang"
python = "/opt/sglang/bin/python3"
{deploy}

[server]
model_path = "/models/Qwen3-8B"
ssl_keyfile = "{key}"
ssl_certfile = "/etc/sglang/cert.pem"
"""


def loaded(key: str, deploy: str = "") -> LoadedProfile:
    profile = LoadedProfile(path="p.toml")
    profile.text = PROFILE.format(key=key, deploy=deploy)
    parse_toml_text(profile, Profile)
    assert profile.model is not None
    return profile


def test_relative_paths_resolve_against_the_working_directory() -> None:
    assert [f.path for f in host_files({"ssl_keyfile": "key.pem"}, None)] == ["/key.pem"]
    assert [f.path for f in host_files({"ssl_keyfile": "../tls/key.pem"}, "/etc/sglang")] == ["/etc/tls/key.pem"]
    assert host_file_paths(loaded("tls/key.pem", 'working_directory = "/etc/sglang"')) == (
        "/etc/sglang/tls/key.pem", "/etc/sglang/cert.pem")
    assert not host_files({"model_path": "Qwen/Qwen3-8B", "chat_template": "chatml"}, None)


def test_the_facts_command_reports_each_file(tmp_path: Path) -> None:
    present = tmp_path / "key.pem"
    present.write_text("key")
    missing = tmp_path / "nope.pem"
    command = facts_command("sglang", "python3", str(tmp_path), 30000, files=(str(present), str(missing)))
    facts = parse_facts(run_facts(command, fake_path(tmp_path)))
    assert facts.host_files == {str(present): "ok", str(missing): "missing"}


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("runuser"), reason="needs root and runuser")
def test_a_file_the_unit_user_cannot_read_is_unreadable(tmp_path: Path) -> None:
    secret = tmp_path / "key.pem"
    secret.write_text("key")
    secret.chmod(0o600)
    tmp_path.chmod(0o755)
    path = fake_path(tmp_path, {"runuser": 'exec /usr/sbin/runuser "$@"\n', "id": 'exec /usr/bin/id "$@"\n',
                                "test": 'exec /usr/bin/test "$@"\n'})
    command = facts_command("sglang", "python3", str(tmp_path), 30000, user="nobody", files=(str(secret),))
    done = subprocess.run(["/bin/sh", "-c", command], env={"PATH": path, "LC_ALL": "C"}, capture_output=True,
                          text=True, timeout=60, check=False)
    assert parse_facts(done.stdout).host_files == {str(secret): "unreadable"}


def test_files_must_be_absolute_and_on_one_line() -> None:
    for bad in ("key.pem", "/a\nb"):
        with pytest.raises(ValueError):
            facts_command("sglang", "python3", "/m", 30000, files=(bad,))


def test_preflight_refuses_a_missing_or_unreadable_file() -> None:
    profile = loaded("key.pem", 'working_directory = "/etc/sglang"\nuser = "sglang"')
    facts = HostFacts(python_ok=True, host_files={"/etc/sglang/key.pem": "missing",
                                                   "/etc/sglang/cert.pem": "unreadable"})
    found = preflight(profile, "gpu1", facts, None).diagnostics
    problems = {d.message for d in found if d.rule == "SGD713"}
    assert problems == {
        "ssl_keyfile: 'key.pem' (/etc/sglang/key.pem) does not exist on gpu1",
        "ssl_certfile: /etc/sglang/cert.pem cannot be read by user sglang, who runs the server on gpu1",
    }
    fine = HostFacts(python_ok=True, host_files={"/etc/sglang/key.pem": "ok", "/etc/sglang/cert.pem": "ok"})
    assert not [d for d in preflight(profile, "gpu1", fine, None).diagnostics if d.rule == "SGD713"]


def test_a_watermark_config_is_a_host_file_unless_it_is_inline_json() -> None:
    assert [f.path for f in host_files({"watermark_config": "wm.json"}, "/srv")] == ["/srv/wm.json"]
    assert host_files({"watermark_config": ' {"key": "k"}'}, None) == []
    assert host_files({"watermark_config": ""}, None) == []
