"""Rendering a profile into its systemd unit.

The argv is built as a list (never a shell line) and every argument is quoted for systemd's
own parser: ExecStart= per systemd.service(5) (quotes, backslash escapes, `%%` for specifiers,
`$$` for variable expansion), Environment= per systemd.exec(5) (no `$` expansion there).
Rendering is deterministic: the same profile and host give byte-identical output.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from sgdeploy import __version__
from sgdeploy.deploy.hardening import UnitSandbox, unit_sandbox
from sgdeploy.deploy.secret_args import EnvReference, unit_parts
from sgdeploy.deploy.weight_daemon import (
    DAEMON_MODULE,
    DaemonUnit,
    daemon_environment,
    daemon_server_settings,
    daemon_unit_name,
    owns_daemon,
    ranks_on_node,
    ready_wait_command,
    runtime_folder,
    shares_private_tmp,
    template_environment,
)
from sgdeploy.profile.model import LoadedProfile, Profile
from sgdeploy.sglang.argv import LAUNCH_MODULE
from sgdeploy.sglang.catalog import Catalog, Flag
from sgdeploy.sglang.flags import as_sglang_sees_it, removed_switch_off
from sgdeploy.sglang.sandbox import inductor_cache_environment
from sgdeploy.sglang.secrets import launch_secrets
from sgdeploy.sglang.shutdown import stop_environment


def _template_dir() -> Path:
    """Where the unit template lies: inside the installed package, else the checkout's
    templates/."""
    package = Path(__file__).resolve().parents[1]
    installed = package / "templates"
    return installed if installed.is_dir() else package.parent / "templates"


TEMPLATE_DIR = _template_dir()
TEMPLATE_NAME = "sglang.service.j2"
DAEMON_TEMPLATE_NAME = "sglang-weights.service.j2"
STOP_TIMEOUT_S = 120


class SecretInUnit(ValueError):
    """A launch that would write a secret into its unit: refused whatever validation said."""


@dataclass(frozen=True)
class RenderedUnit:
    """A unit file and what it will run."""

    unit: str
    text: str
    # `<python> -m sglang.launch_server FLAGS` (ExecStart= may add -c LAUNCHER before -m)
    argv: tuple[str, ...]
    environment: tuple[tuple[str, str], ...]
    daemon: DaemonUnit | None = None  # the weight-cache daemon's unit, for a client of it

    @property
    def file_name(self) -> str:
        return f"{self.unit}.service"


def flag_args(flag: Flag, value: Any) -> list[str]:
    """The command-line words for one `[server]` entry (empty when a switch is off)."""
    if flag.is_switch:
        if flag.boolean_optional:
            negative = flag.negative_option
            return [flag.option] if value else ([negative] if negative else [])
        if flag.store_false:
            return [] if value else [flag.option]
        return [flag.option] if value else []
    if flag.value_kind == "json" and not isinstance(value, str):
        return [flag.option, json.dumps(value, sort_keys=True, ensure_ascii=False)]
    values = value if isinstance(value, list) else [value]
    return [flag.option, *(value_word(v) for v in values)]


def value_word(value: Any) -> str:
    """One value as a command-line word: TOML booleans as true/false, tables and arrays as JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    return str(value)


def launch_words(profile: Profile, catalog: Catalog) -> list[list[str]]:
    """`<python> -m sglang.launch_server`, then one group of words per flag, in profile order.

    Expects a validated profile: keys unknown to the catalog are an error caught before.
    """
    groups = [[profile.deploy.python, "-m", LAUNCH_MODULE]]
    for key, value in profile.server.items():
        if removed_switch_off(catalog, key, value):
            continue  # a switch this release no longer has, left off: SGLang never sees it (SGD017)
        if not catalog.accepts(key) and (catalog.lookup(key) is None or value):
            raise KeyError(f"'{key}' is not a flag of SGLang {catalog.version}")
        # A deprecated alias renders as the option of the field it feeds, with the value SGLang
        # would store; an option SGLang ignores, or a switch left off, renders to nothing.
        seen = as_sglang_sees_it(catalog, key, value)
        words = flag_args(catalog.flags[seen.field], seen.value) if seen else []
        if words:
            groups.append(words)
    return groups


def launch_argv(profile: Profile, catalog: Catalog) -> list[str]:
    return [word for group in launch_words(profile, catalog) for word in group]


# systemd's own PATH for services (systemd.exec(5), on a merged /usr)
SYSTEMD_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def unit_path(python: str) -> str:
    """PATH of the unit: the interpreter's own bin directory first, as an activated virtualenv has
    it. SGLang's JIT kernels (tvm_ffi, FlashInfer, torch extensions) run `ninja` from PATH while
    the server starts; under systemd's PATH alone the venv's `ninja` is not found and the server
    dies capturing CUDA graphs (seen on a real H200 with SGLang 0.5.11)."""
    bin_dir = posixpath.dirname(python)
    if not bin_dir or bin_dir in SYSTEMD_DEFAULT_PATH.split(":"):
        return SYSTEMD_DEFAULT_PATH
    return f"{bin_dir}:{SYSTEMD_DEFAULT_PATH}"


def unit_environment(profile: Profile, sglang_version: str | None = None) -> list[tuple[str, str]]:
    """The unit's Environment=: sgdeploy's own, then `[env]`, then what keeps a stop of
    `sglang_version` short (sgdeploy.sglang.shutdown)."""
    env = [("PYTHONUNBUFFERED", "1")]
    if "PATH" not in profile.env:
        env.append(("PATH", unit_path(profile.deploy.python)))
    if profile.deploy.gpus:
        env.append(("CUDA_VISIBLE_DEVICES", ",".join(str(g) for g in profile.deploy.gpus)))
    env.extend(profile.env.items())
    env.extend(stop_environment(sglang_version, profile.env))
    return env


# --------------------------------------------------------------------------- systemd quoting
def _escape_common(value: str) -> str:
    out = []
    for ch in value:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "%":
            out.append("%%")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)


def exec_arg(value: str) -> str:
    """One ExecStart= argument: double-quoted, `\\` `"` escaped, `%` -> `%%`, `$` -> `$$`.

    An `EnvReference` is the one word systemd must expand: `"${NAME}"` (a secret of an SGLang
    release without --config, from EnvironmentFile=; see sgdeploy.deploy.secret_args)."""
    if isinstance(value, EnvReference):
        return '"${' + value + '}"'
    return '"' + _escape_common(value).replace("$", "$$") + '"'


def exec_path(value: str) -> str:
    """The ExecStart= executable: quoted like an argument, but systemd expands no `$` there."""
    return '"' + _escape_common(value) + '"'


def env_assignment(pair: tuple[str, str]) -> str:
    """One Environment= assignment, quoted whole: `"KEY=value"`."""
    key, value = pair
    return '"' + _escape_common(f"{key}={value}") + '"'


def exec_command(groups: list[list[str]]) -> str:
    """The ExecStart= value, one flag per line (systemd joins lines ending in a backslash)."""
    words = [
        [exec_path(group[0]), *map(exec_arg, group[1:])] if i == 0 else [exec_arg(w) for w in group]
        for i, group in enumerate(groups)
    ]
    return " \\\n    ".join(" ".join(group) for group in words)


def text_value(value: str) -> str:
    """Free text in the unit (comments, Description=): one line, specifiers escaped."""
    shown = "".join(ch if ch.isprintable() and ch != "\\" else f"\\x{ord(ch):02x}" for ch in value)
    return shown.replace("%", "%%")


def path_value(value: str) -> str:
    """A path setting (WorkingDirectory=, EnvironmentFile=): only specifiers need escaping.

    Validation refuses control characters and a final backslash in these paths; refusing them
    here too keeps a unit from ever gaining a line it did not ask for.
    """
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value) or value.endswith("\\"):
        raise ValueError(f"path cannot be written into a unit file: {value!r}")
    return value.replace("%", "%%")


def _template_env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        autoescape=False,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=False,
    )
    env.filters.update(
        exec_command=exec_command,
        env_assignment=env_assignment,
        path_value=path_value,
        text_value=text_value,
    )
    return env


def refuse_secrets(profile: Profile) -> None:
    """SecretInUnit when a `[server]` or `[env]` value is a secret (sgdeploy.sglang.secrets): a
    unit file is world-readable, so no secret is ever written into one (named, never shown)."""
    spots = launch_secrets(profile.server, profile.env)
    if spots:
        where = "; ".join(f"{spot.dotted} {spot.what}" for spot in spots)
        raise SecretInUnit(f"{where}: a unit file is readable by every user of the host, so "
                           "sgdeploy writes no secret into it (SGD021 says where the value goes)")


def render_unit(loaded: LoadedProfile, catalog: Catalog, host: str | None) -> RenderedUnit:
    profile = loaded.model
    if profile is None:
        raise ValueError(f"{loaded.path} is not a valid profile")
    refuse_secrets(profile)
    secrets = unit_parts(profile, catalog, launch_words(profile, catalog))
    groups = secrets.groups
    argv = [word for group in groups for word in group]
    # ExecStart= may run SGLang's launch through the launcher that keeps secrets out of its log
    exec_groups = [[groups[0][0], *secrets.launcher, *groups[0][1:]], *groups[1:]]
    environment = unit_environment(profile, catalog.version)
    sandbox = unit_sandbox(profile)
    daemon = None
    # sgdeploy places the daemons' sockets: its templates win
    if owns_daemon(profile, catalog.version):
        owned = dict(template_environment(profile.deploy.unit, catalog.version))
        environment = [(k, v) for k, v in environment if k not in owned] + list(owned.items())
        daemon = _daemon_unit(profile, catalog, host, environment, sandbox)
    # after the daemon's: its text, and the weights kept, do not move with it
    inductor = [] if sandbox else inductor_cache_environment(profile.deploy.unit, profile.env)
    environment = [*environment, *inductor]
    text = _template_env().get_template(TEMPLATE_NAME).render(
        unit=profile.deploy.unit,
        sgdeploy_version=__version__,
        profile_name=loaded.name,
        profile_sha256=loaded.sha256,
        host=host or profile.deploy.host,
        sglang_version=catalog.version,
        user=profile.deploy.run_as,
        sandbox=sandbox,
        working_directory=profile.deploy.working_directory,
        environment=environment,
        env_file=profile.deploy.env_file,
        secrets_note=secrets.note,
        secret_env_files=secrets.env_files,
        runtime_directory=secrets.runtime_directory,
        exec_start_pre=secrets.exec_start_pre,
        exec_groups=exec_groups,
        timeout_start_s=profile.deploy.ready_timeout_s,
        timeout_stop_s=STOP_TIMEOUT_S,
        quiet_stop=[k for k, _ in stop_environment(catalog.version, profile.env)],
        weights_unit=daemon.unit if daemon else None,
        shared_tmp=bool(daemon) and shares_private_tmp(catalog.version),
        # CacheDirectory= names the folder relative to /var/cache
        compile_cache=posixpath.dirname(inductor[0][1]).removeprefix("/var/cache/")
        if inductor else None,
    )
    return RenderedUnit(profile.deploy.unit, text, tuple(argv), tuple(environment), daemon)


def _daemon_unit(profile: Profile, catalog: Catalog, host: str | None,
                 environment: list[tuple[str, str]], sandbox: UnitSandbox | None) -> DaemonUnit:
    """The weight-cache daemon's unit (sgdeploy.deploy.weight_daemon), for a client launch."""
    unit = profile.deploy.unit
    name = daemon_unit_name(unit)
    weights = profile.model_copy(
        update={"server": daemon_server_settings(profile, catalog.version)}
    )
    groups = launch_words(weights, catalog)
    groups[0] = [profile.deploy.python, "-m", DAEMON_MODULE]
    groups.append(["--timeout", str(profile.deploy.ready_timeout_s)])
    text = _template_env().get_template(DAEMON_TEMPLATE_NAME).render(
        unit=name,
        server_unit=unit,
        host=host or profile.deploy.host,
        sglang_version=catalog.version,
        user=profile.deploy.run_as,
        sandbox=sandbox,
        working_directory=profile.deploy.working_directory,
        environment=daemon_environment(environment),
        env_file=profile.deploy.env_file,
        runtime_directory=runtime_folder(unit).removeprefix("/run/"),
        exec_groups=groups,
        ready_wait=ready_wait_command(unit, ranks_on_node(profile), catalog.version),
        shared_tmp=shares_private_tmp(catalog.version),
        timeout_start_s=profile.deploy.ready_timeout_s,
        timeout_stop_s=STOP_TIMEOUT_S,
    )
    return DaemonUnit(name, text)
