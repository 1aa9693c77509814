"""SSH configuration resolution (sgdeploy/host/sshconfig.py) on configuration texts, as `ssh` reads them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from sgdeploy.host.sshconfig import (
    SSH_CONFIG_ENV,
    Jump,
    SshConfigError,
    config_files,
    encrypted_key,
    for_host,
    resolve,
    route,
)
from sgdeploy.profile.inventory import load_inventory


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home of its own: `~` and Include's `~/.ssh` never read the real user's files."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv(SSH_CONFIG_ENV, raising=False)
    return home


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


GPU_BOX = """\
Host gpu-box
  HostName 127.0.0.1
  Port 2301
  User deploy
  IdentityFile ~/.ssh/gpu_box
  UserKnownHostsFile ~/.ssh/known_hosts.gpu

Host *
  User nobody
  Port 2222
  ConnectTimeout 7
"""


def test_an_alias_gives_every_setting_the_inventory_leaves_unset(home: Path) -> None:
    config = write(home / ".ssh/config", GPU_BOX)
    t = resolve("gpu-box", {}, files=[config], local_user="me")
    assert (t.hostname, t.port, t.user) == ("127.0.0.1", 2301, "deploy")
    assert t.identity_files == (str(home / ".ssh/gpu_box"),) and t.identity_files_set
    assert t.known_hosts == (str(home / ".ssh/known_hosts.gpu"),)
    assert t.connect_timeout == 7.0 and t.strict_host_key_checking == "yes"
    assert t.sources["hostname"] == f"{config}:2" and t.sources["port"] == f"{config}:3"
    assert t.sources["connect_timeout"] == f"{config}:11"


def test_inventory_values_win_over_the_configuration(home: Path) -> None:
    config = write(home / ".ssh/config", GPU_BOX)
    t = resolve("gpu-box", {"port": 2400, "user": None, "identity_file": "/keys/k", "strict_host_key_checking": False},
                override_source="inventory [hosts.a]", files=[config])
    assert (t.port, t.user) == (2400, "deploy")
    assert t.identity_files == ("/keys/k",), "the inventory's identity replaces the configuration's"
    assert t.strict_host_key_checking == "no"
    assert t.sources["port"] == t.sources["identity_files"] == "inventory [hosts.a]"
    assert t.sources["user"] == f"{config}:4"


def test_first_obtained_value_wins_and_identity_files_accumulate(tmp_path: Path) -> None:
    config = write(tmp_path / "cfg", """\
Host *
  IdentityFile /k/all
Host gpu-* !gpu-old
  Port 2201
  IdentityFile /k/gpu
Host gpu-1?
  Port 2202
""")
    t = resolve("gpu-12", files=[config])
    assert t.port == 2201 and t.identity_files == ("/k/all", "/k/gpu")
    old = resolve("gpu-old", files=[config])
    assert old.port == 22 and old.identity_files == ("/k/all",), "a negated pattern excludes the host"
    assert resolve("GPU-12", files=[config]).port == 2201, "host patterns ignore case"


def test_nothing_set_gives_ssh_defaults_and_sgdeploys_root(tmp_path: Path, home: Path) -> None:
    t = resolve("10.0.0.5", files=[])
    assert (t.hostname, t.port, t.user, t.strict_host_key_checking) == ("10.0.0.5", 22, "root", "yes")
    assert not t.identity_files_set and t.identity_files[0] == str(home / ".ssh/id_ed25519")
    assert t.known_hosts == (str(home / ".ssh/known_hosts"), str(home / ".ssh/known_hosts2"))
    assert t.sources == {"hostname": "inventory (address)"}


def test_match_host_sees_the_hostname_obtained_so_far(tmp_path: Path) -> None:
    config = write(tmp_path / "cfg", """\
Host box
  HostName node7.cluster.example
Match host *.cluster.example user root
  Port 2207
Match originalhost box
  User root
Match !host *.example
  IdentityFile /k/never
Match exec "true"
  ConnectTimeout 99
Match all
  ServerAliveInterval 1m
""")
    t = resolve("box", files=[config])
    assert t.hostname == "node7.cluster.example" and t.port == 2207 and t.user == "root"
    assert not t.identity_files_set and t.connect_timeout is None and t.server_alive_interval == 60
    assert t.notes == (f"{config}:9: Match exec is not evaluated by sgdeploy (counted as not matching)",)


def test_include_reads_files_in_place_relative_to_dot_ssh(home: Path, tmp_path: Path) -> None:
    write(home / ".ssh/conf.d/10-gpu.conf", "Host gpu-*\n  Port 2210\n  User ops\n")
    write(home / ".ssh/conf.d/20-late.conf", "Host *\n  Port 9999\n")
    write(tmp_path / "only-for-x.conf", "User xuser\n")
    config = write(home / ".ssh/config", f"""\
Include conf.d/*.conf
Host x
  Include {tmp_path}/only-for-x.conf
Host *
  User fallback
""")
    gpu = resolve("gpu-3", files=[config])
    assert (gpu.port, gpu.user) == (2210, "ops")
    assert gpu.sources["port"] == f"{home}/.ssh/conf.d/10-gpu.conf:2"
    x = resolve("x", files=[config])
    assert (x.port, x.user) == (9999, "xuser"), "an Include inside a Host block applies to that host only"
    assert resolve("y", files=[config]).user == "fallback"
    assert resolve("gpu-3", files=[write(home / ".ssh/nested", "Host x\nInclude conf.d/*.conf\n")]).port == 22


def test_tokens_are_expanded_in_files_and_proxy_command(tmp_path: Path, home: Path) -> None:
    config = write(tmp_path / "cfg", """\
Host box
  HostName %h.internal
  User ops
  Port 2200
  IdentityFile ~/.ssh/%n_%r
  UserKnownHostsFile ~/.ssh/kh_%h_%p /etc/ssh/kh_%%
  ProxyCommand ssh -W %h:%p jump
""")
    t = resolve("box", files=[config])
    assert t.hostname == "box.internal"
    assert t.identity_files == (str(home / ".ssh/box_ops"),)
    assert t.known_hosts == (str(home / ".ssh/kh_box.internal_2200"), "/etc/ssh/kh_%")
    assert t.proxy_command == "ssh -W box.internal:2200 jump"
    bad = write(tmp_path / "bad", "Host *\n  IdentityFile ~/.ssh/%Q\n")
    with pytest.raises(SshConfigError, match=rf"{bad}:2: '%Q' in '~/.ssh/%Q' is not a token"):
        resolve("box", files=[bad])


def test_proxy_jump_hops_are_connected_in_order(tmp_path: Path) -> None:
    config = write(tmp_path / "cfg", """\
Host target
  HostName 10.9.0.5
  ProxyJump ops@hop2:2202,hop3
Host hop2
  HostName hop2.example
  ProxyJump outer
Host hop3
  ProxyJump ignored-because-reached-through-hop2
Host outer
  HostName 203.0.113.7
  Port 2022
""")
    files = [config]
    target = resolve("target", files=files)
    assert target.proxy_jump == (Jump("hop2", "ops", 2202), Jump("hop3"))
    chain = route(target, files)
    assert [(h.alias, h.hostname, h.port, h.user) for h in chain] == [
        ("outer", "203.0.113.7", 2022, "root"),
        ("hop2", "hop2.example", 2202, "ops"),
        ("hop3", "hop3", 22, "root"),
        ("target", "10.9.0.5", 22, "root"),
    ]
    assert chain[1].sources["user"] == "ProxyJump of target"
    assert chain[2].proxy_jump == ()


def test_proxy_jump_none_and_the_one_proxy_slot(tmp_path: Path) -> None:
    config = write(tmp_path / "cfg", """\
Host direct
  ProxyJump none
Host cmd
  ProxyCommand nc %h %p
Host *
  ProxyJump bastion
""")
    assert resolve("direct", files=[config]).proxy_jump == ()
    cmd = resolve("cmd", files=[config])
    assert cmd.proxy_command == "nc cmd 22" and cmd.proxy_jump == (), "the first of the two wins"
    assert resolve("other", files=[config]).proxy_jump == (Jump("bastion"),)
    inventory_none = resolve("other", {"proxy_jump": "none"}, files=[config])
    assert inventory_none.proxy_jump == ()


def test_a_proxy_jump_loop_is_refused(tmp_path: Path) -> None:
    config = write(tmp_path / "cfg", "Host a\n  ProxyJump b\nHost b\n  ProxyJump a\n")
    with pytest.raises(SshConfigError, match="ProxyJump chain longer than"):
        route(resolve("a", files=[config]), [config])


@pytest.mark.parametrize(("value", "strict"), [("yes", "yes"), ("ask", "yes"), ("accept-new", "accept-new"),
                                               ("no", "no"), ("off", "no")])
def test_strict_host_key_checking_values(tmp_path: Path, value: str, strict: str) -> None:
    config = write(tmp_path / "cfg", f"StrictHostKeyChecking={value}\n")
    assert resolve("h", files=[config]).strict_host_key_checking == strict


@pytest.mark.parametrize(("text", "message"), [
    ("Host h\n  Port 70000\n", "cfg:2: port '70000' is not a TCP port"),
    ("Host h\n  ConnectTimeout soon\n", "cfg:2: 'soon' is not a time"),
    ("Host h\n  IdentitiesOnly maybe\n", "cfg:2: IdentitiesOnly 'maybe' is neither yes nor no"),
    ("Match hostname x\n", "cfg:1: unknown Match criterion 'hostname'"),
    ('Host h\n  User "unclosed\n', "cfg:2: No closing quotation"),
    ("Host h\n  ProxyJump :22\n", "cfg:2: ProxyJump hop ':22' names no host"),
])
def test_bad_settings_are_located(tmp_path: Path, text: str, message: str) -> None:
    config = write(tmp_path / "cfg", text)
    with pytest.raises(SshConfigError) as caught:
        resolve("h", files=[config])
    assert str(caught.value).startswith(f"{tmp_path}/{message}"), caught.value


def test_which_files_are_read(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    explicit = write(tmp_path / "explicit", "")
    env = write(tmp_path / "env", "")
    user = write(home / ".ssh/config", "")
    assert config_files(str(explicit), {SSH_CONFIG_ENV: str(env)}) == [explicit]
    assert config_files(None, {SSH_CONFIG_ENV: str(env)}) == [env]
    assert config_files(None, {})[0] == user
    with pytest.raises(SshConfigError, match="ssh_config = /nowhere: no such SSH configuration file"):
        config_files("/nowhere", {})
    with pytest.raises(SshConfigError, match=f"{SSH_CONFIG_ENV}=/nowhere: no such"):
        config_files(None, {SSH_CONFIG_ENV: "/nowhere"})


def test_inventory_ssh_config_per_host_or_for_all(tmp_path: Path) -> None:
    write(tmp_path / "ssh/config", "Host gpu-box\n  HostName 10.1.2.3\n  Port 2301\n")
    write(tmp_path / "other.conf", "Host gpu-box\n  Port 2999\n")
    inventory = write(tmp_path / "inventory.toml", """\
ssh_config = "ssh/config"

[hosts.a]
address = "gpu-box"

[hosts.b]
address = "gpu-box"
ssh_config = "other.conf"
port = 2400
""")
    model = load_inventory(inventory).model
    assert model is not None
    a = for_host("a", model.hosts["a"])
    assert [(t.hostname, t.port) for t in a] == [("10.1.2.3", 2301)]
    assert a[-1].sources["port"] == f"{tmp_path}/ssh/config:3"
    b = for_host("b", model.hosts["b"])[-1]
    assert (b.hostname, b.port, b.sources["port"]) == ("gpu-box", 2400, "inventory [hosts.b]")


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen is not installed")
@pytest.mark.parametrize("key_format", ["openssh", "pem"])
def test_encrypted_keys_are_recognised(tmp_path: Path, key_format: str) -> None:
    def keygen(name: str, passphrase: str) -> str:
        path = tmp_path / name
        kind = ["-t", "ed25519"] if key_format == "openssh" else ["-t", "ecdsa", "-m", "PEM"]
        subprocess.run(["ssh-keygen", "-q", *kind, "-N", passphrase, "-f", str(path)], check=True,
                       stdin=subprocess.DEVNULL)
        return str(path)

    assert encrypted_key(keygen("locked", "secret phrase"))
    assert not encrypted_key(keygen("open", ""))
    assert not encrypted_key(str(tmp_path / "missing"))


needs_openssh = pytest.mark.skipif(shutil.which("ssh") is None, reason="no OpenSSH client installed")


@needs_openssh
def test_openssh_decides_what_the_files_reading_cannot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`Match exec` is never run by sgdeploy's reading; `ssh -G` runs it, as ssh would, and its
    value is taken, with its source and a note (#31 item 10)."""
    config = write(tmp_path / "cfg", 'Host box\n  HostName 10.9.8.7\nMatch exec "true"\n  User alice\n  Port 2207\n')
    own = resolve("box", {}, files=[config], local_user="me")
    assert (own.user, own.port) == ("root", 22)
    exact = resolve("box", {}, files=[config], local_user="me", openssh=True)
    assert (exact.hostname, exact.user, exact.port) == ("10.9.8.7", "alice", 2207)
    assert exact.sources["user"] == exact.sources["port"] == "ssh -G"
    assert "ssh -G reads user as alice, not root: OpenSSH's reading is used" in exact.notes
    # the inventory's values still win, as ssh's command line does
    assert resolve("box", {"port": 2300}, files=[config], local_user="me", openssh=True).port == 2300
    monkeypatch.setenv("SGDEPLOY_OPENSSH", "0")
    assert resolve("box", {}, files=[config], local_user="me", openssh=True).user == "root"


@needs_openssh
def test_openssh_agrees_on_an_ordinary_configuration_and_keeps_sgdeploys_defaults(home: Path) -> None:
    config = write(home / ".ssh/config", GPU_BOX)
    for alias in ("gpu-box", "other"):
        own = resolve(alias, {}, files=[config])
        assert resolve(alias, {}, files=[config], openssh=True) == own
    bare = write(home / "bare", "Host plain\n  HostName 10.0.0.9\n")
    plain = resolve("plain", {}, files=[bare], openssh=True)
    assert (plain.user, plain.strict_host_key_checking, plain.identity_files_set, plain.notes) == (
        "root", "yes", False, ())
