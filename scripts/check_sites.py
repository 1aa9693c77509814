"""Where SGLang's ``ServerArgs`` refuses a launch or changes a value, read from a wheel's sources.

Used by ``scripts/build_catalogs.py``; see docs/catalogs.md ("Check sites"). Like the flag
catalogs, this reads the sources with :mod:`ast` and never imports SGLang.

The code read is ``sglang/srt/server_args.py`` and, from 0.5.20 on, ``sglang/srt/arg_groups/``.
A function is read when ``ServerArgs`` reaches it: every ``ServerArgs`` method except
``add_cli_args`` (the flag set, already in the catalog) is a start, and from there every
function of those files that is called, passed (``run_hook(handle_x, server_args)``) or
registered by a decorator (the 0.5.2x post-process passes and model override declarations).

Each function gives:

* ``raise`` / ``assert`` sites (kind ``raise`` / ``assert``): the launch is refused;
* ``logger.warning`` / ``warnings.warn`` sites (kind ``warning``);
* assignments to a ``ServerArgs`` field (kind ``override``): ``self.x = ...``,
  ``server_args.x = ...``, ``overrides["x"] = ...``, ``return {"x": ...}``.

Every site carries a ``key``: the function name without its module, class or leading
underscores, and the message with f-string placeholders replaced by ``{}`` and whitespace
collapsed. The key survives line moves and the 0.5.20 move of ``ServerArgs._handle_x`` to
``arg_groups/*_hook.handle_x``; ``sgdeploy/sglang/data/check_sites.toml`` maps keys to rules.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

SERVER_ARGS_PATH = "sglang/srt/server_args.py"
ARG_GROUPS_DIR = "sglang/srt/arg_groups/"
ARG_GROUPS_MODULE = "sglang.srt.arg_groups"
# Methods that build the flag set (catalogued as flags) rather than check values.
NOT_ROOTS = {"add_cli_args"}
# Decorators that do not register a function somewhere.
PLAIN_DECORATORS = {"property", "staticmethod", "classmethod", "cached_property", "cache", "lru_cache",
                    "functools.cache", "functools.lru_cache", "functools.cached_property", "wraps",
                    "functools.wraps", "abstractmethod", "override", "dataclass", "contextmanager"}
WARNING_CALLS = ("warning", "warn", "warning_once", "print_deprecated_warning", "print_warning_once")
MAX_VALUE_TEXT = 120


def in_scope(path: str) -> bool:
    return path == SERVER_ARGS_PATH or path.startswith(ARG_GROUPS_DIR)


def module_name(path: str) -> str:
    name = path[: -len(".py")].replace("/", ".")
    return name[: -len(".__init__")] if name.endswith(".__init__") else name


@dataclass
class Function:
    module: str
    path: str
    qualname: str  # Class.method or function, as written in its module
    node: ast.FunctionDef | ast.AsyncFunctionDef
    cls: str | None = None

    @property
    def ident(self) -> tuple[str, str]:
        return (self.module, self.qualname)

    @property
    def key_name(self) -> str:
        """Name part of a site key: no module, no class, no leading underscores (a dunder
        method keeps its class: `ResolvedView.__setattr__`)."""
        name = self.node.name
        if name.startswith("__") and name.endswith("__"):
            return f"{self.cls}.{name}" if self.cls else name
        return name.lstrip("_")


@dataclass
class ModuleInfo:
    name: str
    path: str
    tree: ast.Module
    functions: dict[str, Function] = field(default_factory=dict)  # top-level defs by name
    classes: dict[str, list[Function]] = field(default_factory=dict)  # methods by class name
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # alias -> (module, name)


def _resolve_relative(module: str, is_package: bool, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    parts = parts[: len(parts) - (level - 1)]
    return ".".join(parts + ([target] if target else []))


def _import_bindings(
    stmts: Iterator[ast.stmt] | list[ast.stmt], mod: str, is_pkg: bool
) -> dict[str, tuple[str, str | None]]:
    out: dict[str, tuple[str, str | None]] = {}
    for stmt in stmts:
        if isinstance(stmt, ast.ImportFrom):
            source = _resolve_relative(mod, is_pkg, stmt.level, stmt.module)
            for alias in stmt.names:
                out[alias.asname or alias.name] = (source, alias.name)
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname:
                    out[alias.asname] = (alias.name, None)
    return out


def _top_statements(tree: ast.Module) -> Iterator[ast.stmt]:
    for stmt in tree.body:
        if isinstance(stmt, ast.Try | ast.If):
            yield from stmt.body
            if isinstance(stmt, ast.Try):
                for handler in stmt.handlers:
                    yield from handler.body
        else:
            yield stmt


class Program:
    """The in-scope modules of one wheel and the functions they define."""

    def __init__(self, files: dict[str, str]) -> None:
        self.modules: dict[str, ModuleInfo] = {}
        self.outside_imports = _imported_from_outside(files)
        for path in sorted(files):
            if not in_scope(path):
                continue
            name = module_name(path)
            info = ModuleInfo(name, path, ast.parse(files[path]))
            top = list(_top_statements(info.tree))
            info.imports = _import_bindings(top, name, path.endswith("__init__.py"))
            for stmt in top:
                if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                    info.functions[stmt.name] = Function(name, path, stmt.name, stmt)
                elif isinstance(stmt, ast.ClassDef):
                    info.classes[stmt.name] = [
                        Function(name, path, f"{stmt.name}.{item.name}", item, cls=stmt.name)
                        for item in stmt.body
                        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                    ]
            self.modules[name] = info
        server_args = self.modules[module_name(SERVER_ARGS_PATH)]
        self.server_args_methods = {f.node.name: f for f in server_args.classes.get("ServerArgs", [])}

    def resolve(self, module: str, name: str, depth: int = 0) -> list[Function]:
        """Functions that ``name`` in ``module`` stands for (a function, or a class's methods)."""
        info = self.modules.get(module)
        if info is None or depth > 8:
            return []
        if name in info.functions:
            return [info.functions[name]]
        if name in info.classes:
            return list(info.classes[name])
        if name in info.imports:
            source, attr = info.imports[name]
            return self.resolve(source, attr, depth + 1) if attr else []
        return []

    def roots(self) -> list[Function]:
        out = [f for name, f in self.server_args_methods.items() if name not in NOT_ROOTS]
        for info in self.modules.values():
            candidates = list(info.functions.values()) + [m for ms in info.classes.values() for m in ms]
            out.extend(f for f in candidates if _is_registered(f.node))
        for module, name in sorted(self.outside_imports):
            out.extend(self.resolve(module, name))
        return out

    def callees(self, func: Function) -> list[Function]:
        info = self.modules[func.module]
        local = _import_bindings(
            [n for n in ast.walk(func.node) if isinstance(n, ast.Import | ast.ImportFrom)],
            func.module,
            func.path.endswith("__init__.py"),
        )
        out: list[Function] = []
        for node in ast.walk(func.node):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                if node.id in local:
                    source, attr = local[node.id]
                    if attr:
                        out.extend(self.resolve(source, attr))
                else:
                    out.extend(self.resolve(info.name, node.id))
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                out.extend(self._attribute_targets(func, node, {**info.imports, **local}))
        return out

    def _attribute_targets(
        self, func: Function, node: ast.Attribute, bindings: dict[str, tuple[str, str | None]]
    ) -> list[Function]:
        receiver = node.value
        if not isinstance(receiver, ast.Name):
            return []
        bound = bindings.get(receiver.id)
        if bound and bound[1] is None:  # import sglang.srt.arg_groups.x as x; x.f
            return self.resolve(bound[0], node.attr)
        if bound and bound[1] is not None:  # from sglang.srt.arg_groups import x; x.f
            return self.resolve(f"{bound[0]}.{bound[1]}", node.attr)
        if receiver.id in {"self", "cls"} and func.cls:
            own = [m for m in self.modules[func.module].classes[func.cls] if m.node.name == node.attr]
            if own:
                return own
        method = self.server_args_methods.get(node.attr)
        return [method] if method else []

    def reachable(self) -> list[Function]:
        seen: dict[tuple[str, str], Function] = {}
        stack = self.roots()
        while stack:
            func = stack.pop()
            if func.ident in seen:
                continue
            seen[func.ident] = func
            stack.extend(c for c in self.callees(func) if c.ident not in seen)
        return sorted(seen.values(), key=lambda f: (f.path, f.node.lineno))


def _imported_from_outside(files: dict[str, str]) -> set[tuple[str, str]]:
    """``(module, name)`` of in-scope functions that other SGLang modules import: dispatchers
    outside the argument code (e.g. the speculative algorithm registry) call them back."""
    out: set[tuple[str, str]] = set()
    for path, text in files.items():
        if in_scope(path) or ARG_GROUPS_MODULE not in text:
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(ARG_GROUPS_MODULE):
                out.update((node.module or "", alias.name) for alias in node.names)
    return out


def _is_registered(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for deco in node.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        if ast.unparse(target) not in PLAIN_DECORATORS and not ast.unparse(target).endswith(".setter"):
            return True
    return False


# ---------------------------------------------------------------------------
# Sites
# ---------------------------------------------------------------------------

_RECEIVERS = re.compile(r"\b(?:self|server_args|args|cfg|view|sa)\.")
_PLACEHOLDER = re.compile(r"\{[^{}]*\}")


def message_text(node: ast.expr | None) -> str:
    """A message as written: strings joined, f-string placeholders kept as ``{expr}``."""
    if node is None:
        return ""
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue):
                parts.append("{" + ast.unparse(value.value) + "}")
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return message_text(node.left) + message_text(node.right)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return message_text(node.left)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return message_text(node.func.value)
    return "{" + ast.unparse(node) + "}"


def normalise(text: str) -> str:
    text = _PLACEHOLDER.sub("{}", text)
    return " ".join(text.split())


def _exception(node: ast.Raise) -> tuple[str, str]:
    exc = node.exc
    assert exc is not None
    if isinstance(exc, ast.Call):
        name = ast.unparse(exc.func)
        arg = exc.args[0] if exc.args else None
        return name, message_text(arg) if arg is not None else ""
    return ast.unparse(exc), ""


def _warning_call(node: ast.Call) -> bool:
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name in WARNING_CALLS and bool(node.args)


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_VALUE_TEXT else text[: MAX_VALUE_TEXT - 3] + "..."


def sites_of(func: Function, fields: set[str]) -> Iterator[dict[str, Any]]:
    where = {"function": f"{func.module.removeprefix('sglang.srt.')}.{func.qualname}", "file": func.path}
    name = func.key_name
    for node in ast.walk(func.node):
        site: dict[str, Any] | None = None
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc, message = _exception(node)
            site = {"kind": "raise", "exception": exc, "message": message}
        elif isinstance(node, ast.Assert):
            message = message_text(node.msg) if node.msg is not None else ""
            site = {"kind": "assert", "exception": "AssertionError", "message": message,
                    "condition": _short(ast.unparse(node.test))}
        elif isinstance(node, ast.Call) and _warning_call(node):
            site = {"kind": "warning", "message": message_text(node.args[0])}
        if site is not None:
            text = site["message"] or "assert " + _RECEIVERS.sub("", site.get("condition", ""))
            if not site["message"] and site["kind"] == "raise":
                text = f"raise {site['exception']}"
            site["key"] = f"{name}: {normalise(text)}"
            yield {**where, "line": node.lineno, **site}
            continue
        for target, value in _assigned_fields(node, fields):
            yield {**where, "line": node.lineno, "kind": "override", "field": target,
                   "value": _short(ast.unparse(value)) if value is not None else "",
                   "key": f"{name}: {target}"}


def _assigned_fields(node: ast.AST, fields: set[str]) -> Iterator[tuple[str, ast.expr | None]]:
    if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            for leaf in ast.walk(target):
                if isinstance(leaf, ast.Attribute) and isinstance(leaf.value, ast.Name) \
                        and leaf.attr in fields and leaf.value.id != "cls":
                    yield leaf.attr, node.value
                elif isinstance(leaf, ast.Subscript) and isinstance(leaf.slice, ast.Constant) \
                        and leaf.slice.value in fields and isinstance(leaf.ctx, ast.Store):
                    yield str(leaf.slice.value), node.value
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
            and len(node.args) == 3 and isinstance(node.args[1], ast.Constant) and node.args[1].value in fields:
        yield str(node.args[1].value), node.args[2]
    elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith("declare_resolution"):
        for kw in node.keywords:
            if kw.arg in fields:
                yield kw.arg, kw.value
    elif isinstance(node, ast.Return) and isinstance(node.value, ast.Dict):
        for k, v in zip(node.value.keys, node.value.values, strict=True):
            if isinstance(k, ast.Constant) and k.value in fields:
                yield str(k.value), v


def extract_check_sites(files: dict[str, str], fields: set[str]) -> list[dict[str, Any]]:
    """Every check and override site ``ServerArgs`` reaches, sorted by file and line."""
    program = Program(files)
    out: list[dict[str, Any]] = []
    for func in program.reachable():
        out.extend(sites_of(func, fields))
    out.sort(key=lambda s: (s["file"], s["line"], s["kind"], s["key"]))
    return out
