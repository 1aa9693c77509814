"""The argument round trip under real systemd: what a profile says is what the process gets.

One test host (systemd-nspawn, real systemd 252) serves the whole module. `deploy.python` points
at a small script on the host that prints its argv, working directory and environment as one JSON
line; the rendered unit is installed, started with `systemctl start --wait`, and the line is read
back from the unit's journal. argv must equal `sgdeploy.deploy.render.launch_argv` and the environment
must equal `[env]` (plus PYTHONUNBUFFERED and CUDA_VISIBLE_DEVICES), byte for byte.
"""

from __future__ import annotations

import base64
import io
import itertools
import json
import re
import shlex
import tarfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sgdeploy.deploy.hardening import unit_sandbox
from sgdeploy.deploy.render import RenderedUnit, launch_argv, render_unit, unit_environment
from sgdeploy.profile.model import load_profile
from sgdeploy.profile.validate import InventoryContext, select_host, validate_loaded
from sgdeploy.sglang.catalog import load_catalog
from sgdeploy.sglang.sandbox import inductor_cache_environment
from tests.hosts import HostSet, HostSpec, booted_or_skipped
from tests.test_render import INVENTORY, profile_targets, profile_toml

pytestmark = pytest.mark.hosts

HOST = "ct129"
DUMPER = "/usr/local/bin/argv-dump"
# The same script under paths that need quoting, escaping of '%', '$' kept as is, and UTF-8
# (systemd refuses quotes, backslashes and control characters in an executable's name).
ODD_DUMPER = "/usr/local/lib/rt dir/argv dump %n ü;&& `x`"
DOLLAR_DUMPER = "/usr/local/lib/rt dir/argv dump $X ${Y} $$"
ODD_WORKDIR = "/srv/rt work/$HOME ${X} %n ü;&& `x`"
DUMPER_SCRIPT = """#!/usr/bin/python3
import json, os, sys
print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "env": dict(os.environ)},
                 ensure_ascii=True, sort_keys=True), flush=True)
"""
# Variables systemd itself gives every service; anything else must come from the unit.
SYSTEMD_ENV = {
    "PATH",
    "LANG",
    "INVOCATION_ID",
    "JOURNAL_STREAM",
    "SYSTEMD_EXEC_PID",
    "HOME",
    "LOGNAME",
    "USER",
    "SHELL",
    "MANAGERPID",
    "CACHE_DIRECTORY",  # CacheDirectory= of a strict unit
}


# --------------------------------------------------------------------------- the host
@dataclass
class Dump:
    """What the dumper saw: its argv (argv[0] included), working directory and environment."""

    argv: list[str]
    cwd: str
    env: dict[str, str]


class RoundTrip:
    """Installs rendered units on one test host, runs them, reads what the process received."""

    def __init__(self, hs: HostSet, host: str) -> None:
        self.hs, self.host = hs, host
        self._names = itertools.count(1)

    def unit_name(self) -> str:
        return f"rt-{next(self._names)}"

    def run(self, units: list[RenderedUnit]) -> dict[str, Dump]:
        """Install all units at once, start them together, read each one's dump from the journal.

        `systemctl start` returns once each process has been executed (Type=exec); the dump line
        follows within milliseconds. A unit that never prints (it failed to load or to start)
        shows up with its status and journal in the assertion message.
        """
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for unit in units:
                data = unit.text.encode("utf-8")
                info = tarfile.TarInfo(unit.file_name)
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
        names = " ".join(shlex.quote(u.file_name) for u in units)
        script = f"""
set -u
base64 -d | tar -xf - -C /etc/systemd/system
systemctl daemon-reload
timeout 30 systemctl start {names}
echo "start-rc=$?"
for u in {names}; do
  line= left=100
  while [ "$left" -gt 0 ]; do
    line=$(journalctl -u "$u" -o cat --no-pager | grep '^{{"argv"' | tail -n 1)
    [ -n "$line" ] && break
    # once the unit is over (or never loaded), its line has at most half a second to arrive
    case "$(systemctl show -P LoadState "$u") $(systemctl show -P SubState "$u")" in
      "loaded dead"|"loaded failed"|"loaded auto-restart"|bad-setting*|not-found*|error*)
        [ "$left" -gt 10 ] && left=10;;
    esac
    left=$((left - 1))
    sleep 0.05
  done
  if [ -n "$line" ]; then printf 'DUMP %s %s\\n' "$u" "$line"
  else printf 'NODUMP %s\\n' "$u"; systemctl status --no-pager "$u" 2>&1 | sed 's/^/  /'
       journalctl -u "$u" -o cat --no-pager | sed 's/^/  /'; fi
done
systemctl stop {names} >/dev/null 2>&1
cd /etc/systemd/system && rm -f {names}
systemctl reset-failed >/dev/null 2>&1
true
"""
        done = self.hs.ssh(
            self.host, script, input=base64.b64encode(buffer.getvalue()).decode(), timeout=120
        )
        dumps: dict[str, Dump] = {}
        for line in done.stdout.splitlines():
            if line.startswith("DUMP "):
                _, name, payload = line.split(" ", 2)
                data = json.loads(payload)
                dumps[name.removesuffix(".service")] = Dump(data["argv"], data["cwd"], data["env"])
        missing = [u.unit for u in units if u.unit not in dumps]
        assert not missing, f"no output from {missing}:\n{done.stdout}\n{done.stderr}"
        return dumps


@pytest.fixture(scope="module")
def roundtrip() -> Iterator[RoundTrip]:
    with booted_or_skipped([HostSpec.like(HOST)]) as hs:
        odd_dir = ODD_DUMPER.rsplit("/", 1)[0]
        hs.ssh(
            HOST,
            f"""set -e
cat > {DUMPER} && chmod 755 {DUMPER}
mkdir -p {shlex.quote(odd_dir)} {shlex.quote(ODD_WORKDIR)}
ln -s {DUMPER} {shlex.quote(ODD_DUMPER)}
ln -s {DUMPER} {shlex.quote(DOLLAR_DUMPER)}
id -u sglang >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin sglang
# one dump line can be long (long values, \\uXXXX escapes): keep it one journal entry
mkdir -p /etc/systemd/journald.conf.d
printf '[Journal]\\nLineMax=4M\\nRateLimitBurst=0\\n' > /etc/systemd/journald.conf.d/rt.conf
systemctl restart systemd-journald
""",
            input=DUMPER_SCRIPT,
        )
        yield RoundTrip(hs, HOST)


# --------------------------------------------------------------------------- rendering
CATALOG_VERSION = "0.5.11"  # ct129 of inventory.toml


def render_valid(
    folder: Path, text: str, name: str, host: str | None = HOST
) -> tuple[RenderedUnit, Any]:
    """Render a profile that validation must accept; returns (unit, profile model)."""
    path = folder / f"{name}.toml"
    path.write_text(text, encoding="utf-8")
    loaded = load_profile(path)
    inventory = InventoryContext.load(INVENTORY)
    result = validate_loaded(loaded, inventory)
    errors = [f"{d.rule} {d.field}: {d.message}" for d in result.diagnostics if d.is_error]
    assert result.ok and loaded.model is not None, errors
    target = select_host(loaded.model.deploy.host, inventory, host)
    assert target is not None and target.sglang_version
    return render_unit(loaded, load_catalog(target.sglang_version), target.name), loaded.model


def check(unit: RenderedUnit, model: Any, dump: Dump, catalog_version: str) -> None:
    argv = launch_argv(model, load_catalog(catalog_version))
    assert dump.argv == argv
    assert list(unit.argv) == argv
    expected_env = dict(unit_environment(model, catalog_version))
    sandbox = unit_sandbox(model)  # a strict unit also points every cache at its cache folder
    expected_env.update({k: v for k, v in (sandbox.environment if sandbox else ()) if k not in SYSTEMD_ENV})
    if sandbox is None:  # any other, TorchInductor's
        expected_env.update(inductor_cache_environment(model.deploy.unit, model.env))
    # the unit sets PATH itself (the interpreter's bin directory first): the process sees exactly it
    assert dump.env.get("PATH") == expected_env.pop("PATH")
    got_env = {k: v for k, v in dump.env.items() if k not in SYSTEMD_ENV}
    assert got_env == expected_env
    assert dump.cwd == (model.deploy.working_directory or "/")


# --------------------------------------------------------------------------- strategies
def _noncharacter(ch: str) -> bool:
    code = ord(ch)
    return 0xFDD0 <= code <= 0xFDEF or (code & 0xFFFE) == 0xFFFE


# Pieces that mean something to systemd, a shell, TOML, JSON or a terminal.
TRICKY = [
    " ",
    "  ",
    '"',
    "'",
    "\\",
    "\\\\",
    '\\"',
    "$",
    "$$",
    "${X}",
    "$X",
    "$HOME",
    "$1",
    "%",
    "%n",
    "%%",
    "%i",
    "%%n",
    ";",
    " ; ",
    "\\;",
    "&&",
    "||",
    "|",
    "&",
    "`id`",
    "$(id)",
    "#",
    "=",
    "\t",
    "*",
    "?",
    "~",
    "<",
    ">",
    "{",
    "}",
    "[",
    "]",
    "é",
    "ü",
    "✓",
    "😀",
    "\u2028",
    "\u0085",
    "\u00a0",
    "\ufeff",
    "\x01",
    "\x1b[31m",
    "\x7f",
    "\\x41",
    "\\n",
    "\\u00e9",
    "-",
    "--",
    "--port",
    "=x",
    "null",
    "true",
]
REFUSED = "\n\r\x00"  # refused by validation (SGD020); see tests/test_render.py
_chars = st.characters(blacklist_categories=("Cs",), blacklist_characters=REFUSED).filter(
    lambda c: not _noncharacter(c)
)
_piece = st.one_of(st.sampled_from(TRICKY), st.text(_chars, max_size=6))
short_text = st.lists(_piece, max_size=10).map("".join)
long_text = st.tuples(
    st.lists(_piece, min_size=1, max_size=6).map("".join), st.integers(50, 400)
).map(lambda t: (t[0] * t[1])[:4000])
text = st.one_of(short_text, short_text, short_text, long_text)

STRING_FLAGS = [
    "tokenizer_path",
    "chat_template",
    "completion_template",
    "served_model_name",
    "revision",
    "download_dir",
    "weight_version",
    "file_storage_path",
]
LIST_FLAGS = {
    "log_requests_target": 1,
    "uvicorn_access_log_exclude_prefixes": 0,
    "tokenizer_metrics_allowed_custom_labels": 1,  # with its header flag (SGLang requires it)
    "custom_weight_loader": 0,
}
JSON_FLAGS = ["preferred_sampling_params", "extra_metric_labels", "forward_hooks"]
SWITCHES = ["trust_remote_code", "lora_strict_loading", "enable_metrics"]

json_scalar = st.one_of(
    short_text,
    st.integers(-(2**53), 2**53),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
)
json_table = st.dictionaries(
    short_text, st.one_of(json_scalar, st.lists(json_scalar, max_size=3)), max_size=4
)
env_name = st.from_regex(r"RT_[A-Z0-9_]{0,12}", fullmatch=True).filter(
    lambda n: not re.search(r"TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY", n)
)
env_value = st.one_of(text, text, st.booleans(), st.integers(), st.floats(allow_nan=False))
gpus = st.one_of(
    st.none(),
    st.lists(st.integers(0, 1), min_size=1, max_size=2, unique=True),
    st.lists(
        st.from_regex(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}", fullmatch=True),
        min_size=1,
        max_size=2,
        unique=True,
    ),
)


@st.composite
def server_values(draw: st.DrawFn) -> dict[str, Any]:
    server: dict[str, Any] = {"model_path": draw(text.filter(str.strip))}  # SGD016: not blank
    names = draw(
        st.lists(
            st.sampled_from(STRING_FLAGS + list(LIST_FLAGS) + JSON_FLAGS + SWITCHES + ["port"]),
            unique=True,
            max_size=8,
        )
    )
    for name in names:
        if name in STRING_FLAGS:
            value = draw(text)
            server[name] = (
                value.replace(":", "") if name == "served_model_name" else value
            )  # SGD503
        elif name in LIST_FLAGS:
            server[name] = draw(st.lists(text, min_size=LIST_FLAGS[name], max_size=5))
            if name == "tokenizer_metrics_allowed_custom_labels":
                server["tokenizer_metrics_custom_labels_header"] = draw(text.filter(bool))
        elif name == "forward_hooks":
            server[name] = draw(st.lists(json_table, max_size=3))
        elif name in JSON_FLAGS:
            table = draw(json_table)
            as_string = draw(st.booleans())
            server[name] = (
                json.dumps(table, ensure_ascii=draw(st.booleans())) if as_string else table
            )
        elif name in SWITCHES:
            server[name] = draw(st.booleans())
        else:
            server[name] = draw(st.integers(1, 55535))  # SGLang 0.5.11 refuses port + 10000 > 65535
    return server


@st.composite
def profiles(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    deploy: dict[str, Any] = {
        "host": HOST,
        "python": draw(st.sampled_from([DUMPER, ODD_DUMPER, DOLLAR_DUMPER])),
    }
    workdir = draw(st.sampled_from([None, "/tmp", ODD_WORKDIR]))
    if workdir:
        deploy["working_directory"] = workdir
    chosen_gpus = draw(gpus)
    if chosen_gpus:
        deploy["gpus"] = chosen_gpus
    env = draw(st.dictionaries(env_name, env_value, max_size=5))
    return deploy, draw(server_values()), env


# --------------------------------------------------------------------------- tests
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(batch=st.lists(profiles(), min_size=1, max_size=4))
def test_argument_round_trip(
    roundtrip: RoundTrip,
    tmp_path_factory: pytest.TempPathFactory,
    batch: list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]],
) -> None:
    folder = tmp_path_factory.mktemp("rt")
    rendered = []
    for deploy, server, env in batch:
        name = roundtrip.unit_name()
        unit, model = render_valid(
            folder, profile_toml({**deploy, "unit": name}, server, env), name
        )
        rendered.append((unit, model))
    dumps = roundtrip.run([unit for unit, _ in rendered])
    for unit, model in rendered:
        check(unit, model, dumps[unit.unit], CATALOG_VERSION)


@pytest.mark.parametrize(
    ("profile", "host"), profile_targets(), ids=lambda v: v.stem if isinstance(v, Path) else v
)
def test_example_profile_round_trip(
    roundtrip: RoundTrip, tmp_path: Path, profile: Path, host: str
) -> None:
    data = tomllib.loads(profile.read_text(encoding="utf-8"))
    name = roundtrip.unit_name()
    deploy = {**data["deploy"], "python": DUMPER, "unit": name}
    unit, model = render_valid(
        tmp_path, profile_toml(deploy, data.get("server", {}), data.get("env")), name, host
    )
    dumps = roundtrip.run([unit])
    version = InventoryContext.load(INVENTORY).inventory.hosts[host].sglang_version  # type: ignore[union-attr]
    check(unit, model, dumps[name], version)
    assert dumps[name].argv[1:3] == ["-m", "sglang.launch_server"]


def test_env_file_reaches_the_process_and_not_the_unit(
    roundtrip: RoundTrip, tmp_path: Path
) -> None:
    secret = "hf_roundtrip_0123456789"
    roundtrip.hs.ssh(
        HOST,
        "mkdir -p /etc/sglang && cat > /etc/sglang/rt.env && chmod 600 /etc/sglang/rt.env",
        input=f"HF_TOKEN={secret}\nRT_FROM_FILE='a b $c'\n",
    )
    name = roundtrip.unit_name()
    text = profile_toml(
        {"host": HOST, "unit": name, "python": DUMPER, "env_file": "/etc/sglang/rt.env"},
        {"model_path": "/root/models/Qwen3-8B"},
        {"RT_INLINE": "x"},
    )
    unit, model = render_valid(tmp_path, text, name)
    assert (
        secret not in unit.text and "EnvironmentFile=/etc/sglang/rt.env" in unit.text.splitlines()
    )
    dump = roundtrip.run([unit])[name]
    assert dump.env["HF_TOKEN"] == secret
    assert dump.env["RT_FROM_FILE"] == "a b $c"
    assert dump.env["RT_INLINE"] == "x"
    assert dump.argv == launch_argv(model, load_catalog(CATALOG_VERSION))


def test_noncharacter_is_refused_or_passed(roundtrip: RoundTrip, tmp_path: Path) -> None:
    """systemd drops a whole line that is not UTF-8 clean (noncharacters count): such a value is
    refused by validation, or else it must reach the process intact."""
    name = roundtrip.unit_name()
    text = profile_toml(
        {"host": HOST, "unit": name, "python": DUMPER},
        {"model_path": "/root/models/Qwen3-8B", "served_model_name": "a\ufffeb"},
    )
    path = tmp_path / f"{name}.toml"
    path.write_text(text, encoding="utf-8")
    loaded = load_profile(path)
    if not validate_loaded(loaded, InventoryContext.load(INVENTORY)).ok:
        return
    unit, model = render_valid(tmp_path, text, name)
    check(unit, model, roundtrip.run([unit])[name], CATALOG_VERSION)


def test_working_directory_with_trailing_backslash(roundtrip: RoundTrip, tmp_path: Path) -> None:
    """A final backslash would join the next line of the unit into WorkingDirectory=: refused by
    validation, or else the process runs there with its whole environment."""
    workdir = "/srv/rt-backslash\\"
    roundtrip.hs.ssh(HOST, f"mkdir -p {shlex.quote(workdir)}")
    name = roundtrip.unit_name()
    text = profile_toml(
        {"host": HOST, "unit": name, "python": DUMPER, "working_directory": workdir},
        {"model_path": "/root/models/Qwen3-8B"},
    )
    path = tmp_path / f"{name}.toml"
    path.write_text(text, encoding="utf-8")
    if not validate_loaded(load_profile(path), InventoryContext.load(INVENTORY)).ok:
        return
    unit, model = render_valid(tmp_path, text, name)
    check(unit, model, roundtrip.run([unit])[name], CATALOG_VERSION)


def test_dollar_in_python_path(roundtrip: RoundTrip, tmp_path: Path) -> None:
    """systemd expands no variables in the executable, only in its arguments."""
    name = roundtrip.unit_name()
    text = profile_toml(
        {"host": HOST, "unit": name, "python": DOLLAR_DUMPER},
        {"model_path": "/root/models/Qwen3-8B", "served_model_name": "$X"},
    )
    unit, model = render_valid(tmp_path, text, name)
    check(unit, model, roundtrip.run([unit])[name], CATALOG_VERSION)
