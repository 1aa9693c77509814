"""A secret fed through every command and output format that could show it is found nowhere.

`import` (a bare `python3`, a host the inventory lacks, no host, the good case, secrets in the
environment and in URLs), `diff` (text, markdown, JSON), `render`, `validate` (text, JSON,
GitHub), and what `plan`, `status`, `history` and `apply --json` print of a unit or a record
that holds one. tests/test_secrets_everywhere_hosts.py does the same on a real host.
"""

from __future__ import annotations

import base64
import json
import tomllib
from pathlib import Path

import pytest

from sgdeploy import cli
from sgdeploy.deploy.apply import build_deployment
from sgdeploy.deploy.operate import MARK, Status, StatusFiles, find_drift, parse_history
from sgdeploy.deploy.plan import make_plan
from sgdeploy.deploy.transaction import ApplyResult
from sgdeploy.host.facts import HostFacts
from sgdeploy.profile.model import load_profile
from sgdeploy.review import report
from sgdeploy.sglang.check.verdict import CheckReport, HostVerdict

ROOT = Path(__file__).resolve().parent.parent
INVENTORY = ROOT / "tests" / "inventory.rules.toml"
API_KEY = "sk-abc123"  # the issue's own: recognised by its flag, not its shape
ADMIN_KEY = "adm-7Qe2Lw9x"
URL_PASSWORD = "Tr0ub4dor-3"
QUERY_TOKEN = "qT0k3n-55aa"
HF_TOKEN = "hf_" + "Zq81kLm0PnB7rT2vWx9YcD4eFgH6jK"
DB_PASSWORD = "pw-Ge8Hq2"
SECRETS = (API_KEY, ADMIN_KEY, URL_PASSWORD, QUERY_TOKEN, HF_TOKEN, DB_PASSWORD)

CLEAN = """\
[deploy]
host = "a6000-new"
unit = "qwen"
python = "/root/ml-env/bin/python3"

[server]
model_path = "/models/Qwen3-8B"
tp_size = 1
"""
SECRET = f"""\
[deploy]
host = "a6000-new"
unit = "qwen"
python = "/root/ml-env/bin/python3"

[env]
HF_TOKEN = "{HF_TOKEN}"
SGLANG_DB_PASSWORD = "{DB_PASSWORD}"

[server]
model_path = "https://user:{URL_PASSWORD}@models.example.com/qwen"
tokenizer_path = "https://cdn.example.com/tok?rev=2&token={QUERY_TOKEN}"
api_key = "{API_KEY}"
admin_api_key = "{ADMIN_KEY}"
tp_size = 1
"""


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = cli.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def nowhere(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, (secret, text)


def profiles(tmp_path: Path) -> tuple[Path, Path]:
    old, new = tmp_path / "old.toml", tmp_path / "new.toml"
    old.write_text(CLEAN)
    new.write_text(SECRET)
    return old, new


# --------------------------------------------------------------------------- import
BARE = (f"python3 -m sglang.launch_server --model-path /m --api-key {API_KEY} "
        f"--admin-api-key={ADMIN_KEY}")
LAUNCH = BARE.replace("python3", "/root/ml-env/bin/python3")
EVERYTHING = (f"HF_TOKEN={HF_TOKEN} SGLANG_DB_PASSWORD={DB_PASSWORD} "
              "python3 -m sglang.launch_server "
              f"--model-path https://u:{URL_PASSWORD}@h/m --api-key {API_KEY} "
              f"--tokenizer-path 'https://h/t?token={QUERY_TOKEN}' --config /etc/sglang/base.yaml "
              f"--no-such-flag https://a:{URL_PASSWORD}@b")


@pytest.mark.parametrize(("command", "host", "inventory"), [
    (BARE, "HOST", None),  # a bare python3: the profile does not even load
    (LAUNCH, "nowhere", INVENTORY),  # a host the inventory lacks
    (LAUNCH, None, INVENTORY),  # no host
    (LAUNCH, "a6000-new", INVENTORY),  # the good case
    (EVERYTHING, "a6000-new", INVENTORY),
])
def test_import_writes_no_secret(command: str, host: str | None, inventory: Path | None,
                                 tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    output = tmp_path / "imported.toml"
    where = ["--inventory", str(inventory)] if inventory else []
    args = ["import", *([host] if host else []), "--command", command, *where]
    code, shown = run(capsys, *args, "--output", str(output))
    written = output.read_text()
    nowhere(written, shown)
    data = tomllib.loads(written)
    assert "api_key" not in data["server"] and "admin_api_key" not in data["server"]
    assert "api_key" in data["secrets"]["keys"]
    assert "create /etc/sglang/sglang.secrets.yaml on " in shown  # how to create the secrets file
    code_again, stdout = run(capsys, *args)  # the profile on stdout
    nowhere(stdout)
    assert code_again == code


def test_import_keeps_secrets_of_the_environment_and_urls_out(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    command = (f"cd /srv && HF_TOKEN={HF_TOKEN} SGLANG_DB_PASSWORD={DB_PASSWORD} SGLANG_X=1 "
               "/root/ml-env/bin/python3 -m sglang.launch_server "
               f"--model-path https://u:{URL_PASSWORD}@h/m "
               f"--tokenizer-path 'https://h/t?token={QUERY_TOKEN}' --config /etc/sglang/base.yaml")
    output = tmp_path / "imported.toml"
    code, shown = run(capsys, "import", "a6000-new", "--command", command, "-o", str(output),
                      "--inventory", str(INVENTORY))
    written = output.read_text()
    nowhere(written, shown)
    data = tomllib.loads(written)
    assert data["env"] == {"SGLANG_X": "1"}
    assert data["deploy"]["env_file"] == "/etc/sgdeploy/sglang.env"
    assert "HF_TOKEN, SGLANG_DB_PASSWORD: secrets, not written into the profile" in shown
    assert "install -D -m 600 /dev/null /etc/sgdeploy/sglang.env" in shown
    assert data["secrets"]["keys"] == ["tokenizer_path"]  # its whole value goes to the secrets file
    assert data["server"]["model_path"] == "https://u:<redacted>@h/m"  # a placeholder, refused:
    assert code == 1 and "SGD021 error: server.model_path holds a password in its URL" in shown
    assert data["server"]["config"] == "/etc/sglang/base.yaml"  # read on the host, never here


# --------------------------------------------------------------------------- diff
@pytest.mark.parametrize("form", ["text", "markdown", "json"])
def test_diff_shows_no_secret(form: str, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    old, new = profiles(tmp_path)
    for before, after in ((old, new), (new, old)):
        code, shown = run(capsys, "diff", str(before), str(after), "--format", form,
                          "--inventory", str(INVENTORY))
        assert code == 0
        nowhere(shown)
        assert "<redacted>" in shown and "api-key" in shown and "HF_TOKEN" in shown
    if form == "json":
        target = json.loads(shown)["profiles"][0]["targets"][0]
        removed = {c["name"]: c["before"] for c in target["flags"] + target["environment"]}
        assert removed["api_key"] == removed["HF_TOKEN"] == "<redacted>"
        assert removed["model_path"] == "https://user:<redacted>@models.example.com/qwen"


def test_diff_of_a_secret_that_changes_says_so(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    old, new = profiles(tmp_path)
    old.write_text(CLEAN + f'api_key = "{API_KEY}"\n')
    new.write_text(CLEAN + 'api_key = "sk-other-one"\n')
    code, shown = run(capsys, "diff", str(old), str(new), "--inventory", str(INVENTORY))
    assert code == 0
    nowhere(shown)
    assert "sk-other-one" not in shown
    assert "changed flag  --api-key <redacted> -> <redacted>" in shown


def test_a_unit_diff_never_holds_a_secret(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A unit is rendered even for a profile with errors; one that would hold a secret is not."""
    old, new = profiles(tmp_path)
    _, shown = run(capsys, "diff", str(old), str(new), "--format", "json",
                   "--inventory", str(INVENTORY))
    target = json.loads(shown)["profiles"][0]["targets"][0]
    assert target["unit_diff"] == "" and "no unit for" in target["unit_note"]


# --------------------------------------------------------------------------- render and validate
@pytest.mark.parametrize("form", ["text", "json", "github"])
def test_validate_shows_no_secret(form: str, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    _, new = profiles(tmp_path)
    code, shown = run(capsys, "validate", str(new), "--format", form, "--inventory", str(INVENTORY))
    assert code == 1
    nowhere(shown)
    assert shown.count("SGD021") >= 6


def test_render_shows_no_secret(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, new = profiles(tmp_path)
    code, shown = run(capsys, "render", str(new), "--inventory", str(INVENTORY))
    assert code == 1 and "SGD021" in shown
    nowhere(shown)


# --------------------------------------------------------------------------- plan, status, history
HAND_MADE = f"""\
[Service]
Environment="HF_TOKEN={HF_TOKEN}"
ExecStart=/root/ml-env/bin/python3 -m sglang.launch_server --model-path /models/Qwen3-8B \\
    --api-key {API_KEY} --admin-api-key={ADMIN_KEY}
"""


def test_plan_and_apply_show_no_secret_of_the_unit_they_replace(tmp_path: Path) -> None:
    path = tmp_path / "clean.toml"
    path.write_text(CLEAN + '[secrets]\nfile = "/etc/sglang/q.secrets.yaml"\nkeys = ["api_key"]\n')
    deployment = build_deployment(load_profile(path), "a6000-new", "0.5.23")
    plan = make_plan("a6000-new", deployment, HostFacts(), HAND_MADE, [])
    text = report.plan_text(plan)
    assert "-    --api-key <redacted> --admin-api-key=<redacted>" in text
    assert '-Environment="HF_TOKEN=<redacted>"' in text
    failed = ApplyResult(1, "failed", "a6000-new", "qwen", f"exited: --api-key {API_KEY}",
                         plan=plan,
                         explain=[f"server_args=ServerArgs(api_key='{API_KEY}', port=1)"],
                         sglang_check=CheckReport(HostVerdict("refused", error_type="ValueError",
                                                              error=f"bad --api-key {API_KEY}"),
                                                  f"refuses --api-key {API_KEY}"))
    nowhere(text, report.apply_text(failed), json.dumps(failed.as_dict()))


def _history_wire(meta: dict[str, object]) -> str:
    encoded = base64.b64encode(json.dumps(meta).encode()).decode()
    return f"{MARK}last_good {meta['id']}@@\n{MARK}record {meta['id']}@@\n{encoded}\n{MARK}end@@\n"


def test_history_and_status_show_no_secret_of_a_record_or_unit() -> None:
    deployment_id = "20261101T100000Z-000-11111111"
    meta = {"id": deployment_id, "profile": "qwen", "outcome": "failed", "sglang_version": "0.5.23",
            "failure": {"kind": "argparse", "reason": f"--api-key {API_KEY}: bad",
                        "line": f"HF_TOKEN={HF_TOKEN}"},
            "sglang_check": {"argv": ["--admin-api-key", ADMIN_KEY],
                             "model": f"https://u:{URL_PASSWORD}@h/"}}
    history = parse_history(_history_wire(meta), "a6000-new", "qwen")
    nowhere(report.history_text(history), json.dumps(history.as_dict()))
    assert history.as_dict()["deployments"][0]["failure"]["reason"] == "--api-key <redacted> bad"
    files = StatusFiles(history, HAND_MADE, "[Service]\nExecStart=/x\n", None, {}, False)
    drift = find_drift(files, rendered="[Service]\nExecStart=/y\n", rendered_from="qwen.toml")
    assert drift and all(d.diff for d in drift)
    status = Status("a6000-new", "qwen", False, (f"GET /health: --api-key {API_KEY}",), None,
                    deployment_id, None, history.records[0], tuple(drift), (), (), None, "0.5.23",
                    (f"cannot render: token={QUERY_TOKEN}",))
    nowhere(report.status_text(status), json.dumps(status.as_dict()))


@pytest.mark.parametrize("json_output", [False, True])
def test_logcheck_takes_out_what_the_log_says_is_a_secret(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], json_output: bool) -> None:
    """The dump names the api key; the error message repeats it bare, in no shape a pattern knows."""
    log = tmp_path / "server.log"
    log.write_text(
        f"[2026-05-12 00:00:01] server_args=ServerArgs(model_path='/m', api_key='{API_KEY}', "
        f"admin_api_key='{ADMIN_KEY}', port=30000)\n"
        "Traceback (most recent call last):\n"
        '  File "/venv/sglang/srt/entrypoints/http_server.py", line 9, in check\n'
        f"ValueError: key {API_KEY} and {ADMIN_KEY} may not be equal; url https://u:{URL_PASSWORD}@h/x\n")
    code = cli.main(["logcheck", str(log), *(["--json"] if json_output else [])])
    shown = capsys.readouterr().out
    assert code == 1
    assert "may not be equal" in shown
    for secret in (API_KEY, ADMIN_KEY, URL_PASSWORD):
        assert secret not in shown, shown
