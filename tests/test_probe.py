"""The throughput probe without a host: stream parsing, measurement on a fake clock, comparison,
and `RemoteHost.http_stream`'s HTTP framing over a fake SSH channel."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from sgdeploy.deploy.probe import (
    ProbeResult,
    ProbeSettings,
    StreamParser,
    TokenEvent,
    compare,
    measure_stream,
    parse_stream,
    percentile,
    request_body,
    run_probe,
)
from sgdeploy.host.remote import CommandTimeout, RemoteError, RemoteHost
from sgdeploy.profile.inventory import HostEntry


# --------------------------------------------------------------------------- streams
def sse(obj: Any) -> bytes:
    return f"data: {obj if isinstance(obj, str) else json.dumps(obj)}\n\n".encode()


def native_stream(n: int, per_event: int = 1, text: str = " héllo") -> bytes:
    """SGLang's /generate with "stream": true: cumulative text and completion_tokens."""
    out = b""
    done = 0
    while done < n:
        done = min(n, done + per_event)
        out += sse({"text": text * done, "output_ids": list(range(done)),
                    "meta_info": {"id": "a1", "prompt_tokens": 9, "completion_tokens": done, "cached_tokens": 0,
                                  "finish_reason": {"type": "length", "length": n} if done == n else None,
                                  "e2e_latency": 0.5}})
    return out + b"data: [DONE]\n\n"


def openai_stream(n: int, usage: bool = True) -> bytes:
    """/v1/completions with "stream": true: one text piece per event, a usage event, [DONE]."""
    out = b""
    for i in range(n):
        out += sse({"id": "c1", "object": "text_completion", "created": 1, "model": "default",
                    "choices": [{"index": 0, "text": " 日本", "logprobs": None,
                                 "finish_reason": "length" if i == n - 1 else None, "matched_stop": None}],
                    "usage": None})
    if usage:
        out += sse({"id": "c1", "object": "text_completion", "created": 1, "model": "default", "choices": [],
                    "usage": {"prompt_tokens": 9, "completion_tokens": n, "total_tokens": 9 + n}})
    return out + sse("[DONE]")


def feed_split(data: bytes, cuts: list[int]) -> tuple[list[TokenEvent], StreamParser]:
    bounds = [0, *sorted(set(cuts)), len(data)]
    return parse_stream((float(i), data[a:b]) for i, (a, b) in enumerate(itertools.pairwise(bounds)))


STREAMS = {
    "native": (native_stream(7), 7, 7),
    "native-speculative": (native_stream(10, per_event=4), 10, 3),  # MTP: several tokens per event
    "openai": (openai_stream(6), 6, 6),
    "openai-no-usage": (openai_stream(5, usage=False), 5, 5),
    "crlf": (native_stream(3).replace(b"\n", b"\r\n"), 3, 3),
}


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_parser_every_single_split(name: str) -> None:
    data, tokens, events = STREAMS[name]
    whole, parser = feed_split(data, [])
    assert parser.tokens == tokens and parser.done and parser.error is None
    assert len(whole) == events and whole[-1].tokens == tokens
    for cut in range(1, len(data)):
        split, p = feed_split(data, [cut])
        assert [e.tokens for e in split] == [e.tokens for e in whole], cut
        assert p.tokens == tokens and p.done and p.error is None


@given(name=st.sampled_from(sorted(STREAMS)), data=st.data())
@settings(max_examples=300, deadline=None)
def test_parser_any_splits(name: str, data: st.DataObject) -> None:
    raw, tokens, _ = STREAMS[name]
    cuts = data.draw(st.lists(st.integers(min_value=1, max_value=len(raw) - 1), max_size=40))
    events, parser = feed_split(raw, cuts)
    assert parser.tokens == tokens and parser.done and parser.error is None
    counts = [e.tokens for e in events]
    assert counts == sorted(set(counts)) and counts[-1] == tokens
    whole, _ = feed_split(raw, [])
    assert counts == [e.tokens for e in whole]


def test_parser_times_are_arrival_times_of_the_completing_chunk() -> None:
    data = native_stream(2)
    first_end = data.index(b"\n\n") + 2
    events, _ = feed_split(data, [first_end - 1, first_end + 5])
    # the first event completes in the second chunk (its final "\n"), the second in the third
    assert [(e.t, e.tokens) for e in events] == [(1.0, 1), (2.0, 2)]


def test_parser_sse_details() -> None:
    data = (b": keep-alive comment\n\nevent: message\nid: 7\nretry: 100\n"
            b'data: {"choices": [{"text": "a"}],\ndata:  "usage": null}\n\n'  # one event over two data lines
            b'data:{"choices":[{"text":""}]}\n\n'  # no text: no token
            b'data: {"choices":[{"delta":{"content":"b"}}]}\n\n'  # chat-style delta counts too
            b'data: {"choices":[{"text":"c"}]}')  # no final newline: counted at close
    events, parser = feed_split(data, [])
    assert [e.tokens for e in events] == [1, 2, 3]
    assert parser.error is None and not parser.done


def test_parser_server_error_and_garbage() -> None:
    _, p = feed_split(sse({"text": "x", "meta_info": {"completion_tokens": 1}})
                      + sse({"error": {"message": "Request aborted", "code": 500}}), [])
    assert p.tokens == 1 and p.error == "server error: Request aborted"
    _, p = feed_split(sse({"object": "error", "message": "context too long", "code": 400}), [])
    assert p.tokens == 0 and p.error and "context too long" in p.error
    _, p = feed_split(b"data: {not json\n\n", [])
    assert p.error and p.error.startswith("unreadable event")
    _, p = feed_split(b"<html>502 Bad Gateway</html>\n", [])
    assert p.tokens == 0 and p.error is None and p.events == 0


def test_parser_counts_output_ids_without_completion_tokens() -> None:
    data = sse({"text": "ab", "output_ids": [1, 2], "meta_info": {}}) + sse(
        {"text": "abcde", "output_ids": [1, 2, 3, 4, 5], "meta_info": {}})
    events, _ = feed_split(data, [])
    assert [e.tokens for e in events] == [2, 5]


# --------------------------------------------------------------------------- fake server and clock
class FakeClock:
    """Virtual time per thread. Worker threads start at the main thread's last reading; the main
    thread reads the latest time of any thread (it waits for its workers)."""

    def __init__(self) -> None:
        self.main = threading.get_ident()
        self.times: dict[int, float] = {self.main: 1000.0}
        self.last_main = 1000.0
        self.lock = threading.Lock()

    def __call__(self) -> float:
        me = threading.get_ident()
        with self.lock:
            if me == self.main:
                self.times[me] = self.last_main = max(self.times.values())
            return self.times.setdefault(me, self.last_main)

    def advance(self, seconds: float) -> None:
        me = threading.get_ident()
        with self.lock:
            self.times[me] = self.times.setdefault(me, self.last_main) + seconds


class FakeServer:
    """A stream function: TTFT, then one SSE event per token at `tps` (per stream, ideal scaling)."""

    def __init__(self, clock: FakeClock, tps: float = 50.0, ttft: float = 0.2, concurrency: int = 1,
                 fail: set[int] | None = None, endless: bool = False) -> None:
        self.clock, self.tps, self.ttft, self.fail, self.endless = clock, tps, ttft, fail or set(), endless
        self.barrier = threading.Barrier(concurrency) if concurrency > 1 else None
        self.bodies: list[dict[str, Any]] = []
        self.closed = 0
        self.lock = threading.Lock()

    def __call__(self, body: bytes) -> Iterator[bytes]:
        with self.lock:
            self.bodies.append(json.loads(body))
            index = len(self.bodies) - 1
        if index in self.fail:
            raise ConnectionRefusedError("nothing listens on 127.0.0.1:30000")
        n = self.bodies[-1].get("sampling_params", {}).get("max_new_tokens") or self.bodies[-1].get("max_tokens")
        return self._stream(int(n), threading.get_ident() != self.clock.main)

    def _stream(self, n: int, concurrent: bool) -> Iterator[bytes]:
        if concurrent and self.barrier is not None:
            self.barrier.wait(timeout=10)  # all streams of a wave really overlap
        try:
            self.clock.advance(self.ttft)
            i = 0
            while self.endless or i < n:
                if i:
                    self.clock.advance(1 / self.tps)
                i += 1
                yield sse({"text": "x" * i, "meta_info": {"completion_tokens": i}})
            yield b"data: [DONE]\n\n"
        finally:
            with self.lock:
                self.closed += 1


def test_single_stream_and_concurrent_figures() -> None:
    clock = FakeClock()
    server = FakeServer(clock, tps=50.0, ttft=0.2, concurrency=4)
    cfg = ProbeSettings(max_tokens=101, concurrency=4, requests=4, warmup=1)
    result = run_probe(server, cfg, clock=clock)
    assert len(server.bodies) == 1 + 4 + 4
    assert result.errors == 0 and result.requests == 8 and result.ok
    assert result.single_stream_tps == pytest.approx(50.0)  # 100 tokens after the first in 2.0 s
    assert result.ttft_ms_median == pytest.approx(200.0) and result.ttft_ms_p90 == pytest.approx(200.0)
    # four streams side by side, each 0.2 s + 2.0 s for 101 tokens
    assert result.concurrent_tps == pytest.approx(4 * 101 / 2.2)
    assert result.concurrent_stream_tps == pytest.approx(50.0)
    assert result.output_tokens == 8 * 101
    assert result.duration_s == pytest.approx(5 * 2.2 + 2.2)
    # prompts rotate, every request is greedy with exactly max_tokens
    prompts = [b["text"] for b in server.bodies]
    assert prompts[:4] == list(cfg.prompts)
    assert all(b["stream"] and b["sampling_params"] == {"max_new_tokens": 101, "temperature": 0, "ignore_eos": True}
               for b in server.bodies)


def test_two_waves_when_requests_exceed_concurrency() -> None:
    clock = FakeClock()
    server = FakeServer(clock, tps=20.0, ttft=0.5, concurrency=2)
    result = run_probe(server, ProbeSettings(max_tokens=21, concurrency=2, requests=4, warmup=0), clock=clock)
    assert result.single_stream_tps == pytest.approx(20.0)
    assert result.concurrent_tps == pytest.approx(4 * 21 / (2 * 1.5))


def test_concurrent_phase_fills_whole_waves() -> None:
    clock = FakeClock()
    server = FakeServer(clock, tps=50.0, ttft=0.0, concurrency=4)
    result = run_probe(server, ProbeSettings(max_tokens=11, concurrency=4, requests=3, warmup=0), clock=clock)
    assert len(server.bodies) == 3 + 4 and result.requests == 7
    assert result.concurrent_tps == pytest.approx(4 * 11 / 0.2)


def test_concurrency_one_skips_the_concurrent_phase() -> None:
    clock = FakeClock()
    server = FakeServer(clock)
    result = run_probe(server, ProbeSettings(concurrency=1, requests=3, warmup=0, max_tokens=10), clock=clock)
    assert len(server.bodies) == 3 and result.requests == 3
    assert result.concurrent_tps is None and result.single_stream_tps == pytest.approx(50.0)


def test_failed_requests_are_counted_not_raised() -> None:
    clock = FakeClock()
    server = FakeServer(clock, fail={1, 3})
    result = run_probe(server, ProbeSettings(concurrency=1, requests=4, warmup=0, max_tokens=10), clock=clock)
    assert result.errors == 2 and result.requests == 4 and not result.ok
    assert result.error_messages == ["ConnectionRefusedError: nothing listens on 127.0.0.1:30000"]
    assert result.single_stream_tps == pytest.approx(50.0)
    assert "2 of 4 requests failed" in result.summary()


def test_everything_failing_gives_no_figures() -> None:
    clock = FakeClock()
    server = FakeServer(clock, fail=set(range(20)))
    result = run_probe(server, ProbeSettings(concurrency=2, requests=2, warmup=1), clock=clock)
    assert result.errors == 4 and result.single_stream_tps is None and result.concurrent_tps is None
    assert result.ttft_ms_median is None
    json.dumps(result.as_dict())


def test_duration_cap_stops_sending() -> None:
    clock = FakeClock()
    server = FakeServer(clock, tps=10.0, ttft=0.0, concurrency=4)
    # each request takes 12.7 s; the cap lets the warmup and two single-stream requests start
    cfg = ProbeSettings(max_tokens=128, concurrency=4, requests=4, warmup=1, duration_s=30)
    result = run_probe(server, cfg, clock=clock)
    assert len(server.bodies) == 3
    assert result.requests == 8 and result.errors == 7  # 1 cut at the cap, 6 never sent
    assert "cut off at the probe's time limit" in result.error_messages
    assert result.error_messages[-1] == "6 requests not sent: the probe's 30 s cap was reached"
    assert result.duration_s == pytest.approx(30.0, abs=0.2)
    assert server.closed == 3


def test_request_timeout_cuts_an_endless_stream_and_closes_it() -> None:
    clock = FakeClock()
    server = FakeServer(clock, tps=100.0, ttft=0.0, endless=True)
    stats = measure_stream(server, request_body(ProbeSettings(), "hi"), clock, deadline=clock() + 5.0)
    assert stats.error == "cut off at the probe's time limit"
    assert server.closed == 1 and 495 < stats.tokens < 510


def test_a_stream_without_tokens_is_an_error() -> None:
    clock = FakeClock()
    stats = measure_stream(lambda body: iter([b"data: [DONE]\n\n"]), b"{}", clock, clock() + 10)
    assert stats.error == "the response carried no tokens" and stats.decode_tps is None


def test_stream_of_a_single_token_has_ttft_but_no_rate() -> None:
    clock = FakeClock()
    server = FakeServer(clock, ttft=0.3)
    stats = measure_stream(server, request_body(ProbeSettings(max_tokens=2), "x"), clock, clock() + 60)
    assert stats.ok and stats.ttft_s == pytest.approx(0.3) and stats.decode_tps == pytest.approx(50.0)
    one = measure_stream(lambda body: iter([sse({"text": "a", "meta_info": {"completion_tokens": 1}})]),
                         b"{}", clock, clock() + 60)
    assert one.ok and one.ttft_s == 0 and one.decode_tps is None


def test_percentile() -> None:
    assert percentile([5.0], 90) == 5.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 90) == 4.0
    assert percentile([float(i) for i in range(1, 11)], 90) == 9.0
    assert percentile([float(i) for i in range(1, 11)], 50) == 5.0


# --------------------------------------------------------------------------- settings and bodies
def test_settings_defaults_and_strictness() -> None:
    cfg = ProbeSettings()
    assert cfg.max_tokens == 128 and cfg.concurrency == 4 and cfg.endpoint == "generate" and cfg.path == "/generate"
    assert len(cfg.prompts) >= 3
    with pytest.raises(ValidationError):
        ProbeSettings(max_token=10)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        ProbeSettings(endpoint="chat")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        ProbeSettings(prompts=("  ",))
    with pytest.raises(ValidationError):
        ProbeSettings(concurrency=0)
    assert ProbeSettings.model_validate({"endpoint": "openai", "requests": 2}).path == "/v1/completions"


def test_openai_body() -> None:
    body = json.loads(request_body(ProbeSettings(endpoint="openai", max_tokens=64), "Hello"))
    assert body == {"model": "default", "prompt": "Hello", "max_tokens": 64, "temperature": 0, "ignore_eos": True,
                    "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}


def test_openai_endpoint_through_run_probe() -> None:
    clock = FakeClock()

    def server(body: bytes) -> Iterator[bytes]:
        n = json.loads(body)["max_tokens"]
        clock.advance(0.1)
        for i, piece in enumerate(openai_stream(n).split(b"\n\n")):
            if 0 < i < n:
                clock.advance(0.05)
            yield piece + b"\n\n"

    result = run_probe(server, ProbeSettings(endpoint="openai", max_tokens=21, concurrency=1, requests=2), clock)
    assert result.endpoint == "openai" and result.single_stream_tps == pytest.approx(20.0)
    assert result.ttft_ms_median == pytest.approx(100.0)


def test_as_dict_shape() -> None:
    clock = FakeClock()
    result = run_probe(FakeServer(clock, concurrency=2), ProbeSettings(concurrency=2, requests=2, max_tokens=11),
                       clock=clock)
    d = result.as_dict()
    assert set(d) == {"endpoint", "single_stream_tps", "concurrent_tps", "concurrent_stream_tps", "concurrency",
                      "ttft_ms", "requests", "errors", "error_messages", "output_tokens", "duration_s", "workload"}
    assert d["single_stream_tps"] == 50.0 and d["ttft_ms"] == {"median": 200.0, "p90": 200.0}
    assert d["workload"] == ProbeSettings(concurrency=2, requests=2, max_tokens=11).workload()
    assert json.loads(json.dumps(d)) == d


# --------------------------------------------------------------------------- compare
def result(single: float | None, concurrent: float | None = None, errors: int = 0, **workload: Any) -> ProbeResult:
    cfg = ProbeSettings(**workload)
    return ProbeResult(endpoint=cfg.endpoint, concurrency=cfg.concurrency, requests=8, errors=errors,
                       single_stream_tps=single, concurrent_tps=concurrent,
                       error_messages=["TimeoutError: x"] if errors else [], workload=cfg.workload())


def test_compare_without_baseline() -> None:
    verdict = compare(result(70.4), None, 0.9)
    assert verdict.ok and verdict.ratio is None and "no previous figure" in verdict.message
    assert compare(result(70.4), {"single_stream_tps": None}, 0.9).ok
    assert compare(result(70.4), {}, 0.9).ok


def test_compare_regression_message() -> None:
    verdict = compare(result(35.2), result(70.4).as_dict(), 0.9)
    assert not verdict.ok and verdict.ratio == pytest.approx(0.5)
    assert verdict.message == ("single-stream 35.2 tok/s is 50 % of the last good deployment's 70.4 tok/s "
                               "(minimum 90 %)")
    assert verdict.as_dict() == {"ok": False, "ratio": 0.5, "message": verdict.message}


def test_compare_within_tolerance_and_faster() -> None:
    assert compare(result(66.0), result(70.4).as_dict(), 0.9).ok
    faster = compare(result(70.4), result(57.0).as_dict(), 0.9)
    assert faster.ok and faster.ratio == pytest.approx(70.4 / 57.0)
    assert not compare(result(63.0), result(70.4).as_dict(), 0.9).ok


def test_compare_reads_a_meta_json() -> None:
    meta = {"id": "20260101T000000Z-abcd1234", "outcome": "ready", "probe": result(70.4).as_dict()}
    assert not compare(result(35.2), meta, 0.9).ok


def test_compare_concurrent_figure_can_fail_it() -> None:
    verdict = compare(result(70.0, concurrent=100.0), result(70.0, concurrent=200.0).as_dict(), 0.9)
    assert not verdict.ok and verdict.message.startswith("4-concurrent 100.0 tok/s is 50 %")
    # a baseline without the concurrent figure: only single-stream is compared
    old = result(70.0).as_dict()
    assert compare(result(70.0, concurrent=100.0), old, 0.9).ok


def test_compare_different_workload_is_not_compared() -> None:
    verdict = compare(result(35.0, max_tokens=256), result(70.0).as_dict(), 0.9)
    assert verdict.ok and verdict.ratio is None and "max_tokens changed" in verdict.message


def test_compare_failed_probe() -> None:
    empty = ProbeResult(endpoint="generate", concurrency=4, requests=8, errors=8,
                        error_messages=["ConnectionRefusedError: nothing listens"])
    verdict = compare(empty, result(70.0).as_dict(), 0.9)
    assert not verdict.ok and "measured nothing" in verdict.message and "nothing listens" in verdict.message
    partial = compare(result(70.0, errors=2), result(70.0).as_dict(), 0.9)
    assert not partial.ok and "2 of 8 probe requests failed" in partial.message


# --------------------------------------------------------------------------- http_stream framing
class FakeChannel:
    def __init__(self, response: bytes, step: int = 1, stall: bool = False) -> None:
        self.response, self.step, self.stall = response, step, stall
        self.sent = b""
        self.closed = False
        self.pos = 0

    def settimeout(self, timeout: float) -> None:
        self.timeout = timeout

    def sendall(self, data: bytes) -> None:
        self.sent += data

    def recv(self, n: int) -> bytes:
        if self.pos >= len(self.response) and self.stall:
            raise TimeoutError("timed out")
        piece = self.response[self.pos:self.pos + min(n, self.step)]
        self.pos += len(piece)
        return piece

    def close(self) -> None:
        self.closed = True


class FakeTransport:
    def __init__(self, channel: FakeChannel) -> None:
        self.channel = channel
        self.opened: list[Any] = []

    def open_channel(self, kind: str, dest: Any, src: Any, timeout: float) -> FakeChannel:
        self.opened.append((kind, dest))
        return self.channel


def remote_with(channel: FakeChannel, monkeypatch: pytest.MonkeyPatch) -> tuple[RemoteHost, FakeTransport]:
    transport = FakeTransport(channel)
    monkeypatch.setattr(RemoteHost, "_transport", property(lambda self: transport))
    return RemoteHost("ct129", HostEntry(address="127.0.0.1")), transport


def chunked(body: bytes, size: int) -> bytes:
    out = b""
    for i in range(0, len(body), size):
        piece = body[i:i + size]
        out += f"{len(piece):x};ext=1\r\n".encode() + piece + b"\r\n"
    return out + b"0\r\n\r\n"


BODY = native_stream(5)


@pytest.mark.parametrize("step", [1, 7, 65536])
@pytest.mark.parametrize("framing", ["chunked", "length", "close"])
def test_http_stream_framing(step: int, framing: str, monkeypatch: pytest.MonkeyPatch) -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    if framing == "chunked":
        raw = head + b"Transfer-Encoding: chunked\r\n\r\n" + chunked(BODY, 33)
    elif framing == "length":
        raw = head + f"content-length: {len(BODY)}\r\n\r\n".encode() + BODY + b"trailing garbage"
    else:
        raw = head + b"connection: close\r\n\r\n" + BODY
    channel = FakeChannel(raw, step)
    remote, transport = remote_with(channel, monkeypatch)
    chunks = remote.http_stream(30000, "POST", "/generate", b'{"a":1}', {"Content-Type": "application/json"}, 5)
    assert transport.opened == []  # nothing happens before the first chunk is asked for
    assert b"".join(chunks) == BODY
    assert transport.opened == [("direct-tcpip", ("127.0.0.1", 30000))] and channel.closed
    request = channel.sent.decode()
    assert request.startswith("POST /generate HTTP/1.1\r\n")
    assert "Content-Length: 7\r\n" in request and "Content-Type: application/json\r\n" in request
    assert request.endswith('\r\n\r\n{"a":1}')
    assert remote.stats.http_requests == 1


def test_http_stream_error_status(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = b'HTTP/1.1 401 Unauthorized\r\ncontent-length: 25\r\n\r\n{"error": "Unauthorized"}'
    remote, _ = remote_with(FakeChannel(raw, 5), monkeypatch)
    with pytest.raises(RemoteError, match=r'answered HTTP 401: \{"error": "Unauthorized"\}'):
        list(remote.http_stream(30000, "POST", "/generate", b"{}", {}, 5))


def test_http_stream_stall_is_a_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n" + BODY[:40]
    channel = FakeChannel(raw, 1000, stall=True)
    remote, _ = remote_with(channel, monkeypatch)
    got = b""
    with pytest.raises(CommandTimeout, match="no data for 5 s"):
        for chunk in remote.http_stream(30000, "POST", "/generate", b"{}", {}, 5):
            got += chunk
    assert got == BODY[:40] and channel.closed


def test_http_stream_closed_early_closes_the_channel(monkeypatch: pytest.MonkeyPatch) -> None:
    channel = FakeChannel(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(BODY, 10), 64)
    remote, _ = remote_with(channel, monkeypatch)
    stream = remote.http_stream(30000, "POST", "/generate", b"{}", {}, 5)
    assert next(stream)
    stream.close()
    assert channel.closed


def test_run_probe_over_http_stream_framing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The production path end to end, over a fake channel: chunked SSE bytes in, figures out."""
    channels: list[FakeChannel] = []

    class Transport:
        def open_channel(self, kind: str, dest: Any, src: Any, timeout: float) -> FakeChannel:
            channels.append(FakeChannel(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                                        + chunked(native_stream(16), 50), 9))
            return channels[-1]

    transport = Transport()
    monkeypatch.setattr(RemoteHost, "_transport", property(lambda self: transport))
    from sgdeploy.deploy.probe import probe_remote

    remote = RemoteHost("ct129", HostEntry(address="127.0.0.1"))
    res = probe_remote(remote, 30000, ProbeSettings(max_tokens=16, concurrency=2, requests=2), api_key="k")
    assert res.errors == 0 and res.output_tokens == 4 * 16 and len(channels) == 5
    assert all(b"Authorization: Bearer k\r\n" in c.sent and c.closed for c in channels)
