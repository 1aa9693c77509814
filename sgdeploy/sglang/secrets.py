"""Secrets: which values are one, how a release takes SGLang's from a file, and their values
kept out of every text sgdeploy shows, writes or records.

This is the one place that recognises a secret, by what it is:

- by name: SGLang's secret arguments (`api_key`, `admin_api_key`, `ssl_keyfile_password`) and
  any field, environment variable or key named like one (`HF_TOKEN`, `*_API_KEY`, `*_SECRET`,
  `*_PASSWORD`; see `is_secret_name`);
- by value (`secret_in`): a password in a URL (`scheme://user:PASSWORD@host`), a URL parameter
  named like a secret (`?token=`, `?api_key=`, `&sig=`), and the shapes of well-known tokens
  (`hf_...`, `sk-...`, `ghp_...`, `github_pat_...`, `glpat-...`, `xox?-...`, `AKIA...`).

`launch_secrets` finds them in a launch (SGD021 refuses them at their line; the unit renderer
refuses to write one whatever validation said); `redact`, `shown` and `redact_data` take the
values out of text, of one setting and of a JSON document. How a deployment passes a secret to
SGLang without writing it into the unit is `sgdeploy.deploy.secret_args`'s.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from sgdeploy.sglang.catalog import Catalog, Flag

Mechanism = Literal["config", "environment"]
REDACTED = "<redacted>"

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


# --------------------------------------------------------------------------- by name
_SECRET_WORD = (r"(?:token|secret|password|passwd|passphrase|signature"
                r"|api[_-]?key|access[_-]key|secret[_-]key|private[_-]key)")
_SECRET_NAME = re.compile(rf"(?:^|[_-]){_SECRET_WORD}$", re.I)
# snake_case names ending in _token count text tokens (bucket_time_to_first_token); these do not
_TOKEN_NAMES = frozenset({"hf_token", "access_token", "auth_token", "api_token", "bearer_token",
                          "id_token", "refresh_token", "session_token", "security_token"})
# URL parameters that carry a key or a signature under a short name (`?key=`, SAS `&sig=`)
_SECRET_PARAMETERS = frozenset({"key", "sig", "auth", "code", "secret"})


def is_secret_name(name: str) -> bool:
    """A field, environment variable, option or key whose name says it holds a secret:
    `api_key`, `admin_api_key`, `ssl_keyfile_password`, `hf_token`, `HF_TOKEN`, `*_API_KEY`,
    `*_SECRET`, `*_PASSWORD`, `--api-key`, `X-Amz-Signature`."""
    bare = name.lstrip("-")
    if not _SECRET_NAME.search(bare):
        return False
    snake = bare.replace("-", "_")
    if not (bare.islower() and snake.endswith("_token")):
        return True
    return any(snake == kind or snake.endswith("_" + kind) for kind in _TOKEN_NAMES)


# --------------------------------------------------------------------------- by value
_TOKEN_SHAPES = {
    "hf": ("a Hugging Face token (hf_...)", r"hf_[A-Za-z0-9]{20,}"),
    "sk": ("an API key (sk-...)", r"sk-[A-Za-z0-9_-]*?[A-Za-z0-9]{20}[A-Za-z0-9_-]*"),
    "gh": ("a GitHub token", r"gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"),
    "gl": ("a GitLab token (glpat-...)", r"glpat-[A-Za-z0-9_-]{20,}"),
    "xox": ("a Slack token", r"xox[abposr]-[A-Za-z0-9-]{10,}"),
    "aws": ("an AWS access key id", r"(?:AKIA|ASIA)[0-9A-Z]{16}"),
}
_TOKEN = re.compile(r"(?<![A-Za-z0-9_-])(?:"
                    + "|".join(f"(?P<{name}>{shape})" for name, (_, shape) in _TOKEN_SHAPES.items())
                    + r")(?![A-Za-z0-9_])")
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]{0,31}://[^\s'\"<>`\\]+")  # a scheme is short


@dataclass(frozen=True)
class _Url:
    """A URL with its secrets replaced, and what they were (no value)."""

    text: str
    found: tuple[str, ...]


def _parameters(part: str) -> tuple[str, list[str]]:
    """A query or fragment with the values of secret parameters replaced, and their names."""
    shown, found = [], []
    for pair in part.split("&"):
        name, eq, value = pair.partition("=")
        if eq and value and (is_secret_name(name) or name.lower() in _SECRET_PARAMETERS):
            shown.append(f"{name}={REDACTED}")
            found.append(f"a secret in its URL (the {name} parameter)")
        else:
            shown.append(pair)
    return "&".join(shown), found


def _url(url: str) -> _Url:
    scheme, _, rest = url.partition("://")
    cut = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:cut], rest[cut:]
    found: list[str] = []
    userinfo, at, host = authority.rpartition("@")
    user, colon, password = userinfo.partition(":")
    if at and colon and password:
        authority = f"{user}:{REDACTED}@{host}"
        found.append("a password in its URL (user:PASSWORD@host)")
    path, hash_mark, fragment = tail.partition("#")
    path, question, query = path.partition("?")
    if query:
        query, named = _parameters(query)
        found += named
    if fragment:
        fragment, named = _parameters(fragment)
        found += named
    return _Url(f"{scheme}://{authority}{path}{question}{query}{hash_mark}{fragment}", tuple(found))


def secret_in(value: Any) -> str | None:
    """What secret `value` holds (a URL's password or secret parameter, a well-known token),
    in words and without the value; None when it holds none. Lists and tables are searched."""
    if isinstance(value, list | dict):
        items = value.values() if isinstance(value, dict) else value
        return next((held for item in items if (held := secret_in(item))), None)
    if not isinstance(value, str):
        return None
    for match in _URL.finditer(value):
        if in_url := _url(match.group(0)).found:
            return in_url[0]
    token = _TOKEN.search(value)
    return _TOKEN_SHAPES[str(token.lastgroup)][0] if token else None


@dataclass(frozen=True)
class SecretSpot:
    """Where a launch holds a secret: `server.api_key`, `env.HF_TOKEN` (never the value)."""

    table: Literal["server", "env"]
    key: str
    what: str  # "is a secret argument", "holds a password in its URL (user:PASSWORD@host)", ...
    by_name: bool  # the key names a secret (its whole value is one), not a value that holds one

    @property
    def dotted(self) -> str:
        return f"{self.table}.{self.key}"


def launch_secrets(server: Mapping[str, Any], env: Mapping[str, str]) -> list[SecretSpot]:
    """Every `[server]` and `[env]` entry that would write a secret into a unit."""
    spots = []
    for key, value in server.items():
        if is_secret_name(key):  # whatever the value: `api_key = ""` still says what it is
            spots.append(SecretSpot("server", key, "is a secret argument", True))
        elif found := secret_in(value):
            spots.append(SecretSpot("server", key, f"holds {found}", False))
    for key, text in env.items():
        if is_secret_name(key) and text:  # an empty value writes nothing
            spots.append(SecretSpot("env", key, "names a secret", True))
        elif found := secret_in(text):
            spots.append(SecretSpot("env", key, f"holds {found}", False))
    return spots


# --------------------------------------------------------------------------- redaction
_QUOTED = r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\""
_BARE = r"[^\s'\",;)\]}`\\]+"  # an unquoted value, up to a quote, a space or a closing bracket
# a name that may be a secret's (is_secret_name decides): other names are never consumed
_NAME = rf"(?i:(?:[A-Za-z0-9_]*_)?{_SECRET_WORD})"
_YAML_NAME = rf"(?=[A-Za-z0-9]+[_-])(?i:(?:[A-Za-z0-9_-]*[_-])?{_SECRET_WORD})"
_REDACTIONS = (
    # --api-key VALUE, --api-key=VALUE, "--api-key" "VALUE", '--api-key', 'VALUE' (a command line)
    re.compile(r"(?<![\w-])(--[A-Za-z0-9][A-Za-z0-9-]*)(['\"]?(?:=|,?[ \t]+)['\"]?)(?!-)"
               r"([^\s'\",`\]]+)"),
    # {'api_key': '...'}, "HF_TOKEN": "..." (a dict or JSON)
    re.compile(rf"(['\"])({_NAME})(\1:[ \t]*)({_QUOTED}|[0-9][0-9A-Za-z_.+-]*)"),
    # api_key='...' (ServerArgs), HF_TOKEN=... (an environment, a shell line)
    re.compile(rf"(?<![\w.-])()({_NAME})(=)({_QUOTED}|\[[^\]\n]*\]|{_BARE})"),
    # api_key = "..." (TOML: a quoted value or an array, so that prose `token = it` stays)
    re.compile(rf"(?<![\w.-])()({_NAME})([ \t]+=[ \t]*|=[ \t]+)({_QUOTED}|\[[^\]\n]*\])"),
    # api-key: ..., hf_token: ... (a YAML key: at a line's start or in braces, compound so that
    # prose such as `api_key: systemd expands it` or `first token: 0.5` stays)
    re.compile(rf"(^[ \t]*(?:-[ \t]+)?|\{{[ \t]*)({_YAML_NAME})(:[ \t]+)({_QUOTED}|{_BARE})", re.M),
)
# what stands for a value rather than being one: VALUE, <the value>, sk-..., ${api_key} (systemd's)
_PLACEHOLDER = re.compile(r"<.*|.*>|\$\{?\w+\}?|.*\.\.\..*|[A-Z]+|None|null|\[\]|")
_MAYBE = re.compile(r"key|pass|token|secret|sig|auth|code|://|hf_|sk-|gh[pousr]_|github_pat_"
                    r"|glpat-|xox|AKIA|ASIA", re.I)


def _placeholder(value: str) -> bool:
    quoted = len(value) > 1 and value[0] in "'\"" and value[-1] == value[0]
    return bool(_PLACEHOLDER.fullmatch(value[1:-1] if quoted else value))


def _option(match: re.Match[str]) -> str:
    if not is_secret_name(match.group(1)) or _placeholder(match.group(3)):
        return match.group(0)
    return match.group(1) + match.group(2) + REDACTED


def _assigned(match: re.Match[str]) -> str:
    value = match.group(4)
    if not is_secret_name(match.group(2)) or _placeholder(value):
        return match.group(0)
    quote = value[0] if value[0] in "'\"" and value[-1] == value[0] and len(value) > 1 else ""
    return f"{match.group(1)}{match.group(2)}{match.group(3)}{quote}{REDACTED}{quote}"


def redact(text: str) -> str:
    """`text` with every secret value recognised in it replaced by `<redacted>`: the values of
    secret-named arguments, variables and keys, a URL's password and secret parameters, and
    well-known tokens. Everything else stays as it was."""
    if not _MAYBE.search(text):
        return text
    text = _URL.sub(lambda m: _url(m.group(0)).text, text)
    text = _REDACTIONS[0].sub(_option, text)
    for pattern in _REDACTIONS[1:]:
        text = pattern.sub(_assigned, text)
    return _TOKEN.sub(REDACTED, text)


def shown(name: str, value: Any) -> Any:
    """A setting's value as it may be shown: `<redacted>` under a secret name, else the value
    with the secrets recognised inside it redacted (lists and tables item by item)."""
    if is_secret_name(name) and value not in (None, "", False, True):
        return REDACTED
    return redact_data(value)


def redact_data(data: Any) -> Any:
    """A JSON-like document with every secret taken out: the values under secret-named keys,
    and the secrets recognised inside strings."""
    if isinstance(data, dict):
        return {key: shown(key, value) if isinstance(key, str) else redact_data(value)
                for key, value in data.items()}
    if isinstance(data, list | tuple):
        return _redacted_words(list(data))
    return redact(data) if isinstance(data, str) else data


def _redacted_words(items: list[Any]) -> list[Any]:
    """A list item by item; in an argv (`["--api-key", "sk-..."]`), the word after a secret
    option too."""
    shown_items = [redact_data(item) for item in items]
    for i, item in enumerate(items[:-1]):
        option = isinstance(item, str) and item.startswith("--") and "=" not in item
        if option and is_secret_name(item) and isinstance(items[i + 1], str):
            shown_items[i + 1] = REDACTED
    return shown_items


def secret_values(settings: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The values of the secret-named settings (a server_args dump, a profile's [server]): once
    known, a value is taken out wherever it appears, whatever its shape (`sk-...` of any length
    in an error message)."""
    found = {
        value
        for key, value in (settings or {}).items()
        if isinstance(value, str)
        and len(value) >= 4
        and is_secret_name(key)
        and not _placeholder(value)
    }
    return tuple(sorted(found, key=len, reverse=True))


def redact_known(text: str, values: tuple[str, ...]) -> str:
    """`text` with each of `values` (secret_values) replaced by `<redacted>`, then `redact`."""
    for value in values:
        text = text.replace(value, REDACTED)
    return redact(text)


def redact_document(document: dict[str, Any]) -> dict[str, Any]:
    """`redact_data` of a JSON object (a result's `as_dict`)."""
    return {key: shown(key, value) for key, value in document.items()}
