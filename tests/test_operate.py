"""history, status, retention and logcheck without hosts: parsers on captured output, the shell
commands run on a local folder, the verdict and drift logic, and the logcheck CLI on the log corpus."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sgdeploy import cli
from sgdeploy.deploy.operate import (
    MARK,
    HealthCheck,
    History,
    Record,
    StatusFiles,
    WeightDaemonStatus,
    find_drift,
    health_path,
    history_command,
    parse_history,
    parse_status_files,
    prune_command,
    read_status,
    status_files_command,
    status_verdict,
)
from sgdeploy.host.facts import SystemdUnitState
from sgdeploy.host.remote import HttpResponse
from sgdeploy.logs import read_log
from sgdeploy.review import report

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "logs"
EXPECTED: dict[str, dict[str, Any]] = json.loads((CORPUS / "expected.json").read_text())

ID_OLD = "20261101T100000Z-11111111"
ID_MID = "20261102T100000Z-22222222"
ID_NEW = "20261103T100000Z-33333333"


def meta(deployment_id: str, outcome: str = "ready", **extra: Any) -> dict[str, Any]:
    return {"id": deployment_id, "time": "2026-11-01T10:00:09+00:00", "profile": "qwen36-mtp3",
            "profile_sha256": deployment_id[-8:] * 8, "sglang_version": "0.5.11", "outcome": outcome,
            "deployed_by": "alice@laptop", "rollback_of": None, "startup_s": 73.2, **extra}


def b64(text: str | bytes) -> str:
    data = text.encode() if isinstance(text, str) else text
    encoded = base64.b64encode(data).decode()
    return "\n".join(encoded[i:i + 76] for i in range(0, len(encoded), 76))


def wire(last_good: str | None, records: dict[str, str | bytes | None], extra: str = "") -> str:
    """What history_command prints: None is a missing meta.json."""
    out = [f"{MARK}last_good {last_good or ''}@@"]
    for deployment_id, content in records.items():
        out.append(f"{MARK}record {deployment_id}@@")
        out.append("!missing" if content is None else b64(content))
    return "\n".join(out) + "\n" + extra + f"{MARK}end@@\n"


# --------------------------------------------------------------------------- history parsing
def test_history_newest_first_and_last_good_marked() -> None:
    out = wire(ID_MID, {ID_OLD: json.dumps(meta(ID_OLD)), ID_NEW: json.dumps(meta(ID_NEW, "failed")),
                        ID_MID: json.dumps(meta(ID_MID, rollback_of=ID_OLD))})
    history = parse_history(out, "ct129", "sglang")
    assert [r.id for r in history.records] == [ID_NEW, ID_MID, ID_OLD]
    assert [r.outcome for r in history.records] == ["failed", "ready", "ready"]
    assert [r.last_good for r in history.records] == [False, True, False]
    assert history.last_good == ID_MID
    row = history.as_dict()["deployments"][1]
    assert row["rollback_of"] == ID_OLD and row["deployed_by"] == "alice@laptop"
    assert row["startup_s"] == 73.2 and row["sglang_version"] == "0.5.11"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "missing"),
        ("{not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        (b"\xff\xfe{}", "not UTF-8"),
        ("", "not JSON"),
    ],
)
def test_corrupt_record_is_listed_not_fatal(content: str | bytes | None, problem: str) -> None:
    out = wire(ID_OLD, {ID_OLD: json.dumps(meta(ID_OLD)), ID_NEW: content})
    history = parse_history(out)
    corrupt = history.get(ID_NEW)
    assert corrupt is not None and corrupt.outcome == "corrupt" and problem in (corrupt.problem or "")
    assert history.get(ID_OLD) is not None and history.get(ID_OLD).outcome == "ready"  # type: ignore[union-attr]
    assert problem in report.history_text(history)


def test_cut_off_base64_and_marker_lookalikes() -> None:
    out = wire(None, {ID_OLD: json.dumps(meta(ID_OLD))})
    # A record cut in the middle of its base64, and noise before the first marker.
    out = "Last login: somewhere\n" + out.replace(f"{MARK}end@@\n", "") + f"{MARK}record {ID_NEW}@@\neyJpZCI6\n"
    history = parse_history(out)
    assert history.get(ID_NEW).outcome == "corrupt"  # type: ignore[union-attr]
    assert history.get(ID_OLD).outcome == "ready"  # type: ignore[union-attr]
    assert history.last_good is None


def test_meta_without_outcome_is_corrupt() -> None:
    history = parse_history(wire(None, {ID_OLD: json.dumps({"id": ID_OLD})}))
    assert history.records[0].outcome == "corrupt"


def test_no_state_folder() -> None:
    history = parse_history(f"{MARK}nostate@@\n{MARK}end@@\n", "ct129", "sglang")
    assert not history.state_present and history.records == ()
    assert "no deployments recorded" in report.history_text(history)


def sh(command: str) -> str:
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True).stdout


def test_history_command_on_a_local_folder(tmp_path: Path) -> None:
    state = tmp_path / "sglang"
    for deployment_id in (ID_OLD, ID_MID, ID_NEW):
        (state / deployment_id).mkdir(parents=True)
    (state / ID_OLD / "meta.json").write_text(json.dumps(meta(ID_OLD)))
    (state / ID_MID / "meta.json").write_bytes(b'{"id": "trunc')
    (state / "last_good").write_text(ID_OLD + "\n")
    (state / "lock").write_text("")
    (state / ".meta.json.sgdeploy-1234").write_text("temp")
    history = parse_history(sh(history_command(str(state))))
    assert [(r.id, r.outcome, r.last_good) for r in history.records] == [
        (ID_NEW, "corrupt", False), (ID_MID, "corrupt", False), (ID_OLD, "ready", True)]
    assert history.get(ID_NEW).problem == "meta.json is missing"  # type: ignore[union-attr]
    # last_good as a link to the folder reads the same
    (state / "last_good").unlink()
    (state / "last_good").symlink_to(state / ID_OLD)
    assert parse_history(sh(history_command(str(state)))).last_good == ID_OLD
    assert not parse_history(sh(history_command(str(tmp_path / "absent")))).state_present


def test_history_text_columns() -> None:
    out = wire(ID_MID, {ID_NEW: json.dumps(meta(ID_NEW, "failed", failure={"kind": "graph_capture_failed"})),
                        ID_MID: json.dumps(meta(ID_MID, rollback_of=ID_OLD))})
    text = report.history_text(parse_history(out, "ct129", "sglang"))
    lines = text.splitlines()
    assert lines[0].startswith("sglang.service on ct129: 2 deployment(s), newest first")
    assert lines[2].startswith("   " + ID_NEW) and "failed (graph_capture_failed)" in lines[2]
    assert lines[3].startswith("*  " + ID_MID) and ID_OLD in lines[3] and "73.2 s" in lines[3]
    assert "qwen36-mtp3 22222222" in lines[3] and "alice@laptop" in lines[3]


# --------------------------------------------------------------------------- status
UNIT_A = "[Service]\nExecStart=/x --port 30000\n"
UNIT_B = "[Service]\nExecStart=/x --port 30001\n"


def files(unit_text: str | None, last_good: str | None = ID_MID, record_unit: str | None = UNIT_A,
          hashes: dict[str, str] | None = None, reload: bool | None = False) -> StatusFiles:
    records = tuple(Record(i, meta(i), last_good=i == last_good) for i in (ID_NEW, ID_MID))
    history = History("ct129", "sglang", last_good, records)
    digests = hashes if hashes is not None else {
        ID_MID: hashlib.sha256(UNIT_A.encode()).hexdigest(), ID_NEW: hashlib.sha256(UNIT_B.encode()).hexdigest()}
    return StatusFiles(history, unit_text, record_unit, None, digests, reload)


def kinds(found: list[Any]) -> list[str]:
    return [d.kind for d in found]


def test_no_drift_when_the_installed_unit_is_the_last_good_record() -> None:
    f = files(UNIT_A)
    assert f.installed() == ID_MID
    assert find_drift(f) == []
    assert find_drift(f, rendered=UNIT_A, rendered_from="profiles/x.toml") == []


def test_hand_edited_unit_is_drift_with_a_diff() -> None:
    edited = UNIT_A.replace("30000", "31000")
    found = find_drift(files(edited))
    assert kinds(found) == ["unit_edited"]
    assert "-ExecStart=/x --port 30000" in found[0].diff and "+ExecStart=/x --port 31000" in found[0].diff


def test_installed_failed_deployment_is_not_last_good() -> None:
    found = find_drift(files(UNIT_B))
    assert kinds(found) == ["not_last_good"] and ID_NEW in found[0].message


def test_profile_drift_and_daemon_reload_and_missing_unit() -> None:
    found = find_drift(files(UNIT_A, reload=True), rendered=UNIT_B, rendered_from="profiles/x.toml")
    assert kinds(found) == ["daemon_reload", "profile"]
    assert "+ExecStart=/x --port 30001" in found[1].diff
    assert kinds(find_drift(files(None))) == ["unit_missing"]
    unmanaged = StatusFiles(History("h", "sglang", None, ()), UNIT_A, None, None, {}, False)
    assert kinds(find_drift(unmanaged)) == ["unmanaged"]
    assert find_drift(StatusFiles(History("h", "sglang", None, ()), None, None, None, {}, None)) == []


def test_profile_drift_in_comments_only_says_so() -> None:
    found = find_drift(files(UNIT_A), rendered="# profile: x (sha256 1234)\n" + UNIT_A)
    assert kinds(found) == ["profile"] and "only comments differ" in found[0].message
    found = find_drift(files(UNIT_A), rendered=UNIT_B)
    assert "only comments differ" not in found[0].message


def test_long_diffs_are_cut() -> None:
    old = "".join(f"line {i}\n" for i in range(200))
    new = "".join(f"LINE {i}\n" for i in range(200))
    found = find_drift(files(new, record_unit=old, hashes={}))
    assert len(found[0].diff.splitlines()) <= 61 and "more diff lines" in found[0].diff


RUNNING = SystemdUnitState("loaded", "active", "running", 4242, 0, 1, n_restarts=0)


@pytest.mark.parametrize(
    ("state", "health", "healthy", "problem"),
    [
        (RUNNING, HealthCheck("/health", 30000, 200), True, None),
        (RUNNING, HealthCheck("/health", 30000, 503), False, "HTTP 503"),
        (RUNNING, HealthCheck("/ready", 30000, 0, "nothing listens on the port"), False, "nothing listens"),
        (SystemdUnitState("loaded", "activating", "start"), None, False, "still starting"),
        (SystemdUnitState("loaded", "failed", "failed", exec_main_status=9), None, False, "exit status 9"),
        (SystemdUnitState("loaded", "failed", "failed", exec_main_status=1, exec_main_code=1), None, False,
         "(failed/failed, exit status 1)"),
        # how a real SGLang (0.5.11 on the H200) leaves its unit after `systemctl stop` by hand
        (SystemdUnitState("loaded", "failed", "failed", exec_main_status=9, exec_main_code=2), None, False,
         "(failed/failed, killed by SIGKILL: SGLang ends itself that way when stopped"),
        (SystemdUnitState("loaded", "failed", "failed", exec_main_status=11, exec_main_code=3), None, False,
         "(failed/failed, killed by SIGSEGV)"),
        (SystemdUnitState("loaded", "inactive", "dead"), None, False, "not running (inactive/dead)"),
        (SystemdUnitState("not-found", "inactive", "dead"), None, False, "not installed"),
        (None, None, False, "could not be read"),
        (RUNNING, None, False, "not checked"),
    ],
)
def test_status_verdict(state: SystemdUnitState | None, health: HealthCheck | None, healthy: bool,
                        problem: str | None) -> None:
    ok, problems = status_verdict("sglang", state, health)
    assert ok is healthy
    assert (problem is None and problems == []) or any(problem in p for p in problems if problem)


@pytest.mark.parametrize(("version", "path"), [("0.5.11", "/health"), ("0.5.23", "/ready"),
                                               ("0.5.23.post1", "/ready"), (None, "/health"),
                                               ("garbage", "/health")])
def test_health_path(version: str | None, path: str) -> None:
    assert health_path(version) == path


@pytest.mark.parametrize("version", ["0.5.11", "0.5.23", None])
def test_a_launch_without_sglangs_warmup_is_ready_once_a_token_was_generated(version: str | None) -> None:
    assert health_path(version, {"skip_server_warmup": True}) == "/health_generate"
    assert health_path(version, {"skip_server_warmup": False}) == health_path(version)


def status_output(sections: list[tuple[str, str]], **meta_fields: Any) -> str:
    """What `status_files_command` prints: ID_MID's history, then each (section, body)."""
    history = wire(ID_MID, {ID_MID: json.dumps(meta(ID_MID, **meta_fields))}).replace(f"{MARK}end@@\n", "")
    return history + "".join(f"{MARK}{name}@@\n{body}\n" for name, body in sections) + f"{MARK}end@@\n"


def test_parse_status_files() -> None:
    digest = hashlib.sha256(UNIT_A.encode()).hexdigest()
    out = status_output([("file unit", b64(UNIT_A)), ("file record/unit.service", b64(UNIT_A)),
                         ("file record/profile.toml", "!missing"),
                         ("sums", f"{digest}  /var/lib/sgdeploy/sglang/{ID_MID}/unit.service"),
                         ("systemd", "NeedDaemonReload=yes")])
    f = parse_status_files(out, "ct129", "sglang")
    assert f.unit_text == UNIT_A and f.record_unit == UNIT_A and f.record_profile is None
    assert f.unit_hashes == {ID_MID: digest} and f.need_daemon_reload is True
    assert f.installed() == ID_MID


DAEMON = "[Service]\nExecStart=/x -m sglang.srt.weight_cache.daemon --tp-size 2\n"


def test_the_daemon_unit_drifts_from_its_record_and_counts_in_the_verdict() -> None:
    recorded = dataclasses.replace(files(UNIT_A), daemon_text=DAEMON, record_daemon=DAEMON)
    assert recorded.has_daemon() and find_drift(recorded) == []
    edited = dataclasses.replace(recorded, daemon_text=DAEMON.replace("2", "4"))
    found = find_drift(edited)
    assert kinds(found) == ["weights_unit_edited"] and "+ExecStart=/x -m sglang.srt" in found[0].diff
    missing = dataclasses.replace(recorded, daemon_text=None)
    assert missing.has_daemon() and kinds(find_drift(missing)) == ["weights_unit_missing"]
    assert "sglang-weights.service is missing" in find_drift(missing)[0].message
    # a server unit that is not the last good one: its record's daemon is not fetched
    assert not dataclasses.replace(files(UNIT_B), record_daemon=DAEMON).has_daemon()
    crashed = WeightDaemonStatus("sglang-weights.service",
                                 SystemdUnitState("loaded", "failed", "failed", exec_main_status=1,
                                                  exec_main_code=1))
    ok, problems = status_verdict("sglang", RUNNING, HealthCheck("/health", 30000, 200), crashed)
    assert not ok and problems == [
        "sglang-weights.service is not running (failed/failed, exit status 1): the server maps its "
        "weights from it, and a restart of sglang.service fails until it runs again"]
    running = WeightDaemonStatus("sglang-weights.service", RUNNING)
    assert status_verdict("sglang", RUNNING, HealthCheck("/health", 30000, 200), running) == (True, [])


def test_parse_status_files_reads_the_daemon_unit() -> None:
    out = status_output([("file unit", b64(UNIT_A)), ("file daemon", b64(DAEMON)),
                         ("file record/weights.service", b64(DAEMON)),
                         ("daemon_state", daemon_state("active", "running"))])
    f = parse_status_files(out, "ct129", "sglang")
    assert f.daemon_text == DAEMON and f.record_daemon == DAEMON
    assert f.daemon_state is not None and (f.daemon_state.active_state, f.daemon_state.main_pid) == (
        "active", 77)
    command = status_files_command("sglang")
    assert "sglang-weights.service" in command and "weights.service" in command


def daemon_state(active: str, sub: str) -> str:
    return f"LoadState=loaded\nActiveState={active}\nSubState={sub}\nMainPID=77\nNRestarts=0"


class FakeRemote:
    """RemoteHost's surface that `read_status` uses, answering with captured-style output."""

    name = "ct129"

    def __init__(self, files_out: str, facts_out: str, health: int | None) -> None:
        self.files_out, self.facts_out, self.health = files_out, facts_out, health
        self.commands: list[str] = []
        self.requests: list[tuple[int, str]] = []

    def run(self, command: str, timeout: float = 120.0) -> Any:
        self.commands.append(command)
        out = self.facts_out if command.startswith("sh -c") else self.files_out
        return type("R", (), {"stdout": out, "ok": True})()

    def http_get(self, port: int, path: str, timeout: float = 10.0) -> HttpResponse:
        self.requests.append((port, path))
        if self.health is None:
            raise ConnectionRefusedError("refused")
        return HttpResponse(self.health, b"")


def facts_out(active: str = "active", sub: str = "running", version: str = "0.5.23") -> str:
    def section(name: str, lines: list[str]) -> str:
        return f"@@sgdeploy:begin {name}@@\n" + "".join(f"|{x}\n" for x in lines) + f"@@sgdeploy:end {name} rc=0@@\n"

    uuid = "GPU-00000000-0000-0000-0000-000000000000"
    return (section("gpus", [f"0, {uuid}, NVIDIA H200, 9.0, 143771, 120000, 00000000:18:00.0"])
            + section("gpu_apps", [f"4243, sglang::scheduler_TP0, 119990, {uuid}"])
            + section("python", ["/root/ml-env/bin/python3", "3.11.2"]) + section("sglang", [version])
            + section("unit", ["LoadState=loaded", f"ActiveState={active}", f"SubState={sub}", "MainPID=4242",
                               "NRestarts=2"]))


STATUS_PROFILE = '[deploy]\npython = "/opt/py"\n[server]\nport = 31234\nmodel_path = "/m"\n'
INSTALLED_A = [("file unit", b64(UNIT_A)), ("file record/unit.service", b64(UNIT_A)),
               ("file record/profile.toml", b64(STATUS_PROFILE)),
               ("sums", f"{hashlib.sha256(UNIT_A.encode()).hexdigest()}  /v/{ID_MID}/unit.service")]


def test_read_status_over_a_fake_host() -> None:
    files_out = status_output(INSTALLED_A, sglang_version="0.5.23")
    remote = FakeRemote(files_out, facts_out(), 200)
    status = read_status(remote, "sglang")  # type: ignore[arg-type]
    assert status.healthy and status.exit_code == 0 and status.drift == ()
    assert remote.requests == [(31234, "/ready")]
    assert len(remote.commands) == 2 and "sgd_py=/opt/py" in remote.commands[1]
    doc = status.as_dict()
    assert doc["deployment"]["installed"] == ID_MID and doc["deployment"]["installed_is_last_good"]
    assert doc["gpu_processes"][0]["gpu_index"] == 0 and doc["sglang_version"] == "0.5.23"
    assert "restarted the unit 2 time(s)" in " ".join(doc["notes"])
    text = report.status_text(status)
    assert "HEALTHY" in text and "drift: none" in text and "GET /ready on port 31234: HTTP 200" in text

    down = FakeRemote(files_out, facts_out("failed", "failed"), 200)
    status = read_status(down, "sglang")  # type: ignore[arg-type]
    assert not status.healthy and status.exit_code == 1
    assert down.requests == []  # another server may answer on the port of a stopped unit
    assert "NOT HEALTHY" in report.status_text(status)

    refused = read_status(FakeRemote(files_out, facts_out(), None), "sglang")  # type: ignore[arg-type]
    assert not refused.healthy and "nothing listens" in refused.problems[0]


# --------------------------------------------------------------------------- retention
def ids(n: int) -> list[str]:
    return [f"202611{day:02d}T1000{minute:02d}Z-{minute:08x}" for day in range(1, 29) for minute in range(0, 60)][:n]


def make_records(state: Path, names: list[str], last_good: str | None) -> None:
    for name in names:
        (state / name).mkdir(parents=True)
        (state / name / "meta.json").write_text("{}")
    if last_good:
        (state / "last_good").write_text(last_good + "\n")


def remaining(state: Path) -> list[str]:
    return sorted(p.name for p in state.iterdir() if p.is_dir() and not p.is_symlink())


def test_prune_keeps_the_newest_n_and_the_last_good(tmp_path: Path) -> None:
    state = tmp_path / "sglang"
    names = ids(25)
    make_records(state, names, last_good=names[2])
    (state / "manual-backup").mkdir()  # not a deployment: never counted, never deleted
    (state / "lock").write_text("")
    deleted = sh(prune_command(str(state), keep=20, last_good=names[2])).split()
    assert sorted(deleted) == sorted(set(names[:5]) - {names[2]})
    assert remaining(state) == sorted([*names[5:], names[2], "manual-backup"])
    assert (state / "last_good").read_text() == names[2] + "\n" and (state / "lock").exists()
    # Idempotent
    assert sh(prune_command(str(state), keep=20, last_good=names[2])) == ""


def test_prune_reads_last_good_on_the_host_too(tmp_path: Path) -> None:
    state = tmp_path / "sglang"
    names = ids(6)
    make_records(state, names, last_good=names[0])
    sh(prune_command(str(state), keep=2, last_good=names[1]))
    assert remaining(state) == sorted([names[0], names[1], names[4], names[5]])


def test_prune_keep_one_keeps_the_newest(tmp_path: Path) -> None:
    state = tmp_path / "sglang"
    names = ids(4)
    make_records(state, names, last_good=None)
    sh(prune_command(str(state), keep=1))
    assert remaining(state) == [names[-1]]


def test_prune_last_good_as_a_link_and_odd_names(tmp_path: Path) -> None:
    state = tmp_path / "s p a c e"
    names = ids(5)
    make_records(state, names, last_good=None)
    (state / "last_good").symlink_to(state / names[0])
    sh(prune_command(str(state), keep=1))
    assert remaining(state) == [names[0], names[4]]
    assert sh(prune_command(str(tmp_path / "absent"), keep=3)) == ""


def test_prune_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError):
        prune_command("/var/lib/sgdeploy/sglang", keep=0)
    with pytest.raises(ValueError):
        prune_command("/var/lib/sgdeploy/sglang", keep=3, last_good="../../etc")


def test_prune_command_quotes_its_inputs(tmp_path: Path) -> None:
    evil = tmp_path / "x; touch pwned"
    make_records(evil, ids(3), last_good=None)
    sh(prune_command(str(evil), keep=1, last_good="$(touch pwned2)"))
    assert not (tmp_path / "pwned").exists() and not Path("pwned2").exists()
    assert remaining(evil) == [ids(3)[-1]]


# --------------------------------------------------------------------------- logcheck CLI
def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_logcheck_verdicts_and_exit_codes(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    exp = EXPECTED[name]
    code, out, _ = run_cli(["logcheck", str(CORPUS / name), "--json"], capsys)
    doc = json.loads(out)
    assert code == (0 if exp["ready"] else 1)
    assert set(doc) == {"ready", "failure", "phases", "kv_cache_tokens", "auto_adjusted"}
    assert doc["ready"] == exp["ready"] and doc["kv_cache_tokens"] == exp["kv_cache_tokens"]
    if exp["failure"] is None:
        assert doc["failure"] is None
    else:
        assert {k: doc["failure"][k] for k in ("kind", "line")} == exp["failure"]
        assert {"kind", "line", "message"} <= set(doc["failure"])  # it gained confidence, evidence, consequences
    assert [[p["name"], p["line"]] for p in doc["phases"]] == exp["phases"]
    # text mode: same exit code, the verdict on the first line
    code_text, text, _ = run_cli(["logcheck", str(CORPUS / name)], capsys)
    assert code_text == code
    first = text.splitlines()[0]
    assert ("READY" in first) if exp["ready"] else ("FAILED" in first or "NOT READY" in first)
    if exp["failure"] and exp["failure"]["kind"] != "incomplete":
        assert f"failure: {exp['failure']['kind']} at line {exp['failure']['line']}" in text


def test_logcheck_text_shows_phases_kv_and_changes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["logcheck", str(CORPUS / "ok-0.5.11-qwen36-mtp-tp2.log"),
                            "--profile", str(ROOT / "profiles" / "qwen36-mtp3.toml")], capsys)
    assert code == 0
    assert "ready                     line 49" in out and "KV cache: 242880 tokens" in out
    assert "startup times: weights 29.4 s" in out
    assert "settings SGLang changed on its own:" in out and "speculative_algorithm = \"EAGLE\"" in out


def test_logcheck_failure_shows_the_explaining_lines(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["logcheck", str(CORPUS / "fail-graph-capture.log")], capsys)
    assert code == 1
    assert "failure: graph_capture_failed at line 13" in out
    assert "the log lines that explain it:" in out and "cuda_graph_runner.py" in out


def test_logcheck_profile_is_passed_to_the_reader(capsys: pytest.CaptureFixture[str]) -> None:
    log = CORPUS / "ok-0.5.11-qwen36-mtp-tp2.log"
    profile = ROOT / "profiles" / "qwen36-mtp3.toml"
    _, out, _ = run_cli(["logcheck", str(log), "--profile", str(profile), "--json",
                            "--inventory", str(ROOT / "inventory.toml")], capsys)
    import tomllib

    server = tomllib.loads(profile.read_text())["server"]
    inventory = tomllib.loads((ROOT / "inventory.toml").read_text()) if (ROOT / "inventory.toml").exists() else {}
    version = inventory.get("hosts", {}).get("ct129", {}).get("sglang_version")
    with log.open(encoding="utf-8") as handle:
        assert json.loads(out) == json.loads(json.dumps(read_log(handle, server, version).as_json(), default=str))


def test_logcheck_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    text = (CORPUS / "fail-port-in-use.log").read_text()
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    code, out, _ = run_cli(["logcheck", "-", "--json"], capsys)
    assert code == 1 and json.loads(out)["failure"]["kind"] == "port_in_use"


def test_logcheck_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["logcheck", str(tmp_path / "missing.log")], capsys)
    assert code == 2 and out == "" and "no such log file" in err
    log = str(CORPUS / "ok-0.5.10-tp1.log")
    assert run_cli(["logcheck", log, "--profile", str(tmp_path / "nope.toml")], capsys)[0] == 2
    bad = tmp_path / "bad.toml"
    bad.write_text("[deploy]\nhost = 1\n")
    assert run_cli(["logcheck", log, "--profile", str(bad)], capsys)[0] == 2


def test_logcheck_subprocess_json_only_on_stdout() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cp = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-m", "sgdeploy", "logcheck",
                         str(CORPUS / "fail-nccl-tp2.log"), "--json"], capture_output=True, text=True, env=env)
    assert cp.returncode == 1 and json.loads(cp.stdout)["failure"]["kind"] == "nccl_error"


# --------------------------------------------------------------------------- operate CLI usage
def test_operate_commands_usage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inventory = tmp_path / "inventory.toml"
    inventory.write_text('[hosts.closed]\naddress = "127.0.0.1"\nport = 1\nstrict_host_key_checking = false\n')
    for command in ("history", "status", "rollback"):
        code, out, err = run_cli([command, "--inventory", str(inventory)], capsys)
        assert code == 2 and "give a PROFILE, or both --host H and --unit U" in err, command
        code, _, err = run_cli([command, "--host", "nowhere", "--unit", "sglang", "--inventory", str(inventory)],
                               capsys)
        assert code == 2 and "not a host" in err
        code, _, err = run_cli([command, "--host", "closed", "--unit", "a/b", "--inventory", str(inventory)],
                               capsys)
        assert code == 2 and "not a valid systemd unit name" in err
        code, out, err = run_cli([command, "--host", "closed", "--unit", "sglang", "--inventory", str(inventory),
                                  "--json"], capsys)
        assert code == 2 and "cannot connect" in (err + out), (command, err, out)
    code, _, err = run_cli(["history", "--host", "closed", "--unit", "sglang", "--inventory",
                            str(tmp_path / "none.toml")], capsys)
    assert code == 2 and "inventory is needed" in err and "sgdeploy init HOST --address ADDR" in err


def test_read_status_shows_the_daemon_beside_the_server() -> None:
    def files_out(active: str, sub: str) -> str:
        return status_output([*INSTALLED_A, ("file daemon", b64(DAEMON)),
                              ("file record/weights.service", b64(DAEMON)),
                              ("daemon_state", daemon_state(active, sub))], sglang_version="0.5.23")

    up = read_status(FakeRemote(files_out("active", "running"), facts_out(), 200), "sglang")  # type: ignore[arg-type]
    assert up.healthy and up.drift == ()
    assert up.as_dict()["weight_daemon"]["unit_state"]["main_pid"] == 77
    assert "weight-cache daemon: sglang-weights.service, loaded, active/running, main pid 77" in (
        report.status_text(up))
    down = read_status(FakeRemote(files_out("failed", "failed"), facts_out(), 200), "sglang")  # type: ignore[arg-type]
    assert not down.healthy and "sglang-weights.service is not running" in down.problems[0]
    assert "NOT HEALTHY" in report.status_text(down)


def test_logcheck_without_a_profile_says_a_listed_setting_may_be_the_launchs(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["logcheck", str(CORPUS / "ok-0.5.11-qwen36-mtp-tp2.log")], capsys)
    assert code == 0
    assert "settings SGLang changed on its own, or the launch set (--profile tells them apart):" in out
    assert "disable_piecewise_cuda_graph = true" in out
