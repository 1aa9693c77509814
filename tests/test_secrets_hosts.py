"""Secret SGLang arguments end to end on a real systemd test host (SGLang 0.5.23, simulated).

A profile whose API key lives in a root-only `--config` file on the host deploys; the server
refuses a request without the key (401) and serves one with it; `apply --probe` measures it
with the key read on the host; the key is in none of the unit, `ps`, the records, `history
--json`, sgdeploy's output, the working tree or the journal (where SGLang prints its arguments,
the unit's launcher redacts it). A missing, empty or world-readable file is refused before the stop while
the running server keeps answering.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sgdeploy import cli
from sgdeploy.logs import parse_server_args
from tests.hosts import HostSet, HostSpec, SimSettings, booted_or_skipped, free_port

pytestmark = pytest.mark.hosts

REPO = Path(__file__).resolve().parents[1]
PORT = free_port()
UNIT = "sglang-sec"
KEY = "sk-sgd-" + "7f3a9c1e5b2d4086"  # built here so the literal is not in the tree as one string
SECRETS = "/etc/sglang/qwen3.secrets.yaml"
OLD_PORT = next(p for p in iter(free_port, None) if p != PORT)  # the test hosts share the network namespace
OLD = "a6000-052"  # SGLang 0.5.2: no --config, so systemd expands the key from an EnvironmentFile=
OLD_SECRETS = "/etc/sglang/qwen3.secrets.env"
BASE = "/etc/sglang/qwen3.base.yaml"  # the profile's own --config, merged with the secrets
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
    fast = SimSettings(startup_s=0.6, release_delay_s=0.2)
    with booted_or_skipped([HostSpec.like("a6000-new", sim=fast),
                            HostSpec.like("a6000-new", name=OLD, sglang_version="0.5.2", sim=fast)]) as hs:
        yield hs


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("secrets") / "qwen3-secret.toml"
    path.write_text(PROFILE)
    return path


def write_secrets(host: HostSet, text: str | None, mode: str = "600", name: str = "a6000-new",
                  path: str = SECRETS) -> None:
    if text is None:
        host.ssh(name, f"rm -f {path}")
        return
    host.ssh(name, f"mkdir -p /etc/sglang && umask 077 && printf %s {shlex.quote(text)} > {path} "
             f"&& chmod {mode} {path}")


def sgdeploy(host: HostSet, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    extra = ["--settle", "1"] if args[0] == "apply" else []
    code = cli.main([*args, "--inventory", str(host.inventory_path), "--json", *extra])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def curl(host: HostSet, path: str, key: str | None = None, name: str = "a6000-new", body_to: str = "/dev/null",
         port: int | None = None) -> int:
    auth = f"-H {shlex.quote('Authorization: Bearer ' + key)} " if key else ""
    body = shlex.quote(json.dumps({"model": "default", "prompt": "hi", "max_tokens": 2}))
    post = f"-H 'Content-Type: application/json' -d {body} " if path.startswith("/v1/") else ""
    port = port or (OLD_PORT if name == OLD else PORT)
    out = host.ssh(name, f"curl -s -o {body_to} -w '%{{http_code}}' {auth}{post}"
                   f"http://127.0.0.1:{port}{path}", check=False).stdout
    return int(out.strip() or 0)


def main_pid(host: HostSet) -> str:
    return host.ssh("a6000-new", f"systemctl show -p MainPID --value {UNIT}.service").stdout.strip()


def read_dump(journal: str) -> str:
    """SGLang's last server_args line, which sgdeploy's log reader still reads (the port, the rest)."""
    lines = [line for line in journal.splitlines() if "] server_args=" in line]
    assert lines, journal[-2000:]
    dump = parse_server_args(lines[-1].split("] ", 1)[1])
    assert dump is not None and dump["port"] in (PORT, OLD_PORT) and dump["api_key"] == "<redacted>", dump
    return lines[-1]


def nowhere_but_ps(host: HostSet, name: str, out: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The key is in none of the unit, the journal, the records, history --json or sgdeploy's output."""
    assert KEY not in out
    unit = host.ssh(name, f"cat /etc/systemd/system/{UNIT}.service").stdout
    assert KEY not in unit
    assert KEY not in host.journal(name, f"{UNIT}.service")
    records = host.ssh(name, f"grep -rl -F -e {shlex.quote(KEY)} /var/lib/sgdeploy/{UNIT} || true").stdout
    assert records.strip() == ""
    code, history = sgdeploy(host, capsys, "history", "--host", name, "--unit", UNIT)
    assert code == 0 and KEY not in history


def watched(host: HostSet, action: Callable[[], tuple[int, str]]) -> tuple[int, str, list[int]]:
    """`action`'s result, and the /health answers other than 200 while it ran (polled every 0.1 s)."""
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
        code, out = action()
    finally:
        done.set()
        watcher.join()
    return code, out, failures


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
    # SGLang prints its own arguments at startup; the unit's launcher keeps the key's value out
    journal = host.ssh("a6000-new", f"journalctl -u {UNIT}.service -o cat --no-pager").stdout
    assert KEY not in journal
    assert "'api_key': '<redacted>'" in read_dump(journal)


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
    code, out, failures = watched(host, lambda: sgdeploy(host, capsys, "apply", str(profile), "--force"))
    assert code == 2, out
    assert "SGD709" in out and expect in out and SECRETS in out
    assert KEY not in out
    assert failures == [] and main_pid(host) == before
    write_secrets(host, f"api-key: {KEY}\n")


def test_own_config_is_merged_with_the_secrets(host: HostSet, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    write_secrets(host, f"api-key: {KEY}\n")
    write_secrets(host, "max-running-requests: 7\n", "644", path=BASE)
    merged = tmp_path / "qwen3-merged.toml"
    merged.write_text(PROFILE.replace("[secrets]", f'config = "{BASE}"\n\n[secrets]'))
    code, out = sgdeploy(host, capsys, "apply", str(merged), "--force")
    assert code == 0, out
    unit = host.ssh("a6000-new", f"cat /etc/systemd/system/{UNIT}.service").stdout
    assert f'"--config" "/run/sgdeploy-{UNIT}/config.yaml"' in unit and "ExecStartPre=" in unit
    runtime = host.ssh("a6000-new", f"stat -c '%a %U' /run/sgdeploy-{UNIT} /run/sgdeploy-{UNIT}/config.yaml").stdout
    assert runtime.split("\n")[:2] == ["700 root", "600 root"], runtime
    # both files reached SGLang: its resolved arguments have the profile's setting, and the key is enforced
    assert curl(host, "/server_info") == 401
    assert curl(host, "/server_info", KEY, body_to="/tmp/info.json") == 200
    info = json.loads(host.ssh("a6000-new", "cat /tmp/info.json && rm -f /tmp/info.json").stdout)
    assert info["max_running_requests"] == 7
    nowhere_but_ps(host, "a6000-new", out, capsys)
    assert KEY not in host.ssh("a6000-new", "ps -eo pid,args").stdout


def test_rollback_checks_the_secrets_file_before_the_stop(host: HostSet, capsys: pytest.CaptureFixture[str]) -> None:
    """The last good deployment (the merged one above) uses [secrets]: its file is checked first."""
    assert host.ssh("a6000-new", f"systemctl is-active {UNIT}.service", check=False).stdout.strip() == "active"
    before = main_pid(host)
    write_secrets(host, None)
    rollback = ("rollback", "--host", "a6000-new", "--unit", UNIT)
    code, out, failures = watched(host, lambda: sgdeploy(host, capsys, *rollback))
    assert code == 2, out
    assert "SGD709" in out and SECRETS in out and "does not exist" in out and "nothing was stopped" in out
    assert failures == [] and main_pid(host) == before
    write_secrets(host, f"api-key: {KEY}\n")
    code, out = sgdeploy(host, capsys, *rollback, "--settle", "1")
    assert code == 0, out
    assert main_pid(host) != before
    assert curl(host, "/v1/completions") == 401 and curl(host, "/v1/completions", KEY) == 200
    assert KEY not in out


def test_releases_without_config_take_the_key_from_an_environment_file(
        host: HostSet, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang 0.5.2 has no --config: EnvironmentFile= and ${api_key} in ExecStart=, expanded by systemd."""
    write_secrets(host, f"api_key={KEY}\n", name=OLD, path=OLD_SECRETS)
    old = tmp_path / "qwen3-052.toml"
    old.write_text(PROFILE.replace('"a6000-new"', f'"{OLD}"').replace(SECRETS, OLD_SECRETS)
                   .replace(f"port = {PORT}", f"port = {OLD_PORT}")
                   .replace('endpoint = "openai"', 'endpoint = "generate"'))
    code, out = sgdeploy(host, capsys, "apply", str(old), "--probe", "--force")
    result = json.loads(out[: out.rindex("}") + 1])
    assert code == 0, result["message"]
    assert result["probe"]["errors"] == 0, result["probe"]
    unit = host.ssh(OLD, f"cat /etc/systemd/system/{UNIT}.service").stdout
    assert f"EnvironmentFile={OLD_SECRETS}\n" in unit and '"--api-key" "${api_key}"' in unit
    assert curl(host, "/v1/completions", name=OLD) == 401
    assert curl(host, "/v1/completions", KEY, name=OLD) == 200
    assert curl(host, "/health", name=OLD) == 200  # exempt in every release
    nowhere_but_ps(host, OLD, out, capsys)
    assert "api_key='<redacted>'" in read_dump(host.journal(OLD, f"{UNIT}.service"))
    # the trade-off the docs state: systemd puts the value on the command line
    assert KEY in host.ssh(OLD, "ps -eo pid,args").stdout
    write_secrets(host, f"api_key={KEY}\n", "640", name=OLD, path=OLD_SECRETS)
    code, out = sgdeploy(host, capsys, "apply", str(old), "--force")
    assert code == 2 and "SGD709" in out and "has mode 0640" in out and KEY not in out



def test_admin_key_guards_the_admin_routes(host: HostSet, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """0.5.8 and later: an admin route takes admin_api_key alone when it is set; the others api_key."""
    admin = "sk-adm-" + "9b1d7e3c5a204f68"
    both = tmp_path / "qwen3-admin.toml"
    both.write_text(PROFILE.replace('keys = ["api_key"]', 'keys = ["api_key", "admin_api_key"]'))
    write_secrets(host, f"api-key: {KEY}\nadmin-api-key: {admin}\n")
    code, out = sgdeploy(host, capsys, "apply", str(both), "--force")
    assert code == 0, out
    assert [curl(host, "/flush_cache", k) for k in (None, KEY, admin)] == [401, 401, 200]
    assert [curl(host, "/v1/completions", k) for k in (None, admin, KEY)] == [401, 401, 200]
    assert admin not in host.journal("a6000-new", f"{UNIT}.service") + host.ssh("a6000-new", "ps -eo args").stdout
    # admin_api_key alone: the ordinary routes stay open and sgdeploy sends no key
    only = tmp_path / "qwen3-admin-only.toml"
    only.write_text(PROFILE.replace('keys = ["api_key"]', 'keys = ["admin_api_key"]'))
    write_secrets(host, f"admin-api-key: {admin}\n")
    code, out = sgdeploy(host, capsys, "apply", str(only), "--force")
    assert code == 0, out
    assert curl(host, "/v1/completions") == 200
    assert [curl(host, "/flush_cache", k) for k in (None, admin)] == [401, 200]
    assert admin not in out and admin not in host.journal("a6000-new", f"{UNIT}.service")
    write_secrets(host, f"api-key: {KEY}\n")


def test_a_server_run_with_keys_is_imported_and_adopted(host: HostSet, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """`import` of a hand-run server started with --api-key/--admin-api-key: [secrets] names a file and the
    notes say what to write in it; after doing exactly that, `apply --adopt` takes the server over."""
    host.ssh("a6000-new", f"systemctl stop {UNIT}.service")
    host.wait_gpus_free("a6000-new")
    admin, unit = "sk-adm-" + "4e8a2c6b1d3f5a79", "sglang-imp"
    port = next(p for p in iter(free_port, None) if p not in (PORT, OLD_PORT))
    host.ssh("a6000-new", "cd /root; setsid nohup /root/ml-env/bin/python3 -m sglang.launch_server --model-path "
             f"/root/models/Qwen3-8B --host 127.0.0.1 --port {port} --api-key {KEY} --admin-api-key={admin} "
             ">/root/hand.log 2>&1 </dev/null &")
    deadline = time.monotonic() + 60
    while host.ssh("a6000-new", f"curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{port}/health",
                   check=False).stdout.strip() != "200":
        assert time.monotonic() < deadline, host.ssh("a6000-new", "tail -n 20 /root/hand.log").stdout
        time.sleep(0.3)
    profile = tmp_path / "imported.toml"
    code = cli.main(["import", "a6000-new", "--name", unit, "--output", str(profile),
                     "--inventory", str(host.inventory_path)])
    err = capsys.readouterr().err
    assert code == 0, err
    text = profile.read_text()
    assert KEY not in text + err and admin not in text + err
    path = f"/etc/sglang/{unit}.secrets.yaml"
    assert tomllib.loads(text)["secrets"] == {"file": path, "keys": ["api_key", "admin_api_key"]}
    note = next(line for line in err.splitlines() if "hold secrets" in line)
    install = note.split("(`", 1)[1].split("`)", 1)[0]
    assert install == f"install -D -m 600 -o root /dev/null {path}"
    # what the note says: that command, then one line per key, each value single-quoted
    host.ssh("a6000-new", f"{install} && printf '%s\\n' \"api-key: '{KEY}'\" \"admin-api-key: '{admin}'\" > {path}")
    code, out = sgdeploy(host, capsys, "apply", str(profile), "--adopt")
    assert code == 0, out
    assert "hand.log" not in out and KEY not in out and admin not in out
    assert [curl(host, "/v1/completions", key, port=port) for key in (None, KEY)] == [401, 200]
    assert [curl(host, "/flush_cache", key, port=port) for key in (KEY, admin)] == [401, 200]
    journal = host.journal("a6000-new", f"{unit}.service")
    assert "server_args=" in journal and KEY not in journal and admin not in journal
    host.ssh("a6000-new", f"systemctl stop {unit}.service")
