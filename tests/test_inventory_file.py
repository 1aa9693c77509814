"""A host's connection settings read from the inventory before validation
(`sgdeploy.profile.inventory_file.unvalidated_ssh_entry`): the same as the validated entry's wherever it
answers at all, and no answer where the file is not plainly one host without a gateway."""

from __future__ import annotations

from pathlib import Path

import pytest

from sgdeploy.host.sshconfig import SshEntry
from sgdeploy.profile.inventory import load_inventory
from sgdeploy.profile.inventory_file import unvalidated_ssh_entry

REPO = Path(__file__).resolve().parents[1]

SAME_AS_VALIDATED = {
    "plain": '[hosts.a]\naddress = "10.0.0.5"\n',
    "everything set": (
        '[hosts.a]\naddress = "gpu-a"\nport = 2222\nuser = "deploy"\nidentity_file = "~/.ssh/k"\n'
        'known_hosts = "kh"\nstrict_host_key_checking = false\nproxy_jump = "bastion"\n'
        'become = true\ngpu = "H200"\ngpu_count = 8\nsglang_version = "0.5.11"\n'),
    "ssh_config of the inventory, relative": 'ssh_config = "ssh/config"\n[hosts.a]\naddress = "a"\n',
    "ssh_config of the host wins": 'ssh_config = "x"\n[hosts.a]\naddress = "a"\nssh_config = "/etc/y"\n',
    "ssh_config under ~ stays": '[hosts.a]\naddress = "a"\nssh_config = "~/.ssh/other"\n',
    "a group beside it": '[hosts.a]\naddress = "a"\n[hosts.b]\naddress = "b"\n[groups]\nall = ["a", "b"]\n',
}

NO_ANSWER = {
    "no such host": '[hosts.b]\naddress = "b"\n',
    "behind a gateway": '[hosts.a]\naddress = "a"\ngateway = "g"\n[gateways.g]\nurl = "http://g:30000"\n',
    "a gateway table": '[hosts.a]\naddress = "a"\n[gateways.g]\nurl = "http://g:30000"\nhosts = ["a"]\n',
    "port as text": '[hosts.a]\naddress = "a"\nport = "22"\n',
    "port as a flag": '[hosts.a]\naddress = "a"\nport = true\n',
    "no address": '[hosts.a]\nuser = "x"\n',
    "become as text": '[hosts.a]\naddress = "a"\nbecome = "yes"\n',
    "not TOML": "[hosts.a\n",
    "nested too deep to read": "x = " + "[" * 2000 + "]" * 2000 + '\n[hosts.a]\naddress = "a"\n',
}


@pytest.mark.parametrize("text", SAME_AS_VALIDATED.values(), ids=SAME_AS_VALIDATED.keys())
def test_it_reads_what_validation_makes_of_the_entry(tmp_path: Path, text: str) -> None:
    path = tmp_path / "inventory.toml"
    path.write_text(text)
    validated = load_inventory(path).model
    assert validated is not None
    assert unvalidated_ssh_entry(path, "a") == SshEntry.of(validated.hosts["a"])


@pytest.mark.parametrize("text", NO_ANSWER.values(), ids=NO_ANSWER.keys())
def test_no_answer_where_the_file_is_not_plainly_one_host(tmp_path: Path, text: str) -> None:
    path = tmp_path / "inventory.toml"
    path.write_text(text)
    assert unvalidated_ssh_entry(path, "a") is None


def test_the_repository_inventory_reads_the_same_for_every_host() -> None:
    path = REPO / "inventory.toml"
    validated = load_inventory(path).model
    assert validated is not None and validated.hosts
    for name, entry in validated.hosts.items():
        quick = unvalidated_ssh_entry(path, name)
        assert quick is None or quick == SshEntry.of(entry), name


def test_a_missing_file_gives_no_answer(tmp_path: Path) -> None:
    assert unvalidated_ssh_entry(tmp_path / "none.toml", "a") is None
