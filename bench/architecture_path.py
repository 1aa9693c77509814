"""Following a profile through apply: which of sgdeploy's modules its data passes, in order.

Runs `sgdeploy plan PROFILE --no-sglang-check` through the CLI's own code
(`sgdeploy.cli.deploying.run_apply` with `dry_run`, the path `apply` takes up to its plan:
load, validate, select the host, connect, facts, preflight, render, the plan's steps as data,
`plan`'s exit code and its text), with one thing replaced: the connection. Instead of
`sgdeploy.deploy.early.EarlyStart` connecting over SSH, the session's host answers the facts
command with bench/host_answers/ct129.facts.txt (the facts command's output for the
inventory's ct129: 2x RTX A6000, SGLang 0.5.11, the model present, no unit installed yet).
Any other command the path sends fails the run: nothing on a host is pretended to have run.

Not covered: the transaction (lock, stop, install, start, journal, record, rollback), which
needs a host; SGLang's own check on the host (`--no-sglang-check`); the connection and the
facts read ahead on `EarlyStart`'s thread (here the facts are read and parsed on the main
thread, where `decide` would take them).

Every call of a function defined under sgdeploy/ on the main thread is recorded with
`sys.setprofile` (module and function; module-level code, i.e. imports, left out: all modules
are imported before the measured run, and one run is made first so that caches are warm).
Consecutive calls within one module are one stop. Per stop its stage is its package, in the
order of `STAGES`; a climb back is a stop whose stage comes before the previous stop's; a
return is a stop in a module already left earlier.

    .venv/bin/python bench/architecture_path.py            # the path and the figures
    .venv/bin/python bench/architecture_path.py --json FILE
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import io
import json
import pkgutil
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import sgdeploy  # noqa: E402

PACKAGE = Path(sgdeploy.__file__).resolve().parent
PROFILE = REPO / "profiles" / "qwen36-mtp3.toml"
INVENTORY = REPO / "inventory.toml"
FACTS = REPO / "bench" / "host_answers" / "ct129.facts.txt"
# The pipeline's stages, earliest first (issue #32). Within deploy/ no order is used: the
# package level only (docs/architecture.md lists deploy's modules but gives no order among them).
STAGES = ("core", "sglang", "profile", "host", "deploy", "logs", "review", "cli")
# The import layers of tests/test_architecture.py, reported beside for comparison.
LAYERS = ("core", "logs", "sglang", "host", "profile", "deploy", "review", "cli")
_GENERATOR_FLAGS = 0x20 | 0x80 | 0x200  # CO_GENERATOR, CO_COROUTINE, CO_ASYNC_GENERATOR


@dataclass
class Stop:
    module: str  # sgdeploy.deploy.apply
    functions: list[str] = field(default_factory=list)  # in the order first called
    caller: str = ""  # the sgdeploy function that made the stop's first call

    @property
    def package(self) -> str:
        parts = self.module.split(".")
        return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in STAGES) else "sgdeploy"

    @property
    def file(self) -> str:
        return self.module.replace(".", "/") + ".py"


@dataclass
class Measure:
    stops: list[Stop]
    exit_code: int
    output: str

    @property
    def files(self) -> int:
        return len({s.module for s in self.stops})

    def climbs(self, order: tuple[str, ...] = STAGES) -> list[tuple[Stop, Stop]]:
        return [(a, b) for a, b in zip(self.stops, self.stops[1:], strict=False)
                if a.package in order and b.package in order and order.index(b.package) < order.index(a.package)]

    def returns(self) -> list[int]:
        left: set[str] = set()
        found = []
        for i, stop in enumerate(self.stops):
            if stop.module in left:
                found.append(i)
            if i:
                left.add(self.stops[i - 1].module)
        return found

    def figures(self) -> dict[str, int]:
        return {"stops": len(self.stops), "files": self.files, "climbs_back": len(self.climbs()),
                "returns": len(self.returns()), "climbs_back_import_layers": len(self.climbs(LAYERS))}


# --------------------------------------------------------------------------- the host's answers
class AnsweringHost:
    """The surface of `sgdeploy.host.remote.RemoteHost` that the plan's path uses, answering the
    facts command (no unit file installed, no last good deployment) and nothing else."""

    def __init__(self, name: str, facts: str) -> None:
        from sgdeploy.host.remote import Privileges, RemoteStats

        self.name = name
        self.facts = facts
        self.privileges = Privileges()
        self.stats = RemoteStats()
        self.commands: list[str] = []

    def __enter__(self) -> AnsweringHost:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def close(self) -> None:
        return None

    def run(self, command: str, timeout: float = 0.0, stdin: bytes | None = None) -> Any:
        from sgdeploy.deploy.session import RECORD_MARKER, UNIT_FILE_MARKER
        from sgdeploy.host.remote import CommandResult

        self.commands.append(command)
        self.stats.commands += 1
        if command.startswith("sh -c ") and UNIT_FILE_MARKER in command:
            return CommandResult(command, 0, f"{self.facts}{UNIT_FILE_MARKER}\n@@none@@\n{RECORD_MARKER}\n", "")
        raise AssertionError(f"the measured path sent a command that has no answer here: {command[:120]}")


class AnsweredStart:
    """Stands where `sgdeploy.deploy.early.EarlyStart` stands in `run_apply`: its session is
    over `AnsweringHost` instead of an SSH connection, and reads nothing ahead."""

    def __init__(self, profile: str, inventory: str | None, hosts: list[str], *_: Any, **__: Any) -> None:
        from sgdeploy.deploy.session import HostSession

        self.host = AnsweringHost("ct129", FACTS.read_text(encoding="utf-8"))
        self.session = HostSession(self.host)  # type: ignore[arg-type]

    def validated(self) -> None:
        return None

    def take(self, name: str) -> Any:
        return self.session if name == self.host.name else None

    def close(self) -> None:
        return None


@contextlib.contextmanager
def answered_start() -> Iterator[None]:
    from sgdeploy.deploy import early

    real = early.EarlyStart
    early.EarlyStart = AnsweredStart  # type: ignore[assignment,misc]
    try:
        yield
    finally:
        early.EarlyStart = real  # type: ignore[misc]


# --------------------------------------------------------------------------- the measure
def import_all() -> None:
    """Every sgdeploy module, so that no import runs inside the measured run."""
    for info in pkgutil.walk_packages([str(PACKAGE)], "sgdeploy."):
        if ".catalogs" in info.name or info.name.endswith("check.program") or "__main__" in info.name:
            continue
        with contextlib.suppress(ImportError):
            importlib.import_module(info.name)


def _module_of(filename: str) -> str | None:
    """`sgdeploy.deploy.apply` for a file under sgdeploy/; None for any other code (the standard
    library, pydantic, Jinja's compiled templates, code made by `exec`)."""
    path = Path(filename)
    if not path.is_absolute() or path.suffix != ".py":
        return None
    try:
        rel = path.resolve().relative_to(PACKAGE)
    except ValueError:
        return None
    return ".".join(("sgdeploy", *rel.with_suffix("").parts)).removesuffix(".__init__")


def plan_once() -> tuple[int, str]:
    from sgdeploy.cli.deploying import run_apply
    from sgdeploy.cli.main import build_parser

    args = build_parser().parse_args(["plan", str(PROFILE), "--inventory", str(INVENTORY), "--no-sglang-check"])
    out = io.StringIO()
    with answered_start(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = run_apply(args, dry_run=True)
    return code, out.getvalue()


@dataclass
class Call:
    module: str
    function: str
    caller: str  # the sgdeploy function that called it (module.function)
    carries: bool  # given the profile (`LoadedProfile`, its `Profile`; `self` too) or returns it
    # (in a tuple, dict or dataclass too)


def _stops(calls: list[Call]) -> list[Stop]:
    stops: list[Stop] = []
    for call in calls:
        if not stops or stops[-1].module != call.module:
            stops.append(Stop(call.module, caller=call.caller))
        if call.function not in stops[-1].functions:
            stops[-1].functions.append(call.function)
    return stops


def measure() -> tuple[Measure, Measure]:
    """(the profile's path: the calls that are given the profile or return it; every call)."""
    from sgdeploy.profile.model import LoadedProfile, Profile

    import_all()
    plan_once()  # caches (catalogs, templates, compiled patterns) warm: the path, not the first loads
    modules: dict[str, str | None] = {}
    calls: list[Call] = []
    open_calls: dict[int, Call] = {}
    resumed: set[int] = set()
    main = threading.get_ident()
    profile_types = (LoadedProfile, Profile)

    def given_profile(frame: FrameType) -> bool:
        code = frame.f_code
        count = code.co_argcount + code.co_kwonlyargcount
        names = list(code.co_varnames[:count])
        if code.co_flags & 0x04:  # *args
            names.append(code.co_varnames[count])
            count += 1
        if code.co_flags & 0x08:  # **kwargs
            names.append(code.co_varnames[count])
        return holds_profile([frame.f_locals.get(n) for n in names])

    def holds_profile(values: list[Any]) -> bool:
        """A profile among `values`, or in a tuple, dict or dataclass (a typed result) of them."""
        values += [v for x in values if isinstance(x, tuple) for v in x]
        values += [v for x in values if isinstance(x, dict) for v in x.values()]
        values += [getattr(x, f.name, None) for x in values
                   if dataclasses.is_dataclass(x) and not isinstance(x, profile_types)
                   for f in dataclasses.fields(x)]
        return any(isinstance(v, profile_types) for v in values)

    def caller_of(frame: FrameType) -> str:
        back = frame.f_back
        while back is not None:
            name = modules.get(back.f_code.co_filename, "")
            if name == "":
                name = modules[back.f_code.co_filename] = _module_of(back.f_code.co_filename)
            if name is not None and back.f_code.co_name != "<module>":
                return f"{name.removeprefix('sgdeploy.')}.{back.f_code.co_qualname}"
            back = back.f_back
        return "?"

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event not in ("call", "return") or threading.get_ident() != main:
            return
        code = frame.f_code
        module = modules.get(code.co_filename, "")
        if module == "":
            module = modules[code.co_filename] = _module_of(code.co_filename)
        if module is None or code.co_name == "<module>":
            return
        if event == "return":
            call = open_calls.pop(id(frame), None)
            if call is not None and holds_profile([arg]):
                call.carries = True
            return
        if code.co_flags & _GENERATOR_FLAGS:  # a generator resumed is not a new call
            if id(frame) in resumed:
                return
            resumed.add(id(frame))
        call = Call(module, code.co_qualname, caller_of(frame), given_profile(frame))
        calls.append(call)
        if not code.co_flags & _GENERATOR_FLAGS:
            open_calls[id(frame)] = call

    sys.setprofile(profile)
    try:
        code, output = plan_once()
    finally:
        sys.setprofile(None)
    return (Measure(_stops([c for c in calls if c.carries]), code, output),
            Measure(_stops(calls), code, output))


# --------------------------------------------------------------------------- the report
def report(path: Measure, every: Measure) -> str:
    climbs = {id(b) for _, b in path.climbs()}
    returns = {id(path.stops[i]) for i in path.returns()}
    lines = [f"sgdeploy plan {PROFILE.relative_to(REPO)} --no-sglang-check, host ct129 answered from "
             f"{FACTS.relative_to(REPO)}: exit {path.exit_code}", "",
             "The profile's path (calls given the loaded profile or its model, or returning it):",
             " #     stage    module                      functions, first called   (^ climbs back, < returns)"]
    for i, stop in enumerate(path.stops, 1):
        marks = ("^" if id(stop) in climbs else " ") + ("<" if id(stop) in returns else " ")
        shown = ", ".join(stop.functions[:4]) + (f", +{len(stop.functions) - 4}" if len(stop.functions) > 4 else "")
        lines.append(f"{i:>2} {marks}  {stop.package:<8} {stop.module.removeprefix('sgdeploy.'):<27} {shown}")
    lines += ["", "climbs back, in order (from -> to):"]
    lines += [f"  {a.module.removeprefix('sgdeploy.')}.{a.functions[-1]} -> "
              f"{b.module.removeprefix('sgdeploy.')}.{b.functions[0]}   (called by {b.caller})"
              for a, b in path.climbs()]
    f, e = path.figures(), every.figures()
    lines += ["", f"stops: {f['stops']}   files: {f['files']}   climbs back: {f['climbs_back']}   "
              f"returns to a file already left: {f['returns']}",
              f"stages: {' < '.join(STAGES)}; deploy/ at package level",
              f"(with the import layers of tests/test_architecture.py, {' < '.join(LAYERS)}: "
              f"{f['climbs_back_import_layers']} climbs back)", "",
              f"every sgdeploy call of the same run: stops: {e['stops']}   files: {e['files']}   climbs back: "
              f"{e['climbs_back']}   returns: {e['returns']}"]
    pairs = Counter((a.module.removeprefix("sgdeploy."), b.module.removeprefix("sgdeploy.")) for a, b in every.climbs())
    lines += [f"  {a} -> {b}: {n}" for (a, b), n in sorted(pairs.items(), key=lambda kv: (-kv[1], kv[0]))]
    return "\n".join(lines)


def _document(m: Measure) -> dict[str, Any]:
    return {"figures": m.figures(),
            "stops": [{"module": s.module, "stage": s.package, "functions": s.functions} for s in m.stops]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="FILE", help="also write the stops and the figures as JSON")
    args = parser.parse_args()
    path, every = measure()
    print(report(path, every))
    if args.json:
        Path(args.json).write_text(json.dumps({"exit_code": path.exit_code, "profile_path": _document(path),
                                               "every_call": _document(every)}, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
