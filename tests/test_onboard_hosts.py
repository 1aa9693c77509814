"""`sgdeploy init` end to end on a real systemd test host: the host's facts become its inventory
entry, a starting profile is written and validated on the spot, and what cannot be read is said."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from sgdeploy import cli
from tests.hosts import HostSet, HostSpec, booted_or_skipped

pytestmark = pytest.mark.hosts

MODEL = "/root/models/Qwen3-8B"


@pytest.fixture(scope="module")
def host() -> Iterator[HostSet]:
    with booted_or_skipped([HostSpec.like("ct129")]) as hs:
        yield hs


def _ssh_config(hs: HostSet, tmp_path: Path, alias: str) -> Path:
    """An SSH configuration naming the test host by an alias, as a user's ~/.ssh/config would."""
    h = hs["ct129"]
    path = tmp_path / "ssh_config"
    path.write_text(f"Host {alias}\n  HostName {h.address}\n  Port {h.port}\n  User root\n"
                    f"  IdentityFile {hs.key_path}\n  UserKnownHostsFile {hs.known_hosts_path}\n")
    return path


def test_init_writes_the_hosts_entry_and_a_valid_starting_profile(
    host: HostSet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory, profile = tmp_path / "inventory.toml", tmp_path / "gpu1.toml"
    config = _ssh_config(host, tmp_path, "gpu1")
    code = cli.main(["init", "gpu1", "--ssh-config", str(config), "--inventory", str(inventory),
                     "--model-path", MODEL, "--output", str(profile)])
    _, err = capsys.readouterr()
    assert code == 0, err
    entry = tomllib.loads(inventory.read_text())["hosts"]["gpu1"]
    spec = host["ct129"].spec
    assert entry["address"] == "gpu1" and entry["ssh_config"] == str(config)
    assert (entry["gpu_count"], entry["compute_capability"], entry["sglang_version"]) == (
        spec.gpu_count, spec.compute_capability, spec.sglang_version)
    assert "A6000" in entry["gpu"] and entry["gpu_memory_gib"] == round(spec.gpu_memory_mib / 1024)
    written = tomllib.loads(profile.read_text())
    assert written["deploy"]["host"] == "gpu1" and written["deploy"]["python"].endswith("python3")
    assert written["server"] == {"model_path": MODEL, "host": "0.0.0.0", "port": 30000, "tp_size": 2}
    assert "valid" in err and "sgdeploy plan" in err

    # a second run does not overwrite the entry: it says what differs and changes nothing
    before = inventory.read_text()
    assert cli.main(["init", "gpu1", "--ssh-config", str(config), "--inventory", str(inventory)]) == 1
    assert inventory.read_text() == before and "already has [hosts.gpu1]" in capsys.readouterr().err


def test_init_says_what_it_could_not_read(host: HostSet, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inventory = tmp_path / "inventory.toml"
    config = _ssh_config(host, tmp_path, "gpu2")
    code = cli.main(["init", "gpu2", "--ssh-config", str(config), "--inventory", str(inventory),
                     "--python", "/nonexistent/bin/python3"])
    err = capsys.readouterr().err
    assert code == 1 and "has no SGLang" in err
    entry = tomllib.loads(inventory.read_text())["hosts"]["gpu2"]
    assert "sglang_version" not in entry and entry["gpu_count"] == 2


def test_init_on_an_unreachable_host_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inventory = tmp_path / "inventory.toml"
    code = cli.main(["init", "nowhere", "--address", "127.0.0.1", "--port", "1", "--inventory", str(inventory)])
    assert code == 2 and not inventory.exists()
    assert "nowhere" in capsys.readouterr().err
