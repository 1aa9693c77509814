"""sgdeploy against a real SGLang server on a real H200 (bench/h200_real_deploy.sh): the journals,
endpoints and outputs it kept under tests/fixtures/h200-real/, replayed on a machine without a GPU.

The first real cold start found a defect the simulated host could not: SGLang 0.5.11 builds its
rope kernel with tvm_ffi at the first forward pass (CUDA graph capture), which runs `ninja` from
PATH; the unit had systemd's PATH, without the venv's bin directory, so the server died
(cold-no-ninja.*). The unit now puts the interpreter's bin directory first (test_render.py).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any, cast

import pytest

from sgdeploy.core.diagnostics import Severity
from sgdeploy.deploy.apply import kv_cache_findings
from sgdeploy.logs import read_log
from sgdeploy.logs.reader import LogReader
from sgdeploy.profile.model import load_profile
from sgdeploy.review.report import logcheck_text
from sgdeploy.sglang.sandbox import NVIDIA_DEVICE_GROUPS

REAL = Path(__file__).parent / "fixtures" / "h200-real"


def real_lines(name: str) -> list[str]:
    return (REAL / name).read_text(encoding="utf-8").splitlines()


def test_logcheck_names_the_missing_ninja_of_the_real_cold_start() -> None:
    lines = real_lines("cold-no-ninja.log")
    report = read_log(lines, None, "0.5.11")
    assert not report.ready
    assert report.failure is not None
    assert report.failure.kind == "graph_capture_failed"
    assert lines[report.failure.line - 1] == "FileNotFoundError: [Errno 2] No such file or directory: 'ninja'"
    names = [p.name for p in report.phases]
    assert names[:4] == ["args_parsed", "dist_init", "weights_loaded", "kv_cache_allocated"]
    assert report.kv_cache_tokens == 801003


def test_the_journal_of_the_real_failure_is_read_as_the_plain_log() -> None:
    """`-o short-precise` (what `journalctl -u` shows a person) and `-o cat` give the same verdict."""
    journal = read_log(real_lines("cold-ninja-loop.journal"), None, "0.5.11")
    plain = read_log(real_lines("cold-ninja-loop.log"), None, "0.5.11")
    assert journal.failure is not None and plain.failure is not None
    assert journal.failure.kind == plain.failure.kind == "graph_capture_failed"
    assert journal.failure.message == plain.failure.message
    assert "Too many levels of symbolic links: 'ninja'" in plain.failure.message


def real_apply(name: str) -> dict[str, Any]:
    return cast(dict[str, Any], json.loads((REAL / name).read_text(encoding="utf-8")))


def started_lines(name: str) -> list[str]:
    """The lines of the unit's last start in a `-o cat` window (what the follower reads by invocation)."""
    lines = real_lines(name)
    last = max(i for i, line in enumerate(lines) if line.startswith("Started sglang.service"))
    return lines[last + 1:]


@pytest.mark.parametrize("name", ["restart.log", "restart.journal"])
def test_the_real_restart_is_read_phase_by_phase_as_apply_read_it(name: str) -> None:
    """A changed flag on the H200 (big-a -> big-b, 8B, 801,003 KV tokens): the window holds the old
    server's last requests, its stop and the new start. Read whole, it gives the phases apply
    followed live, in the same order, and the same startup times; apply missed only the 11 KB
    server_args= line, which `journalctl -o json` wrote as null until the follower asked for --all."""
    applied = real_apply("restart.apply.json")
    live = [e["name"] for e in applied["events"] if e["event"] in ("phase", "progress")]
    report = read_log(real_lines(name), None, "0.5.11")
    assert report.ready and report.failure is None
    assert report.kv_cache_tokens == applied["kv_cache_tokens"] == 801003
    read = [p.name for p in report.phases]
    assert read == ["args_parsed", *[n for n in live if not n.endswith("_begin")]]
    assert report.server_args is not None and report.server_args["mem_fraction_static"] == 0.8
    # timed from the new server's first line, not from the old server's lines before the stop
    assert report.started == "2026-12-05T07:53:47"
    assert report.phase_times() == applied["phase_times"]


def test_the_follower_reads_the_real_invocation_with_its_server_args() -> None:
    """The new invocation's lines, as the follower gets them, fed one by one: the dump is read."""
    reader = LogReader(None, "0.5.11")
    names = [e.name for line in started_lines("restart.log") for e in reader.feed(line) if e.kind == "phase"]
    assert names[0] == "args_parsed" and names[-1] == "ready"


def test_a_real_stop_is_no_failure() -> None:
    """How SGLang 0.5.11 stopped under systemd on the H200: "SIGTERM received ... Draining", a
    scheduler "crashed with exit code -15", "SIGQUIT received", and the main process SIGKILLed by
    SGLang itself ("status=9/KILL", "Failed with result 'signal'"). The server it ends was ready."""
    lines = real_lines("stop-sigquit.journal")
    assert any("crashed with exit code -15. Triggering SIGQUIT for cleanup" in line for line in lines)
    assert any("Failed with result 'signal'" in line for line in lines)
    report = read_log(lines, None, "0.5.11")
    assert report.ready and report.failure is None


def test_a_server_started_by_hand_without_the_venv_on_path_names_ninja() -> None:
    """`python3 -m sglang.launch_server` over SSH with the venv's python but not its bin/ on PATH
    (as a person often starts it) dies as the unit did before it set PATH: logcheck names it."""
    lines = real_lines("hand-no-ninja.log")
    report = read_log(lines, None, "0.5.11")
    assert report.failure is not None and report.failure.kind == "graph_capture_failed"
    assert lines[report.failure.line - 1] == "FileNotFoundError: [Errno 2] No such file or directory: 'ninja'"


def test_a_kv_cache_of_3951_tokens_is_a_ready_server_with_a_warning(tmp_path: Path) -> None:
    """mem_fraction_static 0.101 of 140 GiB beside 13.5 GiB of weights: SGD511 lets it through, and
    SGLang 0.5.11 starts with 0.48 GB of KV cache, as SGD511's arithmetic says it would: fewer
    tokens than one request of the context length, which apply and logcheck now say (SGD714)."""
    applied = real_apply("small-kv.apply.json")
    assert applied["status"] == "ready" and applied["kv_cache_tokens"] == 3951
    report = read_log(real_lines("small-kv.log"), None, "0.5.11")
    assert report.ready and report.kv_cache_tokens == 3951 and report.context_len == 8192
    assert "KV cache: 3951 tokens, fewer than one request of the context length 8192 (SGD714)" in logcheck_text(
        report, "small-kv.log")
    profile = tmp_path / "big-oom.toml"
    profile.write_text('[deploy]\nhost = "h200"\n\n[server]\nmodel_path = "/opt/models/llama-8b"\n'
                       "mem_fraction_static = 0.101\n")
    found = kv_cache_findings(load_profile(profile), report)
    assert [(d.rule, d.severity, d.field, d.line) for d in found] == [
        ("SGD714", Severity.WARNING, "server.mem_fraction_static", 6)]
    big = read_log(real_lines("restart.log"), None, "0.5.11")
    assert kv_cache_findings(load_profile(profile), big) == []
    refused = real_apply("refused-weights.apply.json")
    assert refused["status"] == "refused" and [d["rule"] for d in refused["diagnostics"]] == ["SGD511"]


def test_a_shard_the_strict_units_user_could_not_read_is_named_with_its_fix() -> None:
    """The first strict start on the GPU: shards saved 0600 by root; safetensors says 'No such file
    or directory' for a file the process may not open. preflight now refuses it (SGD704,
    test_hardening_hosts.py); logcheck names the cause of a log that shows it."""
    for name in ("strict/unreadable-weights.log", "strict/unreadable-weights.journal"):
        report = read_log(real_lines(name), None, "0.5.11")
        assert report.failure is not None and report.failure.kind == "model_not_found", name
        shard = "/opt/models/llama-8b/model-00001-of-00003.safetensors"
        assert f"No such file or directory: {shard}" in report.failure.message
        assert "can read it (chmod a+r, or chown)" in report.failure.message
        # the lines shown with it are SGLang's frames, not concurrent.futures re-raising them
        shown = [text for _, text in report.failure.context]
        assert not any("concurrent/futures" in text for text in shown), shown
        assert "weight_utils.py\", line 971, in _load_file" in shown[-2]


def test_a_log_with_a_failed_start_then_the_rollback_reports_the_last_start() -> None:
    """apply's window of the journal: the partial download's start failed, the rollback's reached
    ready. Phases, settings and verdict are the last start's; the failure before it is kept."""
    lines = real_lines("adopt/partial.log")
    report = read_log(lines, None, "0.5.11")
    assert report.ready and report.failure is None
    (earlier,) = report.earlier_failures
    assert earlier.kind == "model_not_found" and "incomplete metadata" in earlier.message
    assert all(p.line > earlier.line for p in report.phases), report.phases
    assert report.phase("args_parsed") is not None
    assert [(a.field, a.value) for a in report.auto_adjusted] == [("disable_piecewise_cuda_graph", True)]
    assert report.as_json()["earlier_failures"][0]["kind"] == "model_not_found"
    text = logcheck_text(report, "partial.log")
    assert "an earlier start in this log failed: model_not_found at line" in text
    # the same two starts written by hand (no systemd lines): the second server_args line splits them
    by_hand = [line for line in lines if not line.startswith(("Start", "Stop", "sglang.service"))]
    again = read_log(by_hand, None, "0.5.11")
    assert again.ready and [f.kind for f in again.earlier_failures] == ["model_not_found"]


def test_the_strict_unit_on_the_gpu_kept_its_sandbox_and_its_exposure() -> None:
    """PHASE=5 of bench/h200_real_deploy.sh: what systemd reported for the running strict unit."""
    exposure = (REAL / "strict/security.txt").read_text(encoding="utf-8").splitlines()[-1]
    assert float(exposure.split("sglang.service:")[1].split()[0]) <= 4.5, exposure
    shown = (REAL / "strict/show.txt").read_text(encoding="utf-8")
    allowed = {line.split("=", 1)[1].split()[0] for line in shown.splitlines() if line.startswith("DeviceAllow=")}
    assert {f"char-{group}" for group in NVIDIA_DEVICE_GROUPS} <= allowed
    assert "User=sglang" in shown and "ProtectSystem=strict" in shown
    for name in ("strict/cold.apply.json", "strict/flag-change.apply.json", "strict/rollback.apply.json"):
        assert real_apply(name)["status"] == "ready", name
    for name in ("strict/flag-change.journal", "strict/rollback.journal"):
        assert read_log(real_lines(name), None, "0.5.11").ready, name


# --------------------------------------------------------------------------- the weight-cache daemon
WEIGHT_CACHE = REAL / "weight-cache"
RUNS = ["llama-20b-1", "llama-20b-2", "llama-8b"]


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("step", ["client-first", "client-flag-change-warm", "plain-flag-change-warm",
                                  "plain-flag-change-dropped"])
def test_the_real_0_5_17_starts_are_read_as_apply_read_them(run: str, step: str) -> None:
    """SGLang 0.5.17 on an H100 (PHASE=8): each start, read whole from its window, is ready with the
    phase times apply reported; a client of the daemon maps the weights in well under a second."""
    applied = json.loads((WEIGHT_CACHE / run / f"{step}.out").read_text(encoding="utf-8"))
    lines = (WEIGHT_CACHE / run / f"{step}.log").read_text(encoding="utf-8").splitlines()
    report = read_log(lines, None, "0.5.17")
    assert applied["status"] == "ready" and report.ready and report.failure is None
    assert report.phase_times() == applied["phase_times"]
    names = [p.name for p in report.phases]
    assert names[:4] == ["args_parsed", "dist_init", "weights_loaded", "kv_cache_allocated"], names
    assert names[-1] == "ready"
    ipc = any("[IpcModelLoader] Loaded model via IPC (mode=client)" in line for line in lines)
    assert ipc is step.startswith("client")
    if step == "client-flag-change-warm":
        assert applied["phase_times"]["weights"] < 0.5


@pytest.mark.parametrize("run", RUNS)
def test_plan_said_which_restart_each_real_change_needed(run: str) -> None:
    first = (WEIGHT_CACHE / run / "plan-client.out").read_text(encoding="utf-8")
    kept = (WEIGHT_CACHE / run / "plan-client-flag-change.out").read_text(encoding="utf-8")
    assert "restart: cold (nothing runs yet" in first
    assert "restart: weights kept (the daemon keeps the weights" in kept


@pytest.mark.parametrize("run", RUNS)
def test_the_real_daemon_unit_started_once_and_served_each_client(run: str) -> None:
    """The daemon's journal: loaded from disk once, `Started` only once it was ready (ExecStartPost=
    waits for its ready file), then served both clients of the run over its /tmp socket."""
    journal = (WEIGHT_CACHE / run / "daemon.journal").read_text(encoding="utf-8")
    assert journal.count("Loading model from disk:") == 1
    loaded = journal.index("Model loaded from disk in")
    assert journal.index("Listening on /tmp/sglang_weight_cache_rank0.sock") > loaded
    assert journal.index("Started sglang-weights.service") > loaded
    assert journal.count("Serving 292 IPC handles to engine" if "20b" in run else "IPC handles to engine") == 2


def test_the_documented_weight_cache_table_is_the_fixtures_table() -> None:
    """docs/weight-cache.md's table of the real runs is what bench/h200_real/figures.py makes of
    the fixtures."""
    from bench.h200_real.figures import weight_cache_table

    doc = (Path(__file__).parents[1] / "docs" / "weight-cache.md").read_text(encoding="utf-8")
    assert weight_cache_table(WEIGHT_CACHE) in doc


# ------------------------------------------------------- the levers of a restart that keeps the weights
H200_8B = WEIGHT_CACHE / "llama-8b-h200"
LEVERS = {  # PHASE=small's steps on an H200 (2026-12-06) and the [server] keys each added to the client
    "202-levers-all": {"skip_server_warmup": True, "disable_prefill_cuda_graph": True},
    "203-levers-prefill-graphs-512": {"skip_server_warmup": True, "cuda_graph_max_bs_prefill": 512},
    "204-lever-skip-warmup": {"skip_server_warmup": True},
}


def lever_launch(step: str) -> dict[str, Any]:
    return {"model_path": "/opt/models/llama-8b", "attention_backend": "triton", "sampling_backend": "pytorch",
            "mem_fraction_static": 0.8, "cuda_graph_max_bs": 32, "weight_cache_mode": "client", **LEVERS[step]}


@pytest.mark.parametrize("step", sorted(LEVERS))
def test_each_lever_on_the_gpu_was_read_as_apply_read_it(step: str) -> None:
    """The start after each lever's apply is ready with apply's phase times; a launch without
    SGLang's warm-up was judged ready on /health_generate (one token through the scheduler)."""
    from bench.h200_real.figures import stop_s

    applied = json.loads((H200_8B / f"{step}.out").read_text(encoding="utf-8"))
    report = read_log((H200_8B / f"{step}.log").read_text(encoding="utf-8").splitlines(), lever_launch(step),
                      "0.5.17")
    assert applied["status"] == "ready" and report.ready and report.failure is None
    assert report.phase_times() == applied["phase_times"]
    health = next(s["why"] for s in applied["steps"] if s["step"] == "check_health")
    assert health.startswith("GET /health_generate "), health
    # sgdeploy's unit turns SGLang's crash diagnostics off: the old server stops in under a second
    # (5.1-6.1 s on the H100 with them on: the 0.5.17 runs above)
    stop = stop_s(H200_8B / f"{step}.journal")
    assert stop is not None and stop < 1.0, stop
    assert applied["downtime"]["stop_s"] < 1.0, applied["downtime"]
    journal = (H200_8B / f"{step}.journal").read_text(encoding="utf-8")
    assert "before crash diagnostics" not in journal


def test_a_prefill_graph_the_launch_turned_off_is_no_adjustment_of_sglang() -> None:
    """0.5.17 logs "Disable prefill CUDA graph because cuda_graph_config resolved
    prefill.backend='disabled' (... or auto-disable rules)" for --disable-prefill-cuda-graph too;
    the apply of that run reported it as SGLang's own change (with the value None, the dump's
    unset flag). The launch asked for it: nothing to report; without the flag it is SGLang's."""
    lines = (H200_8B / "202-levers-all.log").read_text(encoding="utf-8").splitlines()
    recorded = json.loads((H200_8B / "202-levers-all.out").read_text(encoding="utf-8"))["auto_adjusted"]
    assert [a["field"] for a in recorded] == ["cuda_graph_backend_prefill"]  # what the run printed
    assert read_log(lines, lever_launch("202-levers-all"), "0.5.17").auto_adjusted == ()
    for asked in ({"cuda_graph_backend_prefill": "disabled"}, {"cuda_graph_config": '{"prefill": {"backend": "disabled"}}'}):
        launch = {k: v for k, v in lever_launch("202-levers-all").items() if k != "disable_prefill_cuda_graph"}
        assert read_log(lines, {**launch, **asked}, "0.5.17").auto_adjusted == (), asked
    launch = {k: v for k, v in lever_launch("202-levers-all").items() if k != "disable_prefill_cuda_graph"}
    adjusted = read_log(lines, launch, "0.5.17").auto_adjusted
    assert ("cuda_graph_backend_prefill", "disabled") in [(a.field, a.value) for a in adjusted]


def test_the_prefill_graphs_are_the_largest_lever_left_after_the_weights() -> None:
    """From the KV cache to ready on the same H200: all prefill graphs (0.5.17's 58 sizes up to
    8,192 tokens), those up to 512 tokens, none."""
    from bench.h200_real.figures import phases

    def kv_to_ready(step: str) -> float:
        _, ends = phases(H200_8B / f"{step}.journal")
        return ends["ready"] - ends["KV cache"]

    full, capped, off = (kv_to_ready(s) for s in ("204-lever-skip-warmup", "203-levers-prefill-graphs-512",
                                                  "202-levers-all"))
    assert off < capped < full and full - off > 8, (full, capped, off)


# ------------------------------------------------------------------ issue #37's bar, on one machine
BAR_RUNS = {"llama-20b-bar": WEIGHT_CACHE / "llama-20b-bar", "llama-8b-bar": WEIGHT_CACHE / "llama-8b-bar"}


def outages_by_kind(run: str) -> dict[str, list[float]]:
    """The /generate outage of each restart of one run of the same machine, by kind of apply."""
    from bench.h200_real.figures import WEIGHT_CACHE_COLUMNS, restarts

    column = WEIGHT_CACHE_COLUMNS.index("/generate outage")
    kinds: dict[str, list[float]] = {}
    for name, step, cells in restarts(WEIGHT_CACHE):
        if name == run and cells[column] is not None:
            kinds.setdefault(step, []).append(cast(float, cells[column]))
    return kinds


def test_a_change_that_keeps_38_gb_of_weights_restarts_in_under_half_of_todays_cold_restart() -> None:
    """Issue #37's bar, on one H100 in one run (2026-12-06, SGLang 0.5.17, llama-20b: 38.2 GB): the
    flag change that keeps the weights, with all levers, against today's restart of the same change
    with the page cache dropped (at most half) and warm (below it), three runs of each but warm."""
    from statistics import median

    kinds = outages_by_kind("llama-20b-bar")
    kept, dropped, warm = (kinds[k] for k in ("levers-all", "today-flag-change-dropped", "today-flag-change-warm"))
    assert (len(kept), len(dropped), len(warm)) == (3, 3, 2)
    assert median(kept) <= 0.5 * median(dropped), (kept, dropped)
    assert max(kept) < min(warm), (kept, warm)


@pytest.mark.parametrize("run", sorted(BAR_RUNS))
def test_every_restart_of_the_bar_run_was_ready_and_read_as_apply_read_it(run: str) -> None:
    """Each apply of the run: ready, its phase times those of the log read whole; sgdeploy's unit
    stops the old server in about a second, today's (crash diagnostics on) after their 5 s sleep;
    the daemon's clients map the weights, today's read them."""
    for step in map(json.loads, (BAR_RUNS[run] / "steps.jsonl").read_text(encoding="utf-8").splitlines()):
        if step["argv"][1] != "apply":
            continue
        stem = BAR_RUNS[run] / f"{step['n']}-{step['step']}"
        applied = json.loads(stem.with_suffix(".out").read_text(encoding="utf-8"))
        lines = stem.with_suffix(".log").read_text(encoding="utf-8").splitlines()
        report = read_log(lines, None, "0.5.17")
        assert applied["status"] == "ready" and report.ready and report.failure is None, stem.name
        assert report.phase_times() == applied["phase_times"], stem.name
        assert applied["auto_adjusted"] == [], stem.name
        today = step["step"].startswith("today-")
        assert any("[IpcModelLoader] Loaded model via IPC (mode=client)" in line for line in lines) is not today
        if "stop_s" in applied["downtime"] and step["step"] != "today-cold":  # today-cold stops a client
            assert (applied["downtime"]["stop_s"] > 5.0) is today, (stem.name, applied["downtime"])


@pytest.mark.parametrize("run", sorted(BAR_RUNS))
def test_each_real_0_5_17_stop_is_no_failure(run: str) -> None:
    """How SGLang 0.5.17 stopped each server of the run on the H100: "Draining", then a scheduler
    "crashed with exit code -15" and SIGQUIT (after 5 s of crash diagnostics where they were on) or
    the watchdog's "Gracefully exiting", and always "kill_process_tree called" (0.5.13+) before
    systemd saw status=9/KILL. Read after the server's own start: a ready server, no failure."""
    for this, after in itertools.pairwise(sorted(BAR_RUNS[run].glob("*.log"))):
        own = this.read_text(encoding="utf-8").splitlines()
        nxt = after.read_text(encoding="utf-8").splitlines()
        start = max(i for i, line in enumerate(own) if line.startswith("Started sglang.service"))
        stop = nxt[:min(i for i, line in enumerate(nxt) if line.startswith("Starting sglang.service"))]
        said = [line for line in stop if "kill_process_tree called" in line or "Sleeping 5 seconds" in line
                or "Gracefully exiting" in line or "Triggering SIGQUIT" in line]
        assert "kill_process_tree called" in said[-1], (after.name, said)
        report = read_log(own[start:] + stop, None, "0.5.17")
        assert report.ready and report.failure is None, (this.name, report.failure)


def test_the_first_start_on_a_fresh_host_compiles_what_later_starts_find_cached() -> None:
    """The daemon's first client on the fresh host against the same launch later in the run:
    SGLang's own startup timings put the difference in the prefill graphs' capture."""
    def prefill_capture(step: str) -> float:
        text = (BAR_RUNS["llama-20b-bar"] / f"{step}.journal").read_text(encoding="utf-8")
        return float(text.split("cuda_graph={prefill=")[1].split(",")[0])

    first, later = prefill_capture("161-client-first"), prefill_capture("184-client-first")
    assert first - later > 20, (first, later)


def test_the_documented_bar_table_is_the_fixtures_medians() -> None:
    from bench.h200_real.figures import lever_table

    doc = (Path(__file__).parents[1] / "docs" / "weight-cache.md").read_text(encoding="utf-8")
    rows = [r for r in lever_table(WEIGHT_CACHE).splitlines() if r.split("|")[1].strip() in BAR_RUNS]
    assert len(rows) == 16 and all(row in doc for row in rows)


def test_read_without_its_profile_a_graph_the_launch_turned_off_is_still_the_launchs() -> None:
    """A user's log read alone (`logcheck` without --profile): 0.5.14+ resolves CUDA graphs into
    cuda_graph_config and dumps the launch's own switches as given, so a dump with
    disable_prefill_cuda_graph=True is the launch's request; the same start with the switch off
    in the dump is SGLang's own doing."""
    lines = (BAR_RUNS["llama-20b-bar"] / "163-levers-all.log").read_text(encoding="utf-8").splitlines()
    assert read_log(lines, None, "0.5.17").auto_adjusted == ()
    unasked = [line.replace("disable_prefill_cuda_graph=True", "disable_prefill_cuda_graph=False")
               for line in lines]
    adjusted = read_log(unasked, None, "0.5.17").auto_adjusted
    assert [(a.field, a.value) for a in adjusted] == [("cuda_graph_backend_prefill", "disabled")]


@pytest.mark.parametrize("step", ["161-client-first", "163-levers-all", "185-levers-prefill-graphs-512",
                                  "186-lever-skip-warmup", "166-today-flag-change-dropped"])
def test_sglangs_own_startup_timings_are_read_and_agree_with_the_journal(step: str) -> None:
    """0.5.17 logs `Engine startup timings (s): ...` once before ready: logcheck shows it in
    SGLang's names; its graph seconds agree with the capture lines' own stamps, and the graph
    phases SGLang did not capture (prefill with the prefill graphs off) are left out."""
    from bench.h200_real.figures import phases

    lines = (BAR_RUNS["llama-20b-bar"] / f"{step}.log").read_text(encoding="utf-8").splitlines()
    report = read_log(lines, None, "0.5.17")
    timings = cast(dict[str, Any], report.engine_timings)
    assert set(timings) == {"load_weight", "kv_cache_allocation", "scheduler_e2e", "tokenizer_e2e", "cuda_graph"}
    graphs = timings["cuda_graph"]
    _, ends = phases(BAR_RUNS["llama-20b-bar"] / f"{step}.journal")
    if "piecewise graphs" in ends:  # prefill captured first, from the KV cache on
        assert set(graphs) == {"prefill", "decode"}
        assert abs(graphs["prefill"] - (ends["piecewise graphs"] - ends["KV cache"])) < 1.0, (graphs, ends)
    else:
        assert set(graphs) == {"decode"}
    assert report.as_json()["engine_timings"] == timings
    text = logcheck_text(report, f"{step}.log", profile_given=False)
    assert "SGLang's own timings: load_weight " in text and f"decode {graphs['decode']:.2f} s" in text
    weights_from_disk = step.endswith("dropped")
    assert (timings["load_weight"] > 10) is weights_from_disk, timings


# ------------------------------------------------------------- the read-ahead's share, on a slower disk
READAHEAD_RUNS = {"llama-20b-readahead": WEIGHT_CACHE / "llama-20b-readahead",
                  "llama-8b-readahead": WEIGHT_CACHE / "llama-8b-readahead"}


def test_reading_38_gb_ahead_takes_the_disk_out_of_a_restart_from_a_cold_page_cache() -> None:
    """Today's restart of the 20B model with the page cache dropped (2026-12-06, a second H100
    whose disk reads ~1.4 GB/s), three with the read-ahead before the stop and three without:
    every one with it was out for less than any without, by ~20 s at the median."""
    from statistics import median

    kinds = outages_by_kind("llama-20b-readahead")
    ahead, without = kinds["today-flag-change-dropped-read-ahead"], kinds["today-flag-change-dropped"]
    assert (len(ahead), len(without)) == (3, 3)
    assert max(ahead) < min(without) and median(without) - median(ahead) > 15, (ahead, without)


@pytest.mark.parametrize("run", sorted(READAHEAD_RUNS))
def test_read_ahead_weights_load_at_page_cache_speed(run: str) -> None:
    """SGLang's own `load_weight`: with the read-ahead as at the first start (the model written
    just before, so in the page cache), without it the disk's several times that; the read ran
    before the stop, while the old server still served."""
    folder = READAHEAD_RUNS[run]
    loads: dict[str, list[float]] = {}
    for step in map(json.loads, (folder / "steps.jsonl").read_text(encoding="utf-8").splitlines()):
        stem = folder / f"{step['n']}-{step['step']}"
        applied = json.loads(stem.with_suffix(".out").read_text(encoding="utf-8"))
        assert applied["status"] == "ready", stem.name
        loads.setdefault(step["step"], []).append(applied["engine_timings"]["load_weight"])
        if step["step"].endswith("read-ahead"):
            journal = stem.with_suffix(".journal").read_text(encoding="utf-8")
            assert "Stopping sglang.service" in journal
    cached = max(loads["today-cold"] + loads["today-flag-change-dropped-read-ahead"])
    assert 2.5 * cached < min(loads["today-flag-change-dropped"]), loads


def test_the_8b_models_first_start_on_a_fresh_host_compiles_what_later_starts_find_cached() -> None:
    """0.5.17 with the 8B model: its first start captured the graphs in ~3x the later starts'
    time (SGLang's own startup timings), as the 20B model's did on the bar run."""
    folder = READAHEAD_RUNS["llama-8b-readahead"]
    captures = {}
    for log in sorted(folder.glob("*.log")):
        graphs = cast(dict[str, Any], read_log(log.read_text(encoding="utf-8").splitlines(), None,
                                                "0.5.17").engine_timings)["cuda_graph"]
        captures[log.stem] = graphs["prefill"] + graphs["decode"]
    first, *later = captures.values()
    assert next(iter(captures)) == "221-today-cold" and len(later) == 3
    assert first > 2.5 * max(later) and first - max(later) > 30, captures


def test_the_documented_read_ahead_table_is_the_fixtures_medians() -> None:
    from bench.h200_real.figures import lever_table

    doc = (Path(__file__).parents[1] / "docs" / "weight-cache.md").read_text(encoding="utf-8")
    rows = [r for r in lever_table(WEIGHT_CACHE).splitlines() if r.split("|")[1].strip() in READAHEAD_RUNS]
    assert len(rows) == 4 and all(row in doc for row in rows)
