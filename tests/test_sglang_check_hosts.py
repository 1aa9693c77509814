"""SGLang's own verdict, asked of the simulated SGLang on a real systemd test host.

The check program (sgdeploy/sglangcheck/program.py) is sent over SSH and run by the
deployment's interpreter under `systemd-run --pipe --wait`, bounded by RuntimeMaxSec, the way
apply runs it: accepted with SGLang's adjustments, refused at parse and at resolution (a
refusal only the model's files can tell), a hung resolution killed at its limit, and a broken
install reported as "cannot run".
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from tests.hosts import HostSpec

pytestmark = pytest.mark.hosts

PROGRAM = (Path(__file__).resolve().parents[1] / "sgdeploy" / "sglangcheck" / "program.py").read_text()
MARKER = "@@sgdeploy:sglang-check@@"


def _check(hs, host, argv, limit_s=60, env=()):  # type: ignore[no-untyped-def]
    request = base64.b64encode(json.dumps({"argv": argv}).encode()).decode()
    props = " ".join(f"-p Environment={e}" for e in ("HF_HUB_OFFLINE=1", *env))
    cp = hs.ssh(host, f"systemd-run --pipe --wait --collect -p RuntimeMaxSec={limit_s} -p TimeoutStopSec=2 "
                      f"{props} /root/ml-env/bin/python3 - {request}", check=False, input=PROGRAM, timeout=90)
    answer = [line for line in cp.stdout.splitlines() if line.startswith(MARKER)]
    return (json.loads(answer[0][len(MARKER):]) if answer else None), cp


def test_verdicts_of_the_simulated_sglang(host_factory) -> None:  # type: ignore[no-untyped-def]
    hs = host_factory(HostSpec.like("ct129", name="chk"))
    hs.make_model("chk", "/models/tiny", "Qwen3ForCausalLM", max_position_embeddings=4096)
    accepted, _ = _check(hs, "chk", ["--model-path", "/models/tiny", "--speculative-algorithm", "NEXTN"])
    assert accepted["accepted"] is True and accepted["sglang_version"] == "0.5.11"
    assert accepted["changed"]["speculative_algorithm"] == ["NEXTN", "EAGLE"]
    assert accepted["gpu_memory_mib"] == 0
    parse, _ = _check(hs, "chk", ["--model-path", "/models/tiny", "--no-such-flag", "1"])
    assert (parse["accepted"], parse["stage"], parse["error_type"]) == (False, "parse", "ArgumentError")
    too_long = ["--model-path", "/models/tiny", "--context-length", "100000"]
    refused, _ = _check(hs, "chk", too_long)
    assert (refused["accepted"], refused["stage"], refused["error_type"]) == (False, "resolve", "ValueError")
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN" in refused["error"]
    allowed, _ = _check(hs, "chk", too_long, env=("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1",))
    assert allowed["accepted"] is True  # the unit's environment is SGLang's environment

    hs.configure_sim("chk", resolve_hang_s=30.0)
    hung, cp = _check(hs, "chk", ["--model-path", "/models/tiny"], limit_s=2)
    assert hung is None and "result: timeout" in cp.stderr
    hs.configure_sim("chk", resolve_hang_s=0.0, broken_import="libcudart.so.13: cannot open shared object file")
    broken, _ = _check(hs, "chk", ["--model-path", "/models/tiny"])
    assert (broken["accepted"], broken["stage"], broken["error_type"]) == (None, "import", "ImportError")
