"""Secret SGLang arguments end to end on a real systemd test host (SGLang 0.5.23, simulated).

A profile whose API key lives in a root-only `--config` file on the host deploys; the server
refuses a request without the key (401) and serves one with it; `apply --probe` measures it
with the key read on the host; the key is in none of the unit, `ps`, the records, `history
--json`, sgdeploy's output or the working tree, and in the journal only where SGLang itself
prints its arguments. A missing, empty or world-readable file is refused before the stop while
the running server keeps answering.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sgdeploy import cli
from tests.hosts import HostSet, HostSpec, SimSettings, free_port, skip_reason, start_hosts

pytestmark = pytest.mark.hosts

REPO = Path(__file__).resolve().parents[1]
PORT = free_port()
UNIT = "sglang-sec"
KEY = "sk-sgd-" + "7f3a9c1e5b2d4086"  # built here so the literal is not in the tree as one string
SECRETS = "/etc/sglang/qwen3.secrets.yaml"
PROFILE = f"""\
[deploy]
host = "a6000-new"
unit = "{UNIT}"
python = "/root/ml-env/bin/python3"
ready_timeout_s = 60

[server]
model_path = "/root/models/Qwen3-8B"
host = "127.0.0.1"
port = {PORT}

[secrets]
file = "{SECRETS}"
keys = ["api_key"]

[probe]
max_tokens = 12
requests = 2
concurrency = 2
warmup = 0
endpoint = "openai"
"""


@pytest.fixture(scope="module")
def host() -> Iterator[HostSet]:
    reason = skip_reason()
    if reason:
        pytest.skip(f"test hosts unavailable: {reason}")
    fast = SimSettings(startup_s=0.6, release_delay_s=0.2)
    hs = start_hosts([HostSpec.like("a6000-new", sim=fast)], owner="pytest")
    try:
        yield hs
    finally:
        hs.close()


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("secrets") / "qwen3-secret.toml"
    path.write_text(PROFILE)
    return path


def write_secrets(host: HostSet, text: str | None, mode: str = "600") -> None:
    if text is None:
        host.ssh("a6000-new", f"rm -f {SECRETS}")
        return
    host.ssh("a6000-new", f"mkdir -p /etc/sglang && umask 077 && printf %s {shlex.quote(text)} > {SECRETS} "
             f"&& chmod {mode} {SECRETS}")


def sgdeploy(host: HostSet, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    extra = ["--settle", "1"] if args[0] == "apply" else []
    code = cli.main([*args, "--inventory", str(host.inventory_path), "--json", *extra])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def curl(host: HostSet, path: str, key: str | None = None) -> int:
    auth = f"-H {shlex.quote('Authorization: Bearer ' + key)} " if key else ""
    body = shlex.quote(json.dumps({"model": "default", "prompt": "hi", "max_tokens": 2}))
    post = f"-H 'Content-Type: application/json' -d {body} " if path.startswith("/v1/") else ""
    out = host.ssh("a6000-new", f"curl -s -o /dev/null -w '%{{http_code}}' {auth}{post}"
                   f"http://127.0.0.1:{PORT}{path}", check=False).stdout
    return int(out.strip() or 0)


def main_pid(host: HostSet) -> str:
    return host.ssh("a6000-new", f"systemctl show -p MainPID --value {UNIT}.service").stdout.strip()


def test_protected_server_deploys_and_is_probed(host: HostSet, profile: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    write_secrets(host, f"api-key: {KEY}\n")
    code, out = sgdeploy(host, capsys, "apply", str(profile), "--probe", "--force")
    result = json.loads(out[: out.rindex("}") + 1])
    assert code == 0, result["message"]
    probe = result["probe"]
    assert probe["errors"] == 0 and probe["single_stream_tps"], probe
    assert curl(host, "/v1/completions") == 401
    assert curl(host, "/v1/completions", "wrong") == 401
    assert curl(host, "/v1/completions", KEY) == 200
    assert curl(host, "/health") == 200 and curl(host, "/ready") == 200  # exempt in 0.5.23
    # the key is nowhere sgdeploy or systemd writes it
    assert KEY not in out
    unit = host.ssh("a6000-new", f"cat /etc/systemd/system/{UNIT}.service").stdout
    assert KEY not in unit and f'"--config" "{SECRETS}"' in unit
    assert KEY not in host.ssh("a6000-new", "ps -eo pid,args").stdout
    records = host.ssh("a6000-new", f"grep -rl -F -e {shlex.quote(KEY)} /var/lib/sgdeploy/{UNIT} || true").stdout
    assert records.strip() == ""
    code, history = sgdeploy(host, capsys, "history", "--host", "a6000-new", "--unit", UNIT)
    assert code == 0 and KEY not in history
    tree = subprocess.run(["git", "grep", "--untracked", "-I", "-l", "-F", KEY], cwd=REPO, capture_output=True,
                          text=True, check=False)
    assert tree.stdout == "", tree.stdout
    # SGLang prints its own arguments at startup, api_key included: that line alone has it
    journal = host.ssh("a6000-new", f"journalctl -u {UNIT}.service -o cat --no-pager").stdout
    assert any(KEY in line for line in journal.splitlines())
    assert all("server_args=" in line for line in journal.splitlines() if KEY in line)


@pytest.mark.parametrize(("case", "text", "mode", "expect"), [
    ("missing", None, "600", "does not exist"),
    ("empty", "api-key: ''\n", "600", "gives an empty value for api-key"),
    ("world-readable", f"api-key: {KEY}\n", "644", "has mode 0644"),
])
def test_bad_secrets_file_is_refused_before_the_stop(host: HostSet, profile: Path, case: str, text: str | None,
                                                     mode: str, expect: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    write_secrets(host, f"api-key: {KEY}\n")
    if host.ssh("a6000-new", f"systemctl is-active {UNIT}.service", check=False).stdout.strip() != "active":
        assert sgdeploy(host, capsys, "apply", str(profile))[0] == 0
    before = main_pid(host)
    write_secrets(host, text, mode)
    failures: list[int] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            status = curl(host, "/health")
            if status != 200:
                failures.append(status)
            time.sleep(0.1)

    watcher = threading.Thread(target=poll)
    watcher.start()
    try:
        code, out = sgdeploy(host, capsys, "apply", str(profile), "--force")
    finally:
        done.set()
        watcher.join()
    assert code == 2, out
    assert "SGD709" in out and expect in out and SECRETS in out
    assert KEY not in out
    assert failures == [] and main_pid(host) == before
    write_secrets(host, f"api-key: {KEY}\n")
