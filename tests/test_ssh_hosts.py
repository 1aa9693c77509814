"""Reaching hosts the way `ssh` does, end to end on real systemd test hosts.

A target in a private network reached only through another test host acting as a bastion
(`ProxyJump`), known only by a name that the bastion resolves and configured only in an SSH
configuration file, gets an apply, status and rollback; its host key is checked against its
own name in a hashed known_hosts. An alias with a non-default port and identity works with an
inventory that gives only the alias; a passphrase-protected key works through an SSH agent and
fails clearly without one.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sgdeploy import cli
from sgdeploy.host.sshconfig import SSH_CONFIG_ENV
from tests.hosts import HostSet, HostSpec, SimSettings

pytestmark = pytest.mark.hosts

REPO = Path(__file__).resolve().parents[1]
FAST = SimSettings(startup_s=1.0, release_delay_s=0.5)
HOST_FACTS = """\
gpu = "RTX A6000"
compute_capability = "8.6"
gpu_count = 2
sglang_version = "0.5.11"
"""


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    extra = ["--settle", "1"] if args[0] in ("apply", "rollback") else []
    code = cli.main([*args, "--json", *extra])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else {}


def host_key(hs: HostSet, name: str) -> tuple[str, str]:
    """(type, base64) of a test host's own ed25519 host key."""
    typ, b64 = hs[name].host_key_line.split()[1:3]
    return typ, b64


@pytest.fixture
def no_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.delenv(SSH_CONFIG_ENV, raising=False)


@pytest.fixture
def behind_bastion(host_factory: Callable[..., HostSet], tmp_path: Path, no_agent: None) -> Iterator[
        tuple[HostSet, Path, Path, Path]]:
    """A bastion and a target `gpu-target` in the run's private network; this machine cannot
    resolve `gpu-target`: only the bastion can (its /etc/hosts). Returns the hosts, the SSH
    configuration, the known_hosts file (the target's entry hashed) and the inventory."""
    hs = host_factory(HostSpec.like("ct129", name="bastion", private_network=True, sim=FAST),
                      HostSpec.like("ct129", name="gpu-target", private_network=True, sim=FAST))
    with pytest.raises(OSError):
        socket.getaddrinfo("gpu-target", 22)
    known = tmp_path / "known_hosts"
    known.write_text("{} {} {}\n".format(hs["bastion"].address, *host_key(hs, "bastion"))
                     + "gpu-target {} {}\n".format(*host_key(hs, "gpu-target")))
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(known)], check=True, capture_output=True)
    assert "gpu-target" not in known.read_text() and known.read_text().startswith("|1|")
    config = tmp_path / "ssh_config"
    config.write_text(f"""\
Host lab-bastion
  HostName {hs['bastion'].address}

Host gpu
  HostName gpu-target
  ProxyJump lab-bastion

Host *
  User root
  IdentityFile {hs.key_path}
  IdentitiesOnly yes
  UserKnownHostsFile {known}
  StrictHostKeyChecking yes
""")
    inventory = tmp_path / "inventory.toml"
    inventory.write_text(f'ssh_config = "ssh_config"\n\n[hosts.ct129]\naddress = "gpu"\n{HOST_FACTS}')
    yield hs, config, known, inventory


def test_apply_status_rollback_through_a_bastion(behind_bastion: tuple[HostSet, Path, Path, Path],
                                                 tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hs, config, _, inventory = behind_bastion
    reference = (REPO / "profiles" / "qwen36-mtp3.toml").read_text()
    first, second = tmp_path / "qwen36-mtp3.toml", tmp_path / "other.toml"
    first.write_text(reference)
    second.write_text(reference.replace("max_running_requests = 16", "max_running_requests = 12"))
    inv = ["--inventory", str(inventory)]

    code, applied = run(capsys, "apply", str(first), *inv)
    assert code == 0, applied
    deployment = applied["deployment_id"]
    # the target saw the connection come from the bastion's address
    assert f"from {hs['bastion'].address}" in hs.ssh("gpu-target", "journalctl -u ssh -o cat --no-pager").stdout

    code, status = run(capsys, "status", str(first), *inv, "--verbose")
    assert code == 0 and status["healthy"], status
    connection = status["connection"]
    assert connection["route"] == ["lab-bastion", "gpu"]
    assert connection["hostname"] == {"value": "gpu-target", "source": f"{config}:5"}
    assert connection["proxy_jump"] == {"value": "lab-bastion", "source": f"{config}:6"}
    assert connection["user"]["source"] == f"{config}:9"
    assert connection["through"][0]["hostname"]["value"] == hs["bastion"].address

    code, applied = run(capsys, "apply", str(second), *inv)
    assert code == 0, applied
    code, rolled = run(capsys, "rollback", str(first), *inv, "--to", deployment)
    assert code == 0, rolled
    code, status = run(capsys, "status", str(first), *inv)
    assert code == 0 and status["healthy"] and status["drift"] == [], status

    # the text form of --verbose names each setting's source
    assert cli.main(["status", str(first), *inv, "--verbose"]) == 0
    text = capsys.readouterr().out
    assert "through lab-bastion: root@" in text and "target gpu: root@gpu-target:22" in text
    assert f"proxy_jump:                lab-bastion  ({config}:6)" in text


def test_a_wrong_or_unknown_key_behind_the_bastion_is_refused(
        behind_bastion: tuple[HostSet, Path, Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    hs, _, known, inventory = behind_bastion
    status = ["status", "--host", "ct129", "--unit", "sglang", "--inventory", str(inventory)]
    hashed = known.read_text().splitlines()
    bastion_line = next(line for line in hashed if " ".join(host_key(hs, "bastion")) in line)

    # the bastion's key in place of the target's: a changed key, named by the target's name
    known.write_text(bastion_line + "\n" + "gpu-target {} {}\n".format(*host_key(hs, "bastion")))
    assert cli.main(status) == 2
    err = capsys.readouterr().err
    assert "the host key of gpu-target:22 (through lab-bastion) CHANGED" in err and str(known) in err, err

    # no entry for the target at all
    known.write_text(bastion_line + "\n")
    assert cli.main(status) == 2
    err = capsys.readouterr().err
    assert "the host key of gpu-target:22 (through lab-bastion) is unknown" in err, err
    assert f"no entry for 'gpu-target' in {known}" in err, err


@pytest.fixture
def alias_host(host_factory: Callable[..., HostSet], tmp_path: Path, no_agent: None) -> tuple[HostSet, Path, Path]:
    """A host on 127.0.0.1 at a non-default port, reached as the alias `gpu-box` of an SSH
    configuration named by SGDEPLOY_SSH_CONFIG; the inventory gives only the alias."""
    hs = host_factory(HostSpec.like("ct129", sim=FAST))
    config = tmp_path / "ssh_config"
    config.write_text(f"""\
Host gpu-box
  HostName 127.0.0.1
  Port {hs['ct129'].port}
  User root
  IdentityFile {tmp_path}/gpu_box
  UserKnownHostsFile {hs.known_hosts_path}
""")
    (tmp_path / "gpu_box").write_bytes(hs.key_path.read_bytes())
    (tmp_path / "gpu_box").chmod(0o600)
    inventory = tmp_path / "inventory.toml"
    inventory.write_text(f'[hosts.ct129]\naddress = "gpu-box"\n{HOST_FACTS}')
    return hs, config, inventory


def test_an_alias_with_its_own_port_and_identity(alias_host: tuple[HostSet, Path, Path], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    hs, config, inventory = alias_host
    assert hs["ct129"].port != 22
    monkeypatch.setenv(SSH_CONFIG_ENV, str(config))
    code, plan = run(capsys, "plan", str(REPO / "profiles" / "qwen36-mtp3.toml"), "--inventory", str(inventory),
                     "--verbose")
    assert code == 0, plan
    assert plan["connection"]["port"] == {"value": hs["ct129"].port, "source": f"{config}:3"}
    assert plan["connection"]["identity_files"] == {"value": [f"{tmp_path}/gpu_box"], "source": f"{config}:5"}


def test_a_passphrase_key_works_through_an_agent_and_fails_clearly_without(
        alias_host: tuple[HostSet, Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _, config, inventory = alias_host
    key = tmp_path / "gpu_box"
    monkeypatch.setenv(SSH_CONFIG_ENV, str(config))
    status = ["status", "--host", "ct129", "--unit", "sglang", "--inventory", str(inventory)]

    # an agent holds the key; then the file on disk gets a passphrase
    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        for _ in range(200):
            if sock.exists():
                break
            subprocess.run(["sleep", "0.02"], check=True)
        env = {**os.environ, "SSH_AUTH_SOCK": str(sock)}
        subprocess.run(["ssh-add", "-q", str(key)], env=env, check=True, stdin=subprocess.DEVNULL,
                       capture_output=True)
        subprocess.run(["ssh-keygen", "-q", "-p", "-P", "", "-N", "a passphrase", "-f", str(key)], check=True,
                       stdin=subprocess.DEVNULL, capture_output=True)

        # without the agent: a clear error naming the key, never a prompt (stdin is closed)
        code = cli.main(status)
        err = capsys.readouterr().err
        assert code == 2 and f"the identity file {key} is protected by a passphrase" in err, err
        assert f"ssh-add {key}" in err and "no SSH agent is running" in err, err

        # with the agent: the same command connects (the unit is simply not installed)
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        code = cli.main(status)
        captured = capsys.readouterr()
        assert "cannot log in" not in captured.err and "ct129" in captured.out, captured
    finally:
        os.kill(agent.pid, signal.SIGTERM)
        agent.wait(timeout=10)
