"""Secret SGLang arguments (`--api-key`, `--admin-api-key`, ...) by reference to a file on the host.

SGLang takes these values from its command line only: no release reads an `API_KEY` or
`SGLANG_API_KEY` environment variable. A unit file is world-readable and a profile lives in a
repository, so the value must reach SGLang some other way. A profile's `[secrets]` names a file
on the host and the arguments it provides; the value never passes through sgdeploy's machine.

- SGLang with `--config` (0.5.3 and later): the unit passes `--config FILE` and SGLang merges
  the YAML file's `flag: value` entries into its arguments in-process (`ConfigArgumentMerger`:
  every key becomes `--KEY VALUE` ahead of the command line, so the file's keys are written as
  the flag is spelled, `api-key`). SGLang accepts one `--config`: when the profile has its own,
  an `ExecStartPre=` merges both into one root-only file in the unit's runtime directory.
- Older releases (0.5.1, 0.5.2): `EnvironmentFile=FILE` (`api_key=VALUE` lines) and
  `--api-key ${api_key}` in `ExecStart=`; systemd expands it, so the value is in the process
  list (documented in docs/apply.md, "Secrets").

On the host sgdeploy checks the file as root without reading a value out (`check_command`),
and reads the API key only at the moment it sends an authenticated request (`read_api_key`),
over the connection it already has; the key lives in memory for that request and nowhere else.
SGLang itself logs its arguments at startup (`server_args=...`, api_key included); `redact`
takes them out of every log line sgdeploy shows or records.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from sgdeploy.core.diagnostics import Diagnostic, Severity
from sgdeploy.profile.model import LoadedProfile, profile_from_text
from sgdeploy.sglang.catalog import Catalog, load_catalog
from sgdeploy.sglang.secrets import ENV_LOOKALIKE, SECRET_FIELDS, file_key, mechanism

if TYPE_CHECKING:
    from sgdeploy.deploy.plan import Deployment
    from sgdeploy.host.remote import RemoteHost
    from sgdeploy.profile.model import LoadedProfile, Profile

MERGED_NAME = "config.yaml"
RULE_HOST = "SGD709"


class EnvReference(str):
    """An ExecStart= word that systemd replaces with an environment variable's value: `${NAME}`."""


def runtime_directory(unit: str) -> str:
    return f"sgdeploy-{unit}"


def merged_path(unit: str) -> str:
    return f"/run/{runtime_directory(unit)}/{MERGED_NAME}"


# Run by the unit's ExecStartPre= when the profile has its own --config: SGLang accepts one.
# The profile's file first, the secrets last (they win); the result is readable by its owner only.
MERGE_SCRIPT = (
    "import os,sys,yaml;d={};[d.update(yaml.safe_load(open(p)) or {}) for p in sys.argv[1:-1]];"
    "f=os.fdopen(os.open(sys.argv[-1],os.O_WRONLY|os.O_CREAT|os.O_TRUNC,0o600),'w');"
    "yaml.safe_dump(d,f,sort_keys=False);f.close()"
)


@dataclass(frozen=True)
class SecretUnit:
    """What `[secrets]` adds to a unit: the launch words, files and settings it needs."""

    groups: list[list[str]]
    note: str = ""  # a comment in the unit: where the secrets come from
    launcher: tuple[str, ...] = ()  # words between the interpreter and `-m sglang.launch_server`
    env_files: tuple[str, ...] = ()
    exec_start_pre: list[list[str]] | None = None
    runtime_directory: str | None = None


def unit_parts(profile: Profile, catalog: Catalog, groups: list[list[str]]) -> SecretUnit:
    """The launch `groups` (from render.launch_words) with the profile's secrets wired in."""
    secrets = profile.secrets
    if secrets is None:
        return SecretUnit(groups)
    launcher = ("-c", redacting_launcher(secrets.keys))
    journal = "; -c keeps their values out of SGLang's log lines (the journal)"
    if mechanism(catalog) == "environment":
        words = [
            [flag.option, EnvReference(key)] for key in secrets.keys if (flag := catalog.get(key))
        ]
        return SecretUnit([*groups, *words], env_files=(secrets.file,), launcher=launcher,
                          note=f"[secrets] {', '.join(secrets.keys)}: systemd expands them from "
                          f"{secrets.file} (SGLang {catalog.version} has no --config; the process "
                          f"list shows them){journal}")
    own = profile.server.get("config")
    if not isinstance(own, str) or not own:
        return SecretUnit([*groups, ["--config", secrets.file]], launcher=launcher,
                          note=f"[secrets] {', '.join(secrets.keys)}: SGLang reads them from "
                          f"{secrets.file} (--config){journal}")
    unit = profile.deploy.unit
    rest = [group for group in groups if group[0] != "--config"]
    merge = [[profile.deploy.python, "-c", MERGE_SCRIPT], [own, secrets.file, merged_path(unit)]]
    return SecretUnit(
        [*rest, ["--config", merged_path(unit)]],
        exec_start_pre=merge,
        launcher=launcher,
        runtime_directory=runtime_directory(unit),
        note=f"[secrets] {', '.join(secrets.keys)}: ExecStartPre= merges {own} and "
        f"{secrets.file} into {merged_path(unit)} (SGLang takes one --config), "
        f"readable by the server's user only{journal}",
    )


def check_argv(profile: Profile, flags: list[str]) -> list[str]:
    """SGLang's flags for its own check before the stop. The merged --config exists only once the
    unit's ExecStartPre= ran, so the check reads the profile's own file there: the secrets add
    only their values, which SGLang's parser takes as they are."""
    own, merged = profile.server.get("config"), merged_path(profile.deploy.unit)
    if profile.secrets is None or not isinstance(own, str) or merged not in flags:
        return flags
    return [own if word == merged else word for word in flags]


# --------------------------------------------------------------------------- the journal
# SGLang logs its arguments at startup with the secrets in them (engine.py, every release:
# `logger.info(f"{server_args=}")` to 0.5.19, `server_args={...resolved_dict()}` from 0.5.20,
# watermark keys only redacted from 0.5.22). The unit therefore runs `python -c LAUNCHER -m
# sglang.launch_server FLAGS`: LAUNCHER wraps the logging record factory of SGLang's main
# process so that a message naming a secret field with a value gets `'<redacted>'` instead,
# then runs sglang.launch_server as `-m` does (runpy's own entry for -m: the same sys.argv,
# sys.path[0], __main__ and __spec__, so spawned schedulers start the same way). SGLang's
# handlers, formats and per-process prefixes stay its own, and only the message text of such
# a record changes; the value SGLang holds does not. Rejected: SGLANG_LOGGING_CONFIG_PATH
# (configure_logger then skips its own setup: no " TP0" prefixes, log level or library
# levels) and systemd's LogFilterPatterns= (drops whole lines, systemd 253 and later only).
# A dumped value: a str's repr in either quote, or a number. As few backslashes as the unit allows.
_SECRET_VALUE = r"""('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[0-9][0-9A-Za-z_.+-]*)"""
_LAUNCHER = (
    "import logging,os,re,sys;logging.setLogRecordFactory(lambda "
    "*a,f=logging.getLogRecordFactory(),s=re.compile(r'''{pattern}''').sub,**k:(lambda r:(r.args "
    "or not isinstance(r.msg,str) or setattr(r,'msg',s(lambda "
    "m:m[1]+\"'<redacted>'\",r.msg)),r)[1])(f(*a,**k)));del "
    "sys.argv[:2];getattr(sys.flags,'safe_path',0) or sys.path.__setitem__(0,os.getcwd());del "
    "logging,os,re,sys;__import__('runpy')._run_module_as_main('sglang.launch_server')"
)


def secret_value_pattern(names: tuple[str, ...] | list[str]) -> str:
    """A field's value as SGLang's argument dumps print it: `name='v'` (ServerArgs) or `'name': 'v'`
    (a dict)."""
    fields = "(?:" + "|".join(map(re.escape, sorted(set(names) | set(SECRET_FIELDS)))) + ")"
    return rf"""((?<![0-9A-Za-z_]){fields}=|['"]{fields}['"]: ?){_SECRET_VALUE}"""


def redacting_launcher(names: tuple[str, ...] | list[str]) -> str:
    """The `-c` program that runs sglang.launch_server with the values of `names` kept out of its
    log."""
    return _LAUNCHER.format(pattern=secret_value_pattern(names))


# --------------------------------------------------------------------------- the host check
# Runs as root under the profile's interpreter (PyYAML comes with every SGLang environment, and
# SGLang reads --config with it). It prints what it found, never a value: states and names only,
# and a YAML error by its line alone (PyYAML's message quotes the file).
_CHECK_SCRIPT = r'''
import json, os, pwd, stat, sys
spec = json.loads(sys.argv[1])

def inspect(path):
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return {"state": "missing"}
    except OSError as exc:
        return {"state": "unreadable", "why": exc.strerror}
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = str(st.st_uid)
    return {"state": "file" if stat.S_ISREG(st.st_mode) else "not_a_file", "owner": owner,
            "mode": "%04o" % stat.S_IMODE(st.st_mode), "size": st.st_size}

def yaml_entries(path, found):
    try:
        import yaml
    except ImportError:
        found["error"] = ("PyYAML is not installed for this interpreter "
                          "(SGLang reads --config with it)")
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        found["error"] = "is not valid YAML" + (" (line %d)" % (mark.line + 1) if mark else "")
        return None
    except (yaml.YAMLError, OSError, UnicodeDecodeError) as exc:
        found["error"] = "cannot be read as YAML (%s)" % type(exc).__name__
        return None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        found["error"] = "is not a YAML mapping of flag: value"
        return None
    return {str(k): v for k, v in data.items()}

def env_entries(path):
    entries = {}
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            line = line.strip()
            name, sep, value = line.partition("=")
            if not line or line[0] in "#;" or not sep:
                continue
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            entries[name.strip()] = value

    return entries

def verdict(value):
    if value is None or isinstance(value, bool) or isinstance(value, (list, dict)):
        return "empty" if value is None else "not_a_value"
    return "ok" if str(value).strip() else "empty"

found = inspect(spec["file"])
if found["state"] == "file":
    try:
        entries = (yaml_entries(spec["file"], found) if spec["format"] == "yaml"
                   else env_entries(spec["file"]))
    except OSError as exc:
        found["error"], entries = "cannot be read (%s)" % exc.strerror, None
    if entries is not None:
        keys, known = {}, set()
        for name, spellings in spec["keys"].items():
            known.update(spellings)
            hit = next((s for s in spellings if s in entries), None)
            if hit is not None:
                keys[name] = verdict(entries[hit])
            elif spec["format"] == "yaml" and name in entries:
                keys[name] = "underscore"
                known.add(name)
            else:
                keys[name] = "missing"
        found["keys"] = keys
        found["others"] = sorted(k for k in entries if k not in known)
if spec.get("also"):
    also = inspect(spec["also"])
    if also["state"] == "file":
        yaml_entries(spec["also"], also)
    found["also"] = also
if spec.get("env_file"):
    try:
        found["env_file_names"] = sorted(env_entries(spec["env_file"]))
    except OSError:
        found["env_file_names"] = []
print(json.dumps(found))
'''


@dataclass(frozen=True)
class SecretCheck:
    """What the host check found (`check_command`, `parse_check`): states and names, no value."""

    raw: dict[str, Any] = field(default_factory=dict)
    failed: str | None = None  # the check itself did not run

    @property
    def state(self) -> str:
        return str(self.raw.get("state", "unknown"))


def _spec(profile: Profile, catalog: Catalog) -> dict[str, Any]:
    secrets = profile.secrets
    spec: dict[str, Any] = {"env_file": profile.deploy.env_file}
    if secrets is None:
        return spec
    kind = mechanism(catalog)
    spellings = {}
    for key in secrets.keys:
        flag = catalog.get(key)
        if flag is not None:
            spellings[key] = (
                [o[2:] for o in flag.options if o.startswith("--") and not o.startswith("--no-")]
                if kind == "config"
                else [key]
            )
    own = profile.server.get("config")
    spec.update(file=secrets.file, format="yaml" if kind == "config" else "env", keys=spellings,
                also=own if kind == "config" and isinstance(own, str) else None)
    return spec


def needs_check(profile: Profile) -> bool:
    return profile.secrets is not None or profile.deploy.env_file is not None


def check_command(profile: Profile, catalog: Catalog) -> str:
    """The host command that checks the profile's secrets file (and names in deploy.env_file)."""
    spec = json.dumps(_spec(profile, catalog))
    return (f"{shlex.quote(profile.deploy.python)} -c {shlex.quote(_CHECK_SCRIPT)} "
            f"{shlex.quote(spec)} 2>&1")


def parse_check(output: str, exit_code: int) -> SecretCheck:
    lines = output.strip().splitlines()
    try:
        raw = json.loads(lines[-1]) if lines else None
    except ValueError:
        raw = None
    if exit_code != 0 or not isinstance(raw, dict):
        return SecretCheck(failed=f"the check did not run (exit {exit_code})")
    return SecretCheck(raw)


def check_diagnostics(
    loaded: LoadedProfile, check: SecretCheck, host: str, catalog: Catalog
) -> list[Diagnostic]:
    """Refusals (and notes) for the host's secrets file; a message names files and keys, never a
    value."""
    profile = loaded.model
    assert profile is not None
    found: list[Diagnostic] = []

    def add(message: str, dotted: str, hint: str, severity: Severity = Severity.ERROR) -> None:
        found.append(
            loaded.diagnostic(RULE_HOST, message, dotted=dotted, hint=hint, severity=severity)
        )

    found.extend(_env_file_notes(loaded, check, host))
    secrets = profile.secrets
    if secrets is None:
        return found
    path, raw = secrets.file, check.raw
    user = profile.deploy.run_as or "root"
    if check.failed:
        add(f"cannot check the secrets file {path} on {host}: {check.failed}", "secrets.file",
            "make deploy.python run on the host (the check runs under it)")
        return found
    if raw.get("state") != "file":
        what = {"missing": "does not exist", "not_a_file": "is not a regular file"}.get(
            check.state, f"cannot be read ({raw.get('why', check.state)})")
        add(
            f"the secrets file {path} {what} on {host}",
            "secrets.file",
            _create_hint(profile, catalog),
        )
        return found
    if raw.get("owner") != user:
        add(f"the secrets file {path} on {host} is owned by {raw.get('owner')}; the server runs as "
            f"{user}",
            "secrets.file", f"chown {user} {path} (only its owner may read it, and SGLang reads it "
                            f"as {user})")
    mode = int(str(raw.get("mode", "0")), 8)
    if mode & 0o077:
        add(f"the secrets file {path} on {host} has mode {raw.get('mode')}: others than its owner "
            "can read or change it", "secrets.file", f"chmod 600 {path}")
    if raw.get("error"):
        add(
            f"the secrets file {path} on {host} {raw['error']}",
            "secrets.file",
            _create_hint(profile, catalog),
        )
        return found
    keys: dict[str, Any] = raw["keys"] if isinstance(raw.get("keys"), dict) else {}
    for key in secrets.keys:
        found.extend(_key_note(loaded, host, path, key, str(keys.get(key, "missing")), catalog))
    others = [str(n) for n in raw.get("others", [])]
    if others and mechanism(catalog) == "config":
        add(f"the secrets file {path} on {host} also sets {', '.join(others)}, which SGLang "
            "applies too (it passes every key of a --config file on)", "secrets.keys",
            "list them in secrets.keys, or move them to [server]", Severity.WARNING)
    also = raw.get("also")
    if isinstance(also, dict) and (also.get("state") != "file" or also.get("error")):
        own = profile.server.get("config")
        add(f"the profile's --config file {own} on {host} "
            + (str(also["error"]) if also.get("error") else "does not exist"), "server.config",
            "create it (a YAML mapping of flag: value) or remove server.config")
    return found


def _key_note(loaded: LoadedProfile, host: str, path: str, key: str, state: str, catalog: Catalog
              ) -> list[Diagnostic]:
    if state == "ok":
        return []
    flag = catalog.get(key)
    spelled = file_key(flag) if flag and mechanism(catalog) == "config" else key
    what = {"missing": "does not define", "empty": "gives an empty value for",
            "not_a_value": "gives no single value (a list, table or true/false) for",
            "underscore": f"spells {key} with underscores (SGLang would pass --{key} and refuse "
                          "it) instead of"}
    hint = (
        f"write `{spelled}: VALUE` in it"
        if mechanism(catalog) == "config"
        else f"write `{key}=VALUE` in it"
    )
    return [loaded.diagnostic(RULE_HOST, f"the secrets file {path} on {host} "
                                         f"{what.get(state, state)} {spelled}",
                              dotted="secrets.keys", hint=hint)]


def _create_hint(profile: Profile, catalog: Catalog) -> str:
    secrets = profile.secrets
    assert secrets is not None
    user = profile.deploy.run_as or "root"
    if mechanism(catalog) == "config":
        lines = ", ".join(f"`{file_key(f)}: VALUE`" for k in secrets.keys if (f := catalog.get(k)))
        form = f"a YAML file with {lines}"
    else:
        form = "an environment file with " + ", ".join(f"`{k}=VALUE`" for k in secrets.keys)
    return f"create {secrets.file} as {form}, owned by {user}, mode 0600"


def default_file(unit: str, catalog: Catalog) -> str:
    """Where an imported profile's `[secrets]` points: YAML for --config, else an environment
    file."""
    return f"/etc/sglang/{unit}.secrets." + ("yaml" if mechanism(catalog) == "config" else "env")


def creation_steps(keys: list[str], catalog: Catalog, path: str, user: str, host: str) -> str:
    """How to create the secrets file on the host (names and placeholders only, never a value)."""
    if mechanism(catalog) == "config":
        lines = [f"`{file_key(flag)}: '<the {flag.option} "
                 "value>'`" for key in keys if (flag := catalog.get(key))]
        how = ("each value in single quotes, a ' inside it written twice; SGLang reads the file "
               "through --config")
    else:
        lines = [f"`{key}=<the {flag.option} value>`" for key in keys if (flag := catalog.get(key))]
        how = (f"SGLang {catalog.version} has no --config: systemd expands the values into the "
               "command line, where the process list shows them")
    return (f"create {path} on {host} as root, owned by {user} with mode 0600 (`install -D -m 600 "
            f"-o {user} /dev/null {path}`), with one line per key: {' and '.join(lines)} ({how})")


def _env_file_notes(loaded: LoadedProfile, check: SecretCheck, host: str) -> list[Diagnostic]:
    profile = loaded.model
    assert profile is not None
    names = [str(n) for n in check.raw.get("env_file_names", []) if ENV_LOOKALIKE.match(str(n))]
    return [loaded.diagnostic(
        RULE_HOST, f"deploy.env_file on {host} sets {name}, which SGLang does not read: the server "
        "runs without it (no API key is "
        "enforced)", dotted="deploy.env_file", severity=Severity.WARNING,
        hint=f"list {_field_of(name)} in [secrets] keys with its value in the secrets file, and "
        f"remove {name}")
        for name in names]


def _field_of(env_name: str) -> str:
    match = ENV_LOOKALIKE.match(env_name)
    return match.group(1).lower() if match else env_name.lower()


# --------------------------------------------------------------------------- the key, at use
@dataclass(frozen=True)
class KeySource:
    """Where a deployment's API key is on the host (no value): read it with `read_api_key`."""

    unit: str
    python: str
    file: str
    format: Literal["yaml", "env"]
    spellings: tuple[str, ...]


def key_source(profile_text: str, unit: str, sglang_version: str) -> KeySource | None:
    """The API key's place for a deployment (its recorded profile); None when it has none."""
    try:
        data = tomllib.loads(profile_text) if profile_text else {}
        catalog = load_catalog(sglang_version)
    except (tomllib.TOMLDecodeError, ValueError, LookupError):
        return None
    secrets, deploy = data.get("secrets"), data.get("deploy")
    if (
        not isinstance(secrets, dict)
        or not isinstance(deploy, dict)
        or "api_key" not in (secrets.get("keys") or [])
    ):
        return None
    flag, python, path = catalog.get("api_key"), deploy.get("python"), secrets.get("file")
    if flag is None or not isinstance(python, str) or not isinstance(path, str):
        return None
    if mechanism(catalog) == "config":
        spellings = tuple(o[2:] for o in flag.options if o.startswith("--"))
        return KeySource(unit, python, path, "yaml", spellings)
    return KeySource(unit, python, path, "env", ("api_key",))


# Prints the key exactly as SGLang holds it: str() of the YAML value (SGLang passes str(value)
# to argparse), or the variable systemd put into the running server's environment.
_READ_SCRIPT = r'''
import json, subprocess, sys
spec = json.loads(sys.argv[1])
value = None
if spec["format"] == "yaml":
    import yaml
    with open(spec["file"], encoding="utf-8") as handle:
        data = yaml.safe_load(handle) or {}
    value = next((data[s] for s in spec["spellings"] if s in data), None)
else:
    pid = subprocess.run(["systemctl", "show", "-p", "MainPID", "--value",
                          spec["unit"] + ".service"],
                         capture_output=True, text=True).stdout.strip()
    with open("/proc/%s/environ" % pid, "rb") as handle:
        for entry in handle.read().split(b"\0"):
            name, _, raw = entry.partition(b"=")
            if name.decode("utf-8", "replace") in spec["spellings"]:
                value = raw.decode("utf-8", "replace")
if value is None or isinstance(value, (bool, list, dict)):
    sys.exit(3)
sys.stdout.write(str(value))
'''


def read_api_key(remote: RemoteHost, source: KeySource) -> str | None:
    """The API key, read on the host as root at the moment of use; None when it cannot be read."""
    spec = json.dumps(
        {
            "file": source.file,
            "format": source.format,
            "spellings": list(source.spellings),
            "unit": source.unit,
        }
    )
    result = remote.run(f"{shlex.quote(source.python)} -c {shlex.quote(_READ_SCRIPT)} "
                        f"{shlex.quote(spec)}",
                        timeout=30)
    return result.stdout if result.ok and result.stdout else None


def api_key_for(remote: RemoteHost, deployment: Deployment) -> str | None:
    """A deployment's API key, read from the host now (None: it has none, or it cannot be read)."""
    source = key_source(deployment.profile_text, deployment.unit, deployment.sglang_version)
    return read_api_key(remote, source) if source else None


def bearer_headers(
    remote: RemoteHost, profile_text: str, unit: str, sglang_version: str
) -> dict[str, str]:
    """`Authorization: Bearer <key>` for a protected deployment, else nothing. Never stored."""
    source = key_source(profile_text, unit, sglang_version)
    key = read_api_key(remote, source) if source else None
    return {"Authorization": f"Bearer {key}"} if key else {}


def without_secrets(info: dict[str, Any]) -> dict[str, Any]:
    """`/server_info` without the secret arguments SGLang reports among the others."""
    return {k: v for k, v in info.items() if k not in SECRET_FIELDS}


# --------------------------------------------------------------------------- preflight
def host_secret_diagnostics(
    remote: RemoteHost, loaded: LoadedProfile, host: str, version: str | None
) -> list[Diagnostic]:
    """Check the profile's secrets file (and deploy.env_file's names) on the host, before anything
    stops."""
    profile = loaded.model
    if profile is None or version is None or not needs_check(profile):
        return []
    try:
        catalog = load_catalog(version)
    except (LookupError, ValueError):
        return []
    result = remote.run(check_command(profile, catalog), timeout=60)
    return check_diagnostics(loaded, parse_check(result.stdout, result.exit_code), host, catalog)


def recorded_secret_diagnostics(
    remote: RemoteHost, deployment: Deployment, host: str
) -> list[Diagnostic]:
    """The host check of a recorded deployment's `[secrets]` (a rollback), before anything stops."""
    if not deployment.profile_text:
        return []
    doc = profile_from_text(f"{deployment.rollback_of or deployment.id}/profile.toml",
                            deployment.profile_text)
    if doc.model is None or doc.model.secrets is None:
        return []
    return host_secret_diagnostics(remote, doc, host, deployment.sglang_version)
