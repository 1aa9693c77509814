"""What `plan`, `status`, `history` and `apply` show and record of a secret, on a real systemd
test host (SGLang 0.5.23, simulated): a unit made by hand with `--api-key` and `HF_TOKEN` in it,
a record whose meta.json holds them, and a profile with a token in a comment. The value is in no
text, no JSON, and no record sgdeploy writes."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from sgdeploy import cli
from tests.hosts import HostSet, HostSpec, SimSettings, booted_or_skipped, free_port

pytestmark = pytest.mark.hosts

HOST = "a6000-new"
UNIT = "sglang-hand"
PORT = free_port()
KEY = "sk-hand-" + "4c1e9a7b2d"  # built here so the literal is not in the tree as one string
HF = "hf_" + "Wq3eRt5yUi7oPa9sDf1gHj2kLz4xCv"
COMMENT_TOKEN = "ghp_" + "Qw8eRt6yUi4oPa2sDf0gHj9kLz7xCv5bNm3"
SECRETS_FILE = f"/etc/sglang/{UNIT}.secrets.yaml"
HAND_MADE = f"""\
[Unit]
Description=SGLang started by hand
[Service]
Environment="HF_TOKEN={HF}"
ExecStart=/root/ml-env/bin/python3 -m sglang.launch_server --model-path /root/models/Qwen3-8B \\
    --host 127.0.0.1 --port {PORT} --api-key {KEY}
[Install]
WantedBy=multi-user.target
"""
PROFILE = f"""\
# rotated: the old CI token was {COMMENT_TOKEN}
[deploy]
host = "{HOST}"
unit = "{UNIT}"
python = "/root/ml-env/bin/python3"
ready_timeout_s = 60

[server]
model_path = "/root/models/Qwen3-8B"
host = "127.0.0.1"
port = {PORT}

[secrets]
file = "{SECRETS_FILE}"
keys = ["api_key"]
"""
RECORD_ID = "20260101T000000Z-000-00000000"
RECORD = {"id": RECORD_ID, "time": "2026-01-01T00:00:00+00:00", "profile": "hand",
          "outcome": "failed", "sglang_version": "0.5.23",
          "failure": {"kind": "argparse", "reason": f"--api-key {KEY} refused",
                      "line": f"HF_TOKEN={HF}"}}


@pytest.fixture(scope="module")
def host() -> Iterator[HostSet]:
    fast = SimSettings(startup_s=0.6, release_delay_s=0.2)
    with booted_or_skipped([HostSpec.like(HOST, sim=fast)]) as hs:
        hs.ssh(HOST, f"printf %s {shlex.quote(HAND_MADE)} > /etc/systemd/system/{UNIT}.service "
               "&& systemctl daemon-reload")
        hs.ssh(HOST, f"mkdir -p /etc/sglang && umask 077 && printf 'api-key: {KEY}\\n' "
               f"> {SECRETS_FILE}")
        yield hs


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("everywhere") / "hand.toml"
    path.write_text(PROFILE)
    return path


def sgdeploy(host: HostSet, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = cli.main([*args, "--inventory", str(host.inventory_path)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def nowhere(*texts: str) -> None:
    for text in texts:
        for secret in (KEY, HF, COMMENT_TOKEN):
            assert secret not in text, (secret, text[-3000:])


def test_plan_shows_the_hand_made_unit_without_its_secrets(
        host: HostSet, profile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, text = sgdeploy(host, capsys, "plan", str(profile))
    assert code == 0, text
    assert "--api-key <redacted>" in text and '-Environment="HF_TOKEN=<redacted>"' in text
    _, document = sgdeploy(host, capsys, "plan", str(profile), "--json")
    nowhere(text, document)


def test_status_shows_the_drift_without_the_secrets(
        host: HostSet, profile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, text = sgdeploy(host, capsys, "status", str(profile))
    assert code == 1  # the unit does not run
    assert "renders a different unit" in text and "--api-key <redacted>" in text, text
    _, document = sgdeploy(host, capsys, "status", str(profile), "--json")
    assert "--api-key <redacted>" in document
    nowhere(text, document)


def test_history_shows_a_record_without_its_secrets(host: HostSet,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    folder = f"/var/lib/sgdeploy/{UNIT}/{RECORD_ID}"
    meta = shlex.quote(json.dumps(RECORD))
    host.ssh(HOST, f"mkdir -p {folder} && printf %s {meta} > {folder}/meta.json")
    try:
        code, text = sgdeploy(host, capsys, "history", "--host", HOST, "--unit", UNIT)
        assert code == 0 and RECORD_ID in text, text
        _, document = sgdeploy(host, capsys, "history", "--host", HOST, "--unit", UNIT, "--json")
        reason = json.loads(document)["deployments"][0]["failure"]["reason"]
        assert reason == "--api-key <redacted> refused"
        nowhere(text, document)
    finally:
        host.ssh(HOST, f"rm -rf {folder}")


def test_apply_records_no_secret(host: HostSet, profile: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, text = sgdeploy(host, capsys, "apply", str(profile), "--settle", "1", "--json")
    assert code == 0, text
    nowhere(text)
    state = f"/var/lib/sgdeploy/{UNIT}"
    files = f"{state}/*/profile.toml {state}/*/meta.json {state}/*/unit.service"
    records = host.ssh(HOST, f"cat {files} /etc/systemd/system/{UNIT}.service").stdout
    assert "# rotated: the old CI token was <redacted>" in records
    nowhere(records)
    host.ssh(HOST, f"systemctl stop {UNIT}.service")
