#!/usr/bin/env python3
"""Launches derived from the condition of each of SGLang's own check sites, both sides of it.

For every refusal site of a release's check-site inventory (`catalogs/checks/<version>.json.gz`:
file, line, function), the condition that leads there is read from the release's own source
(the oracle venv's installed wheel, read as text with `ast`, never imported): the tests of the
`if` statements around the `raise` (true in their body, false in their `else`) and, for an
`assert`, its condition (false to refuse). Each test is evaluated on candidate launches, with the
flags it names (`self.X`, `server_args.X`, `cfg.X`, a bare `X` for ServerArgs fields), the
environment variables it reads (`envs.X.get()`, `get_bool_env_var("X")`), the GPU it asks about
(`is_sm100_supported()`, `is_blackwell()`, ...) and nothing else: a test that needs anything
more (the model's config, a helper's result) is left out of the search. A seeded search finds

- the refusing side: every test as the site needs it, and
- the other side, once per test: that test the other way round, the rest as before,

and each launch goes to SGLang (../shared/oracle, verdicts cached in
`.cache/fidelity/sites-<version>.jsonl`) and to sgdeploy (`validate`, as bench/fidelity/run.py
does). A miss is a refusal sgdeploy does not report; a false alarm an accepted launch it refuses
(policy rules and launches whose startup the oracle predicts to fail counted apart).

    .venv/bin/python bench/fidelity/sitegen.py                       # both versions: generate, ask, compare
    .venv/bin/python bench/fidelity/sitegen.py --cached              # only verdicts already cached
    .venv/bin/python bench/fidelity/sitegen.py --write-fixture       # tests/fixtures/site_launches.json.gz

`--write-fixture` keeps every launch with SGLang's verdict (and the model configs they use), so
that tests/test_site_launches.py replays sgdeploy's side without SGLang: a change that makes
sgdeploy miss one of these refusals, or refuse one of these accepted launches, fails a test.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import random
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.fidelity import corpus, oracle, run  # noqa: E402
from sgdeploy.deploy.render import flag_args  # noqa: E402
from sgdeploy.profile.validate import InventoryContext  # noqa: E402
from sgdeploy.sglang.catalog import Catalog, Flag, load_catalog  # noqa: E402
from sgdeploy.sglang.checksites import refusal_sites  # noqa: E402

VERSIONS = ("0.5.11", "0.5.23")
FIXTURE = REPO / "tests" / "fixtures" / "site_launches.json.gz"
TRIES = 400  # random launches tried per goal
MAX_FLIPS = 4  # "other side" launches per site
# The oracle's simulated GPUs by compute capability.
GPU_CC = {"A6000": (8, 6), "H200": (9, 0), "B200": (10, 0)}
# Words of a site's function, message and condition that say which model reaches it.
MODEL_HINTS = (
    ("deepseek-v3", ("mla", "deepseek", "nsa", "dsa", "index_topk", "flashmla", "cutlass_mla", "trtllm_mla")),
    ("qwen3.6-27b", ("mamba", "hybrid", "linear", "gdn", "ssm", "swa", "qwen3_5", "qwen3_next")),
    ("qwen3-vl-8b", ("multimodal", "vision", "mm_", "vlm", "encoder", "language_only", "image")),
    ("qwen3-30b-a3b", ("moe", "expert", "ep_size", "a2a", "deepep", "eplb")),
)
DEFAULT_MODEL = "qwen3-8b"
# Speculative algorithms that need a draft model, and the one the corpus gives them.
NEEDS_DRAFT = ("EAGLE", "EAGLE3", "STANDALONE", "DFLASH")
# Values that reach more sites than the corpus's generic ones, for flags without choices.
VALUES: dict[str, list[Any]] = {
    "speculative_algorithm": ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"],
    "device": ["cuda", "cpu"],
    "load_format": ["auto", "dummy"],
}


class Unknown(Exception):
    """A test names something the search does not model (the model's config, a helper)."""


# --------------------------------------------------------------------------- reading the source
def site_packages(version: str) -> Path | None:
    python = Path(oracle.python_for(version))
    found = sorted(python.parent.parent.glob("lib/python3*/site-packages"))
    return found[0] if found and (found[0] / "sglang").is_dir() else None


@cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


@cache
def parent_map(path: Path) -> dict[ast.AST, ast.AST]:
    return _parents(parsed(path))


@dataclass(frozen=True)
class Test:
    """One condition on the way to a site, and the truth the site needs of it."""

    expr: ast.expr
    wanted: bool

    @property
    def text(self) -> str:
        return ("" if self.wanted else "not ") + f"({ast.unparse(self.expr)})"


def path_condition(root: Path, site: dict[str, Any]) -> list[Test] | None:
    """The tests around one site, innermost last; None when the site is not found in the source."""
    path = root / site["file"]
    if not path.is_file():
        return None
    tree = parsed(path)
    kinds = (ast.Assert,) if site["kind"] == "assert" else (ast.Raise,)
    node = next((n for n in ast.walk(tree) if isinstance(n, kinds) and n.lineno == site["line"]), None)
    if node is None:
        return None
    parents = parent_map(path)
    tests: list[Test] = []
    if isinstance(node, ast.Assert):
        tests.append(Test(node.test, False))
    child: ast.AST = node
    while child in parents:
        parent = parents[child]
        if isinstance(parent, ast.If):
            if child in parent.body:
                tests.append(Test(parent.test, True))
            elif child in parent.orelse:
                tests.append(Test(parent.test, False))
        if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef):
            break
        child = parent
    tests.reverse()
    return tests


# --------------------------------------------------------------------------- evaluating a test
# Local names of the resolution code that stand for a field (as given, before SGLang resolves them).
_LOCALS = {"prefill_backend": "prefill_attention_backend", "decode_backend": "decode_attention_backend",
           "prefill": "prefill_attention_backend", "decode": "decode_attention_backend"}
_RECEIVERS = {"self", "server_args", "args", "cfg", "sa", "resolved", "view", "s"}
_GPU_CALLS: tuple[tuple[str, Callable[[tuple[int, int]], bool]], ...] = (
    ("sm120", lambda cc: cc[0] == 12),
    ("sm100", lambda cc: cc[0] >= 10),
    ("blackwell", lambda cc: cc[0] >= 10),
    ("sm90", lambda cc: cc >= (9, 0)),
    ("hopper", lambda cc: cc[0] == 9),
    ("sm89", lambda cc: cc >= (8, 9)),
    ("sm80", lambda cc: cc >= (8, 0)),
    ("ampere", lambda cc: cc[0] == 8),
)
_NOT_CUDA = ("hip", "npu", "xpu", "cpu", "musa", "mps", "hpu", "mlu", "rocm", "gfx", "amd")
_SAFE = {"len": len, "isinstance": isinstance, "int": int, "str": str, "float": float, "any": any, "all": all,
         "set": set, "list": list, "tuple": tuple, "bool": bool, "min": min, "max": max, "dict": dict,
         "None": None, "True": True, "False": False, "abs": abs, "sorted": sorted}


@dataclass
class Launch:
    server: dict[str, Any]
    env: dict[str, str]
    gpu: str
    model: str = DEFAULT_MODEL


class Namespace:
    """What a test sees: the launch's fields (defaults where unset), its environment, its GPU."""

    def __init__(self, catalog: Catalog, launch: Launch) -> None:
        self.catalog = catalog
        self.launch = launch

    def field(self, name: str) -> Any:
        if name in self.launch.server:
            return self.launch.server[name]
        return self.catalog.default(name)

    def env(self, name: str, kind: str) -> Any:
        raw = self.launch.env.get(name)
        if kind == "bool":
            return raw is not None and raw.lower() in ("1", "true", "yes")
        return raw

    def arch(self) -> str:
        name = run.architecture(self.launch.model)
        if name is None:
            raise Unknown("architecture")
        return name

    def capability(self) -> tuple[int, int]:
        return GPU_CC[self.launch.gpu]

    def gpu(self, word: str) -> bool:
        cc = GPU_CC[self.launch.gpu]
        for key, test in _GPU_CALLS:
            if key in word:
                return test(cc)
        if any(key in word for key in _NOT_CUDA):
            return False
        if "cuda" in word or "nvidia" in word:
            return True
        raise Unknown(word)


class Rewriter(ast.NodeTransformer):
    """A test's names as calls into a Namespace; a name it cannot model stays, and leaves its part undecided."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.fields: set[str] = set()
        self.envs: set[str] = set()
        self.gpu = False
        self.arch = False

    def _call(self, method: str, *args: str) -> ast.expr:
        return ast.Call(func=ast.Attribute(value=ast.Name("__ns", ast.Load()), attr=method, ctx=ast.Load()),
                        args=[ast.Constant(a) for a in args], keywords=[])

    def visit_Attribute(self, node: ast.Attribute) -> ast.expr:
        if isinstance(node.value, ast.Name) and node.value.id in _RECEIVERS and node.attr in self.catalog:
            self.fields.add(node.attr)
            return self._call("field", node.attr)
        # get_platform().is_sm100, current_platform.is_hopper: the GPU, as a property
        if node.attr.startswith("is_") and "platform" in ast.unparse(node.value):
            self.gpu = True
            return self._call("gpu", node.attr.lower())
        return self.generic_visit(node)  # type: ignore[return-value]

    def visit_Name(self, node: ast.Name) -> ast.expr:
        name = _LOCALS.get(node.id, node.id)
        if name in self.catalog and name not in _SAFE:
            self.fields.add(name)
            return self._call("field", name)
        if node.id == "model_arch":
            self.arch = True
            return self._call("arch")
        return node

    def visit_Call(self, node: ast.Call) -> ast.expr:
        func = node.func
        # envs.SGLANG_X.get() / envs.SGLANG_X.value
        if (isinstance(func, ast.Attribute) and func.attr in ("get", "value") and isinstance(func.value, ast.Attribute)
                and isinstance(func.value.value, ast.Name) and func.value.value.id == "envs"):
            self.envs.add(func.value.attr)
            return self._call("env", func.value.attr, "raw")
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name == "get_device_capability":
            self.gpu = True
            return self._call("capability")
        reads_env = name in ("get_bool_env_var", "getenv") or (
            name == "get" and ast.unparse(func).startswith("os.environ"))
        if reads_env and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            self.envs.add(node.args[0].value)
            return self._call("env", node.args[0].value, "bool" if name == "get_bool_env_var" else "raw")
        if name.startswith(("is_", "_is_")) and not node.args:
            self.gpu = True
            return self._call("gpu", name.lower())
        return self.generic_visit(node)  # type: ignore[return-value]


def _evaluate(node: ast.expr, ns: Namespace) -> bool | None:
    """A rewritten test's truth on a launch; None where it depends on what the search does not model
    (three-valued through `and`, `or` and `not`, so a known part still decides)."""
    if isinstance(node, ast.BoolOp):
        parts = [_evaluate(v, ns) for v in node.values]
        if isinstance(node.op, ast.And):
            return False if False in parts else None if None in parts else True
        return True if True in parts else None if None in parts else False
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = _evaluate(node.operand, ns)
        return None if inner is None else not inner
    try:
        code = compile(ast.fix_missing_locations(ast.Expression(node)), "<site>", "eval")
        return bool(eval(code, {"__builtins__": {}, **_SAFE}, {"__ns": ns}))
    except Exception:  # a name the rewriter left alone, a type the launch does not give, Unknown
        return None


@dataclass
class Compiled:
    test: Test
    expr: ast.expr
    fields: frozenset[str]
    envs: frozenset[str]
    gpu: bool
    arch: bool

    def value(self, ns: Namespace) -> bool | None:
        return _evaluate(self.expr, ns)


def compile_test(test: Test, catalog: Catalog) -> Compiled | None:
    rewriter = Rewriter(catalog)
    expr = rewriter.visit(ast.parse(ast.unparse(test.expr), mode="eval").body)
    if not (rewriter.fields or rewriter.envs or rewriter.gpu or rewriter.arch):
        return None
    return Compiled(test, expr, frozenset(rewriter.fields), frozenset(rewriter.envs), rewriter.gpu, rewriter.arch)


# --------------------------------------------------------------------------- the search
def constants(tests: list[Test]) -> list[Any]:
    found: list[Any] = []
    for test in tests:
        for node in ast.walk(test.expr):
            value = node.value if isinstance(node, ast.Constant) else None
            if value is not None and not isinstance(value, bytes) and value not in found:
                found.append(value)
    return found


def candidates(flag: Flag, consts: list[Any]) -> list[Any]:
    """Values to try for one flag: the test's own constants that suit it, and the corpus's values."""
    values: list[Any] = []
    for value in [*VALUES.get(flag.field, []), *corpus.valid_values(flag)]:
        if value not in values:
            values.append(value)
    if flag.is_switch:
        return values
    for const in consts:
        options = []
        if flag.value_kind == "int" and isinstance(const, int) and not isinstance(const, bool):
            options = [const, const + 1, const - 1, const * 2]
        elif flag.value_kind == "float" and isinstance(const, int | float) and not isinstance(const, bool):
            options = [float(const), float(const) + 0.5, float(const) - 0.5]
        elif flag.value_kind == "str" and isinstance(const, str) and (not flag.choices or const in flag.choices):
            options = [const]
        for option in options:
            value = [option] if flag.is_list else option
            if value not in values:
                values.append(value)
    return values


def model_for(site: dict[str, Any], tests: list[Test]) -> str:
    text = " ".join([site["function"], site.get("message") or "", *(ast.unparse(t.expr) for t in tests)]).lower()
    for model, words in MODEL_HINTS:
        if any(word in text for word in words):
            return model
    return DEFAULT_MODEL


def satisfied(compiled: list[Compiled], goal: list[bool], ns: Namespace) -> bool:
    """Every test as the goal wants it, or not decidable here; at least one decided."""
    values = [c.value(ns) for c in compiled]
    return (all(v is None or v == want for v, want in zip(values, goal, strict=True))
            and any(v is not None for v in values))


def search(catalog: Catalog, compiled: list[Compiled], goal: list[bool], rng: random.Random,
           consts: list[Any], model: str, start: Launch | None = None) -> Launch | None:
    """A launch on which every test takes the truth the goal gives it, changing as few flags as it can."""
    fields = sorted({f for c in compiled for f in c.fields})
    envs = sorted({e for c in compiled for e in c.envs})
    gpus = list(GPU_CC) if any(c.gpu for c in compiled) else [start.gpu if start else "H200"]
    models = list(corpus.MODELS) if any(c.arch for c in compiled) else [start.model if start else model]
    values = {f: candidates(catalog.flags[f], consts) for f in fields}
    env_values = ["1", "0", *[c for c in consts if isinstance(c, str)][:4]]
    base = start or Launch({}, {}, gpus[0], models[0])
    if satisfied(compiled, goal, Namespace(catalog, base)):
        return base
    for attempt in range(TRIES):
        server = dict(base.server)
        env = dict(base.env)
        # Few flags changed first, more as the search goes on.
        width = 1 + attempt * max(1, len(fields) + len(envs)) // TRIES
        for name in rng.sample(fields + envs, k=min(width, len(fields) + len(envs))):
            if name in values:
                choice = rng.choice([None, *values[name]]) if values[name] else None
                if choice is None:
                    server.pop(name, None)
                else:
                    server[name] = choice
            else:
                picked = rng.choice([None, *env_values])
                if picked is None:
                    env.pop(name, None)
                else:
                    env[name] = str(picked)
        launch = Launch(server, env, rng.choice(gpus) if attempt % 3 == 0 else base.gpu,
                        rng.choice(models) if attempt % 3 == 1 else base.model)
        if satisfied(compiled, goal, Namespace(catalog, launch)):
            return launch
    return None


@dataclass
class Derived:
    site: str
    side: str  # "refuse", or "other:<i>" with the test index turned the other way
    launch: Launch
    model: str
    test: str


def derive_site(catalog: Catalog, root: Path, site: dict[str, Any]) -> Iterator[Derived]:
    tests = path_condition(root, site)
    if not tests:
        return
    compiled = [c for c in (compile_test(t, catalog) for t in tests) if c is not None]
    if not compiled:
        return
    consts = constants(tests)
    rng = random.Random(f"{catalog.version}:{site['key']}")
    model = model_for(site, tests)
    goal = [c.test.wanted for c in compiled]
    refusing = search(catalog, compiled, goal, rng, consts, model)
    if refusing is not None:
        yield Derived(site["key"], "refuse", refusing, refusing.model, " and ".join(c.test.text for c in compiled))
    for index in range(len(compiled))[-MAX_FLIPS:]:
        flipped = list(goal)
        flipped[index] = not flipped[index]
        other = search(catalog, compiled[:index + 1], flipped[:index + 1], rng, consts, model, refusing)
        if other is not None:
            yield Derived(site["key"], f"other:{index}", other, other.model, compiled[index].test.text)


def finish(catalog: Catalog, derived: Derived) -> dict[str, Any] | None:
    """The case as bench/fidelity/run.py and the oracle read it, or None when it renders no argv."""
    server = {k: v for k, v in derived.launch.server.items() if k not in corpus.SKIPPED}
    algorithm = server.get("speculative_algorithm")
    if algorithm in NEEDS_DRAFT and "speculative_draft_model_path" in catalog:
        server.setdefault("speculative_draft_model_path", corpus.DRAFT_MODEL)
    sizes = [server.get(k) for k in ("tp_size", "pp_size")]
    ranks = 1
    for size in sizes:
        if isinstance(size, int) and not isinstance(size, bool) and size > 0:
            ranks *= size
    count = next((c for c in corpus.COUNTS if c >= ranks), corpus.COUNTS[-1])
    argv: list[str] = []
    for key, value in server.items():
        argv.extend(flag_args(catalog.flags[key], value))
    return {"version": catalog.version, "origin": f"sitegen:{derived.side}", "site": derived.site,
            "side": derived.side, "test": derived.test, "gpu": derived.launch.gpu, "gpu_count": count,
            "model": derived.model, "env": derived.launch.env, "server": server, "argv": argv}


def build(version: str) -> list[dict[str, Any]]:
    """Every derived launch of one release, deduplicated, with ids."""
    root = site_packages(version)
    if root is None:
        raise RuntimeError(f"no installed SGLang {version} to read the check sites from (the oracle's venv)")
    catalog = load_catalog(version)
    cases: list[dict[str, Any]] = []
    seen: set[str] = set()
    for site in refusal_sites(version):
        for derived in derive_site(catalog, root, site):
            case = finish(catalog, derived)
            if case is None:
                continue
            signature = oracle.case_key(case)
            if signature in seen:
                continue
            seen.add(signature)
            case["id"] = f"{version}/sitegen/{len(cases)}"
            cases.append(case)
    return cases


# --------------------------------------------------------------------------- comparing
KEPT_VERDICT = ("accepted", "stage", "error_type", "raised_at", "startup_predictions")


@dataclass
class Outcome:
    """One launch: SGLang's verdict and sgdeploy's, and what that makes it."""

    case: dict[str, Any]
    verdict: dict[str, Any]
    ours: dict[str, Any]
    raised_site: str
    status: str  # caught, miss, agree, false_alarm, policy, startup, undecided


def judge(case: dict[str, Any], verdict: dict[str, Any], ours: dict[str, Any], sites: run.Sites) -> Outcome:
    refused_by_us = bool(ours["errors"])
    if verdict.get("accepted") is None:
        return Outcome(case, verdict, ours, "", "undecided")
    if verdict["accepted"] is False:
        key = "argparse" if verdict.get("stage") == "parse" else sites.key(verdict.get("raised_at"))
        return Outcome(case, verdict, ours, key, "caught" if refused_by_us else "miss")
    if run.predicted_startup_failure(verdict):
        return Outcome(case, verdict, ours, "", "startup")
    if not refused_by_us:
        return Outcome(case, verdict, ours, "", "agree")
    if all(rule in run.POLICY_RULES or rule in ours.get("policy", ()) for rule in ours["errors"]):
        return Outcome(case, verdict, ours, "", "policy")
    return Outcome(case, verdict, ours, "", "false_alarm")


def inventory() -> tuple[tempfile.TemporaryDirectory[str], InventoryContext]:
    tmp = tempfile.TemporaryDirectory(prefix="sgd-sitegen-")
    path = Path(tmp.name) / "inventory.toml"
    path.write_text(run.inventory_text(), encoding="utf-8")
    return tmp, InventoryContext.load(path)


def compare(version: str, cases: list[dict[str, Any]], verdicts: dict[str, dict[str, Any]],
            models_dir: Path | None = None, model_config: bool = True) -> list[Outcome]:
    """Each launch judged; `model_config=False` gives sgdeploy only deploy.model_architecture."""
    sites = run.Sites(version)
    tmp, inv = inventory()
    with tmp:
        return [judge(c, verdicts[c["id"]], run.sgdeploy_verdict(c, inv, model_config, models_dir), sites)
                for c in cases if c["id"] in verdicts]


def report(version: str, outcomes: list[Outcome], limit: int) -> dict[str, Any]:
    counts = Counter(o.status for o in outcomes)
    reached = sum(1 for o in outcomes if o.case["side"] == "refuse" and o.raised_site == o.case["site"])
    refusing = sum(1 for o in outcomes if o.case["side"] == "refuse")
    sites_with_cases = len({o.case["site"] for o in outcomes})
    print(f"## SGLang {version}: {len(outcomes)} launches from {sites_with_cases} check sites\n")
    print(f"refusing side: {refusing} launches, {reached} refused by SGLang at their own site")
    argparse_refused = sum(1 for o in outcomes if o.raised_site == "argparse")
    post = [o for o in outcomes if o.status in ("caught", "miss") and o.raised_site != "argparse"]
    print(f"SGLang refused: {counts['caught'] + counts['miss']} ({argparse_refused} argparse); "
          f"caught {counts['caught']}, missed {counts['miss']} (post-parse caught "
          f"{sum(o.status == 'caught' for o in post)} / {len(post)})")
    accepted = counts["agree"] + counts["false_alarm"] + counts["policy"]
    print(f"SGLang accepted: {accepted}; false alarms {counts['false_alarm']}, policy only {counts['policy']}; "
          f"startup predicted to fail {counts['startup']}; undecided {counts['undecided']}\n")
    misses: dict[str, list[Outcome]] = defaultdict(list)
    for outcome in outcomes:
        if outcome.status == "miss":
            misses[outcome.raised_site].append(outcome)
    for key, found in sorted(misses.items(), key=lambda item: -len(item[1]))[:limit]:
        example = found[0]
        print(f"- miss x{len(found)} [{run.decision_words(key)}] {key[:140]}\n"
              f"    e.g. {example.case['id']} on {example.case['gpu']} x{example.case['gpu_count']} "
              f"{example.case['model']}: {' '.join(example.case['argv'])[:200]}")
    alarms: dict[str, list[Outcome]] = defaultdict(list)
    for outcome in outcomes:
        if outcome.status == "false_alarm":
            for rule in outcome.ours["errors"]:
                if rule not in run.POLICY_RULES and rule not in outcome.ours.get("policy", ()):
                    alarms[rule].append(outcome)
    for rule, found in sorted(alarms.items(), key=lambda item: -len(item[1]))[:limit]:
        example = found[0]
        print(f"- false alarm {rule} x{len(found)}: e.g. {example.case['id']}: {' '.join(example.case['argv'])[:160]}\n"
              f"    {next((m for m in example.ours['messages'] if m.startswith(rule)), '')[:200]}")
    print()
    return {"launches": len(outcomes), "sites": sites_with_cases, "refusing_side": refusing,
            "reached_own_site": reached, **counts}


# --------------------------------------------------------------------------- the fixture
def fixture_entry(case: dict[str, Any], verdict: dict[str, Any]) -> dict[str, Any]:
    keep = {k: case[k] for k in ("id", "version", "site", "side", "test", "gpu", "gpu_count", "model", "env", "server",
                                 "argv")}
    keep["sglang"] = {k: verdict.get(k) for k in KEPT_VERDICT}
    return keep


def write_fixture(entries: dict[str, list[dict[str, Any]]]) -> None:
    models = sorted({e["model"] for found in entries.values() for e in found}
                    | {corpus.DRAFT_MODEL.lstrip("@")})
    configs = {m: json.loads((oracle.ORACLE_DIR / "models" / m / "config.json").read_text(encoding="utf-8"))
               for m in models}
    data = {"models": configs, "versions": entries}
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    FIXTURE.write_bytes(gzip.compress(text.encode(), mtime=0))


def load_fixture() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(gzip.decompress(FIXTURE.read_bytes()))
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="append", choices=VERSIONS, help="repeatable (default: both)")
    parser.add_argument("--cached", action="store_true", help="only launches with a cached verdict")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--misses", type=int, default=30, metavar="N")
    parser.add_argument("--write-fixture", action="store_true", help=f"write {FIXTURE.relative_to(REPO)}")
    parser.add_argument("--json", metavar="FILE", help="the counts and every miss and false alarm as JSON")
    args = parser.parse_args(argv)
    entries: dict[str, list[dict[str, Any]]] = {}
    summary: dict[str, Any] = {}
    for version in args.version or VERSIONS:
        cases = build(version)
        verdicts = oracle.verdicts(version, cases, jobs=args.jobs, run_missing=not args.cached,
                                   cache=f"sites-{version}")
        outcomes = compare(version, cases, verdicts)
        summary[version] = report(version, outcomes, args.misses)
        summary[version]["misses"] = [[o.case["id"], o.raised_site] for o in outcomes if o.status == "miss"]
        summary[version]["false_alarms"] = [[o.case["id"], o.ours["errors"]] for o in outcomes
                                            if o.status == "false_alarm"]
        entries[version] = [fixture_entry(c, verdicts[c["id"]]) for c in cases if c["id"] in verdicts]
    if args.write_fixture:
        write_fixture(entries)
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
