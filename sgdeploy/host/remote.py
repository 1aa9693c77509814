"""The one module that talks to a host: an SSH connection (Paramiko) and what runs over it.

The connection is made the way `ssh` makes it: settings from the inventory, then the user's SSH
configuration (sgdeploy/host/sshconfig.py resolves them), through each `ProxyJump` hop or a
`ProxyCommand`, each host key checked against that host's own name. Everything sgdeploy does on
a host goes through `RemoteHost`: commands, atomic file writes, a streaming command (journal
follower), a lock held by an open channel, and HTTP requests to the server's port on the host's
loopback through the SSH transport (like `ssh -L`), so the server never has to listen beyond the
host. It counts connections and commands for the benchmarks.

A login that is not root gets root the way Ansible's `become` does: on connecting, one round
trip finds out whether `sudo -n` works for it, and from then on every command runs through
`sudo -n -- sh -c ...` (`Privileges`). Without it, `privileges.refusal` says why this login
cannot change the host, before anything is changed. Paramiko's own log lines (`Secsh channel 2
open FAILED: ...`) go to the debug log: each failure they describe reaches the user as a sentence.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import logging
import os
import posixpath
import select
import shlex
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

# Paramiko imports invoke, when it is installed, for `Match exec` in its own SSH config parser,
# which sgdeploy does not use (sgdeploy/host/sshconfig.py reads the configuration): ~0.1 s of every
# apply's start. Unless something imported invoke already, paramiko is told it is absent.
sys.modules.setdefault("invoke", None)  # type: ignore[arg-type]
import paramiko  # noqa: E402

from sgdeploy.host import sshconfig  # noqa: E402
from sgdeploy.host.sshconfig import HostSettings, SshTarget  # noqa: E402

CONNECT_TIMEOUT_S = 10.0
COMMAND_TIMEOUT_S = 120.0
KEEPALIVE_S = 15
UNIT_DIR = "/etc/systemd/system"

_log = logging.getLogger("sgdeploy.host.remote")


class _LibraryToDebug(logging.Handler):
    """Paramiko logs at ERROR what sgdeploy already turns into a sentence of its own (a refused
    tunnel is "nothing listens on 127.0.0.1:PORT"); its lines go to sgdeploy's debug log only."""

    def emit(self, record: logging.LogRecord) -> None:
        _log.debug("%s: %s", record.name, record.getMessage())


_paramiko_log = logging.getLogger("paramiko")
_paramiko_log.addHandler(_LibraryToDebug())
_paramiko_log.propagate = False


class RemoteError(Exception):
    """Base of everything that goes wrong talking to a host.

    RemoteError
    ├── ConnectError        cannot connect or authenticate (host key refused included)
    ├── CommandTimeout      a command ran past its timeout
    └── ConnectionLost      the connection dropped while in use
    """


class ConnectError(RemoteError):
    pass


class CommandTimeout(RemoteError):
    pass


class ConnectionLost(RemoteError):
    pass


@dataclass(frozen=True)
class CommandResult:
    command: str
    exit_code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass(frozen=True)
class Privileges:
    """What the login may do on the host, found once per connection.

    `sudo`: every command runs through `sudo -n` (the login is not root, and sudo lets it run
    `sh` as root without a password). `refusal`: why this login cannot change the host (not
    root, and no sudo); None when it can.
    """

    user: str = "root"
    root: bool = True
    sudo: bool = False
    refusal: str | None = None

    def as_dict(self) -> dict[str, object]:
        return {"user": self.user, "root": self.root, "sudo": self.sudo, "refusal": self.refusal}


# Run raw (never through sudo) right after logging in as someone other than root: the uid,
# whether the unit folder is writable, and what `sudo -n` answers when asked for a root shell.
_PRIVILEGES_PROBE = (
    'u=$(id -u); echo "uid=$u"; [ "$u" != 0 ] || exit 0; '
    f"if [ -w {UNIT_DIR} ]; then echo units=writable; else echo units=readonly; fi; "
    "command -v sudo >/dev/null 2>&1 || { echo sudo=missing; exit 0; }; "
    "r=$(sudo -n -- sh -c 'echo sudo-uid=$(id -u)' 2>&1 </dev/null); "
    'case $r in *sudo-uid=0*) echo sudo=ok ;; *) echo sudo=refused; printf "%s\\n" "$r" | head -n '
    '3 ;; esac'
)


def parse_privileges(output: str, user: str, host: str, become: bool | None) -> Privileges:
    """The Privileges `_PRIVILEGES_PROBE` printed for `user` on `host`; `become` as in the
    inventory."""
    lines = output.splitlines()
    values = dict(
        line.split("=", 1) for line in lines if "=" in line and line.split("=", 1)[0].isalpha()
    )
    if values.get("uid") == "0":
        return Privileges(user)
    sudo = values.get("sudo")
    if sudo == "ok" and become is not False:
        return Privileges(user, root=False, sudo=True)
    said = "; ".join(line.strip() for line in lines if "=" not in line and line.strip()
                     and "unable to resolve host" not in line)  # sudo's noise, not its answer
    if become is False:
        why = "become = false in the inventory"
    elif sudo == "missing":
        why = "sudo is not installed there"
    elif sudo == "refused":
        why = f"has no passwordless sudo ({said or 'sudo refused'})"
    else:
        why = f"its rights could not be read ({output.strip()[:200] or 'no answer'})"
    cannot = (f"cannot write {UNIT_DIR}" if values.get("units") != "writable"
              else "cannot run systemctl on system units")
    return Privileges(user, root=False, refusal=(
        f"user {user} on {host} {cannot} and {why}; let it run commands as root through sudo "
        f"without a password (sudoers: `{user} ALL=(root) NOPASSWD: ALL`) or connect as root"))


@dataclass
class RemoteStats:
    connections: int = 0
    commands: int = 0
    uploads: int = 0
    http_requests: int = 0
    streams: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class HttpResponse:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


class RemoteHost:
    """An SSH connection to one inventory host."""

    def __init__(
        self, name: str, entry: HostSettings, connect_timeout: float = CONNECT_TIMEOUT_S
    ) -> None:
        self.name = name
        self.entry = entry
        self.connect_timeout = connect_timeout
        self.stats = RemoteStats()
        self.route: list[SshTarget] = []  # the hosts connected through, ending with this one
        self.privileges = Privileges()  # until connect() has asked the host
        self._clients: list[paramiko.SSHClient] = []  # one per hop of the route
        self._shell: _Shell | None = None  # the shell that runs commands one after another (`run`)
        self._shell_busy = threading.Lock()
        self._spare: paramiko.Channel | None = None  # a `sh` started ahead for the next `hold`
        self._spare_lock = threading.Lock()

    # -- connection ---------------------------------------------------------------------
    def connect(self) -> RemoteHost:
        """Connect the way `ssh` would (see sgdeploy/host/sshconfig.py), through each ProxyJump
        hop."""
        try:
            chain = sshconfig.for_host(self.name, self.entry)
        except sshconfig.SshConfigError as exc:
            raise ConnectError(f"{self.name}: {exc}") from exc
        clients: list[paramiko.SSHClient] = []
        try:
            for i, hop in enumerate(chain):
                via = chain[i - 1] if i else None
                sock = self._socket(hop, via, clients[-1] if clients else None)
                clients.append(self._open(hop, sock, via, None if hop is chain[-1] else chain[-1]))
        except BaseException:
            for client in reversed(clients):
                client.close()
            raise
        final = chain[-1]
        transport = clients[-1].get_transport()
        if transport is not None:
            transport.set_keepalive(final.server_alive_interval or KEEPALIVE_S)
        self.route = chain
        self._clients = clients
        self.stats.connections += 1
        self.privileges = self._find_privileges(final.user)
        return self

    def _find_privileges(self, user: str) -> Privileges:
        """Root needs nothing; any other login is asked once what it may do (see Privileges)."""
        if user == "root":
            return Privileges()
        try:
            # the shell starts as root, later
            result = self._run_on_channel(_PRIVILEGES_PROBE, timeout=30)
        except RemoteError as exc:
            self.close()
            raise ConnectError(f"{self.name}: connected as {user}, then: {exc}") from exc
        return parse_privileges(result.stdout, user, self.name, self.entry.become)

    def _as_root(self, command: str) -> str:
        """The command line to run: through `sudo -n` when the login needs it for root."""
        return f"sudo -n -- sh -c {shlex.quote(command)}" if self.privileges.sudo else command

    def _socket(
        self, hop: SshTarget, via: SshTarget | None, through: paramiko.SSHClient | None
    ) -> Any:
        """How to reach `hop`: a channel through the previous hop, its ProxyCommand, or None
        (TCP)."""
        where = f"{hop.hostname}:{hop.port}"
        if through is not None and via is not None:
            transport = through.get_transport()
            try:
                assert transport is not None
                return transport.open_channel(
                    "direct-tcpip",
                    (hop.hostname, hop.port),
                    ("127.0.0.1", 0),
                    timeout=self._timeout(hop),
                )
            except (paramiko.SSHException, EOFError, OSError, AssertionError) as exc:
                raise ConnectError(f"{self.name}: the bastion {via.alias} cannot reach {where}: "
                                   f"{str(exc) or type(exc).__name__}") from exc
        if hop.proxy_command:
            try:
                return paramiko.ProxyCommand(hop.proxy_command)
            except (paramiko.SSHException, OSError) as exc:
                raise ConnectError(f"{self.name}: ProxyCommand for {hop.alias} failed: "
                                   f"{exc}") from exc
        return None

    def _timeout(self, hop: SshTarget) -> float:
        return hop.connect_timeout or self.connect_timeout

    def _open(self, hop: SshTarget, sock: Any, via: SshTarget | None, bastion_of: SshTarget | None
              ) -> paramiko.SSHClient:
        """Log in to one hop, its host key checked against its own name in its known_hosts files."""
        client = paramiko.SSHClient()
        known = _load_known_hosts(client, hop)
        client.set_missing_host_key_policy(_host_key_policy(hop))
        where = (_host_port(hop) + (f" (through {via.alias})" if via else "")
                 + (f" (ProxyJump host {hop.alias}, on the way to "
                    f"{bastion_of.alias})" if bastion_of else ""))
        keys = [f for f in hop.identity_files if os.path.isfile(f)]
        timeout = self._timeout(hop)
        try:
            client.connect(
                hop.hostname,
                port=hop.port,
                username=hop.user,
                key_filename=keys or None,
                look_for_keys=False,
                allow_agent=hop.identity_agent != "none",
                timeout=timeout,
                banner_timeout=timeout,
                auth_timeout=timeout,
                sock=sock,
            )
        except paramiko.BadHostKeyException as exc:
            raise ConnectError(f"{self.name}: the host key of {where} CHANGED: it differs from the "
                               f"one for '{_key_name(hop)}' in {_files(known)}; refusing to "
                               "connect") from exc
        except paramiko.AuthenticationException as exc:
            raise ConnectError(self._auth_failed(hop, where, keys, exc)) from exc
        except paramiko.SSHException as exc:
            if "not found in known_hosts" in str(exc):
                raise ConnectError(f"{self.name}: the host key of {where} is unknown: no entry for "
                                   f"'{_key_name(hop)}' in "
                                   f"{_files(known) or ' or '.join(hop.known_hosts)}; check it and "
                                   "add it there (ssh-keyscan), or set strict_host_key_checking = "
                                   "false for this host") from exc
            reason = _ssh_reason(exc, hop)
            raise ConnectError(f"{self.name}: SSH to {where} failed: {reason}") from exc
        except (OSError, EOFError) as exc:
            raise ConnectError(f"{self.name}: cannot connect to {where}: "
                               f"{_tcp_reason(exc, hop, timeout)}") from exc
        return client

    def _auth_failed(self, hop: SshTarget, where: str, keys: list[str], exc: Exception) -> str:
        """Why no key was accepted, naming the identity files (never a passphrase prompt)."""
        locked = [k for k in keys if sshconfig.encrypted_key(k)]
        agent = hop.identity_agent != "none" and bool(os.environ.get("SSH_AUTH_SOCK"))
        if locked:
            held = (
                "the SSH agent does not hold it"
                if agent
                else "no SSH agent is running (SSH_AUTH_SOCK)"
            )
            return (f"{self.name}: cannot log in to {hop.user}@{where}: the identity file "
                    f"{', '.join(locked)} is protected by a passphrase and {held}; load it with "
                    f"`ssh-add {locked[0]}` (sgdeploy never asks for a passphrase)")
        missing = [f for f in hop.identity_files if f not in keys] if hop.identity_files_set else []
        offered = ", ".join(keys) or "none"
        return (f"{self.name}: {hop.user}@{where} refused every key offered (identity files: "
                f"{offered}{'; missing: ' + ', '.join(missing) if missing else ''}; SSH agent: "
                f"{'yes' if agent else 'no'}): {exc}")

    def __enter__(self) -> RemoteHost:
        return self.connect() if not self._clients else self

    def __exit__(self, *exc: object | TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._shell = None
        with self._spare_lock:
            spare, self._spare = self._spare, None
        if spare is not None:
            _close(spare)
        for client in reversed(self._clients):
            client.close()
        self._clients = []

    @property
    def _transport(self) -> paramiko.Transport:
        if not self._clients:
            raise ConnectionLost(f"{self.name}: not connected")
        transport = self._clients[-1].get_transport()
        if transport is None or not transport.is_active():
            raise ConnectionLost(f"{self.name}: the SSH connection dropped")
        return transport

    def _open_channel(self) -> paramiko.Channel:
        try:
            return self._transport.open_session(timeout=self.connect_timeout)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise _dropped(self.name, exc) from exc

    # -- commands -------------------------------------------------------------------------
    def run(
        self, command: str, timeout: float = COMMAND_TIMEOUT_S, stdin: bytes | None = None
    ) -> CommandResult:
        """Run one `sh` command line; never raises for a non-zero exit.

        Commands run one after another in one shell on the host (`_Shell`): a channel of its own
        costs sshd a new session each time (~50 ms on a Debian host, more than most commands
        take). A command with input, or one asked for while the shell is busy on another
        thread, gets a channel of its own."""
        if stdin is None and self._shell_busy.acquire(blocking=False):
            try:
                return self._run_in_shell(command, timeout)
            finally:
                self._shell_busy.release()
        return self._run_on_channel(command, timeout, stdin)

    def warm_up(self) -> None:
        """Start the shell `run` uses, and on another thread a spare `sh` for the next `hold`
        (the lock), before they are needed: sshd takes ~40 ms to start a session."""
        with self._shell_busy:
            if self._shell is None or not self._shell.alive():
                self._shell = _Shell(self._sh_channel())
        threading.Thread(target=self._start_spare, daemon=True, name="sgdeploy-spare").start()

    def _start_spare(self) -> None:
        with contextlib.suppress(RemoteError):
            channel = self._sh_channel()
            with self._spare_lock:
                kept = self._spare is None
                if kept:
                    self._spare = channel
            if not kept:
                _close(channel)

    def _take_spare(self) -> paramiko.Channel | None:
        with self._spare_lock:
            spare, self._spare = self._spare, None
        return spare if spare is not None and _open_both_ways(spare) else None

    def _sh_channel(self) -> paramiko.Channel:
        """A channel running `sh` (as root), reading command lines from its input."""
        channel = self._open_channel()
        try:
            channel.exec_command(self._as_root("exec sh"))
        except (OSError, EOFError, paramiko.SSHException) as exc:
            _close(channel)
            raise _dropped(self.name, exc) from exc
        return channel

    def _run_in_shell(self, command: str, timeout: float) -> CommandResult:
        self.stats.commands += 1
        if self._shell is None or not self._shell.alive():
            self._shell = _Shell(self._sh_channel())
        shell = self._shell
        try:
            return shell.run(self.name, command, timeout, self._transport_alive)
        except (CommandTimeout, ConnectionLost):
            # whatever it was running may still run: the next command gets another
            self._shell = None
            _close(shell.channel)
            raise
        except (OSError, EOFError, paramiko.SSHException) as exc:
            self._shell = None
            raise _dropped(self.name, exc) from exc

    def _run_on_channel(self, command: str, timeout: float = COMMAND_TIMEOUT_S,
                        stdin: bytes | None = None) -> CommandResult:
        channel = self._open_channel()
        self.stats.commands += 1
        deadline = time.monotonic() + timeout
        out, err = bytearray(), bytearray()
        try:
            channel.exec_command(self._as_root(command))
            if stdin is not None:
                channel.sendall(stdin)
            channel.shutdown_write()
            while True:
                if channel.recv_ready():
                    out += channel.recv(65536)
                elif channel.recv_stderr_ready():
                    err += channel.recv_stderr(65536)
                elif channel.exit_status_ready():
                    while channel.recv_ready():
                        out += channel.recv(65536)
                    while channel.recv_stderr_ready():
                        err += channel.recv_stderr(65536)
                    break
                elif time.monotonic() > deadline:
                    raise CommandTimeout(f"{self.name}: command ran past {timeout:.0f} s: "
                                         f"{command[:120]}")
                elif channel.closed and not self._transport_alive():
                    raise ConnectionLost(f"{self.name}: the SSH connection dropped during: "
                                         f"{command[:120]}")
                else:
                    select.select([channel], [], [], 0.05)
            code = channel.recv_exit_status()
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise _dropped(self.name, exc) from exc
        finally:
            _close(channel)
        return CommandResult(
            command, code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
        )

    def _transport_alive(self) -> bool:
        try:
            return bool(self._transport.is_active())
        except ConnectionLost:
            return False

    def write_files(
        self, files: dict[str, bytes], mode: int = 0o644, then: str = ""
    ) -> CommandResult:
        """Write files atomically (temporary file in the same folder, then rename) in one round
        trip.

        `then` is a command run after every file is in place, in the same round trip. The old
        content of a path stays intact when anything fails (disk full, read-only folder).
        """
        self.stats.uploads += len(files)
        return self.run(write_files_command(files, mode, then))

    # -- streams --------------------------------------------------------------------------
    def stream_lines(self, command: str, idle_timeout: float = 0.2) -> Iterator[str | None]:
        """Yield stdout lines of a long-running command as they arrive.

        Yields None whenever `idle_timeout` passes without a line, so the caller can check its
        deadlines; the command is killed (channel closed) when the caller stops iterating.
        """
        channel = self._open_channel()
        self.stats.streams += 1
        buffer = b""
        try:
            channel.exec_command(self._as_root(command))
            while True:
                ready, _, _ = select.select([channel], [], [], idle_timeout)
                if not ready:
                    if channel.exit_status_ready() and not channel.recv_ready():
                        return
                    if not self._transport_alive():
                        raise ConnectionLost(f"{self.name}: the SSH connection dropped while "
                                             "following output")
                    yield None
                    continue
                chunk = channel.recv(65536)
                if not chunk:
                    if buffer:
                        yield buffer.decode("utf-8", "replace")
                    return
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    yield line.decode("utf-8", "replace")
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise _dropped(self.name, exc) from exc
        finally:
            _close(channel)

    def hold(self, command: str, ready_line: str, timeout: float = 15.0) -> HeldCommand:
        """Start a command that keeps running while its channel stays open (a lock holder).

        Returns once the command printed `ready_line`, or with `.held == False` and its output
        when it exited first.
        """
        self.stats.commands += 1
        channel = self._take_spare()
        try:
            if channel is not None:  # its sh becomes the command, on the channel's input as before
                channel.sendall(f"exec sh -c {shlex.quote(command)}\n".encode())
        except (OSError, EOFError, paramiko.SSHException):
            _close(channel)
            channel = None
        if channel is None:
            channel = self._open_channel()
            channel.exec_command(self._as_root(command))
        deadline = time.monotonic() + timeout
        out = b""
        while time.monotonic() < deadline:
            if ready_line.encode() in out:
                return HeldCommand(channel, True, out.decode("utf-8", "replace"))
            if channel.recv_ready():
                out += channel.recv(4096)
                continue
            if channel.exit_status_ready():
                while channel.recv_ready():
                    out += channel.recv(4096)
                code = channel.recv_exit_status()
                _close(channel)
                return HeldCommand(None, False, out.decode("utf-8", "replace"), code)
            select.select([channel], [], [], 0.05)
        _close(channel)
        raise CommandTimeout(f"{self.name}: '{command[:80]}' did not answer within {timeout:.0f} s")

    # -- HTTP on the host -----------------------------------------------------------------
    def _tunnel(self, port: int, timeout: float) -> paramiko.Channel:
        """A TCP connection to 127.0.0.1:<port> on the host, through the SSH transport (like ssh
        -L)."""
        self.stats.http_requests += 1
        try:
            return self._transport.open_channel(
                "direct-tcpip", ("127.0.0.1", port), ("127.0.0.1", 0), timeout=timeout
            )
        except paramiko.ChannelException as exc:
            raise ConnectionRefusedError(f"{self.name}: nothing listens on 127.0.0.1:{port} "
                                         f"({exc})") from exc
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise _dropped(self.name, exc) from exc

    def http_get(self, port: int, path: str, timeout: float = 10.0,
                 headers: dict[str, str] | None = None) -> HttpResponse:
        """GET http://127.0.0.1:<port><path> as seen from the host, through the SSH transport."""
        channel = self._tunnel(port, timeout)
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        try:
            channel.settimeout(timeout)
            channel.sendall(f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n{extra}Connection: "
                            "close\r\n\r\n"
                            .encode())
            raw = bytearray()
            while True:
                chunk = channel.recv(65536)
                if not chunk:
                    break
                raw += chunk
        except TimeoutError as exc:
            raise CommandTimeout(f"{self.name}: GET {path} on port {port} timed out") from exc
        finally:
            _close(channel)
        return _parse_http(bytes(raw))

    def http_stream(
        self,
        port: int,
        method: str,
        path: str,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        timeout: float = 60.0,
    ) -> Iterator[bytes]:
        """Send one request to 127.0.0.1:<port> on the host; yield the response body as it arrives.

        HTTP/1.1 with `Connection: close`: a chunked body is decoded, otherwise the body runs to
        Content-Length or to the end of the connection. `timeout` bounds each wait for data. A
        status other than 2xx raises RemoteError with the start of the body. Nothing is sent
        until the first chunk is asked for; stopping the iteration closes the channel.
        """
        channel = self._tunnel(port, timeout)
        buf = bytearray()

        def more() -> bool:
            chunk = channel.recv(65536)
            buf.extend(chunk)
            return bool(chunk)

        try:
            channel.settimeout(timeout)
            head = {
                "Host": f"127.0.0.1:{port}",
                "Content-Length": str(len(body)),
                "Connection": "close",
                **(headers or {}),
            }
            channel.sendall(
                f"{method} {path} HTTP/1.1\r\n".encode()
                + "".join(f"{k}: {v}\r\n" for k, v in head.items()).encode()
                + b"\r\n"
                + body
            )
            while b"\r\n\r\n" not in buf:
                if not more():
                    raise ConnectionLost(f"{self.name}: {method} {path} on port {port}: no HTTP "
                                         "response")
            end = buf.index(b"\r\n\r\n") + 4
            response = _parse_http(bytes(buf[:end]))
            del buf[:end]
            if not 200 <= response.status < 300:
                while len(buf) < 4096 and more():
                    pass
                raise RemoteError(f"{self.name}: {method} {path} on port {port} answered HTTP "
                                  f"{response.status}: "
                                  f"{bytes(buf[:300]).decode('utf-8', 'replace').strip()}")
            if "chunked" not in response.headers.get("transfer-encoding", "").lower():
                left = int(response.headers.get("content-length", -1))
                while left != 0 and (buf or more()):
                    piece = bytes(buf) if left < 0 else bytes(buf[:left])
                    del buf[:len(piece)]
                    left = left - len(piece) if left > 0 else left
                    yield piece
                return
            while True:  # chunked: "<hex size>[;ext]\r\n<data>\r\n" ... "0\r\n\r\n"
                while b"\r\n" not in buf:
                    if not more():
                        return
                line_end = buf.index(b"\r\n")
                size = int(bytes(buf[:line_end]).split(b";")[0].strip() or b"0", 16)
                del buf[:line_end + 2]
                if size == 0:
                    return
                while size:
                    if not buf and not more():
                        return
                    piece = bytes(buf[:size])
                    del buf[:len(piece)]
                    size -= len(piece)
                    yield piece
                while len(buf) < 2 and more():
                    pass
                del buf[:2]
        except TimeoutError as exc:
            raise CommandTimeout(f"{self.name}: {method} {path} on port {port}: no data for "
                                 f"{timeout:.0f} s") from exc
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise _dropped(self.name, exc) from exc
        finally:
            _close(channel)


@dataclass
class HeldCommand:
    """A command running on an open channel; closing stdin ends it."""

    channel: paramiko.Channel | None
    held: bool
    output: str
    exit_code: int | None = None

    def release(self, wait_s: float = 5.0) -> None:
        """End the command and wait (briefly) until it has exited, so that whatever it held is
        free when this returns: an apply that runs right after must not find the lock busy."""
        if self.channel is not None:
            try:
                self.channel.shutdown_write()
                deadline = time.monotonic() + wait_s
                while not self.channel.exit_status_ready() and time.monotonic() < deadline:
                    time.sleep(0.005)
                self.channel.close()
            except (OSError, EOFError, paramiko.SSHException):
                pass
            self.channel = None


class _Shell:
    """`sh` on a channel of its own, reading one command line after another from its stdin.

    Each command runs in a `sh -c` of its own, with no input, as it would on a channel of its
    own; after it, the shell prints a marker line unique to the command, with its exit status,
    on stdout and on stderr, so both streams are read to their end."""

    def __init__(self, channel: paramiko.Channel) -> None:
        self.channel = channel

    def alive(self) -> bool:
        return _open_both_ways(self.channel)

    def run(
        self, host: str, command: str, timeout: float, transport_alive: Callable[[], bool]
    ) -> CommandResult:
        marker = f"@@sgdeploy:done-{uuid.uuid4().hex}@@"
        channel = self.channel
        channel.sendall(f"sh -c {shlex.quote(command)} </dev/null; sgd_rc=$?; printf '\\n%s %s\\n' "
                        f"{marker} \"$sgd_rc\"; printf '\\n%s\\n' {marker} >&2\n".encode())
        end_out, end_err = f"\n{marker} ".encode(), f"\n{marker}\n".encode()
        out, err = bytearray(), bytearray()
        deadline = time.monotonic() + timeout
        while not (
            out.endswith(b"\n") and end_out in out[-len(end_out) - 12 :] and err.endswith(end_err)
        ):
            if channel.recv_ready():
                out += channel.recv(65536)
            elif channel.recv_stderr_ready():
                err += channel.recv_stderr(65536)
            elif time.monotonic() > deadline:
                raise CommandTimeout(f"{host}: command ran past {timeout:.0f} s: {command[:120]}")
            elif not _open_both_ways(channel):
                if not transport_alive():
                    raise ConnectionLost(f"{host}: the SSH connection dropped during: "
                                         f"{command[:120]}")
                raise ConnectionLost(f"{host}: the shell running commands ended during: "
                                     f"{command[:120]}")
            else:
                select.select([channel], [], [], 0.05)
        stdout, _, status = bytes(out).rpartition(end_out)
        return CommandResult(
            command,
            int(status.strip() or b"255"),
            stdout.decode("utf-8", "replace"),
            bytes(err)[: -len(end_err)].decode("utf-8", "replace"),
        )


class _AcceptNew(paramiko.MissingHostKeyPolicy):  # type: ignore[misc]
    """`StrictHostKeyChecking accept-new`: record an unknown key in the first known_hosts file
    (appended: the file's other lines, hashed or not, stay as they are); a changed key is still
    refused."""

    def __init__(self, path: str) -> None:
        self.path = path

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        os.makedirs(os.path.dirname(self.path) or ".", mode=0o700, exist_ok=True)
        with open(self.path, "a", encoding="ascii") as handle:
            handle.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


def _host_key_policy(hop: SshTarget) -> paramiko.MissingHostKeyPolicy:
    if hop.strict_host_key_checking == "accept-new":
        return _AcceptNew(hop.known_hosts[0])
    if hop.strict_host_key_checking == "no":
        return paramiko.WarningPolicy()
    return paramiko.RejectPolicy()  # Paramiko's own default adds unknown keys silently


def _load_known_hosts(client: paramiko.SSHClient, hop: SshTarget) -> list[str]:
    """Load the hop's known_hosts files (hashed entries and `[host]:port` included); the ones
    read."""
    read = []
    for path in (*hop.known_hosts, *hop.global_known_hosts):
        if os.path.isfile(path):
            try:
                client.get_host_keys().load(path)
            except (OSError, paramiko.SSHException) as exc:
                raise ConnectError(f"{hop.alias}: cannot read known_hosts file {path}: "
                                   f"{exc}") from exc
            read.append(path)
    return read


def _key_name(hop: SshTarget) -> str:
    """The name a host key is looked up by, as ssh writes it in known_hosts."""
    return hop.hostname if hop.port == 22 else f"[{hop.hostname}]:{hop.port}"


def _files(paths: list[str]) -> str:
    return ", ".join(paths)


def _host_port(hop: SshTarget) -> str:
    """`host:22`, `[::1]:22`: an IPv6 address in brackets, so the port stays apart."""
    return f"[{hop.hostname}]:{hop.port}" if ":" in hop.hostname else f"{hop.hostname}:{hop.port}"


def _tcp_reason(exc: BaseException, hop: SshTarget, timeout: float) -> str:
    """Why no TCP connection came up, in words: paramiko's own error for it reads `[Errno None]`,
    its causes (one per address tried) are kept in `.errors`."""
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError) and exc.errors:
        exc = next(iter(exc.errors.values()))
    if isinstance(exc, socket.gaierror):
        return (f"the name {hop.hostname} does not resolve ({exc.strerror}); check the host's "
                "address in the inventory, or the DNS")
    if isinstance(exc, ConnectionRefusedError):
        return (f"connection refused: nothing listens on port {hop.port} there (is sshd running? "
                f"is port {hop.port} the right one?)")
    if isinstance(exc, TimeoutError):
        return (f"no answer within {timeout:.0f} s (the host is down, a firewall drops the "
                "connection, or the address is wrong)")
    if isinstance(exc, OSError) and exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return f"{exc.strerror}: no route from here to {hop.hostname}"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def _ssh_reason(exc: paramiko.SSHException, hop: SshTarget) -> str:
    """What went wrong after TCP connected; a missing banner means no SSH server answered."""
    if "protocol banner" in str(exc):
        return (f"what answers on port {hop.port} is not an SSH server, or it closed the "
                "connection at once (check the port; sshd's MaxStartups may refuse)")
    return str(exc) or type(exc).__name__


def _dropped(name: str, exc: BaseException) -> ConnectionLost:
    """The error for a connection that failed under a call; EOFError and friends carry no text."""
    return ConnectionLost(f"{name}: the SSH connection dropped ({str(exc) or type(exc).__name__})")


def _open_both_ways(channel: paramiko.Channel) -> bool:
    """The channel's command still runs and still sends: not closed, no EOF, no exit status."""
    return not (channel.closed or channel.eof_received or channel.exit_status_ready())


def _close(channel: paramiko.Channel) -> None:
    """Close a channel; on a connection that already dropped there is nothing left to close."""
    with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
        channel.close()


def write_files_command(files: dict[str, bytes], mode: int = 0o644, then: str = "") -> str:
    """One `sh` command writing each file to a temporary name, then renaming it into place."""
    parts = ["set -e", "umask 022"]
    for path, data in files.items():
        folder, name = posixpath.split(path)
        tmp = posixpath.join(folder, f".{name}.sgdeploy-{uuid.uuid4().hex[:8]}")
        encoded = base64.b64encode(data).decode() or "''"
        parts.append(
            f"mkdir -p {shlex.quote(folder)}; sgd_tmp={shlex.quote(tmp)}; trap 'rm -f "
            f"\"$sgd_tmp\"' EXIT; printf %s {encoded} | base64 -d > \"$sgd_tmp\"; chmod {mode:o} "
            f"\"$sgd_tmp\"; mv -f \"$sgd_tmp\" {shlex.quote(path)}; trap - EXIT"
        )
    if then:
        parts.append(then)
    return "\n".join(parts)


def _parse_http(raw: bytes) -> HttpResponse:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("iso-8859-1", "replace").split("\r\n")
    try:
        status = int(lines[0].split()[1])
    except (IndexError, ValueError):
        return HttpResponse(0, raw)
    headers = {}
    for line in lines[1:]:
        key, _, value = line.partition(":")
        headers[key.strip().lower()] = value.strip()
    return HttpResponse(status, body, headers)
