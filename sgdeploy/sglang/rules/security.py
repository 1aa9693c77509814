"""SGD02x: values that cannot pass through a unit, and secrets that must not be written into one."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from sgdeploy.sglang.rule import Finding, LaunchContext
from sgdeploy.sglang.rules.common import server_field
from sgdeploy.sglang.rules.registry import ERROR, rule

_SECRET_FLAGS = {"api_key", "admin_api_key", "hf_token", "ssl_keyfile_password"}
_SECRET_ENV = re.compile(r"(^|_)(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY)($|_)", re.I)
# Values that are credentials whatever they are called: Hugging Face, OpenAI-style, GitHub, AWS.
_SECRET_VALUE = re.compile(
    r"\b(hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16})\b")


@rule("SGD020", "unsafe-characters", ERROR,
      "A value with a newline, NUL or a Unicode noncharacter cannot be passed through a unit.",
      "remove the newline, NUL or noncharacter from the value")
def unsafe_characters(ctx: LaunchContext) -> Iterator[Finding]:
    for key, value in ctx.raw_server.items():
        if _has_control(value):
            yield Finding(server_field(key), f"the value of '{key}' contains a newline, NUL or noncharacter "
                          "(systemd would drop the line)")
    for key, value in ctx.env.items():
        if _has_control(value):
            yield Finding(f"env.{key}", f"the value of {key} contains a newline, NUL or noncharacter")


def _is_noncharacter(ch: str) -> bool:
    code = ord(ch)
    return 0xFDD0 <= code <= 0xFDEF or (code & 0xFFFE) == 0xFFFE


def _has_control(value: Any) -> bool:
    if isinstance(value, str):
        return "\n" in value or "\r" in value or "\x00" in value or any(map(_is_noncharacter, value))
    if isinstance(value, list):
        return any(_has_control(v) for v in value)
    if isinstance(value, dict):
        return any(_has_control(k) or _has_control(v) for k, v in value.items())
    return False


@rule("SGD021", "secret-in-profile", ERROR, "An API key or token written into the profile would land in the unit.",
      "put it in the host's env file (deploy.env_file) and remove it from the profile")
def secret_in_profile(ctx: LaunchContext) -> Iterator[Finding]:
    for key in ctx.raw_server:
        if key in _SECRET_FLAGS:
            yield Finding(server_field(key), f"'{key}' is a secret; profiles and units are not secret",
                          f"remove it and set it on the host: deploy.env_file with {key.upper()}=... "
                          "(SGLang reads the env var) — never in the unit or the repository")
    for key, value in ctx.env.items():
        if _SECRET_ENV.search(key) or _SECRET_VALUE.search(value):
            yield Finding(f"env.{key}", f"{key} looks like a secret; it would be written into the unit")
    for key, value in ctx.raw_server.items():
        if key not in _SECRET_FLAGS and isinstance(value, str) and _SECRET_VALUE.search(value):
            yield Finding(server_field(key), f"the value of '{key}' looks like a credential; it would be written "
                          "into the unit")
