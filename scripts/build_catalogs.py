#!/usr/bin/env python3
"""Build sgdeploy's bundled SGLang flag catalogs from the released wheels.

For every SGLang version asked for, the released wheel is downloaded with
``pip download`` into ``.cache/wheels`` (once; later runs work offline), opened
as a zip file and its ``sglang serve`` / ``launch_server`` flag set is read by
static analysis of the sources with :mod:`ast`. Nothing from the wheel is
installed or imported.

Three source layouts are understood, detected from the wheel's content:

* 0.5.1 - 0.5.13: ``ServerArgs`` is a dataclass in ``sglang/srt/server_args.py``
  and ``ServerArgs.add_cli_args`` registers every flag with
  ``parser.add_argument(...)``.
* 0.5.14 - 0.5.19: the same dataclass, but most fields are declared as
  ``A[T, "help"]`` / ``A[T, Arg(...)]`` and registered by
  ``add_cli_args_from_dataclass``; a few flags are still registered by hand.
* 0.5.20 and later: the fields live in ``msgspec.Struct`` namespace classes in
  ``sglang/srt/arg_groups/fields/*.py``, collected by ``_INPUT_NAMESPACES`` in
  ``server_args.py``; registration works as in the previous layout.

Each catalog is written to ``sgdeploy/sglang/catalogs/<version>.json.gz`` and the
list of catalogs to ``sgdeploy/sglang/catalogs/index.json``. Output is sorted and
gzip headers carry no timestamp, so reruns are byte-identical.

Each release's check sites (the ``raise``/``assert``/warning/override places ``ServerArgs``
reaches, read by ``scripts/check_sites.py``) go to ``catalogs/checks/<version>.json.gz``, and
the facts rules depend on (allow-lists, deprecated options; ``scripts/sglang_facts.py``), with
the release range of each value, to ``catalogs/facts.json``.

Usage::

    python scripts/build_catalogs.py                 # every release 0.5.0 .. 0.5.23
    python scripts/build_catalogs.py 0.5.24          # add one release
    python scripts/build_catalogs.py --offline       # only use cached wheels
    python scripts/build_catalogs.py --offline --checks-only   # only the check-site inventories
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import gzip
import hashlib
import io
import json
import math
import re
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_sites import extract_check_sites
from sglang_facts import alias_facts, extract_facts, write_facts

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CACHE = REPO_ROOT / ".cache" / "wheels"
DEFAULT_OUT = REPO_ROOT / "sgdeploy" / "sglang" / "catalogs"
REQUIRED_VERSIONS = ("0.5.11", "0.5.23")
DEFAULT_RANGE = ("0.5.0", "0.5.23")
SERVER_ARGS_PATH = "sglang/srt/server_args.py"
CHECKS_SUBDIR = "checks"
FACTS_FILE = "facts.json"
FIELDS_DIR = "sglang/srt/arg_groups/fields/"

# argparse actions (as spelled in ``action="..."``) that consume no value.
ZERO_ARG_ACTIONS = {
    "store_true",
    "store_false",
    "store_const",
    "append_const",
    "count",
    "help",
    "version",
}


# ---------------------------------------------------------------------------
# Versions
# ---------------------------------------------------------------------------

_VERSION_RE = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?$")


def version_key(version: str) -> tuple[int, ...]:
    """Sort key for final releases and ``.postN`` releases (pre-releases are not catalogued)."""
    m = _VERSION_RE.match(version)
    if not m:
        raise ValueError(f"not a final SGLang release version: {version!r}")
    major, minor, micro, post = m.groups()
    return (int(major), int(minor), int(micro), int(post) if post else -1)


def list_pypi_versions(lo: str, hi: str) -> list[str]:
    """Final releases between ``lo`` and ``hi`` inclusive, from ``pip index versions``."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "sglang"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    m = re.search(r"Available versions:\s*(.+)", out)
    if not m:
        raise RuntimeError("could not parse `pip index versions sglang` output")
    found = [v.strip() for v in m.group(1).split(",")]
    keep = [
        v
        for v in found
        if _VERSION_RE.match(v) and version_key(lo) <= version_key(v) <= version_key(hi)
    ]
    return sorted(set(keep), key=version_key)


def cached_versions(cache: Path) -> list[str]:
    versions = set()
    for path in cache.glob("sglang-*"):
        parts = path.name.split("-")
        if len(parts) > 1 and _VERSION_RE.match(parts[1]):
            versions.add(parts[1])
    return sorted(versions, key=version_key)


# ---------------------------------------------------------------------------
# Distribution files (wheel, or sdist as a fallback)
# ---------------------------------------------------------------------------


def find_cached_dist(cache: Path, version: str) -> Path | None:
    wheels = sorted(cache.glob(f"sglang-{version}-*.whl"))
    if wheels:
        return wheels[0]
    sdists = sorted(cache.glob(f"sglang-{version}.tar.gz")) + sorted(
        cache.glob(f"sglang-{version}.zip")
    )
    return sdists[0] if sdists else None


def download_dist(cache: Path, version: str, offline: bool) -> Path:
    found = find_cached_dist(cache, version)
    if found or offline:
        if not found:
            raise FileNotFoundError(f"sglang {version}: not in {cache} (offline)")
        return found
    cache.mkdir(parents=True, exist_ok=True)
    base = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(cache)]
    wheel = subprocess.run(
        [*base, "--only-binary=:all:", f"sglang=={version}"], capture_output=True, text=True
    )
    if wheel.returncode != 0:
        sdist = subprocess.run(
            [*base, "--no-binary=:all:", f"sglang=={version}"], capture_output=True, text=True
        )
        if sdist.returncode != 0:
            tail = (sdist.stderr or wheel.stderr).strip().splitlines()[-1:]
            raise RuntimeError(f"pip download failed: {' '.join(tail)}")
    found = find_cached_dist(cache, version)
    if not found:
        raise FileNotFoundError(f"sglang {version}: pip download left no file in {cache}")
    return found


class SourceTree:
    """The ``sglang/**.py`` files of a wheel or sdist, keyed by wheel-relative path."""

    def __init__(self, dist: Path) -> None:
        self.files: dict[str, str] = {}
        if dist.name.endswith(".whl") or dist.name.endswith(".zip"):
            with zipfile.ZipFile(dist) as zf:
                for name in zf.namelist():
                    self._add(name, lambda n=name: zf.read(n))
        else:
            with tarfile.open(dist) as tf:
                for member in tf.getmembers():
                    if member.isfile():
                        self._add(member.name, lambda m=member: tf.extractfile(m).read())  # type: ignore[union-attr]

    def _add(self, name: str, read: Callable[[], bytes]) -> None:
        if not name.endswith(".py"):
            return
        idx = name.find("sglang/")
        # sdists keep sources under <root>/python/sglang/ or <root>/sglang/.
        while idx > 0 and name[idx - 1] != "/":
            idx = name.find("sglang/", idx + 1)
        if idx < 0:
            return
        rel = name[idx:]
        if rel not in self.files:
            self.files[rel] = read().decode("utf-8", errors="replace")

    def module_path(self, module: str) -> str | None:
        base = module.replace(".", "/")
        for cand in (base + ".py", base + "/__init__.py"):
            if cand in self.files:
                return cand
        return None


# ---------------------------------------------------------------------------
# Static evaluation
# ---------------------------------------------------------------------------


class Unresolved(Exception):
    """An expression whose value cannot be known without running SGLang."""


class Opaque:
    """Placeholder for a value that need not be known (e.g. a dict value)."""

    def __init__(self, expr: str) -> None:
        self.expr = expr

    def __repr__(self) -> str:
        return f"<opaque {self.expr}>"


MISSING = object()


@dataclass(frozen=True)
class EnumMember:
    name: str
    value: Any


@dataclass
class ModuleRef:
    module: Module


@dataclass
class ClassRef:
    module: Module
    node: ast.ClassDef

    @property
    def is_enum(self) -> bool:
        return any(
            ast.unparse(b).split(".")[-1] in {"Enum", "IntEnum", "StrEnum", "Flag"}
            for b in self.node.bases
        )


@dataclass
class FuncRef:
    module: Module
    node: ast.FunctionDef | ast.Lambda
    env: dict[str, Any] = field(default_factory=dict)


@dataclass
class BoundMethod:
    obj: Any
    name: str


_BUILTINS: dict[str, Callable[..., Any]] = {
    "list": list,
    "tuple": tuple,
    "set": set,
    "frozenset": frozenset,
    "sorted": sorted,
    "dict": dict,
    "str": str,
    "int": int,
    "float": float,
    "bool": bool,
    "len": len,
    "reversed": lambda x: list(reversed(list(x))),
    "max": max,
    "min": min,
}
_SAFE_METHODS = {
    str: {
        "lower",
        "upper",
        "replace",
        "strip",
        "split",
        "join",
        "format",
        "title",
        "capitalize",
        "startswith",
        "endswith",
    },
    dict: {"keys", "values", "items", "get", "copy"},
    list: {"copy", "index"},
    tuple: {"index"},
    set: {"union", "copy"},
    frozenset: {"union", "copy"},
}
# Values of the few standard-library constants SGLang uses in defaults.
KNOWN_EXTERNALS: dict[str, Any] = {
    "sys.maxsize": 9223372036854775807,  # CPython on 64-bit Linux
    "argparse.SUPPRESS": "==SUPPRESS==",
    "math.inf": float("inf"),
}
_FIELD_FUNCS = {"field", "dataclasses.field", "msgspec.field"}


class Module:
    def __init__(self, world: World, name: str, path: str) -> None:
        self.world = world
        self.name = name
        self.path = path
        self.tree = ast.parse(world.tree.files[path])
        self.is_package = path.endswith("__init__.py")
        self._cache: dict[str, Any] = {}
        self._busy: set[str] = set()
        self._lines: list[bytes] | None = None

    # -- symbol lookup -----------------------------------------------------
    def _top_statements(self) -> Iterator[ast.stmt]:
        """Top-level statements, including those inside ``try`` bodies."""
        for stmt in self.tree.body:
            if isinstance(stmt, ast.Try):
                yield from stmt.body
            else:
                yield stmt

    def segment(self, node: ast.expr) -> str | None:
        """Like :func:`ast.get_source_segment`, without re-splitting the file each call."""
        if self._lines is None:
            self._lines = [
                line.encode("utf-8")
                for line in self.world.tree.files[self.path].splitlines(keepends=True)
            ]
        end_lineno, end_col = node.end_lineno, node.end_col_offset
        if end_lineno is None or end_col is None:
            return None
        first, last = node.lineno - 1, end_lineno - 1
        if first == last:
            return self._lines[first][node.col_offset : end_col].decode("utf-8")
        parts = [
            self._lines[first][node.col_offset :],
            *self._lines[first + 1 : last],
            self._lines[last][:end_col],
        ]
        return b"".join(parts).decode("utf-8")

    def find_class(self, name: str) -> ClassRef | None:
        """The top-level ``class name:`` statement, even if ``name`` is rebound later."""
        for stmt in self._top_statements():
            if isinstance(stmt, ast.ClassDef) and stmt.name == name:
                return ClassRef(self, stmt)
        return None

    def resolve_relative(self, level: int, module: str | None) -> str:
        if level == 0:
            return module or ""
        parts = self.name.split(".")
        if not self.is_package:
            parts = parts[:-1]
        parts = parts[: len(parts) - (level - 1)]
        return ".".join(parts + ([module] if module else []))

    def lookup(self, name: str) -> Any:
        if name in self._cache:
            return self._cache[name]
        if name in self._busy:
            raise Unresolved(f"recursive definition of {name} in {self.name}")
        self._busy.add(name)
        try:
            value = self._lookup(name)
        finally:
            self._busy.discard(name)
        self._cache[name] = value
        return value

    def _note_conditional_bindings(self, name: str) -> None:
        """Record module-level ``if``/``for``/``with`` blocks that rebind or mutate ``name``:
        their effect depends on the machine SGLang runs on, so they are not applied."""
        for stmt in self.tree.body:
            if not isinstance(stmt, ast.If | ast.For | ast.While | ast.With):
                continue
            for node in ast.walk(stmt):
                hit = (
                    (
                        isinstance(node, ast.Name)
                        and node.id == name
                        and isinstance(node.ctx, ast.Store)
                    )
                    or (
                        isinstance(node, ast.Call)
                        and isinstance(node.func, ast.Attribute)
                        and isinstance(node.func.value, ast.Name)
                        and node.func.value.id == name
                        and node.func.attr
                        in {
                            "append",
                            "extend",
                            "add",
                            "update",
                            "insert",
                            "remove",
                            "pop",
                            "discard",
                        }
                    )
                    or (
                        isinstance(node, ast.AugAssign)
                        and isinstance(node.target, ast.Name)
                        and node.target.id == name
                    )
                )
                if hit:
                    self.world.notes.add(
                        f"{self.name}.{name}: conditional module-level change at "
                        f"{self.path}:{stmt.lineno} not applied (runtime-dependent)"
                    )
                    return

    def _lookup(self, name: str) -> Any:
        self._note_conditional_bindings(name)
        value: Any = MISSING
        for stmt in self._top_statements():
            if isinstance(stmt, ast.ClassDef) and stmt.name == name:
                value = ClassRef(self, stmt)
            elif isinstance(stmt, ast.FunctionDef) and stmt.name == name:
                value = FuncRef(self, stmt)
            elif isinstance(stmt, ast.ImportFrom):
                for alias in stmt.names:
                    if (alias.asname or alias.name) == name:
                        mod = self.resolve_relative(stmt.level, stmt.module)
                        value = self.world.import_from(mod, alias.name)
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    if alias.asname == name:
                        value = self.world.import_module_or_external(alias.name)
                    elif alias.asname is None and alias.name.split(".")[0] == name:
                        value = self.world.import_module_or_external(name)
            elif isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    if isinstance(target, ast.Name) and target.id == name:
                        value = _Lazy(self, stmt.value)
                    elif isinstance(target, ast.Tuple) and any(
                        isinstance(e, ast.Name) and e.id == name for e in target.elts
                    ):
                        value = _Lazy(self, None, f"tuple assignment of {name}")
            elif isinstance(stmt, ast.AnnAssign):
                if isinstance(stmt.target, ast.Name) and stmt.target.id == name and stmt.value:
                    value = _Lazy(self, stmt.value)
            elif isinstance(stmt, ast.AugAssign):
                if isinstance(stmt.target, ast.Name) and stmt.target.id == name:
                    value = _Lazy(self, None, op=(stmt.op, stmt.value), prev=value)
            elif (
                isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Call)
                and isinstance(stmt.value.func, ast.Attribute)
                and isinstance(stmt.value.func.value, ast.Name)
                and stmt.value.func.value.id == name
                and stmt.value.func.attr in {"append", "extend", "add", "update"}
            ):
                value = _Lazy(self, None, call=stmt.value, prev=value)
        if value is MISSING:
            for stmt in self._top_statements():
                if isinstance(stmt, ast.ImportFrom) and any(a.name == "*" for a in stmt.names):
                    mod = self.world.import_module_or_none(
                        self.resolve_relative(stmt.level, stmt.module)
                    )
                    if mod is None:
                        continue
                    try:
                        return mod.module.lookup(name)
                    except Unresolved:
                        continue
            if name in _BUILTINS:
                return _BUILTINS[name]
            sub = (
                self.world.import_module_or_none(f"{self.name}.{name}") if self.is_package else None
            )
            if sub is not None:
                return sub
            raise Unresolved(f"name {name!r} not found in {self.name}")
        return _force(value)


class _Lazy:
    """A module-level binding evaluated on first use (with later mutations)."""

    def __init__(
        self,
        module: Module,
        expr: ast.expr | None,
        why: str = "",
        *,
        op: tuple[ast.operator, ast.expr] | None = None,
        call: ast.Call | None = None,
        prev: Any = MISSING,
    ) -> None:
        self.module, self.expr, self.why, self.op, self.call, self.prev = (
            module,
            expr,
            why,
            op,
            call,
            prev,
        )


def _force(value: Any) -> Any:
    if not isinstance(value, _Lazy):
        return value
    ev = Evaluator(value.module)
    if value.op is not None or value.call is not None:
        base = _force(value.prev)
        if base is MISSING:
            raise Unresolved("mutation of an unbound name")
        base = _copy(base)
        if value.op is not None:
            return ev.binop(value.op[0], base, ev.eval(value.op[1]))
        call = value.call
        assert call is not None and isinstance(call.func, ast.Attribute)
        args = [ev.eval(a) for a in call.args]
        getattr(base, call.func.attr)(*args)
        return base
    if value.expr is None:
        raise Unresolved(value.why)
    return ev.eval(value.expr)


def _copy(value: Any) -> Any:
    if isinstance(value, list | dict | set):
        return value.copy()
    return value


class World:
    """All modules of one distribution, loaded on demand."""

    def __init__(self, tree: SourceTree) -> None:
        self.tree = tree
        self.modules: dict[str, Module] = {}
        self.notes: set[str] = set()

    def import_module_or_none(self, name: str) -> ModuleRef | None:
        if name in self.modules:
            return ModuleRef(self.modules[name])
        path = self.tree.module_path(name)
        if path is None:
            return None
        self.modules[name] = Module(self, name, path)
        return ModuleRef(self.modules[name])

    def import_module(self, name: str) -> ModuleRef:
        ref = self.import_module_or_none(name)
        if ref is None:
            raise Unresolved(f"module {name} is not part of the wheel")
        return ref

    def import_module_or_external(self, name: str) -> ModuleRef | _External:
        return self.import_module_or_none(name) or _External(name)

    def import_from(self, module: str, name: str) -> Any:
        ref = self.import_module_or_none(module)
        if ref is None:
            return _External(f"{module}.{name}")
        try:
            return ref.module.lookup(name)
        except Unresolved:
            sub = self.import_module_or_none(f"{module}.{name}")
            if sub is not None:
                return sub
            raise

    def module(self, name: str) -> Module:
        return self.import_module(name).module


@dataclass
class _External:
    """A name imported from outside the wheel (stdlib or a dependency)."""

    dotted: str


class Evaluator:
    """Evaluate a restricted expression language over a wheel's module graph."""

    def __init__(self, module: Module, env: dict[str, Any] | None = None) -> None:
        self.module = module
        self.env = dict(env or {})

    def eval(self, node: ast.expr) -> Any:
        method = getattr(self, "_eval_" + type(node).__name__, None)
        if method is None:
            raise Unresolved(f"unsupported expression {type(node).__name__}")
        return method(node)

    def _eval_Constant(self, node: ast.Constant) -> Any:
        return node.value

    def _eval_JoinedStr(self, node: ast.JoinedStr) -> str:
        out = []
        for part in node.values:
            if isinstance(part, ast.Constant):
                out.append(str(part.value))
            elif isinstance(part, ast.FormattedValue):
                value = self.eval(part.value)
                if isinstance(value, Opaque | _External | FuncRef | ClassRef | ModuleRef):
                    raise Unresolved("f-string of a non-literal value")
                conv = {115: str, 114: repr, 97: ascii}.get(part.conversion, str)
                spec = self.eval(part.format_spec) if part.format_spec else ""
                out.append(format(conv(value) if part.conversion != -1 else value, spec))
        return "".join(out)

    def _eval_List(self, node: ast.List) -> list[Any]:
        return list(self._elts(node.elts))

    def _eval_Tuple(self, node: ast.Tuple) -> tuple[Any, ...]:
        return tuple(self._elts(node.elts))

    def _eval_Set(self, node: ast.Set) -> set[Any]:
        return set(self._elts(node.elts))

    def _elts(self, elts: list[ast.expr]) -> Iterator[Any]:
        for elt in elts:
            if isinstance(elt, ast.Starred):
                yield from self.iterate(self.eval(elt.value))
            else:
                yield self.eval(elt)

    def _eval_Dict(self, node: ast.Dict) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:
                out.update(self.eval(value))
                continue
            try:
                out[self.eval(key)] = self.eval(value)
            except Unresolved:
                out[self.eval(key)] = Opaque(ast.unparse(value))
        return out

    def _eval_Name(self, node: ast.Name) -> Any:
        if node.id in self.env:
            return self.env[node.id]
        return self.module.lookup(node.id)

    def _eval_Attribute(self, node: ast.Attribute) -> Any:
        return self.getattr(self.eval(node.value), node.attr)

    def getattr(self, obj: Any, attr: str) -> Any:
        if isinstance(obj, ModuleRef):
            return obj.module.lookup(attr)
        if isinstance(obj, ClassRef):
            return class_attribute(obj, attr)
        if isinstance(obj, EnumMember):
            if attr == "name":
                return obj.name
            if attr == "value":
                return obj.value
        if isinstance(obj, _External):
            dotted = f"{obj.dotted}.{attr}"
            return KNOWN_EXTERNALS.get(dotted, _External(dotted))
        for typ, names in _SAFE_METHODS.items():
            if isinstance(obj, typ) and attr in names:
                return BoundMethod(obj, attr)
        raise Unresolved(f"attribute {attr!r} of {type(obj).__name__}")

    def _eval_BinOp(self, node: ast.BinOp) -> Any:
        return self.binop(node.op, self.eval(node.left), self.eval(node.right))

    def binop(self, op: ast.operator, left: Any, right: Any) -> Any:
        if isinstance(left, Opaque | _External) or isinstance(right, Opaque | _External):
            raise Unresolved("arithmetic on an unknown value")
        ops: dict[type, Callable[[Any, Any], Any]] = {
            ast.Add: lambda a, b: a + b,
            ast.Sub: lambda a, b: a - b,
            ast.Mult: lambda a, b: a * b,
            ast.Div: lambda a, b: a / b,
            ast.FloorDiv: lambda a, b: a // b,
            ast.Mod: lambda a, b: a % b,
            ast.Pow: lambda a, b: a**b,
            ast.BitOr: lambda a, b: a | b,
            ast.BitAnd: lambda a, b: a & b,
            ast.LShift: lambda a, b: a << b,
        }
        fn = ops.get(type(op))
        if fn is None:
            raise Unresolved(f"operator {type(op).__name__}")
        try:
            return fn(left, right)
        except Exception as exc:
            raise Unresolved(f"operator failed: {exc}") from None

    def _eval_UnaryOp(self, node: ast.UnaryOp) -> Any:
        value = self.eval(node.operand)
        if isinstance(node.op, ast.USub):
            return -value
        if isinstance(node.op, ast.UAdd):
            return +value
        if isinstance(node.op, ast.Not):
            return not value
        raise Unresolved("unary operator")

    def _eval_Subscript(self, node: ast.Subscript) -> Any:
        value = self.eval(node.value)
        index = self.eval(node.slice)
        try:
            return value[index]
        except Exception as exc:
            raise Unresolved(f"subscript failed: {exc}") from None

    def _eval_Slice(self, node: ast.Slice) -> slice:
        def part(n: ast.expr | None) -> Any:
            return None if n is None else self.eval(n)

        return slice(part(node.lower), part(node.upper), part(node.step))

    def _eval_IfExp(self, node: ast.IfExp) -> Any:
        return self.eval(node.body) if self.eval(node.test) else self.eval(node.orelse)

    def _eval_Lambda(self, node: ast.Lambda) -> FuncRef:
        return FuncRef(self.module, node, dict(self.env))

    def _comprehension(
        self,
        gens: list[ast.comprehension],
        emit: Callable[[Evaluator], None],
    ) -> None:
        def run(i: int, ev: Evaluator) -> None:
            if i == len(gens):
                emit(ev)
                return
            gen = gens[i]
            for item in ev.iterate(ev.eval(gen.iter)):
                sub = Evaluator(self.module, ev.env)
                sub.bind(gen.target, item)
                if all(sub.eval(cond) for cond in gen.ifs):
                    run(i + 1, sub)

        run(0, self)

    def _eval_ListComp(self, node: ast.ListComp) -> list[Any]:
        out: list[Any] = []
        self._comprehension(node.generators, lambda ev: out.append(ev.eval(node.elt)))
        return out

    _eval_GeneratorExp = _eval_ListComp  # type: ignore[assignment]

    def _eval_SetComp(self, node: ast.SetComp) -> set[Any]:
        out: set[Any] = set()
        self._comprehension(node.generators, lambda ev: out.add(ev.eval(node.elt)))
        return out

    def _eval_DictComp(self, node: ast.DictComp) -> dict[Any, Any]:
        out: dict[Any, Any] = {}

        def emit(ev: Evaluator) -> None:
            out[ev.eval(node.key)] = ev.eval(node.value)

        self._comprehension(node.generators, emit)
        return out

    def bind(self, target: ast.expr, value: Any) -> None:
        if isinstance(target, ast.Name):
            self.env[target.id] = value
        elif isinstance(target, ast.Tuple | ast.List):
            values = list(value)
            if len(values) != len(target.elts):
                raise Unresolved("unpacking mismatch")
            for t, v in zip(target.elts, values, strict=True):
                self.bind(t, v)
        else:
            raise Unresolved("unsupported assignment target")

    def iterate(self, value: Any) -> list[Any]:
        if isinstance(value, ClassRef) and value.is_enum:
            return enum_members(value)
        if isinstance(value, Opaque | _External | ClassRef | ModuleRef | FuncRef):
            raise Unresolved(f"iteration over {value!r}")
        if isinstance(value, dict):
            return list(value)
        try:
            return list(value)
        except TypeError:
            raise Unresolved(f"iteration over {type(value).__name__}") from None

    def _eval_Call(self, node: ast.Call) -> Any:
        func_src = ast.unparse(node.func)
        if func_src in _FIELD_FUNCS:
            return self.field_default(node)
        func = self.eval(node.func)
        args: list[Any] = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                args.extend(self.iterate(self.eval(a.value)))
            else:
                args.append(self.eval(a))
        kwargs = {kw.arg: self.eval(kw.value) for kw in node.keywords if kw.arg}
        return self.call(func, args, kwargs)

    def call(self, func: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        takes_iterable = (list, tuple, set, frozenset, sorted, _BUILTINS["reversed"])
        if args and any(func is f for f in takes_iterable):
            args = [self.iterate(args[0]), *args[1:]]
        if any(isinstance(a, Opaque) for a in args):
            raise Unresolved("call with an unknown argument")
        if callable(func) and func in _BUILTINS.values():
            try:
                return func(*args, **kwargs)
            except Exception as exc:
                raise Unresolved(f"call failed: {exc}") from None
        if isinstance(func, BoundMethod):
            try:
                return getattr(func.obj, func.name)(*args, **kwargs)
            except Exception as exc:
                raise Unresolved(f"method call failed: {exc}") from None
        if isinstance(func, FuncRef):
            return inline_call(func, args, kwargs)
        raise Unresolved(f"call of {func!r}")

    def field_default(self, node: ast.Call) -> Any:
        kws = {kw.arg: kw.value for kw in node.keywords}
        if "default" in kws:
            return self.eval(kws["default"])
        if "default_factory" in kws:
            factory = self.eval(kws["default_factory"])
            return self.call(factory, [], {})
        return MISSING


def inline_call(func: FuncRef, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Evaluate a small function: bind its parameters, replay simple local
    assignments and imports, and evaluate its last ``return`` statement."""
    node = func.node
    env = dict(func.env)
    params = [a.arg for a in node.args.posonlyargs + node.args.args]
    defaults = node.args.defaults
    for name, d in zip(params[len(params) - len(defaults) :], defaults, strict=True):
        env[name] = Evaluator(func.module, func.env).eval(d)
    for name, value in zip(params, args, strict=False):
        env[name] = value
    env.update(kwargs)
    if isinstance(node, ast.Lambda):
        return Evaluator(func.module, env).eval(node.body)
    ev = Evaluator(func.module, env)
    last_return: ast.expr | None = None
    for stmt in node.body:
        if isinstance(stmt, ast.ImportFrom):
            mod = func.module.resolve_relative(stmt.level, stmt.module)
            for alias in stmt.names:
                ev.env[alias.asname or alias.name] = func.module.world.import_from(mod, alias.name)
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            with contextlib.suppress(Unresolved):
                ev.bind(stmt.targets[0], ev.eval(stmt.value))
        elif isinstance(stmt, ast.Return) and stmt.value is not None:
            last_return = stmt.value
    if last_return is None:
        raise Unresolved(f"function {getattr(node, 'name', 'lambda')} has no final return")
    returns = sum(isinstance(n, ast.Return) for n in ast.walk(node))
    if returns > 1:
        func.module.world.notes.add(
            f"{func.module.name}.{node.name}(): only its last return statement was evaluated "
            f"({returns - 1} earlier, runtime-dependent return(s) skipped)"
        )
    return ev.eval(last_return)


def class_body_value(cls: ClassRef, attr: str) -> Any:
    """The value assigned to ``attr`` in a class body (or a base class in the wheel).

    Names bound earlier in the same class body are visible, as in Python's class scope.
    """
    scope: dict[str, Any] = {}
    found: tuple[ast.expr | None, dict[str, Any]] | None = None
    for stmt in cls.node.body:
        target = value_node = None
        if (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
        ):
            target, value_node = stmt.targets[0].id, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            target, value_node = stmt.target.id, stmt.value
        if target is None:
            continue
        if target == attr:
            if value_node is not None or found is None:  # the last binding wins
                found = (value_node, dict(scope))
            continue
        if value_node is not None and isinstance(stmt, ast.Assign):
            try:
                scope[target] = Evaluator(cls.module, scope).eval(value_node)
            except Unresolved:
                scope.pop(target, None)
    if found is not None:
        if found[0] is None:
            return MISSING
        return Evaluator(cls.module, found[1]).eval(found[0])
    for base in cls.node.bases:
        try:
            ref = Evaluator(cls.module).eval(base)
        except Unresolved:
            continue
        if isinstance(ref, ClassRef):
            return class_body_value(ref, attr)
    raise Unresolved(f"class attribute {cls.node.name}.{attr}")


def enum_members(cls: ClassRef) -> list[EnumMember]:
    members = []
    for stmt in cls.node.body:
        if (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and not stmt.targets[0].id.startswith("_")
        ):
            try:
                value = Evaluator(cls.module).eval(stmt.value)
            except Unresolved:
                value = Opaque(ast.unparse(stmt.value))
            members.append(EnumMember(stmt.targets[0].id, value))
    return members


def class_attribute(cls: ClassRef, attr: str) -> Any:
    if cls.is_enum:
        for member in enum_members(cls):
            if member.name == attr:
                return member
    value = class_body_value(cls, attr)
    if value is MISSING:
        raise Unresolved(f"{cls.node.name}.{attr} has no default")
    return value


# ---------------------------------------------------------------------------
# JSON conversion
# ---------------------------------------------------------------------------


def to_json(value: Any) -> Any:
    """Make a statically evaluated value JSON-serialisable; raise if it is not data."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, set | frozenset):
        items = [to_json(v) for v in value]
        return sorted(items, key=lambda v: (type(v).__name__, str(v)))
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, EnumMember):
        return to_json(value.value)
    raise Unresolved(f"value {value!r} is not plain data")


# ---------------------------------------------------------------------------
# Flag extraction
# ---------------------------------------------------------------------------


@dataclass
class FieldDecl:
    name: str
    annotation: ast.expr
    default: ast.expr | None
    module: Module


@dataclass
class Extraction:
    flags: list[dict[str, Any]] = field(default_factory=list)
    fixups: list[str] = field(default_factory=list)


def first_sentence(text: str | None, min_len: int = 20) -> str:
    """Text up to the first full stop that is followed by a capitalised word (or a quote).

    A very short lead such as "Deprecated." or "DFLASH only." says little on its own,
    so the sentence after it is kept too.
    """
    if not text:
        return ""
    text = " ".join(text.split())
    for m in re.finditer(r"[.!?](?=\s+[A-Z'\"`])", text):
        if m.end() >= min_len:
            return text[: m.end()]
    return text


def is_deprecated(action: str, help_str: str, option_strings: list[str]) -> bool:
    """Deprecated by its action class, or by help that starts with "Deprecated" or says
    "<this flag> is deprecated" (a help that only mentions some other deprecated flag
    does not count)."""
    text = " ".join(help_str.lower().split())
    return (
        "deprecated" in action.lower()
        or re.match(r"^\W*deprecated\b", text) is not None
        or any(f"{opt} is deprecated" in text for opt in option_strings)
    )


def help_text(ev: Evaluator, node: ast.expr | None) -> str:
    """Help text; f-string placeholders are kept as written (``{expr}``)."""
    if node is None:
        return ""
    if not any(isinstance(n, ast.JoinedStr) for n in ast.walk(node)):
        try:
            value = ev.eval(node)
            if isinstance(value, str):
                return value
        except Unresolved:
            pass
    return _help_fallback(node)


def source_text(module: Module, node: ast.expr) -> str:
    """The source of ``node`` with its whitespace collapsed (as a type annotation is read)."""
    seg = module.segment(node)
    return " ".join((seg or ast.unparse(node)).split())


def _help_fallback(node: ast.expr) -> str:
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.JoinedStr):
        return "".join(
            str(p.value) if isinstance(p, ast.Constant) else "{" + ast.unparse(p.value) + "}"  # type: ignore[attr-defined]
            for p in node.values
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _help_fallback(node.left) + _help_fallback(node.right)
    return "{" + ast.unparse(node) + "}"


def strip_annotated(annotation: ast.expr) -> tuple[ast.expr, list[ast.expr]]:
    """Split ``A[T, meta...]`` / ``Annotated[T, meta...]`` into ``T`` and the metadata."""
    if isinstance(annotation, ast.Subscript) and ast.unparse(annotation.value) in {
        "A",
        "Annotated",
        "typing.Annotated",
    }:
        sl = annotation.slice
        if isinstance(sl, ast.Tuple) and sl.elts:
            return sl.elts[0], list(sl.elts[1:])
        return sl, []
    return annotation, []


def unwrap_optional(tp: ast.expr) -> ast.expr:
    if isinstance(tp, ast.Subscript) and ast.unparse(tp.value) in {"Optional", "typing.Optional"}:
        return tp.slice
    members: list[ast.expr] = []
    if isinstance(tp, ast.Subscript) and ast.unparse(tp.value) in {"Union", "typing.Union"}:
        members = list(tp.slice.elts) if isinstance(tp.slice, ast.Tuple) else [tp.slice]
    elif isinstance(tp, ast.BinOp) and isinstance(tp.op, ast.BitOr):
        stack: list[ast.expr] = [tp]
        while stack:
            cur = stack.pop()
            if isinstance(cur, ast.BinOp) and isinstance(cur.op, ast.BitOr):
                stack.extend([cur.right, cur.left])
            else:
                members.append(cur)
    if members:
        non_none = [m for m in members if ast.unparse(m) != "None"]
        if len(non_none) == 1 and len(members) == 2:
            return non_none[0]
    return tp


def infer_type_name(tp: ast.expr) -> str:
    name = ast.unparse(tp)
    return name if name in {"str", "int", "float"} else "str"


class FlagBuilder:
    """Turns argparse registrations (manual or derived from fields) into catalog rows."""

    def __init__(
        self,
        world: World,
        server_args: Module,
        fields: dict[str, FieldDecl],
        renames: dict[str, str],
    ) -> None:
        self.world = world
        self.server_args = server_args
        self.fields = fields
        self.renames = renames
        self.out = Extraction()

    # -- helpers -------------------------------------------------------------
    def fixup(self, text: str) -> None:
        self.out.fixups.append(text)

    def eval_json(self, ev: Evaluator, node: ast.expr, what: str, label: str) -> Any:
        """Evaluate ``node`` to JSON data or raise :class:`Unresolved`."""
        value = ev.eval(node)
        if value is MISSING:
            raise Unresolved("no default")
        return to_json(value)

    def field_default(self, decl: FieldDecl) -> Any:
        if decl.default is None:
            return MISSING
        ev = Evaluator(decl.module)
        src = ast.unparse(decl.default)
        try:
            value = ev.eval(decl.default)
        except Unresolved as exc:
            self.fixup(f"{decl.name}: default '<expr> {src}' not evaluated ({exc})")
            return f"<expr> {src}"
        if value is MISSING:
            return MISSING
        try:
            return to_json(value)
        except Unresolved:
            self.fixup(f"{decl.name}: default '<expr> {src}' is not plain data, stringified")
            return f"<expr> {src}"

    def action_info(
        self,
        ev: Evaluator,
        action: ast.expr | None,
    ) -> tuple[str | None, dict[str, Any]]:
        """Action as written, plus ``__init__`` defaults of a custom action class."""
        if action is None:
            return None, {}
        if isinstance(action, ast.Constant) and isinstance(action.value, str):
            return action.value, {}
        name = ast.unparse(action)
        info: dict[str, Any] = {}
        try:
            ref = ev.eval(action)
        except Unresolved:
            ref = None
        if isinstance(ref, ClassRef):
            for stmt in ref.node.body:
                if isinstance(stmt, ast.FunctionDef) and stmt.name == "__init__":
                    a = stmt.args
                    pos = a.posonlyargs + a.args
                    pairs = list(zip(pos[len(pos) - len(a.defaults) :], a.defaults, strict=True))
                    pairs += [
                        (k, d)
                        for k, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)
                        if d is not None
                    ]
                    for arg, d in pairs:
                        with contextlib.suppress(Unresolved):
                            info[arg.arg] = to_json(Evaluator(ref.module).eval(d))
        return name, info

    # -- one registration ------------------------------------------------------
    def add(
        self,
        *,
        option_strings: list[str],
        kw: dict[str, ast.expr | Any],
        ev: Evaluator,
        source: str,
        python_type: str | None = None,
        derived: dict[str, Any] | None = None,
    ) -> None:
        """Record one ``add_argument`` call.

        ``kw`` maps keyword names to AST nodes (manual registrations); ``derived``
        holds already-known values (registrations derived from field metadata)
        and takes precedence.
        """
        derived = derived or {}
        dest = derived.get("dest")
        if dest is None and "dest" in kw:
            dest = ev.eval(kw["dest"])
        if dest is None:
            longs = [o for o in option_strings if o.startswith("--")]
            dest = (longs or option_strings)[0].lstrip("-").replace("-", "_")
        field_name = self.renames.get(dest, dest)
        label = f"{field_name} ({option_strings[0]})"

        if "action" in derived:
            action, action_defaults = derived["action"], derived.get("action_defaults", {})
        else:
            action, action_defaults = self.action_info(ev, kw.get("action"))
        for key in ("nargs", "default", "const"):
            if key not in derived and key not in kw and key in action_defaults:
                derived[key] = action_defaults[key]

        def value(key: str, fallback: Any = None) -> Any:
            if key in derived:
                return derived[key]
            if key not in kw:
                return fallback
            node = kw[key]
            try:
                return self.eval_json(ev, node, key, label)
            except Unresolved as exc:
                src = ast.unparse(node)
                if key == "default" and field_name in self.fields:
                    fdef = self.field_default(self.fields[field_name])
                    if fdef is not MISSING:
                        self.fixup(
                            f"{label}: default '<expr> {src}' not evaluated ({exc}); "
                            f"used the field's declared default"
                        )
                        return fdef
                self.fixup(f"{label}: {key} '<expr> {src}' not evaluated ({exc})")
                return None if key == "choices" else f"<expr> {src}"

        action_last = (action or "").split(".")[-1]
        store_true = action == "store_true" or action_last.endswith("StoreTrueAction")
        store_false = action == "store_false"
        boolean_optional = action_last == "BooleanOptionalAction"
        nargs = value("nargs")
        if store_true:
            default_fallback: Any = False
        elif store_false:
            default_fallback = True
        else:
            default_fallback = None
        default = value("default", default_fallback)
        choices = value("choices")
        if isinstance(choices, dict):
            choices = list(choices)
        required = bool(value("required", False))
        if "type" in derived:
            argparse_type = derived["type"]
        elif "type" in kw:
            argparse_type = ast.unparse(kw["type"])
        else:
            argparse_type = None
        help_str = derived["help"] if "help" in derived else help_text(ev, kw.get("help"))
        zero_arg = (
            action in ZERO_ARG_ACTIONS
            or boolean_optional
            or nargs == 0
            or (
                action is not None
                and action not in {"store", "append", "extend"}
                and "nargs" not in kw
                and "nargs" not in derived
                and action_defaults.get("nargs") == 0
            )
        )
        if action_defaults.get("nargs") == 0 and nargs == 0 and "nargs" not in kw:
            nargs = None  # the class default, not something written at the call site
        flags = list(option_strings)
        if boolean_optional:
            flags += ["--no-" + o[2:] for o in option_strings if o.startswith("--")]
        if python_type is None and field_name in self.fields:
            decl = self.fields[field_name]
            python_type = source_text(decl.module, strip_annotated(decl.annotation)[0])
        deprecated = is_deprecated(action_last, help_str, option_strings)
        # What a Deprecated*Action does when given (sglang/srt/arg_groups/argparse_actions.py or
        # server_args.py): stores `const_value` / True into its dest, or stops with `error_message`.
        const = value("const_value", value("const")) if action_last.startswith("Deprecated") else None
        self.out.flags.append(
            {
                "field": field_name,
                "argparse_dest": dest,
                "flags": flags,
                "python_type": python_type,
                "argparse_type": argparse_type,
                "default": default,
                "choices": choices,
                "store_true": store_true,
                "action": action,
                "nargs": nargs,
                "required": required,
                "deprecated": deprecated,
                "const": const,
                "new_flag": value("new_flag"),
                "error_message": value("error_message"),
                "help_first_sentence": first_sentence(help_str),
                "boolean_optional": boolean_optional,
                "takes_value": not zero_arg,
                "source": source,
            }
        )

    # -- manual registrations ---------------------------------------------------
    def manual(self, func: ast.FunctionDef, module: Module) -> None:
        """Every ``<parser>.add_argument(...)`` call in ``func``, in source order."""
        local_assigns: list[tuple[int, ast.Assign]] = []
        for node in ast.walk(func):
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            ):
                local_assigns.append((node.lineno, node))
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in {"add", "append", "extend", "update"}
                and isinstance(node.func.value, ast.Name)
            ):
                self.fixup(
                    f"add_cli_args: ignored conditional/local mutation "
                    f"'{ast.unparse(node)}' (runtime-dependent)"
                )
        calls = [
            n
            for n in ast.walk(func)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "add_argument"
        ]
        for call in sorted(calls, key=lambda c: (c.lineno, c.col_offset)):
            env: dict[str, Any] = {}
            for lineno, assign in sorted(local_assigns, key=lambda p: p[0]):
                if lineno < call.lineno:
                    name = assign.targets[0].id  # type: ignore[attr-defined]
                    try:
                        env[name] = Evaluator(module, env).eval(assign.value)
                    except Unresolved:
                        env.pop(name, None)
            ev = Evaluator(module, env)
            opts = []
            for a in call.args:
                try:
                    opts.append(ev.eval(a))
                except Unresolved:
                    self.fixup(
                        f"add_argument at {module.path}:{call.lineno}: "
                        f"option string '{ast.unparse(a)}' not evaluated"
                    )
            if not opts:
                continue
            kw = {k.arg: k.value for k in call.keywords if k.arg}
            self.add(option_strings=opts, kw=kw, ev=ev, source=f"{module.path}:{call.lineno}")

    # -- registrations derived from field annotations ---------------------------
    def from_fields(self, decls: Iterable[FieldDecl]) -> None:
        """Mirror ``add_cli_args_from_dataclass`` for ``A[T, "help"]`` / ``A[T, Arg(...)]``."""
        for decl in decls:
            inner, meta = strip_annotated(decl.annotation)
            if not meta:
                continue
            ev = Evaluator(decl.module)
            arg_kw: dict[str, ast.expr] | None = None
            for m in meta:
                if isinstance(m, ast.Call) and ast.unparse(m.func).split(".")[-1] == "Arg":
                    arg_kw = {k.arg: k.value for k in m.keywords if k.arg}
                    break
                if isinstance(m, ast.Constant | ast.JoinedStr) or (
                    isinstance(m, ast.BinOp) and isinstance(m.op, ast.Add)
                ):
                    try:
                        is_str = isinstance(ev.eval(m), str)
                    except Unresolved:
                        is_str = isinstance(m, ast.JoinedStr)
                    if is_str:
                        arg_kw = {"help": m}
                        break
            if arg_kw is None:
                continue

            def meta_value(
                key: str,
                default: Any = None,
                *,
                _kw: dict[str, ast.expr] = arg_kw,
                _ev: Evaluator = ev,
                _name: str = decl.name,
            ) -> Any:
                if key not in _kw:
                    return default
                try:
                    return to_json(_ev.eval(_kw[key]))
                except Unresolved as exc:
                    self.fixup(
                        f"{_name}: Arg {key} '<expr> {ast.unparse(_kw[key])}' not evaluated ({exc})"
                    )
                    return None

            if meta_value("no_cli", False):
                continue
            cli_name = meta_value("cli_name") or "--" + decl.name.replace("_", "-")
            names = [cli_name, *(meta_value("aliases") or [])]
            default = self.field_default(decl)
            auto_dest = cli_name.lstrip("-").replace("-", "_")
            derived: dict[str, Any] = {
                "dest": decl.name,
                "help": help_text(ev, arg_kw.get("help")),
            }
            type_parser = ast.unparse(arg_kw["type_parser"]) if "type_parser" in arg_kw else None
            python_type = source_text(decl.module, inner)
            source = f"{decl.module.path}:{decl.annotation.lineno}"
            kw: dict[str, ast.expr] = {}
            if "action" in arg_kw:
                action, action_defaults = self.action_info(ev, arg_kw["action"])
                derived["action"] = action
                derived["action_defaults"] = action_defaults
                if default is not MISSING:
                    derived["default"] = default
                action_kwargs = arg_kw.get("action_kwargs")
                if isinstance(action_kwargs, ast.Dict):
                    for k, v in zip(action_kwargs.keys, action_kwargs.values, strict=True):
                        if isinstance(k, ast.Constant) and isinstance(k.value, str):
                            kw[k.value] = v
                elif action_kwargs is not None:
                    self.fixup(
                        f"{decl.name}: action_kwargs '{ast.unparse(action_kwargs)}' "
                        "not a literal dict"
                    )
                if "type" in kw:
                    derived["type"] = ast.unparse(kw.pop("type"))
                self.add(
                    option_strings=names,
                    kw=kw,
                    ev=ev,
                    source=source,
                    python_type=python_type,
                    derived=derived,
                )
                continue
            base = unwrap_optional(inner)
            choices = meta_value("choices")
            nargs = meta_value("nargs")
            const = meta_value("const")
            derived.update({"action": None, "action_defaults": {}})
            if const is not None:
                derived["const"] = const
            origin = ast.unparse(base.value) if isinstance(base, ast.Subscript) else None
            if origin in {"Literal", "typing.Literal"}:
                assert isinstance(base, ast.Subscript)
                lit_nodes = base.slice.elts if isinstance(base.slice, ast.Tuple) else [base.slice]
                try:
                    literal = [to_json(ev.eval(n)) for n in lit_nodes]
                except Unresolved as exc:
                    self.fixup(f"{decl.name}: Literal values not evaluated ({exc})")
                    literal = []
                first_type = type(literal[0]).__name__ if literal else "str"
                derived["type"] = type_parser or (
                    first_type if first_type in {"str", "int", "float"} else "str"
                )
                derived["choices"] = choices or literal
                derived["nargs"] = None
            elif origin in {"List", "list", "typing.List"} and type_parser is None:
                assert isinstance(base, ast.Subscript)
                elem = base.slice.elts[0] if isinstance(base.slice, ast.Tuple) else base.slice
                derived["type"] = infer_type_name(elem)
                derived["nargs"] = nargs or "+"
                derived["choices"] = choices or None
            elif ast.unparse(base) == "bool":
                derived.update(
                    {"action": "store_true", "type": None, "choices": None, "nargs": None}
                )
                derived["default"] = False if default is MISSING else default
                self.add(
                    option_strings=names,
                    kw={},
                    ev=ev,
                    source=source,
                    python_type=python_type,
                    derived=derived,
                )
                continue
            else:
                derived["type"] = type_parser or infer_type_name(base)
                derived["choices"] = choices or None
                derived["nargs"] = nargs
                required = meta_value("required")
                derived["required"] = bool(
                    (required is True or (required is None and default is MISSING))
                    and any(n.startswith("-") for n in names)
                )
            derived["default"] = None if default is MISSING else default
            del auto_dest
            self.add(
                option_strings=names,
                kw={},
                ev=ev,
                source=source,
                python_type=python_type,
                derived=derived,
            )


def class_fields(cls: ClassRef) -> list[FieldDecl]:
    """Annotated class attributes (dataclass / Struct fields), bases first."""
    out: list[FieldDecl] = []
    for base in cls.node.bases:
        try:
            ref = Evaluator(cls.module).eval(base)
        except Unresolved:
            continue
        if isinstance(ref, ClassRef):
            out.extend(class_fields(ref))
    # A name annotated twice in one class body is one field: it keeps the position of
    # the first annotation and takes the later annotation and value (as __annotations__ does).
    own: dict[str, FieldDecl] = {}
    for stmt in cls.node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            if "ClassVar" in ast.unparse(stmt.annotation).split("[")[0]:
                continue
            own[stmt.target.id] = FieldDecl(stmt.target.id, stmt.annotation, stmt.value, cls.module)
    inherited = {d.name for d in out}
    return (
        [d for d in out if d.name not in own]
        + [d for d in own.values() if d.name not in inherited]
        + [d for d in own.values() if d.name in inherited]
    )


def extract(tree: SourceTree) -> Extraction:
    world = World(tree)
    sa_mod = world.module("sglang.srt.server_args")
    server_args = sa_mod.find_class("ServerArgs")
    if server_args is None:
        raise RuntimeError("ServerArgs class not found in server_args.py")
    decls: list[FieldDecl] = []
    has_fields_dir = any(p.startswith(FIELDS_DIR) for p in tree.files)
    if has_fields_dir:
        namespaces = sa_mod.lookup("_INPUT_NAMESPACES")
        for ns in namespaces:
            if not isinstance(ns, ClassRef):
                raise RuntimeError(f"_INPUT_NAMESPACES entry {ns!r} is not a class")
            decls.extend(class_fields(ns))
    decls.extend(class_fields(server_args))
    fields = {d.name: d for d in decls}

    add_cli = from_cli = None
    for stmt in server_args.node.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == "add_cli_args":
            add_cli = stmt
        if isinstance(stmt, ast.FunctionDef) and stmt.name == "from_cli_args":
            from_cli = stmt
    if add_cli is None:
        raise RuntimeError("ServerArgs.add_cli_args not found")

    # from_cli_args renames some argparse dests to fields: args.tp_size = args.tensor_parallel_size
    renames: dict[str, str] = {}
    if from_cli is not None:
        for node in ast.walk(from_cli):
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Attribute)
                and isinstance(node.value, ast.Attribute)
                and ast.unparse(node.targets[0].value) == "args"
                and ast.unparse(node.value.value) == "args"
            ):
                renames[node.value.attr] = node.targets[0].attr

    builder = FlagBuilder(world, sa_mod, fields, renames)
    uses_dataclass_registration = any(
        isinstance(n, ast.Call) and ast.unparse(n.func).endswith("add_cli_args_from_dataclass")
        for n in ast.walk(add_cli)
    )
    if uses_dataclass_registration:
        builder.from_fields(decls)
    builder.manual(add_cli, sa_mod)
    builder.out.fixups.extend(sorted(world.notes))
    return builder.out


# ---------------------------------------------------------------------------
# Catalog files
# ---------------------------------------------------------------------------


def build_catalog(version: str, dist: Path) -> dict[str, Any]:
    tree = SourceTree(dist)
    if SERVER_ARGS_PATH not in tree.files:
        raise RuntimeError(f"{SERVER_ARGS_PATH} not in {dist.name}")
    result = extract(tree)
    flags = sorted(result.flags, key=lambda f: (f["field"], f["flags"][0]))
    for row in flags:
        row.pop("source", None)
    return {
        "sglang_version": version,
        "wheel": dist.name,
        "wheel_sha256": hashlib.sha256(dist.read_bytes()).hexdigest(),
        "fixups": sorted(set(result.fixups)),
        "flags": flags,
    }


def build_check_sites(version: str, dist: Path, catalog: dict[str, Any]) -> dict[str, Any]:
    """The check-site inventory of one release (docs/catalogs.md, "Check sites")."""
    fields = {row["field"] for row in catalog["flags"]}
    return {
        "sglang_version": version,
        "wheel": dist.name,
        "sites": extract_check_sites(SourceTree(dist).files, fields),
    }


def write_check_sites(out_dir: Path, version: str, dist: Path, catalog: dict[str, Any]) -> int:
    sites = build_check_sites(version, dist, catalog)
    (out_dir / CHECKS_SUBDIR).mkdir(parents=True, exist_ok=True)
    (out_dir / CHECKS_SUBDIR / catalog_file_name(version)).write_bytes(catalog_bytes(sites))
    return len(sites["sites"])


def catalog_bytes(catalog: dict[str, Any]) -> bytes:
    raw = json.dumps(catalog, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        gz.write(raw.encode("utf-8"))
    return buf.getvalue()


def catalog_file_name(version: str) -> str:
    return f"{version}.json.gz"


def release_facts(dist: Path, catalog: dict[str, Any]) -> dict[str, Any]:
    """The facts of one release (scripts/sglang_facts.py), its deprecated options as `option:<key>`."""
    facts = extract_facts(SourceTree(dist).files)
    facts.update({f"option:{key}": value for key, value in alias_facts(catalog).items()})
    return facts


def known_facts(path: Path) -> dict[str, dict[str, Any]]:
    """facts.json expanded back to release -> fact -> value (so a partial rebuild keeps the rest)."""
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    order = data["versions"]
    out: dict[str, dict[str, Any]] = {}
    for name, spans in data["facts"].items():
        for span in spans:
            start = order.index(span["since"])
            stop = order.index(span["until"]) if span["until"] else len(order)
            for version in order[start:stop]:
                out.setdefault(version, {})[name] = span["value"]
    return out


def write_index(out_dir: Path) -> None:
    versions = sorted(
        (p.name[: -len(".json.gz")] for p in out_dir.glob("*.json.gz")), key=version_key
    )
    index = {"versions": versions, "files": {v: catalog_file_name(v) for v in versions}}
    (out_dir / "index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "versions",
        nargs="*",
        help="SGLang versions (default: every release "
        f"{DEFAULT_RANGE[0]}..{DEFAULT_RANGE[1]} on PyPI)",
    )
    parser.add_argument(
        "--cache", type=Path, default=DEFAULT_CACHE, help="wheel cache (default: .cache/wheels)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="catalog folder (default: sgdeploy/sglang/catalogs)",
    )
    parser.add_argument(
        "--offline", action="store_true", help="never call pip; use the cached wheels only"
    )
    parser.add_argument(
        "--checks-only",
        action="store_true",
        help="rebuild only the check-site inventories (catalogs/checks/), from the catalogs on disk",
    )
    parser.add_argument(
        "--facts-only",
        action="store_true",
        help="rebuild only catalogs/facts.json, from the wheels and the catalogs on disk",
    )
    args = parser.parse_args(argv)

    versions = list(args.versions)
    if not versions:
        if args.offline:
            versions = [
                v
                for v in cached_versions(args.cache)
                if version_key(DEFAULT_RANGE[0]) <= version_key(v) <= version_key(DEFAULT_RANGE[1])
            ]
        else:
            try:
                versions = list_pypi_versions(*DEFAULT_RANGE)
            except (subprocess.CalledProcessError, RuntimeError) as exc:
                print(
                    f"cannot list versions from PyPI ({exc}); using the wheel cache",
                    file=sys.stderr,
                )
                versions = cached_versions(args.cache)
    versions = sorted(set(versions), key=version_key)

    args.out.mkdir(parents=True, exist_ok=True)
    failed: list[str] = []
    facts = known_facts(args.out / FACTS_FILE)
    for version in versions:
        try:
            dist = download_dist(args.cache, version, args.offline)
            if args.checks_only or args.facts_only:
                catalog_path = args.out / catalog_file_name(version)
                catalog = json.loads(gzip.decompress(catalog_path.read_bytes()))
            else:
                catalog = build_catalog(version, dist)
            n_sites = 0 if args.facts_only else write_check_sites(args.out, version, dist, catalog)
            facts[version] = release_facts(dist, catalog)
        except Exception as exc:
            print(f"{version}: FAILED: {exc}")
            failed.append(version)
            continue
        if not (args.checks_only or args.facts_only):
            (args.out / catalog_file_name(version)).write_bytes(catalog_bytes(catalog))
        print(
            f"{version}: {len(catalog['flags'])} flags, {len(catalog['fixups'])} fixups, "
            f"{n_sites} check sites ({dist.name})"
        )
    write_index(args.out)
    order = json.loads((args.out / "index.json").read_text())["versions"]
    write_facts(args.out / FACTS_FILE, facts, order)
    required_failed = [v for v in failed if v in REQUIRED_VERSIONS]
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if required_failed else 0


if __name__ == "__main__":
    sys.exit(main())
