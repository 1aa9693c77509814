"""The SGLang log reader against a corpus of startup logs (tests/logs/, verdicts in expected.json).

Each corpus file starts with a `# source: ...` line saying where it came from. The reader is fed
that line as an empty one, so line numbers in expected.json are the file's own line numbers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sgdeploy.logs import (
    FAILURE_KINDS,
    PHASES,
    LogReader,
    LogReport,
    expected_phases,
    parse_server_args,
    read_log,
    strip_line,
)

CORPUS = Path(__file__).parent / "logs"
NEW_FAILURE_FIELDS = ("confidence", "evidence", "consequences")
EXPECTED: dict[str, dict[str, Any]] = json.loads((CORPUS / "expected.json").read_text())


def corpus_lines(name: str) -> list[str]:
    lines = (CORPUS / name).read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("# source: "), f"{name}: first line must say where it came from"
    return ["", *lines[1:]]


def read(name: str) -> LogReport:
    exp = EXPECTED[name]
    return read_log(corpus_lines(name), exp.get("server"), exp.get("sglang_version"))


def test_every_log_has_a_verdict_and_every_kind_is_covered() -> None:
    logs = {p.name for p in CORPUS.glob("*.log")}
    assert logs == set(EXPECTED)
    kinds = {e["failure"]["kind"] for e in EXPECTED.values() if e["failure"]}
    assert kinds == set(FAILURE_KINDS)
    assert any(e["ready"] for e in EXPECTED.values())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_verdict(name: str) -> None:
    exp, report = EXPECTED[name], read(name)
    doc = report.as_json()
    assert doc["ready"] is exp["ready"]
    failure = doc["failure"]
    if exp["failure"] is None:
        assert failure is None
    else:
        assert failure is not None
        assert (failure["kind"], failure["line"]) == (
            exp["failure"]["kind"],
            exp["failure"]["line"],
        )
        assert failure["message"]
    assert doc["kv_cache_tokens"] == exp["kv_cache_tokens"]
    assert [[p["name"], p["line"]] for p in doc["phases"]] == exp["phases"]
    assert {a["field"]: a["value"] for a in doc["auto_adjusted"]} == exp["auto_adjusted"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_json_shape_is_specs(name: str) -> None:
    doc = read(name).as_json()
    assert set(doc) == {"ready", "failure", "phases", "kv_cache_tokens", "auto_adjusted"}
    json.dumps(doc)
    if doc["failure"] is not None:
        assert {"kind", "line", "message"} <= set(doc["failure"])
        assert set(doc["failure"]) <= {"kind", "line", "message", *NEW_FAILURE_FIELDS}
        assert doc["failure"]["kind"] in FAILURE_KINDS
    for phase in doc["phases"]:
        assert {"name", "line", "t"} <= set(phase)
        assert phase["name"] in PHASES
    for adj in doc["auto_adjusted"]:
        assert set(adj) == {"field", "value", "reason"} and adj["reason"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_incremental_reader_matches_batch(name: str) -> None:
    exp = EXPECTED[name]
    reader = LogReader(exp.get("server"), exp.get("sglang_version"))
    phase_events: list[tuple[str, int]] = []
    failure_events: list[tuple[str, int]] = []
    for line in corpus_lines(name):
        for event in reader.feed(line):
            if event.kind == "phase":
                phase_events.append((event.name, event.line))
            elif event.kind == "failure":
                failure_events.append((event.name, event.line))
    before_finish = reader.report()
    for event in reader.finish():
        failure_events.append((event.name, event.line))
    batch = read(name)
    assert reader.report() == batch
    assert sorted(phase_events, key=lambda e: e[1]) == [(p.name, p.line) for p in batch.phases]
    if batch.failure is not None:
        assert failure_events[-1] == (batch.failure.kind, batch.failure.line)
        assert batch.failure.context, "a failure comes with the lines that explain it"
    if batch.failure is not None and batch.failure.kind != "incomplete":
        assert before_finish.failure == batch.failure  # known before the end of input


def test_root_cause_is_the_error_not_the_sigquit() -> None:
    report = read("fail-cuda-oom-load-tp2.log")
    assert report.failure is not None
    assert "torch.OutOfMemoryError: CUDA out of memory" in report.failure.message
    assert any("Received sigquit" in line for line in corpus_lines("fail-cuda-oom-load-tp2.log"))


def test_graph_capture_failure_points_at_the_first_traceback() -> None:
    report = read("fail-graph-capture.log")
    assert report.failure is not None
    assert report.failure.message.startswith("torch.OutOfMemoryError")
    assert any("Capture cuda graph failed" in text for _, text in report.failure.context)


def test_reference_launch_expects_kv_graph_draft_ready() -> None:
    server = {
        "model_path": "/root/models/Qwen3.6-27B",
        "tp_size": 2,
        "speculative_algorithm": "NEXTN",
    }
    want = ["kv_cache_allocated", "cuda_graph_captured", "draft_graph_captured", "ready"]
    assert expected_phases(server, "0.5.11") == want
    assert expected_phases(server, None) == want
    report = read("ok-0.5.11-qwen36-mtp-tp2.log")
    assert report.missing(want) == []
    partial = read_log(corpus_lines("incomplete-journal-short-iso.log"), server, "0.5.11")
    assert partial.missing(want) == ["cuda_graph_captured", "draft_graph_captured", "ready"]


@pytest.mark.parametrize(
    ("server", "version", "want"),
    [
        ({}, "0.5.10", ["kv_cache_allocated", "cuda_graph_captured", "ready"]),
        ({"disable_cuda_graph": True}, "0.5.10", ["kv_cache_allocated", "ready"]),
        (
            {"disable_cuda_graph": True, "speculative_algorithm": "EAGLE"},
            "0.5.11",
            ["kv_cache_allocated", "ready"],
        ),
        ({"cuda_graph_backend_decode": "disabled"}, "0.5.23", ["kv_cache_allocated", "ready"]),
        (
            {"disable_cuda_graph": True, "cuda_graph_backend_decode": "full"},
            "0.5.23",
            ["kv_cache_allocated", "cuda_graph_captured", "ready"],
        ),
        (
            {"cuda_graph_config": '{"decode": {"backend": "disabled"}}'},
            "0.5.23",
            ["kv_cache_allocated", "ready"],
        ),
        (
            {"speculative_algorithm": "NGRAM"},
            "0.5.23",
            ["kv_cache_allocated", "cuda_graph_captured", "ready"],
        ),
    ],
)
def test_expected_phases(server: dict[str, Any], version: str, want: list[str]) -> None:
    assert expected_phases(server, version) == want


def test_silently_disabled_piecewise_graph_is_reported() -> None:
    report = read("ok-0.5.11-qwen36-mtp-tp2.log")
    adjusted = {a.field: a for a in report.auto_adjusted}
    assert adjusted["disable_piecewise_cuda_graph"].value is True
    assert adjusted["speculative_algorithm"].value == "EAGLE"
    assert adjusted["speculative_num_draft_tokens"].value == 4
    # Without the later log line the dump alone still shows it.
    lines = [
        ln for ln in corpus_lines("ok-0.5.11-qwen36-mtp-tp2.log") if "Disable piecewise" not in ln
    ]
    alone = {
        a.field: a
        for a in read_log(lines, EXPECTED["ok-0.5.11-qwen36-mtp-tp2.log"]["server"]).auto_adjusted
    }
    assert alone["disable_piecewise_cuda_graph"].value is True
    assert "the profile does not set it" in alone["disable_piecewise_cuda_graph"].reason


def test_a_setting_the_profile_asked_for_is_not_an_adjustment() -> None:
    server = dict(EXPECTED["ok-0.5.11-qwen36-mtp-tp2.log"]["server"])
    server.update(disable_piecewise_cuda_graph=True, speculative_algorithm="EAGLE")
    fields = {
        a.field
        for a in read_log(corpus_lines("ok-0.5.11-qwen36-mtp-tp2.log"), server).auto_adjusted
    }
    assert "disable_piecewise_cuda_graph" not in fields
    assert "speculative_algorithm" not in fields


def test_phase_figures_and_times() -> None:
    report = read("ok-0.5.11-qwen36-mtp-tp2.log")
    weights = report.phase("weights_loaded")
    assert weights is not None and weights.rank == "TP0"
    assert weights.figures["elapsed_s"] == 29.36 and weights.figures["mem_usage_gb"] == 26.65
    assert set(weights.ranks) == {"TP0", "TP1"}
    assert report.phase_times() == {
        "weights": 29.36,
        "kv_cache": 1.0,
        "graph_capture": 15.0,
        "total": 65.0,
    }
    graph = read("ok-0.5.23-tp1.log").phase("cuda_graph_captured")
    assert graph is not None and graph.figures["elapsed_s"] == 2.87


@pytest.mark.parametrize(
    ("raw", "text", "t", "ranks"),
    [
        (
            "[2026-05-12 00:01:11 TP0] Load weight end.",
            "Load weight end.",
            "2026-05-12T00:01:11",
            "TP0",
        ),
        ("[2026-05-12 00:01:11.042 DP0 TP3] x", "x", "2026-05-12T00:01:11.042", "DP0 TP3"),
        (
            "[2026-05-12 00:01:11 DP1 PP1 ATTN_CP0 MOE_DP1 TP1 EP1] x",
            "x",
            None,
            "DP1 PP1 ATTN_CP0 MOE_DP1 TP1 EP1",
        ),
        ("Nov 30 11:00:00 host python3[123]: [2026-05-12 00:01:11 PP1] x", "x", None, "PP1"),
        (
            '2026-05-12T00:01:11+0000 host python3[123]:   File "a.py", line 1',
            '  File "a.py", line 1',
            None,
            None,
        ),
        ("\x1b[33m[2026-05-12 00:01:11] warn\x1b[0m", "warn", None, None),
        ("INFO:     Uvicorn running on http://x:1", "Uvicorn running on http://x:1", None, None),
        ("[2026-05-12 00:01:11] ERROR:    [Errno 98] boom", "[Errno 98] boom", None, None),
    ],
)
def test_strip_line(raw: str, text: str, t: str | None, ranks: str | None) -> None:
    parsed = strip_line(raw)
    assert parsed.text == text
    if t is not None:
        assert parsed.t == t
    assert parsed.rank_label == ranks


def test_server_args_dump_is_parsed_leniently() -> None:
    repr_form = (
        "server_args=ServerArgs(a='x, y', b=[1, 2], c={'k': (1, 2)}, d=Foo(1), e=None, f=0.5)"
    )
    assert parse_server_args(repr_form) == {
        "a": "x, y",
        "b": [1, 2],
        "c": {"k": [1, 2]},
        "e": None,
        "f": 0.5,
    }
    dict_form = "server_args={'a': True, 'b': <E.X: 1>, 'c': 'it''s'}"
    assert parse_server_args(dict_form) == {"a": True, "c": "its"}
    assert parse_server_args("server_args=ServerArgs(a=1, b=[[[") == {"a": 1}
    assert parse_server_args("nothing") is None


def test_errors_before_ready_do_not_fail_a_ready_server() -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in <module>',
        "ImportError: optional kernel missing",
        "[2026-05-12 00:01:36] The server is fired up and ready to roll!",
    ]
    report = read_log(lines)
    assert report.ready and report.failure is None
    crashed = read_log(
        [*lines, "[2026-05-12 00:02:00] Scheduler hit an exception: " + lines[0], *lines[1:3]]
    )
    assert crashed.ready and crashed.failure is not None and crashed.failure.line == 7


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=300), max_size=40))
def test_garbage_never_raises(lines: list[str]) -> None:
    reader = LogReader({"speculative_algorithm": "NEXTN"}, "0.5.11")
    for line in lines:
        reader.feed(line)
    reader.finish()
    json.dumps(reader.report().as_json())


_FRAGMENTS = [
    "[2026-05-12 00:01:11 TP0] ",
    "server_args=ServerArgs(",
    "server_args={",
    "Traceback (most recent call last):",
    "  File ",
    "ValueError: ",
    "Capture cuda graph begin.",
    "Capture target decode CUDA graph end. elapsed=1.2 s",
    "KV Cache is allocated. #tokens: ",
    " is adjusted to ",
    "INFO:     ",
    "\x1b[33m",
    "((([[[{{{'\"",
    "During handling of the above exception, another exception occurred:",
]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from(_FRAGMENTS) | st.text(max_size=20), max_size=6), max_size=40)
)
def test_log_shaped_garbage_never_raises(parts: list[list[str]]) -> None:
    report = read_log(["".join(p) for p in parts], {"tp_size": 2}, "0.5.23")
    json.dumps(report.as_json())
    report.phase_times()


# --------------------------------------------------------------------------------------------
# One class of real-world log at a time, a few lines each, per pipeline stage.

TB = "Traceback (most recent call last):"
FRAME = '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 1, in run_scheduler_process'


@pytest.mark.parametrize(
    ("raw", "text", "stream"),
    [
        (  # docker's json-file driver, colour inside the record
            '{"log":"\\u001b[36m(WorkerDict pid=616)\\u001b[0m [2025-03-22 01:05:30 TP0] x\\n",'
            '"stream":"stderr","time":"2025-03-22T01:05:30.5Z"}',
            "x",
            "WorkerDict pid=616",
        ),
        ("2024-08-27 12:54:55 | ERROR | stderr | Traceback (most recent call last):", TB, None),
        ("May 16, 2026 @ 20:46:57.892    [rank8]:[W516 12:46:57.4 a.cpp:1] w", "[W516 12:46:57.4 a.cpp:1] w", "rank8"),
        ("[pod/sglang-0/sglang] [2025-01-01 00:00:00 TP1] Load weight end.", "Load weight end.", "pod/sglang-0/sglang"),
        ("[12-16 14:27:08] Rank 0 scheduler is dead.", "Rank 0 scheduler is dead.", None),
        ("[gpu=1] Load weight end. type=X", "Load weight end. type=X", None),
    ],
)
def test_wrappers_are_stripped(raw: str, text: str, stream: str | None) -> None:
    parsed = strip_line(raw)
    assert (parsed.text, parsed.stream) == (text, stream)


def test_0_2_gpu_prefix_is_a_rank() -> None:
    assert strip_line("[gpu=1] x").rank_label == "GPU1" and not strip_line("[gpu=1] x").is_primary


def failure_of(lines: list[str]) -> tuple[str, int] | None:
    failure = read_log(lines).failure
    return (failure.kind, failure.line) if failure else None




def test_an_exception_line_alone_is_an_exception() -> None:
    assert failure_of(["ValueError: Unsupported architectures: X. Supported list: [...]"]) == (
        "bad_argument",  # a model this SGLang cannot serve: the launch's model must change
        1,
    )
    assert failure_of(["UserWarning: something deprecated", "Error: not a type"]) == ("incomplete", 2)


def test_a_message_continuation_is_not_a_second_exception() -> None:
    lines = [TB, FRAME, "torch.distributed.DistBackendError: NCCL error in: x", "ncclSystemError: System call"]
    report = read_log(lines)
    assert report.failure is not None and report.failure.line == 3 and not report.failure.consequences


def test_a_traceback_cut_before_its_exception_is_named_by_its_frames() -> None:
    assert failure_of(["[2025-01-01 00:00:00 TP0] Scheduler hit an exception: " + TB, FRAME]) == ("crash", 1)
    graphs = '  File "/sgl/model_runner.py", line 881, in init_cuda_graphs'
    assert failure_of(["x", TB, FRAME, graphs]) == ("graph_capture_failed", 2)
    args = '  File "/sgl/srt/server_args.py", line 733, in __post_init__'
    assert failure_of([TB, args]) == ("bad_argument", 1)


def test_a_new_traceback_in_the_same_stream_cuts_the_open_one() -> None:
    lines = [TB, FRAME, TB, FRAME, "torch.OutOfMemoryError: CUDA out of memory."]
    report = read_log(lines)
    assert report.failure is not None and (report.failure.kind, report.failure.line) == ("cuda_oom", 5)
    assert [n for n, _ in report.failure.consequences] == [1]


def test_the_launchers_traceback_after_a_dead_scheduler_is_a_consequence() -> None:
    lines = [
        "[12-16 14:27:08] Rank 0 scheduler is dead. Please check if there are relevant logs.",
        "[12-16 14:27:10] Exit code: -9",
        TB,
        '  File "/usr/local/bin/sglang", line 10, in <module>',
    ]
    assert failure_of(lines) == ("crash", 1)


def test_c10d_error_records_are_native_causes_and_its_warnings_are_not() -> None:
    error = "[rank3]:[E421 04:13:43.426633564 ProcessGroupGloo.cpp:143] Rank 3 ... from rank 0."
    lines = ["[2025-04-21 04:13:43] Received sigquit from a child process.", error, TB, FRAME]
    assert failure_of(lines) == ("nccl_error", 2)
    warning = "[rank8]:[W516 12:46:57.4995 ProcessGroupNCCL.cpp:1826] Failed to check ... Connection reset"
    assert failure_of([warning]) == ("incomplete", 1)


def test_argparse_usage_banner_is_a_weak_bad_argument() -> None:
    usage = "usage: launch_server.py [-h] --model-path MODEL_PATH [--host HOST]"
    assert failure_of(["INFO 03-06 10:05:08 __init__.py:190] x", usage, "   [--port PORT]"]) == ("bad_argument", 2)
    error = "launch_server.py: error: unrecognized arguments: --enable-reasoning"
    report = read_log([usage, error])
    assert report.failure is not None and report.failure.line == 2 and report.failure.confidence == "high"


def test_graph_capture_is_tracked_per_process() -> None:
    lines = [
        "[2025-01-01 00:00:00 TP1] Capture cuda graph begin. This can take up to several minutes.",
        "[2025-01-01 00:00:01 TP0] Scheduler hit an exception: " + TB,
        FRAME,
        "RuntimeError: something unrelated",
    ]
    assert failure_of(lines) == ("crash", 2 + 2)
    lines[0] = lines[0].replace("TP1", "TP0")
    assert failure_of(lines) == ("graph_capture_failed", 4)


def test_each_rank_keeps_its_own_root_and_a_message_line_is_not_a_native_cause() -> None:
    py = "2026-12-01 20:20:45,101 - sglang_launcher - INFO - "
    lines = [
        py + "host:372:372 [1] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to x<1> failed",
        py + "[2026-12-01 20:20:45 TP1] Scheduler hit an exception: " + TB,
        py + FRAME,
        py + "torch.distributed.DistBackendError: NCCL error in: NCCLUtils.hpp:317, unhandled system error",
        py + "Last error:",
        py + "socketStartConnect: Connect to x<1> failed : Connection refused",
        py + "[2026-12-01 20:20:45 TP0] Scheduler hit an exception: " + TB,
        py + FRAME,
        py + "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer",
        py + "[2026-12-01 20:20:46] Received sigquit from a child process. It usually means the child failed.",
    ]
    failure = read_log(lines).failure
    assert failure is not None and (failure.kind, failure.line) == ("nccl_error", 1)
    assert [n for n, _ in failure.consequences] == [9, 10]
    assert failure.context[0][0] == 1 and "DistBackendError" in dict(failure.context)[4]
    assert dict(failure.context)[5] == "Last error:"  # the rest of its message comes with it


def test_ray_task_and_daemon_prefixes_name_the_stream() -> None:
    for prefix, stream in (
        ("(pid=4242) ", "pid=4242"),
        ("(pid=4242, ip=10.0.0.7) ", "pid=4242"),
        ("(raylet) ", "raylet"),
        ("(raylet, ip=10.0.0.7) ", "raylet"),
        ("(ServeReplica:app:LLMServer pid=28488) ", "ServeReplica:app:LLMServer pid=28488"),
    ):
        p = strip_line(prefix + "[2025-03-25 00:37:49 TP1] Load weight end. type=X")
        assert (p.text, p.rank_label, p.stream) == ("Load weight end. type=X", "TP1", stream)
    assert strip_line("(see below) Traceback").text == "(see below) Traceback"


def incomplete_message(lines: list[str]) -> str:
    failure = read_log(lines).failure
    assert failure is not None and failure.kind == "incomplete"
    return failure.message


def test_a_log_that_stops_says_which_step_was_under_way() -> None:
    stamp = "[2025-04-01 09:58:02 TP0] "
    dist = stamp + "Init torch distributed begin."
    assert "under way: distributed init, begun at line 1" in incomplete_message([dist, stamp + "x"])
    nccl = "node01:322:322 [3] NCCL INFO ncclCommInitRank comm 0x5 rank 3 nranks 16 - Init COMPLETE"
    assert "under way: distributed init, begun at line 1" in incomplete_message([nccl, stamp + "x"])
    dist_end = stamp + "Init torch distributed ends. mem usage=0.00 GB"
    ended = [dist, dist_end, stamp + "Load weight begin. avail mem=9 GB"]
    assert "under way: weight loading, begun at line 3" in incomplete_message(ended)
    shards = "Loading safetensors checkpoint shards: 100% Completed | 163/163"
    assert "weight shards were read (line 4)" in incomplete_message([*ended, shards])
    capture = stamp + "Capture cuda graph begin. This can take up to several minutes. avail mem=11.85 GB"
    loaded = stamp + "Load weight end. type=X, avail mem=30 GB"
    assert "under way: a graph capture, begun at line 5" in incomplete_message([*ended, loaded, capture])
    http = "[2025-04-01 09:58:09] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)"
    assert "under way: the warm-up request" in incomplete_message([http])
    assert "under way" not in incomplete_message([stamp + "x"])


# -- kinds from what the user must do, not from a layer's name in the traceback ------------------

_SITE = "/root/ml-env/lib/python3.12/site-packages"


def _frame(path: str, func: str, source: str) -> list[str]:
    return [f'  File "{_SITE}/{path}", line 10, in {func}', f"    {source}"]


def test_an_error_is_named_by_its_raising_frame_not_by_a_layer_further_out() -> None:
    through_dist = _frame("sglang/srt/distributed/parallel_state.py", "init_distributed_environment", "x()")
    lines = [TB, *through_dist, *_frame("sglang/srt/utils/common.py", "helper", "y = z[0]"),
             "IndexError: list index out of range"]
    assert failure_of(lines) == ("crash", 6)  # distributed init was under way; it did not fail
    raised_there = [TB, *_frame("sglang/srt/model_executor/model_runner.py", "init_torch_distributed", "f()"),
                    *through_dist, "RuntimeError: connection to the store timed out"]
    assert failure_of(raised_there) == ("nccl_error", 6)


def test_a_bad_environment_value_read_through_environ_py_names_the_variable() -> None:
    lines = [TB, *_frame("sglang/srt/distributed/parallel_state.py", "init_distributed_environment",
                         "port = envs.SGLANG_TCP_STORE_PORT.get()"),
             *_frame("sglang/srt/environ.py", "get", "return self.parse(value)"),
             *_frame("sglang/srt/environ.py", "parse", "return int(value)"),
             "TypeError: int() argument must be a string, a bytes-like object or a real number, not 'NoneType'"]
    failure = read_log(lines).failure
    assert failure is not None and (failure.kind, failure.line) == ("bad_argument", 8)
    assert "SGLANG_TCP_STORE_PORT" in failure.message and failure.message.startswith("TypeError: int()")


def test_a_missing_optional_package_is_a_setting_when_an_option_asks_for_it() -> None:
    tb = [TB, *_frame("sglang/srt/layers/moe/token_dispatcher/deepep.py", "__init__", "raise ImportError("),
          "ImportError: DeepEP is not installed. Please install DeepEP package from https://github.com/x."]
    asked = read_log(["server_args=ServerArgs(model_path='/m', moe_a2a_backend='deepep')", *tb]).failure
    assert asked is not None and asked.kind == "bad_argument"
    assert "drop --moe-a2a-backend deepep" in asked.message
    unasked = read_log(["server_args=ServerArgs(model_path='/m', moe_a2a_backend='none')", *tb]).failure
    assert unasked is not None and unasked.kind == "crash" and "no option" in unasked.message
    assert read_log(tb, {"moe_a2a_backend": "deepep"}).failure.kind == "bad_argument"  # type: ignore[union-attr]


def test_any_other_missing_package_is_a_broken_install() -> None:
    lines = [TB, *_frame("sglang/srt/distributed/parallel_state.py", "<module>", "import sgl_kernel"),
             "ModuleNotFoundError: No module named 'sgl_kernel'"]
    failure = read_log(lines).failure
    assert failure is not None and (failure.kind, failure.line) == ("crash", 4)
    assert "install it" in failure.message
    assert failure_of(["ImportError: cannot import name 'foo' from 'bar'"]) == ("crash", 1)


def test_a_missing_native_library_of_nvshmem_is_not_a_network_failure() -> None:
    lines = ["OSError: libnvshmem_host.so.3: cannot open shared object file: No such file or directory"]
    failure = read_log(lines).failure
    assert failure is not None and failure.kind == "bad_argument" and "LD_LIBRARY_PATH" in failure.message


def test_a_model_type_or_architecture_nobody_supports_is_not_a_missing_model() -> None:
    key_error = [TB, *_frame("transformers/models/auto/configuration_auto.py", "__getitem__", "raise KeyError(key)"),
                 "KeyError: 'qwen9'"]
    failure = read_log(key_error).failure
    assert failure is not None and (failure.kind, failure.line) == ("bad_argument", 4)
    assert "'qwen9'" in failure.message and "--trust-remote-code" in failure.message
    unknown = ("ValueError: The checkpoint you are trying to load has model type `qwen9` but Transformers does "
               "not recognize this architecture.")
    assert failure_of([unknown]) == ("bad_argument", 1)
    assert failure_of(["ValueError: Model architectures ['XForCausalLM'] are not supported for now."]) == (
        "bad_argument", 1)
    # a path or a repository that does not resolve stays model_not_found
    assert failure_of(["OSError: /m does not appear to have a file named config.json."]) == ("model_not_found", 1)


def test_a_hint_does_not_push_the_message_past_its_limit() -> None:
    long = "ModuleNotFoundError: No module named 'deep_ep' " + "x" * 600
    failure = read_log([long]).failure
    assert failure is not None and len(failure.message) <= 400 + 200 and failure.message.endswith(")")


def test_a_second_dump_splits_the_log_only_once_the_first_start_ended() -> None:
    """A server restarted by hand prints a second server_args= after the first start failed or got
    ready; two servers writing into one file print both before either is done."""
    first = "[2026-05-12 00:00:01] server_args=ServerArgs(model_path='/m/a', port=30000)"
    second = "[2026-05-12 00:00:02] server_args=ServerArgs(model_path='/m/b', port=30001)"
    ready = "[2026-05-12 00:00:09] The server is fired up and ready to roll!"
    side_by_side = read_log([first, second, ready])
    assert side_by_side.ready and not side_by_side.earlier_failures
    assert side_by_side.phase("args_parsed").line == 1  # type: ignore[union-attr]
    crashed = ["Traceback (most recent call last):",
               '  File "/venv/sglang/srt/server_args.py", line 612, in __post_init__',
               "    self._handle_parallelism()",
               "ValueError: tp_size 3 does not divide the attention heads"]
    again = read_log([first, *crashed, second, ready])
    assert again.ready and [f.kind for f in again.earlier_failures] == ["bad_argument"]
    assert again.phase("args_parsed").line == 6  # type: ignore[union-attr]
