"""SGLang's own check, from sgdeploy's side: the command, reading the answer, what it predicts
and how it compares with the offline rules and with what a started server showed.

The answers are the program's real output: the H200 runs of SGLang 0.5.11 kept in
tests/fixtures/h200/sglang-check-0.5.11.jsonl, and the shapes the test hosts produce.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from sgdeploy.host.facts import (
    GpuInfo,
    GpuProcess,
    gpu_strangers,
    owner_unit,
    parse_compute_apps,
    parse_gpu_owners,
    with_owners,
)
from sgdeploy.logs.report import Adjustment
from sgdeploy.sglang.check.verdict import (
    MARKER,
    CheckRequest,
    check_command,
    covering_text,
    differences,
    disagreements,
    parse_verdict,
    predicted,
    site_for,
    summary,
)

H200 = Path(__file__).parent / "fixtures" / "h200"


def _h200_runs() -> dict[str, dict]:
    runs = [json.loads(line) for line in (H200 / "sglang-check-0.5.11.jsonl").read_text().splitlines() if line]
    return {run["case"]: run for run in runs}


def _answer(verdict: dict) -> str:
    return "SGLang prints to stdout too\n" + MARKER + json.dumps(verdict) + "\n"


# --------------------------------------------------------------------------- the command
def test_command_runs_as_the_unit_would() -> None:
    request = CheckRequest(python="/root/ml-env/bin/python3", argv=("--model-path", "/m", "--port", "30001"),
                           environment=(("PYTHONUNBUFFERED", "1"), ("X", 'a "b" 100% $HOME\\')),
                           user="svc", working_directory="/srv/my models", env_file="/etc/sglang/secrets.env")
    words = shlex.split(check_command(request, 45))
    assert words[:5] == ["systemd-run", "--pipe", "--wait", "--collect", "--service-type=exec"]
    props = [w.removeprefix("--property=") for w in words if w.startswith("--property=")]
    assert "RuntimeMaxSec=45" in props and "User=svc" in props
    assert "WorkingDirectory=/srv/my models" in props and "EnvironmentFile=/etc/sglang/secrets.env" in props
    # systemd unquotes Environment= values itself (C escapes); transient properties take no specifiers
    assert 'Environment="X=a \\"b\\" 100% $HOME\\\\"' in props
    assert props[-1] == 'Environment="HF_DATASETS_OFFLINE=1"' and 'Environment="HF_HUB_OFFLINE=1"' in props
    assert words[-3:-1] == ["/root/ml-env/bin/python3", "-"]


# --------------------------------------------------------------------------- the answer
def test_h200_answers_are_read() -> None:
    runs = _h200_runs()
    accepted = parse_verdict(_answer(runs["defaults"]["verdict"]), "", 0, 17.9)
    assert accepted.status == "accepted" and accepted.sglang_version == "0.5.11"
    assert accepted.defaults()["attention_backend"] == "fa3"
    assert accepted.gpu_memory_mib == 0
    refused = parse_verdict(_answer(runs["context-too-long"]["verdict"]), "", 0)
    assert refused.refused and refused.stage == "resolve" and refused.error_type == "ValueError"
    assert "derived context_length (4096)" in refused.message
    flag = parse_verdict(_answer(runs["unknown-flag"]["verdict"]), "", 0)
    assert flag.refused and flag.stage == "parse" and "unrecognized arguments" in flag.message


def test_what_cannot_run_is_unavailable_not_a_refusal() -> None:
    hung = parse_verdict("", "Running as unit: run-u5.service\nFinished with result: timeout\n", 1, 2.1)
    assert hung.status == "unavailable" and hung.timed_out and "time limit" in hung.reason
    broken = parse_verdict(_answer({"accepted": None, "stage": "import", "error_type": "ImportError",
                                    "error": "libcudart.so.13: cannot open shared object file"}), "", 0)
    assert broken.status == "unavailable" and "libcudart" in broken.reason and not broken.timed_out
    missing = parse_verdict("", "Failed to execute /opt/none/python3: No such file or directory\n", 203)
    assert missing.status == "unavailable" and "No such file" in missing.reason
    garbage = parse_verdict(MARKER + "{not json\n", "", 0)
    assert garbage.status == "unavailable"


# --------------------------------------------------------------------------- what it means
def test_prediction_and_differences_from_a_start() -> None:
    verdict = parse_verdict(_answer({"accepted": True, "stage": "done", "sglang_version": "0.5.11", "changed": {
        "speculative_algorithm": ["NEXTN", "EAGLE"], "disable_piecewise_cuda_graph": [False, True],
        "attention_backend": [None, "flashinfer"], "random_seed": [None, 42]}}), "", 0, 0.3)
    server = {"speculative_algorithm": "NEXTN", "tp_size": 2}
    expected = predicted(verdict, server)
    assert {a.field: a.value for a in expected} == {"speculative_algorithm": "EAGLE",
                                                     "disable_piecewise_cuda_graph": True}
    line = summary(verdict, "ct129", server)
    assert "SGLang 0.5.11 on ct129 accepts the launch" in line
    assert "`speculative_algorithm` NEXTN -> EAGLE" in line and "`disable_piecewise_cuda_graph` false -> true" in line
    assert "attention_backend flashinfer" in line and "random_seed" not in line
    seen = [Adjustment("speculative_algorithm", "EAGLE", ""), Adjustment("disable_piecewise_cuda_graph", "True", "")]
    assert differences(expected, seen) == []
    drift = differences(expected, [Adjustment("speculative_algorithm", "EAGLE3", ""),
                                   Adjustment("disable_radix_cache", True, "")])
    assert drift == ["predicted speculative_algorithm = EAGLE, the server runs with EAGLE3",
                     "predicted disable_piecewise_cuda_graph = true, not seen after the start",
                     "disable_radix_cache = true after the start was not predicted"]


def test_a_refusal_names_the_rule_that_should_have_caught_it() -> None:
    covering = site_for("0.5.11", "Currently standalone speculative decoding does not support dp attention.")
    assert covering is not None and covering.rules == ("SGD209",)
    assert "SGD209 should have caught it" in covering_text(covering)
    assert "no offline rule covers" in covering_text(site_for("0.5.11", "derived context_length (4096)"))
    refused = parse_verdict(_answer({"accepted": False, "stage": "resolve", "error_type": "AssertionError",
                                     "error": "Currently standalone speculative decoding does not support dp "
                                              "attention."}), "", 1)
    found = disagreements(refused, [], True, covering)
    assert [d.as_dict() for d in found] == [{
        "kind": "host_refused", "host": refused.message, "stage": "resolve", "offline": "accepted",
        "site": covering.key, "rules": ["SGD209"], "category": "offline"}]
    assert str(disagreements(refused, [], False, None)[0].offline).startswith("not checked")


# --------------------------------------------------------------------------- GPU holders
def test_holders_from_the_h200_capture_with_owners() -> None:
    apps = parse_compute_apps((H200 / "compute-apps-holder.noheader.nounits.csv").read_text())
    owners = parse_gpu_owners("546\troot\t/user.slice/user-0.slice/session-3.scope\n")
    (holder,) = with_owners(apps, owners)
    assert (holder.pid, holder.process_name, holder.used_memory_mib, holder.user) == (546, "python3", 137004, "root")
    assert holder.unit == "session-3.scope"
    gpu = GpuInfo(0, holder.gpu_uuid, "NVIDIA H200", "9.0", 143771, 137013)
    strangers, undecided = gpu_strangers([gpu], [holder], [0], "sglang")
    assert [s.describe() for s in strangers] == [
        "GPU 0: pid 546 (python3, user root, session-3.scope) holds 137004 MiB"]
    assert not undecided


def test_the_units_own_processes_are_not_strangers() -> None:
    gpus = [GpuInfo(0, "GPU-a", "NVIDIA RTX A6000", "8.6", 49140, 40000),
            GpuInfo(1, "GPU-b", "NVIDIA RTX A6000", "8.6", 49140, 45000)]
    procs = [GpuProcess(10, "sglang::scheduler_TP0", 40000, "GPU-a", "root", "/system.slice/sglang.service"),
             GpuProcess(11, "python3", 5000, "GPU-b", "alice", "/user.slice/user-1000.slice/session-4.scope"),
             GpuProcess(12, "python3", 100, "GPU-b", None, None)]
    strangers, undecided = gpu_strangers(gpus, procs, [0, 1], "sglang", unit_active=True)
    assert [h.pid for h in strangers] == [11] and [h.pid for h in undecided] == [12]
    strangers, _ = gpu_strangers(gpus, procs, [0, 1], "sglang", own_pids=(11,), unit_active=False)
    assert [h.pid for h in strangers] == [12]  # unit stopped: nobody unknown can be its own
    assert gpu_strangers(gpus, procs, [0], "sglang") == ((), ())  # only the unit's GPU 0
    assert owner_unit("/system.slice/sglang.service/payload") == "sglang.service"
    assert owner_unit("/") is None and owner_unit(None) is None
