"""Apply's host work begun before the profile is known to be valid: the connection, the facts
and SGLang's own check, on threads of their own while the CLI validates offline.

`EarlyStart` is built first thing by `sgdeploy apply` and `plan`: its thread imports the SSH
stack and reads the inventory and the profile itself, so that connecting overlaps the
validation's imports. Nothing on the host changes until `apply_profile` takes the session over
(`take`). This module imports nothing heavy at its top: it runs before the validation does.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sgdeploy.inventory import HostEntry
    from sgdeploy.profile import LoadedProfile
    from sgdeploy.remote import ConnectError, RemoteHost
    from sgdeploy.session import HostSession


@dataclass
class EarlyCheck:
    """SGLang's own check of the launch as rendered for the release the inventory declares,
    begun beside the facts once offline validation has passed (`validated` is set); apply
    keeps it when the release the host reports renders the same launch."""

    version: str
    timeout_s: float
    validated: threading.Event = field(default_factory=threading.Event)
    cancelled: bool = False

    def cancel(self) -> None:
        """Offline validation refused the profile: begin nothing."""
        self.cancelled = True
        self.validated.set()

    def begin(self, session: HostSession, loaded: LoadedProfile, name: str) -> None:
        from sgdeploy.apply import build_deployment
        from sgdeploy.session import BackgroundCheck

        if self.cancelled:
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
        from sgdeploy.remote import ConnectError, RemoteError
        from sgdeploy.session import HostSession

        self.name = name
        self.begun: HostSession | ConnectError = connected if isinstance(connected, ConnectError) \
            else HostSession(connected)
        session = self.begun
        if isinstance(session, ConnectError) or session.remote.privileges.refusal:
            return

        def read_ahead() -> None:
            with contextlib.suppress(RemoteError, ValueError):  # apply reads them again and says what went wrong
                session.read_ahead(loaded)

        facts = threading.Thread(target=read_ahead, daemon=True, name="sgdeploy-facts")
        facts.start()
        if check is not None and check.validated.wait(60):
            check.begin(session, loaded, name)
        facts.join()

    def close(self) -> None:
        from sgdeploy.remote import ConnectError

        if not isinstance(self.begun, ConnectError):
            self.begun.remote.close()


class EarlyStart:
    """The one host of an apply, connected to and asked for its facts on a thread of its own
    while the profile is still validated offline. The validation waits until the connection is
    under way, so that the host's work (the facts, then SGLang's own check once validation has
    passed) overlaps the client's."""

    def __init__(self, profile: str, inventory: str | None, hosts: list[str], sglang: str | None = None,
                 sglang_check: bool = True, sglang_check_timeout_s: float = 60.0) -> None:
        self.profile, self.inventory, self.hosts, self.sglang = profile, inventory, hosts, sglang
        self.sglang_check, self.sglang_check_timeout_s = sglang_check, sglang_check_timeout_s
        self.early: EarlyConnection | None = None
        self.check: EarlyCheck | None = None  # SGLang's check begun beside the facts, once validation passed
        self.ready = threading.Event()  # connecting has begun, or will not
        self._thread = threading.Thread(target=self._run, daemon=True, name="sgdeploy-connect")
        self._thread.start()
        self.ready.wait(5)

    def _run(self) -> None:
        try:
            target = self._target()
            if target is None:
                return
            name, entry, loaded, version = target
            connected = _connect(name, entry)  # beside the import of the rest of apply
            checking = version and self.sglang_check
            self.check = EarlyCheck(str(version), self.sglang_check_timeout_s) if checking else None
        except Exception:  # whatever it is, the validation that follows says it, located
            return
        finally:
            self.ready.set()
        self.early = EarlyConnection(name, loaded, connected, self.check)

    def _target(self) -> tuple[str, HostEntry, LoadedProfile, str | None] | None:
        """The host the apply will act on, its inventory entry, the profile and the release the
        inventory declares; None when that is not one host (a group, a gateway) or not known yet."""
        from sgdeploy.inventory import inventory_path, load_inventory
        from sgdeploy.profile import load_profile

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
        if self.check is not None:
            self.check.validated.set()

    def take(self, name: str) -> HostSession | ConnectError | None:
        """The session begun with `name`, or why it could not connect (None: none was begun, or
        with another host)."""
        if self.check is not None and not self.check.validated.is_set():
            self.check.cancel()
        self._thread.join()
        early, self.early = self.early, None
        if early is not None and early.name != name:
            early.close()
            return None
        return early.begun if early is not None else None

    def close(self) -> None:
        self.take("")


def _connect(name: str, entry: HostEntry) -> RemoteHost | ConnectError:
    """Connect while another thread imports sgdeploy.apply: the RemoteHost, or the ConnectError."""
    from sgdeploy.remote import ConnectError, RemoteHost

    importing = threading.Thread(target=importlib.import_module, args=("sgdeploy.apply",), daemon=True,
                                 name="sgdeploy-import")
    importing.start()
    try:
        return RemoteHost(name, entry).connect()
    except ConnectError as exc:
        return exc
    finally:
        importing.join()
