"""What the user must do next, for errors whose layer would name the wrong kind.

A traceback that runs through distributed init, DeepEP's dispatcher or transformers' config
loader names those layers, but the cause is often not theirs: a package that is not installed,
an environment variable SGLang cannot read, a model this SGLang or transformers does not know.
Each of these is decided from the exception itself (its type, its message, the innermost frame
and that frame's source line) before any layer's name is looked at, and carries a hint that
says what to do: install, fix a setting, change the model.

Kinds stay within the `logcheck --json` set: an optional package that an option asked for and a
bad environment value are `bad_argument` (the launch's settings are what must change); a model
SGLang or transformers does not support is `bad_argument` too (the model given is refused, as a
value out of its choices would be; `model_not_found` is for paths and repositories that do not
resolve); any other missing package is `crash` (the install is broken), with the hint.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from sgdeploy.logs.segment import Traceback


@dataclass(frozen=True)
class Remedy:
    kind: str
    hint: str  # what to do, appended to the root line's text in the failure's message


# Optional packages behind SGLang's communication and cache backends: (the missing module,
# library or product as a message names it, what to install, the options that select it).
_Option = tuple[str, tuple[object, ...]]
OPTIONAL_PACKAGES: Final[tuple[tuple[re.Pattern[str], str, tuple[_Option, ...]], ...]] = (
    (
        re.compile(r"nvshmem", re.I),
        "NVSHMEM (DeepEP's transport)",
        (("moe_a2a_backend", ("deepep", "deepep_v2", "pplx")),),
    ),
    (
        re.compile(r"deep_?ep", re.I),
        "deep_ep (DeepEP)",
        (("moe_a2a_backend", ("deepep", "deepep_v2")),),
    ),
    (re.compile(r"pplx", re.I), "pplx-kernels", (("moe_a2a_backend", ("pplx",)),)),
    (
        re.compile(r"mooncake", re.I),
        "mooncake (mooncake-transfer-engine)",
        (
            ("disaggregation_transfer_backend", ("mooncake", "mooncake_tcp")),
            ("moe_a2a_backend", ("mooncake",)),
            ("elastic_ep_backend", ("mooncake",)),
            ("hicache_storage_backend", ("mooncake",)),
            ("encoder_transfer_backend", ("mooncake",)),
            ("remote_instance_weight_loader_backend", ("transfer_engine",)),
        ),
    ),
    (
        re.compile(r"nixl", re.I),
        "nixl",
        (
            ("disaggregation_transfer_backend", ("nixl",)),
            ("moe_a2a_backend", ("nixl",)),
            ("elastic_ep_backend", ("nixl",)),
            ("hicache_storage_backend", ("nixl",)),
        ),
    ),
    (
        re.compile(r"\bmori\b", re.I),
        "mori",
        (
            ("disaggregation_transfer_backend", ("mori",)),
            ("moe_a2a_backend", ("mori",)),
            ("hicache_storage_backend", ("mori",)),
        ),
    ),
    (re.compile(r"lmcache", re.I), "lmcache", (("enable_lmcache", (True,)),)),
)
_IMPORT_TYPES: Final = frozenset({"ImportError", "ModuleNotFoundError"})
_MODULE = re.compile(r"No module named '(?P<name>[\w.]+)'")
_LIBRARY = re.compile(r"(?P<name>lib[\w+-]+(?:\.[\w+-]+)*?\.so[\d.]*): cannot open shared object "
                      r"file")
_PRODUCT = re.compile(r"(?P<name>\w[\w -]{0,30}?) is not (?:installed|available)\b|Please install "
                      r"(?P<pkg>[\w-]+)")

# A value read from the environment: the innermost frame is SGLang's reader, or its source line
# reads the environment.
_ENV_TYPES: Final = frozenset({"TypeError", "ValueError"})
_ENV_RAISER = re.compile(r"sglang/srt/environ\.py:|:get_\w*env\w*$")
_ENV_SOURCE = re.compile(r"os\.environ|os\.getenv|\benvs\.\w+\.get\(|get_\w*env_var\(")
_ENV_NAME = re.compile(
    r"\benvs\.(?P<a>[A-Z][A-Z0-9_]{2,})|get_\w*env_var\(\s*[\"'](?P<b>[A-Z][A-Z0-9_]{2,})[\"']|"
    r"os\.(?:environ(?:\.get)?\s*[\[(]|getenv\()\s*[\"'](?P<c>[A-Z][A-Z0-9_]{2,})[\"']|"
    r"Invalid value for (?P<d>[A-Z][A-Z0-9_]{2,})"
)

# A model SGLang's registry or transformers' config mapping does not know.
_UNSUPPORTED_ARCH = re.compile(
    r"Model architectures? \[(?P<archs>.*?)\] (?:is|are) not supported|"
    r"Unsupported architectures?: (?P<arch>\w+)"  # 0.2/0.3 wording
)
_UNKNOWN_TYPE = re.compile(
    r"has model type `(?P<type>[\w.-]+)` but Transformers does not recognize this architecture|"
    r"does not recognize this architecture|"
    r"[Mm]odel type [`'\"]?(?P<type2>[\w.-]+)[`'\"]? (?:is )?not (?:recognized|supported)"
)
_CONFIG_MAPPING = re.compile(r"configuration_auto\.py:")
# safetensors' reading of a shard whose bytes end before its header says they do
_CUT_SHARD = re.compile(r"incomplete metadata|file not fully covered|header too (?:large|small)|"
                        r"invalid header|MetadataIncompleteBuffer")
# safetensors' open of a shard: a file the process may not read is "No such file" too
_WEIGHT_FILE = re.compile(
    r"(?:No such file or directory|Permission "
    r"denied)\b.*?(?P<path>/\S+\.(?:safetensors|bin|pt|gguf))\b")


def remedy(
    etype: str, msg: str, tb: Traceback | None, settings: Mapping[str, Any] | None
) -> Remedy | None:
    """The kind and the hint for an error whose cause is a package, a setting or the model."""
    short = etype.rsplit(".", 1)[-1]
    return (
        _missing_package(short, msg, settings)
        or _bad_environment(short, msg, tb)
        or _unsupported_model(short, msg, tb)
        or _unopenable_weights(short, msg)
    )


def _missing_package(short: str, msg: str, settings: Mapping[str, Any] | None) -> Remedy | None:
    library = _LIBRARY.search(msg)
    if short not in _IMPORT_TYPES and not (short == "OSError" and library):
        return None
    found = _MODULE.search(msg) or library or _PRODUCT.search(msg)
    if found is None:
        return None  # `cannot import name ...`: versions that do not match, a crash as it is
    name = found.groupdict().get("name") or found.groupdict().get("pkg") or ""
    for pattern, package, options in OPTIONAL_PACKAGES:
        if pattern.search(name) or pattern.search(msg):
            where = " (or its library folder to LD_LIBRARY_PATH)" if found is library else ""
            return _optional(package + where, options, settings)
    if library is not None and found is library:
        return Remedy("crash", f"the shared library {name} is not found: install it, or add its "
                               "folder to LD_LIBRARY_PATH in the unit's environment")
    return Remedy("crash", f"the Python package {name!r} is missing from the server's "
                           "interpreter: install it there")


def _optional(
    package: str, options: tuple[_Option, ...], settings: Mapping[str, Any] | None
) -> Remedy:
    """An optional backend's package: a bad setting when an option asks for that backend (or the
    options are not known), a broken install when the server's resolved options do not."""
    if settings is None:
        flags = " / ".join(_flag(f, values[0]) for f, values in options)
        return Remedy("bad_argument", f"install {package} into the server's interpreter, or drop "
                                      f"the option that selects it ({flags})")
    asked = [_flag(f, settings.get(f)) for f, values in options if _asks(settings, f, values)]
    if asked:
        return Remedy("bad_argument", f"install {package} into the server's interpreter, or drop "
                                      f"{' and '.join(asked)}")
    return Remedy("crash", f"SGLang imported {package} though no option of this launch selects it: "
                           "install or repair it in the server's interpreter")


def _asks(settings: Mapping[str, Any], field: str, values: tuple[object, ...]) -> bool:
    if field == "disaggregation_transfer_backend" and settings.get("disaggregation_mode") in (
        None,
        "null",
    ):
        return False  # the default transfer backend is used only by a disaggregated server
    return settings.get(field) in values


def _flag(field: str, value: object) -> str:
    flag = "--" + field.replace("_", "-")
    return flag if value is True else f"{flag} {value}"


def _bad_environment(short: str, msg: str, tb: Traceback | None) -> Remedy | None:
    if short not in _ENV_TYPES or tb is None:
        return None
    if not (_ENV_RAISER.search(tb.raiser) or _ENV_SOURCE.search(tb.raiser_source)):
        return None
    name = next(
        (m.group("a") or m.group("b") or m.group("c") or m.group("d")
         for text in (msg, tb.raiser_source, *reversed(tb.sources))
         for m in [_ENV_NAME.search(text)] if m),
        None,
    )
    what = f"the environment variable {name}" if name else "an environment variable SGLang reads"
    return Remedy("bad_argument", f"{what} has a value SGLang cannot use: fix or unset it "
                                  "([env] or deploy.env_file)")


def _unsupported_model(short: str, msg: str, tb: Traceback | None) -> Remedy | None:
    arch = _UNSUPPORTED_ARCH.search(msg)
    if arch is not None:
        archs = arch.group("archs") or arch.group("arch")
        return Remedy("bad_argument", f"this SGLang cannot serve {archs}: serve another model, or "
                                      "an SGLang release that supports it")
    unknown = _UNKNOWN_TYPE.search(msg)
    model_type = (unknown.group("type") or unknown.group("type2")) if unknown else None
    if (
        unknown is None
        and short == "KeyError"
        and tb is not None
        and _CONFIG_MAPPING.search(tb.raiser)
    ):
        model_type = msg.strip("'\"")  # transformers' CONFIG_MAPPING[model_type]
    elif unknown is None:
        return None
    what = f"the model type {model_type!r}" if model_type else "this model's type"
    return Remedy("bad_argument", f"transformers here does not know {what}: upgrade transformers "
                                  "(or SGLang), or pass --trust-remote-code if the checkpoint "
                                  "ships its own code")


def _unopenable_weights(short: str, msg: str) -> Remedy | None:
    if short == "SafetensorError" and _CUT_SHARD.search(msg):
        return Remedy("model_not_found", "a weight file of the checkpoint is cut short or damaged "
                                         "(a partial download or copy): fetch it again and compare "
                                         "its size with the source")
    if (
        short not in ("FileNotFoundError", "PermissionError", "OSError")
        or (m := _WEIGHT_FILE.search(msg)) is None
    ):
        return None
    return Remedy("model_not_found", f"SGLang could not open {m.group('path').rsplit('/', 1)[-1]}: "
                                     "check that the file exists and that the unit's user "
                                     "(deploy.user; 'sglang' in a strict unit) can read it (chmod "
                                     "a+r, or chown); safetensors reports an unreadable file as "
                                     "missing")
