"""The JSON Schema of a profile, with `[server]` spelled out from a flag catalog."""

from __future__ import annotations

from typing import Any

from sgdeploy.profile.model import Profile
from sgdeploy.sglang.catalog import Flag, load_catalog, newest_version

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
_JSON_TYPES = {"bool": "boolean", "int": "integer", "float": "number", "str": "string"}


def flag_schema(flag: Flag) -> dict[str, Any]:
    if flag.value_kind == "json":
        item: dict[str, Any] = {"type": ["object", "array", "string"]}
    else:
        item = {"type": _JSON_TYPES[flag.value_kind]}
        if flag.value_kind == "int" and flag.argparse_type == "human_readable_int":
            item["type"] = ["integer", "string"]
    if flag.choices and not flag.is_switch:
        item["enum"] = list(flag.choices)
    schema: dict[str, Any] = {"type": "array", "items": item} if flag.is_list else item
    schema["description"] = f"{flag.option}: {flag.help}".strip()
    # "<expr> ..." from the catalog
    unevaluated = isinstance(flag.default, str) and flag.default.startswith("<")
    if flag.default is not None and not unevaluated:
        schema["default"] = flag.default
    if flag.deprecated:
        schema["deprecated"] = True
    return schema


def profile_schema(sglang_version: str | None = None) -> dict[str, Any]:
    catalog = load_catalog(sglang_version or newest_version())
    # The dialect and an identity up front, so editors (taplo, Even Better TOML) take the file as
    # a schema and tell one release's apart from another's.
    schema = {
        "$schema": JSON_SCHEMA_DIALECT,
        "$id": f"urn:sgdeploy:profile:sglang-{catalog.version}",
        **Profile.model_json_schema(),
    }
    schema["title"] = "sgdeploy launch profile"
    schema["$comment"] = f"[server] flags of SGLang {catalog.version}"
    schema["properties"]["server"] = {
        "type": "object",
        "description": "sglang.launch_server flags by ServerArgs field name.",
        "additionalProperties": False,
        "properties": {
            name: flag_schema(flag)
            for name, flag in sorted([*catalog.flags.items(), *catalog.aliases.items()])
        },
        "required": ["model_path"],
    }
    return schema
