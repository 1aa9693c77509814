"""`RemoteHost.run` through one shell on the host, against a channel of its own per command, on a
real test host: the same stdout, stderr and exit status for awkward commands, nothing carried
from one command to the next, a timeout that leaves the next command a working shell, and
commands from several threads at once; and a held command (the lock) started in the spare `sh` that
`warm_up` leaves ready, as on a channel of its own."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from sgdeploy.host.remote import CommandTimeout, RemoteHost
from sgdeploy.profile.inventory import load_inventory
from tests.hosts import HostSet

pytestmark = pytest.mark.hosts

COMMANDS = [
    "printf 'no newline at the end'",
    "printf 'out\\n\\n'; printf 'err\\n' >&2; exit 3",
    "cat; echo read nothing",  # no input: as a channel of its own after shutdown_write
    "printf '\\n@@sgdeploy:done-0@@ 5\\n'",  # text that looks like the shell's marker
    "echo 'it'\"'\"'s'; echo \"$HOME\" \"$(id -u)\"",
    "for i in 1 2 3; do\n  echo line $i\ndone",
    "cd /tmp; x=set; echo \"${x}\"",
    "pwd; echo \"${x-unset}\"",  # the previous command's folder and variables are gone
    "head -c 300000 /dev/zero | tr '\\0' x; echo",
    "exit 0",
]


@pytest.fixture(scope="module")
def remote(hosts: HostSet) -> Iterator[RemoteHost]:
    entry = load_inventory(hosts.inventory_path).model.hosts["ct129"]
    with RemoteHost("ct129", entry).connect() as connected:
        yield connected


@pytest.mark.parametrize("command", COMMANDS)
def test_a_command_in_the_shell_answers_as_on_its_own_channel(remote: RemoteHost, command: str) -> None:
    in_shell, alone = remote.run(command), remote._run_on_channel(command)
    assert (in_shell.exit_code, in_shell.stdout, in_shell.stderr) == (alone.exit_code, alone.stdout, alone.stderr)


def test_a_timeout_leaves_a_working_shell_for_the_next_command(remote: RemoteHost) -> None:
    with pytest.raises(CommandTimeout, match="ran past 1 s"):
        remote.run("sleep 30", timeout=1)
    assert remote.run("echo still here").stdout == "still here\n"


def test_commands_from_several_threads_at_once(remote: RemoteHost) -> None:
    answers: dict[int, str] = {}

    def ask(i: int) -> None:
        answers[i] = remote.run(f"sleep 0.2; echo {i}; echo {i} >&2").stdout

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == {i: f"{i}\n" for i in range(6)}


HELD = "id -u; echo started; cat; echo 'after the input ended' >&2; exit 4"


def _hold_and_release(remote: RemoteHost) -> tuple[bool, str, int | None]:
    held = remote.hold(HELD, "started")
    channel = held.channel
    assert channel is not None
    channel.shutdown_write()
    while not channel.exit_status_ready():
        time.sleep(0.01)
    err = channel.recv_stderr(4096).decode()
    code = channel.recv_exit_status()
    held.channel = None
    channel.close()
    return held.held, held.output.split("started")[0] + err, code


def test_a_held_command_in_the_spare_shell_answers_as_on_its_own_channel(remote: RemoteHost) -> None:
    alone = _hold_and_release(remote)
    remote.warm_up()
    deadline = time.monotonic() + 10
    while remote._spare is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert remote._spare is not None
    assert _hold_and_release(remote) == alone == (True, "0\nafter the input ended\n", 4)
    assert remote._spare is None  # used once; the next hold opens a channel of its own
    assert _hold_and_release(remote) == alone
