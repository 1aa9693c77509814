"""What `ssh` would use to reach a host: the OpenSSH client configuration, resolved as ssh does.

Pure: reads configuration files, never connects. `resolve` gives the effective settings of one
host with, for each, where it came from (the inventory, `FILE:LINE` of the SSH configuration,
or sgdeploy's default); `route` lists the hosts of a `ProxyJump` chain in connection order.

Resolution follows `ssh_config(5)`: values the inventory sets come first (like ssh's command
line), then the files in order, where the first value obtained for a keyword wins
(`IdentityFile` accumulates); `Host` patterns match the alias, `Match host` the `HostName`
obtained so far; `Include` reads files in place (relative to `~/.ssh`, or `/etc/ssh` for the
system file); `%h %p %r %n %u %d %l %%`, `~` and `${VAR}` are expanded in file names, `HostName`
and `ProxyCommand`. `Match exec`, `localnetwork`, `tagged`, `command`, `sessiontype` and
`version` are never run or evaluated: they count as not matching and are reported as notes.
"""

from __future__ import annotations

import base64
import getpass
import glob
import os
import re
import shlex
import shutil
import socket
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

SSH_CONFIG_ENV = "SGDEPLOY_SSH_CONFIG"
USER_CONFIG = "~/.ssh/config"
SYSTEM_CONFIG = "/etc/ssh/ssh_config"
DEFAULT_USER = "root"  # sgdeploy manages system units; ssh's own default is the local user
DEFAULT_IDENTITIES = ("~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/id_rsa")
DEFAULT_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
DEFAULT_GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
MAX_INCLUDE_DEPTH = 16
MAX_JUMPS = 8
DEFAULT = "default"

# keywords whose every value counts, in order (all others: the first value obtained wins)
_ACCUMULATE = frozenset(
    {"identityfile", "certificatefile", "localforward", "remoteforward", "dynamicforward"}
)
# keywords sgdeploy uses; the others are read (so Include and Match work) and ignored
_USED = frozenset(
    {
        "hostname",
        "port",
        "user",
        "identityfile",
        "identitiesonly",
        "userknownhostsfile",
        "globalknownhostsfile",
        "stricthostkeychecking",
        "proxyjump",
        "proxycommand",
        "connecttimeout",
        "serveraliveinterval",
        "identityagent",
    }
)
_UNEVALUATED_MATCH = frozenset(
    {"exec", "localnetwork", "tagged", "command", "sessiontype", "version"}
)


class SshConfigError(ValueError):
    """A setting that cannot be used, located: `FILE:LINE: message`."""


@dataclass(frozen=True)
class Jump:
    """One hop of a `ProxyJump` list: `[user@]host[:port]`."""

    host: str
    user: str | None = None
    port: int | None = None

    @classmethod
    def parse(cls, text: str, where: str) -> Jump:
        rest = text.removeprefix("ssh://")
        user, at, host = rest.rpartition("@")
        port: int | None = None
        if host.startswith("["):  # [v6 address]:port
            host, _, tail = host[1:].partition("]")
            if tail.startswith(":"):
                port = _port(tail[1:], where)
        elif host.count(":") == 1:
            host, _, port_text = host.partition(":")
            port = _port(port_text, where)
        if not host:
            raise SshConfigError(f"{where}: ProxyJump hop '{text}' names no host")
        return cls(host, user if at else None, port)

    def __str__(self) -> str:
        return (f"{self.user + '@' if self.user else ''}{self.host}"
                f"{':' + str(self.port) if self.port else ''}")


@dataclass(frozen=True)
class SshTarget:
    """The effective settings for reaching one host, and where each came from."""

    alias: str
    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...]
    identities_only: bool
    known_hosts: tuple[str, ...]
    global_known_hosts: tuple[str, ...]
    strict_host_key_checking: str  # "yes" (refuse unknown keys), "accept-new" or "no"
    proxy_jump: tuple[Jump, ...] = ()
    proxy_command: str | None = None
    connect_timeout: float | None = None
    server_alive_interval: int | None = None
    identity_agent: str | None = None  # None: $SSH_AUTH_SOCK; "none": no agent
    identity_files_set: bool = False  # False: the defaults (ssh tries them only if they exist)
    sources: dict[str, str] = field(default_factory=dict)
    config_files: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        """The settings and their sources, as `status --verbose --json` shows them."""
        return {name: {"value": value, "source": self.sources.get(name, DEFAULT)}
                for name, value in self.shown().items()} | {"config_files": list(self.config_files),
                                                             "notes": list(self.notes)}

    def shown(self) -> dict[str, object]:
        """Each effective setting as a reader would write it."""
        return {
            "hostname": self.hostname,
            "port": self.port,
            "user": self.user,
            "identity_files": list(self.identity_files),
            "identities_only": self.identities_only,
            "known_hosts": list(self.known_hosts),
            "strict_host_key_checking": self.strict_host_key_checking,
            "proxy_jump": ",".join(str(j) for j in self.proxy_jump) or None,
            "proxy_command": self.proxy_command,
            "connect_timeout": self.connect_timeout,
            "server_alive_interval": self.server_alive_interval,
        }


# --------------------------------------------------------------------------- config files
def config_files(
    explicit: str | None = None, environ: Mapping[str, str] | None = None
) -> list[Path]:
    """The files ssh would read: an explicit one alone (like `ssh -F`), else `SGDEPLOY_SSH_CONFIG`
    alone, else `~/.ssh/config` then `/etc/ssh/ssh_config` (those two only where they exist)."""
    env = os.environ if environ is None else environ
    chosen = explicit or env.get(SSH_CONFIG_ENV)
    if chosen:
        path = Path(os.path.expanduser(chosen))
        if not path.is_file():
            origin = f"{SSH_CONFIG_ENV}=" if not explicit else "ssh_config = "
            raise SshConfigError(f"{origin}{chosen}: no such SSH configuration file")
        return [path]
    return [p for p in (Path(os.path.expanduser(USER_CONFIG)), Path(SYSTEM_CONFIG)) if p.is_file()]


@dataclass
class _State:
    """Values obtained so far while reading, keyword -> [(arguments, source)]."""

    alias: str
    local_user: str
    values: dict[str, list[tuple[list[str], str]]] = field(default_factory=dict)
    # set by the inventory: the configuration cannot add to them
    fixed: frozenset[str] = frozenset()
    notes: list[str] = field(default_factory=list)

    def first(self, key: str) -> tuple[list[str], str] | None:
        found = self.values.get(key)
        return found[0] if found else None

    def set(self, key: str, args: list[str], source: str) -> None:
        if key in ("proxyjump", "proxycommand") and (
            "proxyjump" in self.values or "proxycommand" in self.values
        ):
            return  # one proxy slot: whichever of the two comes first
        if key in self.fixed:
            return
        if key in _ACCUMULATE:
            self.values.setdefault(key, []).append((args, source))
        elif key not in self.values:
            self.values[key] = [(args, source)]

    def hostname(self) -> str:
        found = self.first("hostname")
        return (
            _expand_tokens(found[0][0], {"h": self.alias, "%": "%"}, found[1])
            if found
            else self.alias
        )

    def remote_user(self) -> str:
        found = self.first("user")
        return found[0][0] if found else self.local_user


def _read(state: _State, path: Path, base: Path, active: bool, depth: int) -> None:
    """Read one file into `state`; `active` is whether the lines before (or the Include) apply."""
    if depth > MAX_INCLUDE_DEPTH:
        raise SshConfigError(f"{path}: Include nested more than {MAX_INCLUDE_DEPTH} deep")
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise SshConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    for number, raw in enumerate(text.splitlines(), 1):
        where = f"{path}:{number}"
        keyword, args = _split_line(raw, where)
        if keyword is None:
            continue
        if keyword == "host":
            active = _host_matches(state.alias, args)
        elif keyword == "match":
            active = _match(state, args, where)
        elif keyword == "include":
            if active:
                for pattern in args:
                    for included in _include_paths(pattern, base):
                        _read(state, included, base, True, depth + 1)
        elif active:
            if not args:
                raise SshConfigError(f"{where}: {keyword} has no value")
            state.set(keyword, args, where)


def _split_line(raw: str, where: str) -> tuple[str | None, list[str]]:
    """`Keyword value...` or `Keyword=value`; comments and blank lines give (None, [])."""
    line = raw.strip()
    if not line or line.startswith("#"):
        return None, []
    match = re.match(r"([A-Za-z]+)\s*(?:=\s*|\s+|$)(.*)$", line)
    if not match:
        raise SshConfigError(f"{where}: cannot read '{line[:60]}' (expected: Keyword value)")
    try:
        args = shlex.split(match.group(2), comments=True)
    except ValueError as exc:
        raise SshConfigError(f"{where}: {exc} in '{line[:60]}'") from None
    return match.group(1).lower(), args


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    return re.compile(
        "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern.lower())
        + r"\Z"
    )


def _pattern_list_matches(value: str, patterns: Sequence[str]) -> bool:
    """ssh's pattern list: some positive pattern matches and no negated (`!`) one does."""
    value = value.lower()
    matched = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        if _pattern_regex(pattern.removeprefix("!")).match(value):
            if negated:
                return False
            matched = True
    return matched


def _host_matches(alias: str, patterns: list[str]) -> bool:
    return _pattern_list_matches(alias, patterns)


def _match(state: _State, args: list[str], where: str) -> bool:
    """Evaluate a `Match` line: every criterion must hold."""
    if not args:
        raise SshConfigError(f"{where}: Match needs criteria (e.g. Match host gpu-*)")
    result = True
    i = 0
    while i < len(args):
        word = args[i].lower()
        negated = word.startswith("!")
        word = word.removeprefix("!")
        if word in ("all", "canonical", "final"):
            # no canonicalization pass: `canonical` never matches, `final` always does
            holds = word != "canonical"
            i += 1
        else:
            if i + 1 >= len(args):
                raise SshConfigError(f"{where}: Match {word} needs an argument")
            value = args[i + 1]
            i += 2
            if word in _UNEVALUATED_MATCH:
                state.notes.append(f"{where}: Match {word} is not evaluated by sgdeploy (counted "
                                   "as not matching)")
                holds = False
            elif word == "host":
                holds = _pattern_list_matches(state.hostname(), value.split(","))
            elif word == "originalhost":
                holds = _pattern_list_matches(state.alias, value.split(","))
            elif word == "user":
                holds = _pattern_list_matches(state.remote_user(), value.split(","))
            elif word == "localuser":
                holds = _pattern_list_matches(state.local_user, value.split(","))
            else:
                raise SshConfigError(f"{where}: unknown Match criterion '{word}'")
        result = result and (holds != negated)
    return result


def _include_paths(pattern: str, base: Path) -> list[Path]:
    expanded = os.path.expanduser(pattern)
    if not os.path.isabs(expanded):
        expanded = str(base / expanded)
    return [Path(p) for p in sorted(glob.glob(expanded)) if Path(p).is_file()]


# --------------------------------------------------------------------------- values
def _port(text: str, where: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise SshConfigError(f"{where}: port '{text}' is not a TCP port (1-65535)")
    return int(text)


def _seconds(text: str, where: str) -> int:
    """ssh's time format: `30`, `30s`, `5m`, `1h30m`."""
    match = re.fullmatch(r"(?:\d+[sSmMhHdDwW]?)+", text)
    if not match:
        raise SshConfigError(f"{where}: '{text}' is not a time (e.g. 30, 30s, 5m)")
    units = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    return sum(int(n) * units[u.lower()] for n, u in re.findall(r"(\d+)([sSmMhHdDwW]?)", text))


def _yes_no(text: str, where: str, keyword: str) -> bool:
    value = text.lower()
    if value in ("yes", "true"):
        return True
    if value in ("no", "false"):
        return False
    raise SshConfigError(f"{where}: {keyword} '{text}' is neither yes nor no")


def _strictness(text: str, where: str) -> str:
    value = text.lower()
    if value in ("yes", "true", "ask"):  # ask: nobody to ask, so unknown keys are refused
        return "yes"
    if value in ("no", "false", "off"):
        return "no"
    if value == "accept-new":
        return "accept-new"
    raise SshConfigError(f"{where}: StrictHostKeyChecking '{text}' is not yes, accept-new, no or "
                         "ask")


def _expand_tokens(text: str, tokens: Mapping[str, str], where: str) -> str:
    def one(match: re.Match[str]) -> str:
        token = match.group(1)
        if token not in tokens:
            raise SshConfigError(f"{where}: '%{token}' in '{text}' is not a token sgdeploy expands "
                                 f"(known: {' '.join('%' + t for t in sorted(tokens))})")
        return tokens[token]

    return re.sub(r"%(.)", one, text)


def _expand_path(text: str, tokens: Mapping[str, str], where: str) -> str:
    expanded = _expand_tokens(text, tokens, where)
    expanded = re.sub(
        r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: os.environ.get(m.group(1), ""), expanded
    )
    return os.path.expanduser(expanded)


# --------------------------------------------------------------------------- resolution
def resolve(
    alias: str,
    overrides: Mapping[str, object] | None = None,
    *,
    override_source: str = "inventory",
    files: Sequence[Path] | None = None,
    local_user: str | None = None,
    openssh: bool = False,
) -> SshTarget:
    """The settings ssh would use for `alias`, with `overrides` (inventory values) winning.

    `overrides` keys: port, user, identity_file, known_hosts, strict_host_key_checking
    (bool), proxy_jump (`none` disables one from the SSH configuration). Values that are None
    count as not set. With `openssh`, OpenSSH's own reading (`ssh -G`, where the client is
    installed) decides each value it reads differently (`with_openssh`).
    """
    files = config_files() if files is None else list(files)
    state = _State(alias, local_user or _local_user())
    fixed = _override_args(overrides or {})
    for key, value in fixed.items():
        state.set(key, value, override_source)
    state.fixed = frozenset(fixed)
    user_base = Path(os.path.expanduser("~/.ssh"))
    for path in files:
        base = Path("/etc/ssh") if str(path) == SYSTEM_CONFIG else user_base
        _read(state, path, base, True, 0)
    target = _target(state, tuple(str(p) for p in files), override_source)
    if openssh:
        seen = openssh_reading(alias, fixed, files)
        if seen is not None:
            target = with_openssh(target, seen, state.local_user)
    return target


def _override_args(overrides: Mapping[str, object]) -> dict[str, list[str]]:
    names = {
        "port": "port",
        "user": "user",
        "identity_file": "identityfile",
        "known_hosts": "userknownhostsfile",
        "strict_host_key_checking": "stricthostkeychecking",
        "proxy_jump": "proxyjump",
        "connect_timeout": "connecttimeout",
    }
    args: dict[str, list[str]] = {}
    for key, value in overrides.items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = "yes" if value else "no"
        args[names[key]] = [str(value)]
    return args


def _local_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def _target(state: _State, files: tuple[str, ...], override_source: str) -> SshTarget:
    sources: dict[str, str] = {}

    def get(key: str, name: str) -> tuple[str, str] | None:
        found = state.first(key)
        if found is None:
            return None
        sources[name] = found[1]
        return found[0][0], found[1]

    hostname = state.hostname()
    found_hostname = state.first("hostname")
    sources["hostname"] = found_hostname[1] if found_hostname else f"{override_source} (address)"
    port_v = get("port", "port")
    port = _port(*port_v) if port_v else 22
    user_v = get("user", "user")
    user = user_v[0] if user_v else DEFAULT_USER
    tokens = {
        "h": hostname,
        "p": str(port),
        "r": user,
        "n": state.alias,
        "u": state.local_user,
        "d": os.path.expanduser("~"),
        "l": socket.gethostname().split(".")[0],
        "L": socket.gethostname(),
        "%": "%",
    }
    identities = [
        (_expand_path(a, tokens, where), where)
        for args, where in state.values.get("identityfile", [])
        for a in args
        if a.lower() != "none"
    ]
    if identities:
        sources["identity_files"] = ", ".join(dict.fromkeys(w for _, w in identities))
    known_v = state.first("userknownhostsfile")
    known = (
        tuple(_expand_path(a, tokens, known_v[1]) for a in known_v[0])
        if known_v
        else DEFAULT_KNOWN_HOSTS
    )
    if known_v:
        sources["known_hosts"] = known_v[1]
    global_v = state.first("globalknownhostsfile")
    global_known = (tuple(_expand_path(a, tokens, global_v[1]) for a in global_v[0]) if global_v
                    else DEFAULT_GLOBAL_KNOWN_HOSTS)
    strict_v = get("stricthostkeychecking", "strict_host_key_checking")
    only_v = get("identitiesonly", "identities_only")
    jump, command = _proxy(state, tokens, sources)
    timeout_v = get("connecttimeout", "connect_timeout")
    alive_v = get("serveraliveinterval", "server_alive_interval")
    agent_v = state.first("identityagent")
    return SshTarget(
        alias=state.alias,
        hostname=hostname,
        port=port,
        user=user,
        identity_files=tuple(p for p, _ in identities)
        or tuple(os.path.expanduser(p) for p in DEFAULT_IDENTITIES),
        identity_files_set=bool(identities),
        identities_only=_yes_no(*only_v, "IdentitiesOnly") if only_v else False,
        known_hosts=tuple(os.path.expanduser(p) for p in known),
        global_known_hosts=global_known,
        strict_host_key_checking=_strictness(*strict_v) if strict_v else "yes",
        proxy_jump=jump,
        proxy_command=command,
        connect_timeout=float(_seconds(*timeout_v)) if timeout_v else None,
        server_alive_interval=_seconds(*alive_v) if alive_v else None,
        identity_agent=_expand_path(agent_v[0][0], tokens, agent_v[1]) if agent_v else None,
        sources=sources,
        config_files=files,
        notes=tuple(state.notes),
    )


def _proxy(
    state: _State, tokens: Mapping[str, str], sources: dict[str, str]
) -> tuple[tuple[Jump, ...], str | None]:
    jump_v = state.first("proxyjump")
    if jump_v is not None:
        args, where = jump_v
        if args[0].lower() == "none":
            return (), None
        sources["proxy_jump"] = where
        return tuple(Jump.parse(hop, where) for hop in ",".join(args).split(",") if hop), None
    command_v = state.first("proxycommand")
    if command_v is not None:
        args, where = command_v
        if args[0].lower() == "none":
            return (), None
        sources["proxy_command"] = where
        raw = " ".join(args)
        return (), _expand_tokens(raw, tokens, where)
    return (), None


def route(target: SshTarget, files: Sequence[Path] | None = None, local_user: str | None = None,
          depth: int = 0, openssh: bool = False) -> list[SshTarget]:
    """The hosts to connect through, in order, ending with `target` (like `ssh -J`).

    The first hop is reached by its own settings (its own ProxyJump or ProxyCommand too);
    each later hop through the one before it, whatever its own configuration says.
    """
    if not target.proxy_jump:
        return [target]
    if depth >= MAX_JUMPS:
        raise SshConfigError(f"{target.alias}: ProxyJump chain longer than {MAX_JUMPS} hosts (a "
                             "loop?)")
    hops = [resolve(j.host, {"user": j.user, "port": j.port}, override_source="ProxyJump of "
                                                              f"{target.alias}",
                    files=files, local_user=local_user, openssh=openssh) for j in target.proxy_jump]
    later = [_without_proxy(hop) for hop in hops[1:]]
    return [*route(hops[0], files, local_user, depth + 1, openssh), *later, target]


def _without_proxy(target: SshTarget) -> SshTarget:
    return replace(target, proxy_jump=(), proxy_command=None)


# The inventory's connection settings that win over the SSH configuration's (`ssh_overrides`)
OVERRIDE_FIELDS = (
    "port",
    "user",
    "identity_file",
    "known_hosts",
    "strict_host_key_checking",
    "proxy_jump",
)


class HostSettings(Protocol):
    """What connecting reads of an inventory host: its validated `[hosts.NAME]` entry, or the
    `SshEntry` read from the file before validation."""

    @property
    def address(self) -> str: ...
    @property
    def ssh_config(self) -> str | None: ...
    @property
    def become(self) -> bool | None: ...
    def ssh_overrides(self) -> dict[str, object]: ...


@dataclass(frozen=True)
class SshEntry:
    """An inventory host's connection settings alone (`HostSettings`), comparable by value."""

    address: str
    ssh_config: str | None = None
    become: bool | None = None
    overrides: tuple[tuple[str, object], ...] = ()

    def ssh_overrides(self) -> dict[str, object]:
        return {name: None for name in OVERRIDE_FIELDS} | dict(self.overrides)

    @classmethod
    def made(cls, address: str, ssh_config: str | None, become: bool | None,
             given: Mapping[str, object]) -> SshEntry:
        """The entry with the overrides `given` sets (by OVERRIDE_FIELDS' names; None: unset)."""
        return cls(
            address,
            ssh_config,
            become,
            tuple((name, given[name]) for name in OVERRIDE_FIELDS if given.get(name) is not None),
        )

    @classmethod
    def of(cls, entry: HostSettings) -> SshEntry:
        return cls.made(entry.address, entry.ssh_config, entry.become, entry.ssh_overrides())


def for_host(name: str, entry: HostSettings) -> list[SshTarget]:
    """The connection route to an inventory host: its SSH configuration under the inventory's
    values."""
    target = resolve(entry.address, entry.ssh_overrides(), override_source="inventory "
                                                           f"[hosts.{name}]",
                     files=config_files(entry.ssh_config), openssh=True)
    return route(target, [Path(f) for f in target.config_files], openssh=True)


# --------------------------------------------------------------------------- OpenSSH's own reading
OPENSSH_ENV = "SGDEPLOY_OPENSSH"  # "0": never ask `ssh -G`
OPENSSH = "ssh -G"  # the source of a value OpenSSH read differently
_STRICTNESS = {
    "yes": "yes",
    "true": "yes",
    "no": "no",
    "false": "no",
    "off": "no",
    "accept-new": "accept-new",
}


def openssh_reading(
    alias: str, fixed: Mapping[str, list[str]], files: Sequence[Path]
) -> dict[str, list[str]] | None:
    """What `ssh -G` prints for `alias` with the same files and the inventory's values as `-o`:
    keyword -> its values (one per line for a repeated keyword). None where no `ssh` client is
    installed, `SGDEPLOY_OPENSSH=0`, the files are not ones one `-F` can name, or it fails.

    OpenSSH evaluates what the files' reading here does not (`Match exec`, `canonical`, `final`,
    `tagged`, `localnetwork`, `version`); it runs `Match exec` commands, as `ssh` itself would."""
    ssh = shutil.which("ssh")
    if ssh is None or os.environ.get(OPENSSH_ENV) == "0":
        return None
    argv = [ssh, "-G"]
    if len(files) == 1:
        argv += ["-F", str(files[0])]
    elif list(files) != [
        Path(_account_home() or "/nonexistent", ".ssh", "config"),
        Path(SYSTEM_CONFIG),
    ]:
        return None  # files ssh would not read by itself, and that no one -F names
    for key, values in fixed.items():
        argv += ["-o", f"{key}={' '.join(values)}"]
    try:
        done = subprocess.run([*argv, "--", alias], capture_output=True, text=True, timeout=10,
                              stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    seen: dict[str, list[str]] = {}
    for line in done.stdout.splitlines():
        key, _, value = line.partition(" ")
        seen.setdefault(key.lower(), []).append(value)
    return seen


def with_openssh(target: SshTarget, seen: Mapping[str, list[str]], local_user: str) -> SshTarget:
    """`target` with each value `ssh -G` reads differently taken from it (source `ssh -G`, and a
    note). sgdeploy's own defaults stay where OpenSSH only shows its own: the user (root, not the
    local user), the identity files it tries, a host key it would ask about (refused here)."""
    def one(key: str) -> str | None:
        values = seen.get(key)
        return values[0] if values else None

    found: dict[str, object] = {"hostname": one("hostname") or target.hostname,
                                "port": int(one("port") or target.port)}
    user = one("user")
    if user and (user != local_user or "user" in target.sources):
        found["user"] = user
    identities = tuple(os.path.expanduser(v) for v in seen.get("identityfile", []))
    if target.identity_files_set or not set(identities) <= _openssh_default_identities():
        found["identity_files"] = identities
    known = tuple(_in_home(w) for v in seen.get("userknownhostsfile", []) for w in v.split())
    if known:
        found["known_hosts"] = known
    strict = _STRICTNESS.get((one("stricthostkeychecking") or "").lower())
    if strict:
        found["strict_host_key_checking"] = strict
    found["identities_only"] = (one("identitiesonly") or "no").lower() == "yes"
    jump = one("proxyjump")
    found["proxy_jump"] = (
        tuple(Jump.parse(h, OPENSSH) for h in jump.split(",") if h) if jump else ()
    )
    found["proxy_command"] = one("proxycommand")
    timeout = one("connecttimeout")
    found["connect_timeout"] = float(timeout) if timeout and timeout.isdigit() else None
    alive = one("serveraliveinterval")
    found["server_alive_interval"] = (
        int(alive) if alive and alive.isdigit() and int(alive) > 0 else None
    )
    changed = {name: value for name, value in found.items() if value != getattr(target, name)}
    if not changed:
        return target
    notes = [f"{OPENSSH} reads {name} as {_shown(value)}, not {_shown(getattr(target, name))}: "
             "OpenSSH's reading is used" for name, value in changed.items()]
    sources = target.sources | {name: OPENSSH for name in changed}
    if "identity_files" in changed:
        changed["identity_files_set"] = True
    return replace(target, **changed, sources=sources, notes=(*target.notes, *notes))  # type: ignore[arg-type]


def _in_home(path: str) -> str:
    """A path `ssh -G` expanded with the account's home directory, under `~` as sgdeploy expands it
    (the two differ only where HOME is not the account's home)."""
    account = _account_home()
    if account and (path == account or path.startswith(account + "/")):
        return os.path.expanduser("~") + path[len(account):]
    return path


def _account_home() -> str | None:
    """The home directory of the account (what OpenSSH expands `~` with, whatever HOME says)."""
    try:
        import pwd  # here: POSIX only, and only where ssh -G is asked

        return pwd.getpwuid(os.getuid()).pw_dir.rstrip("/") or None
    except (ImportError, KeyError, OSError):
        return None


def _shown(value: object) -> str:
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value) or "none"
    return "none" if value is None else str(value)


def _openssh_default_identities() -> set[str]:
    return {
        os.path.expanduser(f"~/.ssh/{name}")
        for name in (
            "id_rsa",
            "id_ecdsa",
            "id_ecdsa_sk",
            "id_ed25519",
            "id_ed25519_sk",
            "id_xmss",
            "id_dsa",
        )
    }


# --------------------------------------------------------------------------- identity files
def encrypted_key(path: str) -> bool:
    """Whether a private key file is protected by a passphrase (OpenSSH or PEM format)."""
    try:
        text = Path(path).read_text(encoding="ascii", errors="replace")
    except OSError:
        return False
    if "ENCRYPTED" in text.split("\n", 2)[0] or "Proc-Type: 4,ENCRYPTED" in text:
        return True
    if "BEGIN OPENSSH PRIVATE KEY" not in text:
        return False
    body = "".join(line for line in text.splitlines() if line and not line.startswith("-----"))
    try:
        blob = base64.b64decode(body)
    except ValueError:
        return False
    magic = b"openssh-key-v1\0"
    if not blob.startswith(magic) or len(blob) < len(magic) + 4:
        return False
    size = int.from_bytes(blob[len(magic):len(magic) + 4], "big")
    return blob[len(magic) + 4:len(magic) + 4 + size] != b"none"
