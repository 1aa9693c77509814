"""SGLang's own verdict, asked of the simulated SGLang on a real systemd test host.

The check program (sgdeploy/sglang/check/program.py) is sent over SSH and run by the
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

PROGRAM = (Path(__file__).resolve().parents[1] / "sgdeploy" / "sglang" / "check" / "program.py").read_text()
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


# --------------------------------------------------------------------------- wired into plan and apply
def _profile(tmp_path: Path, name: str, port: int, edit=lambda t: t) -> Path:  # type: ignore[no-untyped-def]
    from tests.variants import reference

    path = tmp_path / f"{name}.toml"
    path.write_text(edit(reference(port)))
    return path


def _run(capsys, *argv: str) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    from sgdeploy import cli

    capsys.readouterr()
    code = cli.main(list(argv))
    return code, capsys.readouterr().out


def test_plan_and_apply_ask_sglang_on_the_host(host_factory, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from tests.faults import inventory_via
    from tests.hosts import SimSettings, free_port

    hs = host_factory(HostSpec.like("ct129", sim=SimSettings(startup_s=1.0, release_delay_s=0.3)))
    port = free_port()
    inventory = str(hs.inventory_path)
    # Without enforce_piecewise_cuda_graph SGLang 0.5.11 turns the piecewise graph off for this model.
    plain = _profile(tmp_path, "plain", port, lambda t: t.replace("enforce_piecewise_cuda_graph = true\n", ""))
    code, out = _run(capsys, "plan", str(plain), "--inventory", inventory)
    assert code == 0, out
    assert ("SGLang's own check: SGLang 0.5.11 on ct129 accepts the launch; it will resolve "
            "`disable_piecewise_cuda_graph` false -> true, `speculative_algorithm` NEXTN -> EAGLE") in out
    assert out.index("unit diff:") < out.index("SGLang's own check:")
    code, out = _run(capsys, "apply", str(plain), "--inventory", inventory, "--json", "--settle", "1")
    result = json.loads(out)
    assert code == 0 and result["sglang_check"]["status"] == "accepted", out[-2000:]
    assert {a["field"] for a in result["sglang_check"]["predicted"]} == {"disable_piecewise_cuda_graph",
                                                                       "speculative_algorithm"}
    assert result["sglang_check"]["differences"] == [], result["sglang_check"]
    # --no-sglang-check: no check at all
    code, out = _run(capsys, "plan", str(plain), "--inventory", inventory, "--no-sglang-check", "--json")
    assert code == 0 and json.loads(out)["sglang_check"] is None

    # A broken install: a warning and the catalog's verdict, never a traceback.
    hs.configure_sim("ct129", broken_import="libcudart.so.13: cannot open shared object file")
    other = _profile(tmp_path, "other", port, lambda t: t.replace("max_running_requests = 16",
                                                                  "max_running_requests = 12"))
    code, out = _run(capsys, "apply", str(other), "--inventory", inventory, "--json", "--settle", "1")
    result = json.loads(out)
    warned = [d for d in result["diagnostics"] if d["rule"] == "SGD712"]
    assert code == 0 and warned and warned[0]["severity"] == "warning" and "libcudart" in warned[0]["message"]
    hs.configure_sim("ct129", broken_import="")

    # A release without a bundled catalog (a dev build): offline says what it could not check, the
    # host's SGLang decides, and apply goes on with its verdict.
    from tests.hosts.machine import find_catalog

    dev = "0.5.24.dev0"  # its flags: 0.5.23's
    hs.ssh("ct129", "systemctl stop sglang.service")
    (hs["ct129"].root / f"opt/sglang-sim/catalogs/{dev}.json").write_bytes(find_catalog("0.5.23"))
    hs.ssh("ct129", f"cd /opt/sglang-sim && mv sglang-0.5.11.dist-info sglang-{dev}.dist-info && "
                    f"sed -i 's/^Version: .*/Version: {dev}/' sglang-{dev}.dist-info/METADATA")
    dev_inventory = inventory_via(hs.inventory_path, tmp_path / "dev.toml", "ct129", sglang_version=dev)
    small = ('[deploy]\nhost = "ct129"\nunit = "sglang"\npython = "/root/ml-env/bin/python3"\n'
             f'ready_timeout_s = 60\n\n[server]\nmodel_path = "/root/models/Qwen3-8B"\nhost = "0.0.0.0"\n'
             f"port = {port}\nmax_running_requests = 8\n")
    third = tmp_path / "small.toml"
    third.write_text(small)
    code, out = _run(capsys, "validate", str(third), "--inventory", str(dev_inventory), "--format", "json")
    (checked,) = json.loads(out)["profiles"]
    assert code == 0 and any(d["rule"] == "SGD032" and "checked against the nearest older release, 0.5.23"
                             in d["message"] for d in checked["diagnostics"]), out
    code, out = _run(capsys, "apply", str(third), "--inventory", str(dev_inventory), "--json", "--settle", "1")
    result = json.loads(out)
    assert code == 0 and result["status"] == "ready", out[-2000:]
    assert result["sglang_check"]["sglang_version"] == dev
    assert any(d["rule"] == "SGD703" and d["severity"] == "warning" for d in result["diagnostics"])
    tls = tmp_path / "tls.toml"
    # folders where the files should be: preflight (SGD713) sees them readable, SGLang refuses them
    hs.ssh("ct129", "mkdir -p /etc/sglang/tls/key.pem /etc/sglang/tls/cert.pem")
    tls.write_text(small + 'ssl_keyfile = "/etc/sglang/tls/key.pem"\nssl_certfile = "/etc/sglang/tls/cert.pem"\n')
    code, out = _run(capsys, "apply", str(tls), "--inventory", str(dev_inventory), "--json")
    result = json.loads(out)
    assert code == 2 and any(d["rule"] == "SGD711" for d in result["diagnostics"]), out[-2000:]
    assert result["disagreements"][0]["offline"].startswith("not checked")
    code, out = _run(capsys, "apply", str(tls), "--inventory", str(dev_inventory), "--json", "--no-sglang-check")
    result = json.loads(out)
    assert code == 2 and any(d["rule"] == "SGD703" and d["severity"] == "error" for d in result["diagnostics"])
    code, out = _run(capsys, "history", "--host", "ct129", "--unit", "sglang", "--inventory", inventory, "--json")
    refused = [r for r in json.loads(out)["deployments"] if r["outcome"] == "refused"]
    assert refused and refused[0]["disagreements"][0]["kind"] == "host_refused"
