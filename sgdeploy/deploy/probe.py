"""Throughput probe: a small, fixed generation workload against a deployed server, and its figures.

The same model served ~70, then ~35, then ~57 tokens/s depending on one lost flag, and a person
had to measure it by hand to notice. The probe measures it after every deploy, and `compare`
holds the figure against the last good deployment's.

Decide, then act: everything here is pure and testable without a host. `run_probe` takes the
function that sends one request body and yields the response bytes as they arrive; in production
that is `RemoteHost.http_stream` to the server's port on the host's loopback (`stream_requester`).

Workload (see docs/probe.md):
1. `warmup` requests, not counted;
2. single-stream phase: `requests` requests one after another -> time to first token and
   output tokens/s per stream (tokens after the first / time after the first);
3. concurrent phase: `requests` rounded up to whole waves of `concurrency`, `concurrency` at a
   time (threads) -> aggregate output tokens/s (all tokens / phase wall time).
Bounded by a fixed number of requests, a per-request timeout and a cap on the whole probe.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sgdeploy.profile.model import ProbeSettings

if TYPE_CHECKING:
    from sgdeploy.host.remote import RemoteHost

StreamRequest = Callable[[bytes], Iterator[bytes]]
Clock = Callable[[], float]

def request_body(settings: ProbeSettings, prompt: str) -> bytes:
    """One streaming request: greedy, exactly `max_tokens` tokens (EOS ignored)."""
    body: dict[str, Any]
    if settings.endpoint == "generate":
        body = {"text": prompt, "stream": True,
                "sampling_params": {"max_new_tokens": settings.max_tokens, "temperature": 0,
                                    "ignore_eos": True}}
    else:
        body = {
            "model": settings.model or "default",
            "prompt": prompt,
            "max_tokens": settings.max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
    return json.dumps(body).encode()


# --------------------------------------------------------------------------- stream parsing
@dataclass(frozen=True)
class TokenEvent:
    """Tokens arrived: `tokens` is the cumulative count of output tokens after this event."""

    t: float
    tokens: int


@dataclass
class StreamParser:
    """Server-sent events in (bytes, split anywhere), token events out.

    Understands SGLang's native `/generate` stream (`data: {"text": ..., "meta_info":
    {"completion_tokens": N}}`, cumulative) and OpenAI completions (`data: {"choices": [{"text":
    ...}]}`, with `usage.completion_tokens` when the server sends it, and `data: [DONE]`). Without a
    count in the payload, each event that carries text counts as one token.
    """

    tokens: int = 0
    done: bool = False
    error: str | None = None
    events: int = 0
    _buf: bytearray = field(default_factory=bytearray)
    _data: list[str] = field(default_factory=list)

    def feed(self, chunk: bytes, t: float) -> list[TokenEvent]:
        self._buf.extend(chunk)
        out: list[TokenEvent] = []
        while (end := self._buf.find(b"\n")) >= 0:
            line = bytes(self._buf[:end]).rstrip(b"\r").decode("utf-8", "replace")
            del self._buf[:end + 1]
            self._line(line, t, out)
        return out

    def close(self, t: float) -> list[TokenEvent]:
        """The stream ended: a last line without a newline and a pending event still count."""
        out: list[TokenEvent] = []
        if self._buf:
            line = bytes(self._buf).rstrip(b"\r").decode("utf-8", "replace")
            self._buf.clear()
            self._line(line, t, out)
        self._dispatch(t, out)
        return out

    def _line(self, line: str, t: float, out: list[TokenEvent]) -> None:
        if not line:
            self._dispatch(t, out)
        elif line.startswith("data:"):
            value = line[5:]
            self._data.append(value[1:] if value.startswith(" ") else value)
        # comments (":"), event:, id:, retry: and anything else carry no tokens

    def _dispatch(self, t: float, out: list[TokenEvent]) -> None:
        if not self._data:
            return
        data, self._data = "\n".join(self._data), []
        self.events += 1
        if data.strip() == "[DONE]":
            self.done = True
            return
        try:
            obj = json.loads(data)
        except ValueError:
            self.error = self.error or f"unreadable event: {data[:120]}"
            return
        if not isinstance(obj, dict):
            return
        count = _count(obj, self.tokens)
        if count is None:
            self.error = self.error or _error_text(obj)
            return
        if count > self.tokens:
            self.tokens = count
            out.append(TokenEvent(t, count))


def _count(obj: dict[str, Any], before: int) -> int | None:
    """The cumulative output token count after this event; None for an error event."""
    if obj.get("object") == "error" or (
        "error" in obj and "choices" not in obj and "meta_info" not in obj
    ):
        return None
    meta = obj.get("meta_info")
    if isinstance(meta, dict):  # SGLang native
        tokens = meta.get("completion_tokens")
        if isinstance(tokens, int):
            return tokens
        ids = obj.get("output_ids")
        return len(ids) if isinstance(ids, list) else before + (1 if obj.get("text") else 0)
    usage = obj.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        return max(before, int(usage["completion_tokens"]))
    choices = obj.get("choices")
    if isinstance(choices, list):
        texts = [
            c.get("text") or (c.get("delta") or {}).get("content")
            for c in choices
            if isinstance(c, dict)
        ]
        return before + sum(1 for text in texts if text)
    return before


def _error_text(obj: dict[str, Any]) -> str:
    error = obj.get("error", obj)
    if isinstance(error, dict):
        error = error.get("message") or error
    return f"server error: {str(error)[:200]}"


def parse_stream(chunks: Iterable[tuple[float, bytes]]) -> tuple[list[TokenEvent], StreamParser]:
    """Parse a whole recorded stream of (arrival time, bytes)."""
    parser = StreamParser()
    events: list[TokenEvent] = []
    last = 0.0
    for t, chunk in chunks:
        events += parser.feed(chunk, t)
        last = t
    events += parser.close(last)
    return events, parser


# --------------------------------------------------------------------------- one request
@dataclass(frozen=True)
class StreamStats:
    """One request as measured."""

    started: float
    ended: float
    tokens: int = 0
    first_token_at: float | None = None
    first_tokens: int = 0
    last_token_at: float | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_at is None else self.first_token_at - self.started

    @property
    def decode_tps(self) -> float | None:
        """Output tokens/s of this stream: tokens after the first event / time after it."""
        if self.first_token_at is None or self.last_token_at is None:
            return None
        span = self.last_token_at - self.first_token_at
        after = self.tokens - self.first_tokens
        return after / span if span > 0 and after > 0 else None


def measure_stream(
    stream_request: StreamRequest, body: bytes, clock: Clock, deadline: float
) -> StreamStats:
    """Send one request and time its tokens; never raises for what the server or the link does."""
    started = clock()
    parser = StreamParser()
    first: TokenEvent | None = None
    last: TokenEvent | None = None
    error: str | None = None
    chunks: Iterator[bytes] | None = None
    try:
        chunks = stream_request(body)
        for chunk in chunks:
            now = clock()
            for event in parser.feed(chunk, now):
                first, last = first or event, event
            if now > deadline:
                error = "cut off at the probe's time limit"
                break
        else:
            for event in parser.close(clock()):
                first, last = first or event, event
    except Exception as exc:  # a failed request is a figure of the probe, not a crash of it
        error = f"{type(exc).__name__}: {exc}"
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()  # closes the channel of a stream cut short
    ended = clock()
    if error is None and parser.error:
        error = parser.error
    if error is None and parser.tokens == 0:
        error = "the response carried no tokens"
    return StreamStats(started, ended, parser.tokens,
                       first.t if first else None, first.tokens if first else 0,
                       last.t if last else None, error)


# --------------------------------------------------------------------------- the probe
@dataclass
class ProbeResult:
    """What one probe measured. Figures are None when no request produced them."""

    endpoint: str
    concurrency: int
    requests: int  # requests measured (both phases, warmup excluded)
    errors: int
    ttft_ms_median: float | None = None  # single-stream phase
    ttft_ms_p90: float | None = None
    single_stream_tps: float | None = None  # median over the single-stream requests
    concurrent_tps: float | None = None  # aggregate over the concurrent phase
    concurrent_stream_tps: float | None = None  # median per stream in the concurrent phase
    output_tokens: int = 0
    duration_s: float = 0.0
    error_messages: list[str] = field(default_factory=list)
    workload: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Every measured request succeeded and the single-stream figure exists."""
        return self.errors == 0 and self.single_stream_tps is not None

    def as_dict(self) -> dict[str, Any]:
        def r(value: float | None, digits: int = 1) -> float | None:
            return None if value is None else round(value, digits)

        return {
            "endpoint": self.endpoint,
            "single_stream_tps": r(self.single_stream_tps, 2),
            "concurrent_tps": r(self.concurrent_tps, 2),
            "concurrent_stream_tps": r(self.concurrent_stream_tps, 2),
            "concurrency": self.concurrency,
            "ttft_ms": {"median": r(self.ttft_ms_median), "p90": r(self.ttft_ms_p90)},
            "requests": self.requests,
            "errors": self.errors,
            "error_messages": self.error_messages[:5],
            "output_tokens": self.output_tokens,
            "duration_s": round(self.duration_s, 2),
            "workload": self.workload,
        }

    def summary(self) -> str:
        def f(value: float | None, unit: str) -> str:
            return "n/a" if value is None else f"{value:.1f} {unit}"

        text = (f"single-stream {f(self.single_stream_tps, 'tok/s')}, {self.concurrency} "
                f"concurrent {f(self.concurrent_tps, 'tok/s')}, TTFT median "
                f"{f(self.ttft_ms_median, 'ms')} (p90 {f(self.ttft_ms_p90, 'ms')})")
        if self.errors:
            text += f"; {self.errors} of {self.requests} requests failed ({self.error_messages[0]})"
        return text


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def run_probe(stream_request: StreamRequest, settings: ProbeSettings | None = None,
              clock: Clock = time.monotonic) -> ProbeResult:
    """Run the workload through `stream_request` (one body in, response chunks out)."""
    settings = settings or ProbeSettings()
    began = clock()
    cap = began + settings.duration_s
    prompts = settings.prompts
    counter = iter(range(1 << 30))
    lock = threading.Lock()

    def one() -> StreamStats | None:
        with lock:
            i = next(counter)
        now = clock()
        if now >= cap:
            return None  # not started: past the cap
        body = request_body(settings, prompts[i % len(prompts)])
        return measure_stream(
            stream_request, body, clock, min(now + settings.request_timeout_s, cap)
        )

    for _ in range(settings.warmup):
        one()
    single = [s for s in (one() for _ in range(settings.requests)) if s is not None]
    concurrent: list[StreamStats] = []
    waves = -(-settings.requests // settings.concurrency)  # full waves: every slot busy to the end
    concurrent_count = waves * settings.concurrency if settings.concurrency > 1 else 0
    if concurrent_count:
        from concurrent.futures import ThreadPoolExecutor  # not on validate's import path

        with ThreadPoolExecutor(
            max_workers=settings.concurrency, thread_name_prefix="sgdeploy-probe"
        ) as pool:
            futures = [pool.submit(one) for _ in range(concurrent_count)]
            concurrent = [s for s in (f.result() for f in futures) if s is not None]
    measured = single + concurrent
    failed = [s for s in measured if not s.ok]
    planned = settings.requests + concurrent_count
    skipped = planned - len(measured)
    result = ProbeResult(endpoint=settings.endpoint, concurrency=settings.concurrency,
                         requests=planned, errors=len(failed) + skipped,
                         output_tokens=sum(s.tokens for s in measured if s.ok),
                         duration_s=clock() - began, workload=settings.workload())
    result.error_messages = list(dict.fromkeys(s.error for s in failed if s.error))
    if skipped:
        result.error_messages.append(f"{skipped} requests not sent: the probe's "
                                     f"{settings.duration_s:.0f} s cap was reached")
    ttfts = [s.ttft_s * 1000 for s in single if s.ok and s.ttft_s is not None]
    if ttfts:
        result.ttft_ms_median = statistics.median(ttfts)
        result.ttft_ms_p90 = percentile(ttfts, 90)
    rates = [s.decode_tps for s in single if s.ok and s.decode_tps is not None]
    if rates:
        result.single_stream_tps = statistics.median(rates)
    good = [s for s in concurrent if s.ok]
    if good:
        span = max(s.ended for s in good) - min(s.started for s in good)
        result.concurrent_tps = sum(s.tokens for s in good) / span if span > 0 else None
        per_stream = [s.decode_tps for s in good if s.decode_tps is not None]
        result.concurrent_stream_tps = statistics.median(per_stream) if per_stream else None
    return result


def stream_requester(remote: RemoteHost, port: int, settings: ProbeSettings,
                     api_key: str | None = None) -> StreamRequest:
    """The production `stream_request`: POST to the server's port on the host, through SSH."""
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"

    def send(body: bytes) -> Iterator[bytes]:
        return remote.http_stream(
            port, "POST", settings.path, body, headers, timeout=settings.request_timeout_s
        )

    return send


def probe_remote(remote: RemoteHost, port: int, settings: ProbeSettings | None = None,
                 api_key: str | None = None) -> ProbeResult:
    """`run_probe` against the server listening on 127.0.0.1:<port> of a connected host."""
    settings = settings or ProbeSettings()
    return run_probe(stream_requester(remote, port, settings, api_key), settings)


# --------------------------------------------------------------------------- comparison
@dataclass(frozen=True)
class ProbeVerdict:
    ok: bool
    ratio: float | None
    message: str

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "ratio": None if self.ratio is None else round(self.ratio, 3),
                "message": self.message}


@dataclass(frozen=True)
class ProbeOutcome:
    """A started deployment's probe and how it compares with the last good deployment's."""

    result: ProbeResult
    verdict: ProbeVerdict

    def as_dict(self) -> dict[str, Any]:
        """As apply's JSON and the record's meta.json keep it: the figures, the verdict, a
        summary."""
        return {
            **self.result.as_dict(),
            "verdict": self.verdict.as_dict(),
            "summary": self.result.summary(),
        }

    @property
    def text(self) -> str:
        return f"{self.result.summary()}; {self.verdict.message}"


def compare(
    new: ProbeResult, baseline: dict[str, Any] | None, min_ratio: float = 0.9
) -> ProbeVerdict:
    """Hold a probe against the last good deployment's (`ProbeResult.as_dict()`, or a meta.json
    with it under "probe"). The single-stream figure decides; the concurrent figure is checked
    too when both probes have one. A different workload is not compared."""
    if new.single_stream_tps is None:
        why = new.error_messages[0] if new.error_messages else "no request produced tokens"
        return ProbeVerdict(False, None, f"the probe measured nothing: {why}")
    if isinstance(baseline, dict) and isinstance(baseline.get("probe"), dict):
        baseline = baseline["probe"]
    now = f"single-stream {new.single_stream_tps:.1f} tok/s"
    if new.errors:
        return ProbeVerdict(False, None, f"{now}, but {new.errors} of {new.requests} probe "
                            "requests failed: "
                            f"{new.error_messages[0] if new.error_messages else 'unknown error'}")
    old = _figure(baseline, "single_stream_tps")
    if baseline is None or old is None:
        # shown beside the summary
        return ProbeVerdict(True, None, "no previous figure to compare with")
    old_workload = baseline.get("workload")
    if isinstance(old_workload, dict) and old_workload and old_workload != new.workload:
        changed = sorted(k for k in set(old_workload) | set(new.workload)
                         if old_workload.get(k) != new.workload.get(k))
        return ProbeVerdict(True, None, "the previous figure came from a different workload "
                            f"({', '.join(changed)} changed), not compared")
    checks = [("single-stream", new.single_stream_tps, old)]
    old_concurrent = _figure(baseline, "concurrent_tps")
    if new.concurrent_tps is not None and old_concurrent is not None:
        checks.append((f"{new.concurrency}-concurrent", new.concurrent_tps, old_concurrent))
    name, value, before = min(checks, key=lambda c: c[1] / c[2])
    ratio = value / before
    ok = ratio >= min_ratio
    message = (f"{name} {value:.1f} tok/s is {ratio * 100:.0f} % of the last good deployment's "
               f"{before:.1f} tok/s (minimum {min_ratio * 100:.0f} %)")
    return ProbeVerdict(ok, ratio, message)


def _figure(baseline: dict[str, Any] | None, key: str) -> float | None:
    value = (baseline or {}).get(key)
    return (
        float(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
        else None
    )
