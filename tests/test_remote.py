"""Unit tests of sgdeploy.host.remote that need no host."""

from __future__ import annotations

import pytest
from pytest_mock import MockerFixture

from sgdeploy.deploy.apply import probe_unit
from sgdeploy.host.remote import _dropped
from sgdeploy.profile.inventory import HostEntry


@pytest.mark.parametrize(
    ("exc", "detail"),
    [(EOFError(), "(EOFError)"), (OSError(32, "Broken pipe"), "([Errno 32] Broken pipe)")],
)
def test_a_dropped_connection_always_says_why(exc: BaseException, detail: str) -> None:
    assert str(_dropped("ct129", exc)) == f"ct129: the SSH connection dropped {detail}"


class _DroppingRemote:
    """A connected host whose connection drops at the first command."""

    def __enter__(self) -> _DroppingRemote:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def run(self, *args: object, **kwargs: object) -> None:
        raise _dropped("ct129", EOFError())


def test_probe_reports_a_dropped_connection(mocker: MockerFixture) -> None:
    mocker.patch("sgdeploy.deploy.apply.connect", return_value=_DroppingRemote())
    found = probe_unit("ct129", HostEntry(address="127.0.0.1"), "sglang", None)
    assert found.exit_code == 2
    assert found.message == "ct129: the SSH connection dropped (EOFError); nothing was measured"


# --------------------------------------------------------------------------- privileges (become)
def test_a_login_with_passwordless_sudo_runs_commands_through_it() -> None:
    from sgdeploy.host.remote import RemoteHost, parse_privileges

    found = parse_privileges("uid=1001\nunits=readonly\nsudo=ok\n", "deploy", "th1", None)
    assert (found.root, found.sudo, found.refusal) == (False, True, None)
    remote = RemoteHost("th1", HostEntry(address="10.0.0.1"))
    remote.privileges = found
    assert remote._as_root("systemctl stop 'sglang.service'") == \
        "sudo -n -- sh -c 'systemctl stop '\"'\"'sglang.service'\"'\"''"


@pytest.mark.parametrize(("output", "become", "says"), [
    ("uid=1002\nunits=readonly\nsudo=refused\nsudo: unable to resolve host th1\nsudo: a password is required\n",
     None, "user deploy on th1 cannot write /etc/systemd/system and has no passwordless sudo "
           "(sudo: a password is required)"),
    ("uid=1002\nunits=readonly\nsudo=missing\n", None,
     "user deploy on th1 cannot write /etc/systemd/system and sudo is not installed there"),
    ("uid=1002\nunits=writable\nsudo=ok\n", False,
     "user deploy on th1 cannot run systemctl on system units and become = false in the inventory"),
])
def test_a_login_that_cannot_act_is_refused_with_the_reason(output: str, become: bool | None, says: str) -> None:
    from sgdeploy.host.remote import parse_privileges

    found = parse_privileges(output, "deploy", "th1", become)
    assert not found.sudo and found.refusal is not None and found.refusal.startswith(says), found.refusal
    assert "NOPASSWD" in found.refusal


def test_a_login_with_uid_0_needs_no_sudo() -> None:
    from sgdeploy.host.remote import parse_privileges

    assert parse_privileges("uid=0\n", "admin", "th1", None).sudo is False


def test_paramiko_noise_goes_to_the_debug_log(capsys: pytest.CaptureFixture[str],
                                               caplog: pytest.LogCaptureFixture) -> None:
    import logging

    import sgdeploy.host.remote  # noqa: F401  (installs the handler)

    with caplog.at_level(logging.DEBUG, logger="sgdeploy.host.remote"):
        logging.getLogger("paramiko.transport").error("Secsh channel 2 open FAILED: Connection refused: Connect failed")
    assert "Secsh" not in capsys.readouterr().err
    assert any("Secsh channel 2 open FAILED" in r.getMessage() and r.levelno == logging.DEBUG for r in caplog.records)


# --------------------------------------------------------------------------- exit 3 is checked
class _HostThatServes:
    """A connected host whose unit runs and answers /health with `status`."""

    def __init__(self, status: int, active: str = "active", sub: str = "running") -> None:
        self.status, self.active, self.sub = status, active, sub
        self.asked: list[tuple[int, str]] = []

    def run(self, command: str, **_: object) -> object:
        from sgdeploy.deploy.session import UNIT_FILE_MARKER
        from sgdeploy.host.remote import CommandResult

        unit = 'ExecStart=/py -m sglang.launch_server --port 31234\n'
        return CommandResult(command, 0, f"ActiveState={self.active}\nSubState={self.sub}\nMainPID=42\n"
                             f"{UNIT_FILE_MARKER}\n{unit}", "")

    def http_get(self, port: int, path: str, **_: object) -> object:
        from sgdeploy.host.remote import HttpResponse

        self.asked.append((port, path))
        return HttpResponse(self.status, b"")


@pytest.mark.parametrize(("status", "active", "code"), [(200, "active", 1), (503, "active", 3), (200, "failed", 3)])
def test_exit_3_only_after_checking_nothing_healthy_runs(status: int, active: str, code: int) -> None:
    from sgdeploy.deploy.session import HostSession
    from sgdeploy.deploy.transaction import ApplyResult, Exit, confirmed

    remote = _HostThatServes(status, active)
    result = confirmed(HostSession(remote),  # type: ignore[arg-type]
                       ApplyResult(Exit.NOTHING_HEALTHY, "failed", "th1", "sglang", "x failed; nothing healthy"))
    assert result.exit_code == code
    if code == 1:
        assert remote.asked == [(31234, "/health")] and "a healthy server does run" in result.message
