"""SGLang's secret arguments: which they are, how a release takes them from a file, and their
values kept out of every text sgdeploy shows, writes or records.

This is the one place that recognises a secret; how a deployment passes one to SGLang without
writing it into the unit is `sgdeploy.deploy.secret_args`'s.
"""

from __future__ import annotations

import re
from typing import Literal

from sgdeploy.sglang.catalog import Catalog, Flag

Mechanism = Literal["config", "environment"]

# ServerArgs fields that carry a secret in every release that has them.
SECRET_FIELDS = ("api_key", "admin_api_key", "ssl_keyfile_password")
# Environment names that look like one of them; SGLang's server reads none of these.
ENV_LOOKALIKE = re.compile(r"^(?:SGLANG_)?(API_KEY|ADMIN_API_KEY|SSL_KEYFILE_PASSWORD)$", re.I)
YAML_SUFFIXES = (".yaml", ".yml")  # SGLang refuses any other --config file


def mechanism(catalog: Catalog) -> Mechanism:
    """How secrets reach this SGLang release: its own `--config`, else systemd's expansion."""
    return "config" if "config" in catalog else "environment"


def file_key(flag: Flag) -> str:
    """The key of a flag in a --config file: SGLang passes each key on as `--KEY`."""
    return flag.option[2:]


_DUMP_VALUE = r"('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")"
_NAMES = "|".join(SECRET_FIELDS)
_OPTIONS = "|".join(name.replace("_", "-") for name in SECRET_FIELDS)
_REDACTIONS = (
    re.compile(rf"(\b(?:{_NAMES})=){_DUMP_VALUE}"),  # ServerArgs(api_key='...') (0.5.1x)
    re.compile(rf"(['\"](?:{_NAMES})['\"]:\s*){_DUMP_VALUE}"),  # {'api_key': '...'} (0.5.2x)
    re.compile(rf"(--(?:{_OPTIONS})(?:=|\s+))(\S+)"),  # a command line
)


def redact(text: str) -> str:
    """`text` with the values of secret arguments replaced by `<redacted>`."""
    if "key" not in text and "password" not in text:
        return text
    for pattern in _REDACTIONS:
        text = pattern.sub(lambda m: m.group(1) + ("'<redacted>'" if m.group(2)[:1] in "'\"" else "<redacted>"),
                           text)
    return text
