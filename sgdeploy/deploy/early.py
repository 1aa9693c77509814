"""Apply's host work begun before the profile is known to be valid: the connection, the facts
and SGLang's own check, on threads of their own while the CLI validates offline.

`EarlyStart` is built first thing by `sgdeploy apply` and `plan`: its thread reads the host's
connection settings from the files as written (sgdeploy/profile/inventory_file.py, no pydantic),
imports the SSH stack and connects while the CLI imports pydantic and validates; it then
validates the inventory and the profile itself, and keeps the connection only where the
validated entry has the same settings (else it connects again). Once connected it starts the
shell for commands and a spare one for the lock (`RemoteHost.warm_up`). Nothing on the host
changes until `apply_profile` takes the session over (`take`). This module imports nothing
heavy at its top: it runs before the validation does.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from sgdeploy.deploy.session import HostSession
    from sgdeploy.host.remote import ConnectError, RemoteHost
    from sgdeploy.host.sshconfig import HostSettings, SshEntry
    from sgdeploy.profile.inventory import HostEntry
    from sgdeploy.profile.model import LoadedProfile


@dataclass
class OfflineValidation:
    """How the CLI's offline validation ended, for the threads that wait on it."""

    ended: threading.Event = field(default_factory=threading.Event)
    passed: bool = False

    def end(self, passed: bool) -> None:
        self.passed = passed
        self.ended.set()


@dataclass
class EarlyCheck:
    """SGLang's own check of the launch as rendered for the release the inventory declares,
    begun beside the facts once offline validation has passed; apply keeps it when the release
    the host reports renders the same launch."""

    version: str
    timeout_s: float
    validation: OfflineValidation

    def begin(self, session: HostSession, loaded: LoadedProfile, name: str) -> None:
        # imported here: early.py starts the connection before pydantic and the deploy core load
        from sgdeploy.deploy.apply import build_deployment
        from sgdeploy.deploy.session import BackgroundCheck

        if not self.validation.passed:
            return
        try:
            request = build_deployment(loaded, name, self.version).check
        except (KeyError, ValueError, LookupError):
            return  # apply renders it again, after the facts, and says what is wrong
        if request is not None:
            session.checks_ahead.append(BackgroundCheck(session, request, self.timeout_s))


class EarlyConnection:
    """The session with a host and its facts read ahead (`HostSession.read_ahead`), or why it
    could not connect; `check` begins once offline validation has passed."""

    def __init__(self, name: str, loaded: LoadedProfile, connected: RemoteHost | ConnectError,
                 check: EarlyCheck | None = None) -> None:
        # imported here: early.py starts the connection before pydantic and the deploy core load
        from sgdeploy.deploy.session import HostSession
        from sgdeploy.host.remote import ConnectError, RemoteError

        self.name = name
        self.begun: HostSession | ConnectError = connected if isinstance(connected, ConnectError) \
            else HostSession(connected)
        session = self.begun
        if isinstance(session, ConnectError) or session.remote.privileges.refusal:
            return

        def read_ahead() -> None:
            # apply reads them again and says what went wrong
            with contextlib.suppress(RemoteError, ValueError):
                session.read_ahead(loaded)

        facts = threading.Thread(target=read_ahead, daemon=True, name="sgdeploy-facts")
        facts.start()
        if check is not None and check.validation.ended.wait(60):
            check.begin(session, loaded, name)
        facts.join()

    def close(self) -> None:
        # imported here: early.py starts the connection before pydantic and the deploy core load
        from sgdeploy.host.remote import ConnectError

        if not isinstance(self.begun, ConnectError):
            self.begun.remote.close()


class EarlyStart:
    """The one host of an apply, connected to and asked for its facts on a thread of its own
    while the profile is still validated offline. The validation waits until the connection is
    under way, so that the host's work (the facts, then SGLang's own check once validation has
    passed) overlaps the client's."""

    def __init__(
        self,
        profile: str,
        inventory: str | None,
        hosts: list[str],
        sglang: str | None = None,
        sglang_check: bool = True,
        sglang_check_timeout_s: float = 60.0,
    ) -> None:
        self.profile, self.inventory, self.hosts, self.sglang = profile, inventory, hosts, sglang
        self.sglang_check, self.sglang_check_timeout_s = sglang_check, sglang_check_timeout_s
        self.early: EarlyConnection | None = None
        # SGLang's check begun beside the facts, once validation passed
        self.check: EarlyCheck | None = None
        self.validation = OfflineValidation()
        self.ready = threading.Event()  # connecting has begun, or will not
        self._thread = threading.Thread(target=self._run, daemon=True, name="sgdeploy-connect")
        self._thread.start()
        self.ready.wait(5)

    def _run(self) -> None:
        # here, not at the top: on this thread, not before it starts
        from sgdeploy.host.sshconfig import SshEntry

        connected: RemoteHost | ConnectError | None = None
        try:
            quick = self._unvalidated_target()
            # the validation may begin as soon as this connection is under way
            if quick is not None:
                connected = _connect(*quick, began=self.ready.set)
            target = self._target()
            if target is None:
                _close(connected)
                return
            name, entry, loaded, version = target
            if connected is None or quick != (name, SshEntry.of(entry)):
                _close(connected)  # read differently from what validation made of it
                connected = _connect(name, entry)
            checking = version and self.sglang_check
            self.check = (
                EarlyCheck(str(version), self.sglang_check_timeout_s, self.validation)
                if checking
                else None
            )
        except Exception:  # whatever it is, the validation that follows says it, located
            _close(connected)
            return
        finally:
            self.ready.set()
        self.early = EarlyConnection(name, loaded, connected, self.check)

    def _unvalidated_target(self) -> tuple[str, SshEntry] | None:
        """The host and its connection settings as the files write them, before pydantic is even
        imported (see inventory_file); None where that is not plainly one host."""
        # imported here: early.py starts the connection before pydantic and the deploy core load
        from sgdeploy.profile.inventory_file import inventory_path, read_raw, unvalidated_ssh_entry

        if len(self.hosts) > 1:
            return None
        deploy = (read_raw(self.profile) or {}).get("deploy")
        name = (
            self.hosts[0]
            if self.hosts
            else deploy.get("host")
            if isinstance(deploy, dict)
            else None
        )
        if not isinstance(name, str):
            return None
        entry = unvalidated_ssh_entry(inventory_path(self.inventory), name)
        return (name, entry) if entry is not None else None

    def _target(self) -> tuple[str, HostEntry, LoadedProfile, str | None] | None:
        """The host the apply will act on, its inventory entry, the profile and the release the
        inventory declares; None when that is not one host (a group, a gateway) or not known yet."""
        # imported here: early.py starts the connection before pydantic and the deploy core load
        from sgdeploy.profile.inventory import load_inventory
        from sgdeploy.profile.inventory_file import inventory_path
        from sgdeploy.profile.model import load_profile

        path = inventory_path(self.inventory)
        if not Path(self.profile).is_file() or not path.is_file():
            return None
        inventory = load_inventory(path).model
        loaded = load_profile(self.profile)
        if inventory is None or loaded.model is None:
            return None
        name = self.hosts[0] if len(self.hosts) == 1 else loaded.model.deploy.host
        entry = inventory.hosts.get(name)
        if entry is None or len(self.hosts) > 1 or inventory.gateway_of(name):
            return None
        return name, entry, loaded, self.sglang or entry.sglang_version

    def validated(self) -> None:
        """Offline validation passed: SGLang's own check may begin."""
        self.validation.end(passed=True)

    def take(self, name: str) -> HostSession | ConnectError | None:
        """The session begun with `name`, or why it could not connect (None: none was begun, or
        with another host)."""
        if not self.validation.ended.is_set():
            self.validation.end(passed=False)
        self._thread.join()
        early, self.early = self.early, None
        if early is not None and early.name != name:
            early.close()
            return None
        return early.begun if early is not None else None

    def close(self) -> None:
        self.take("")


def _connect(
    name: str, entry: HostSettings, began: Callable[[], None] | None = None
) -> RemoteHost | ConnectError:
    """Connect while another thread imports sgdeploy.deploy.apply: the RemoteHost, or the
    ConnectError. `began` is told once the SSH stack is imported, just before connecting."""
    # imported here: early.py starts the connection before pydantic and the deploy core load
    from sgdeploy.host.remote import ConnectError, RemoteError, RemoteHost

    if began is not None:
        began()
    importing = threading.Thread(
        target=importlib.import_module,
        args=("sgdeploy.deploy.apply",),
        daemon=True,
        name="sgdeploy-import",
    )
    importing.start()
    try:
        remote = RemoteHost(name, entry).connect()
        if not remote.privileges.refusal:
            with contextlib.suppress(RemoteError):  # then the first command says what went wrong
                remote.warm_up()
        return remote
    except ConnectError as exc:
        return exc
    finally:
        importing.join()


def _close(connected: RemoteHost | ConnectError | None) -> None:
    # imported here: early.py starts the connection before pydantic and the deploy core load
    from sgdeploy.host.remote import RemoteHost

    if isinstance(connected, RemoteHost):
        connected.close()
