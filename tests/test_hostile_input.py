"""Hostile input: values that mean something to a shell, systemd, TOML or a terminal, in every place
a profile or an inventory takes text. Each must be refused with a located error, or reach the
process exactly as written; nothing may add a line to the unit, crash sgdeploy, or run anything.

The byte-exact argv/env round trip of `[server]` and `[env]` values under real systemd is
tests/test_render_systemd.py's; profile fuzzing is tests/test_fuzz_profiles.py's. This module
covers the other places (deploy fields, unit names, inventory host names and addresses, the
profile's own file name), very long values, and secrets, end to end through `apply` on a test host.
"""

from __future__ import annotations

import json
import socket
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sgdeploy import cli
from tests.faults import inventory_via, observe, toml_inventory
from tests.hosts import HostSet, HostSpec, SimSettings, booted_or_skipped, free_port

REPO = Path(__file__).resolve().parents[1]
HOST = "ct129"
PWNED = "/tmp/sgdeploy-pwned"
INJECT = f"x\n[Service]\nExecStartPre=/bin/touch {PWNED}\n"
HOSTILE = {
    "shell": "a; touch /tmp/sgdeploy-pwned #",
    "subst": "$(touch /tmp/sgdeploy-pwned)`id`",
    "specifiers": "%n %h %i %%",
    "vars": "$HOME ${PATH} $$",
    "newline": INJECT,
    "cr": "a\rb",
    "nul": "a\x00b",
    "unicode": "ü😀\u2028\u00a0",
    "long": "L" * 100_000,
}
BASE_INVENTORY = {
    "hosts": {HOST: {"address": "127.0.0.1", "gpu": "RTX A6000", "compute_capability": "8.6", "gpu_count": 2,
                     "sglang_version": "0.5.11"}},
}


def _toml(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)


def profile_text(deploy: dict[str, Any], server: dict[str, Any], env: dict[str, Any] | None = None) -> str:
    lines = ["[deploy]", *(f"{json.dumps(k)} = {_toml(v)}" for k, v in deploy.items())]
    if env:
        lines += ["[env]", *(f"{json.dumps(k, ensure_ascii=False)} = {_toml(v)}" for k, v in env.items())]
    lines += ["[server]", *(f"{json.dumps(k)} = {_toml(v)}" for k, v in server.items())]
    text = "\n".join(lines) + "\n"
    assert tomllib.loads(text)["deploy"] == deploy
    return text


def base(**deploy: Any) -> dict[str, Any]:
    return {"host": HOST, "unit": "sglang", "python": "/root/ml-env/bin/python3", **deploy}


SERVER = {"model_path": "/root/models/Qwen3-8B"}


HOST_NAME_BUG = ("an inventory host name is written unescaped into the unit's header comment "
                 "(`# target: host {{ host }}` in templates/sglang.service.j2): a name with a newline adds "
                 "lines to the unit, e.g. `[Service]` + `ExecStartPre=`, which systemd runs as root; the "
                 "inventory accepts any host name and profile deploy.host is not checked for control characters")
KNOWN_BUGS: set[tuple[str, str]] = set()  # (place, value) pairs with a known bug (none left)


def cases() -> list[Any]:
    """(place, value name) -> (profile deploy, server, env, inventory)."""
    out = []
    for name, value in HOSTILE.items():
        plain = value.replace("/", "_")
        places: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None, dict[str, Any]]] = {
            "server.served_model_name": (base(), {**SERVER, "served_model_name": value}, None, BASE_INVENTORY),
            "server.model_path": (base(), {"model_path": "/root/models/" + plain}, None, BASE_INVENTORY),
            "env value": (base(), SERVER, {"SGD_X": value}, BASE_INVENTORY),
            "env name": (base(), SERVER, {value[:200]: "1"}, BASE_INVENTORY),
            "deploy.unit": (base(unit=value), SERVER, None, BASE_INVENTORY),
            "deploy.python": (base(python="/opt/" + plain), SERVER, None, BASE_INVENTORY),
            "deploy.working_directory": (base(working_directory="/srv/" + plain), SERVER, None, BASE_INVENTORY),
            "deploy.env_file": (base(env_file="/etc/" + plain), SERVER, None, BASE_INVENTORY),
            "deploy.user": (base(user=value), SERVER, None, BASE_INVENTORY),
            "deploy.model_architecture": (base(model_architecture=value), SERVER, None, BASE_INVENTORY),
            "inventory host name": (base(host=value), SERVER, None,
                                    {"hosts": {value: BASE_INVENTORY["hosts"][HOST]}}),
            "inventory address": (base(), SERVER, None,
                                  {"hosts": {HOST: {**BASE_INVENTORY["hosts"][HOST], "address": value}}}),
        }
        for place, case in places.items():
            marks = [pytest.mark.xfail(strict=True, reason=HOST_NAME_BUG)] if (place, name) in KNOWN_BUGS else []
            out.append(pytest.param(place, name, *case, id=f"{place}-{name}", marks=marks))
    return out


# Lines a rendered unit may hold outside comments: the template's directives and section headers.
ALLOWED_KEYS = {"Description", "After", "Wants", "StartLimitIntervalSec", "StartLimitBurst", "Type", "User",
                "WorkingDirectory", "Environment", "EnvironmentFile", "ExecStart", "KillMode", "KillSignal",
                "TimeoutStartSec", "TimeoutStopSec", "Restart", "RestartSec", "SyslogIdentifier",
                "StandardOutput", "StandardError", "LimitNOFILE", "LimitMEMLOCK", "CacheDirectory", "WantedBy"}


def unit_shape_problems(text: str) -> list[str]:
    """Lines of a unit that the template did not put there (an injection), systemd's way of reading."""
    problems, sections, continued = [], [], False
    for raw in text.split("\n"):
        line = raw.strip()
        if continued:
            continued = line.endswith("\\")
            continue
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            sections.append(line)
            continue
        key = line.split("=", 1)[0].strip()
        if "=" not in line or key not in ALLOWED_KEYS:
            problems.append(f"unexpected line {line[:80]!r}")
        continued = line.endswith("\\")
    if sections != ["[Unit]", "[Service]", "[Install]"]:
        problems.append(f"sections {sections}")
    return problems


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(("place", "value", "deploy", "server", "env", "inventory"), cases())
def test_hostile_value_is_refused_or_rendered_exactly(place: str, value: str, deploy: dict[str, Any],
                                                      server: dict[str, Any], env: dict[str, Any] | None,
                                                      inventory: dict[str, Any], tmp_path: Path,
                                                      request: pytest.FixtureRequest,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """hostile text in a profile or inventory field: refused with a located error, or rendered exactly"""
    profile = tmp_path / "p.toml"
    profile.write_text(profile_text(deploy, server, env))
    inv = tmp_path / "inventory.toml"
    inv.write_text(toml_inventory(inventory))
    code, out, err = run_cli(capsys, "validate", str(profile), "--inventory", str(inv), "--format", "json")
    assert code in (0, 1), err[-2000:]
    diagnostics = json.loads(out)["profiles"][0]["diagnostics"]
    errors = [d for d in diagnostics if d["severity"] == "error"]
    if code == 1:
        assert errors and all(d["field"] for d in errors), errors
        observe(request, "refused: " + "; ".join(f"{d['rule']} {d['field']} (line {d['line']})" for d in errors)[:200])
        return
    code, unit, err = run_cli(capsys, "render", str(profile), "--inventory", str(inv))
    assert code == 0, err[-2000:]
    problems = unit_shape_problems(unit)
    observe(request, "accepted; unit " + ("; ".join(problems) if problems else "has only the template's lines"))
    assert not problems


def test_hostile_profile_file_name(tmp_path: Path, request: pytest.FixtureRequest,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    """a profile file name with a newline: refused or rendered, never a traceback"""
    inv = tmp_path / "inventory.toml"
    inv.write_text(toml_inventory(BASE_INVENTORY))
    profile = tmp_path / "a\nExecStartPre=touch x.toml"
    profile.write_text(profile_text(base(), SERVER))
    try:
        code, unit, _ = run_cli(capsys, "render", str(profile), "--inventory", str(inv))
    except Exception as exc:
        observe(request, f"crashed: {type(exc).__name__}: {exc}")
        raise
    observe(request, f"exit {code}")
    assert code in (1, 2) or not unit_shape_problems(unit)




@pytest.mark.parametrize("unit", ["../etc", "../../etc/passwd", "/etc/x", "a/b", "sglang@", "sglang@1",
                                  "sglang.service", "-rf", "--help", ".", "..", "a..b", " sglang", "sglang\n",
                                  "%n", "$(id)", "s" * 300, ""])
def test_escaping_unit_names_are_refused(unit: str, tmp_path: Path, request: pytest.FixtureRequest,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """unit names that try to escape (../, absolute, @ templates, .service, leading -): refused"""
    inv = tmp_path / "inventory.toml"
    inv.write_text(toml_inventory(BASE_INVENTORY))
    profile = tmp_path / "p.toml"
    profile.write_text(profile_text(base(unit=unit), SERVER))
    code, out, _ = run_cli(capsys, "validate", str(profile), "--inventory", str(inv), "--format", "json")
    errors = [d for d in json.loads(out)["profiles"][0]["diagnostics"] if d["severity"] == "error"]
    assert code == 1 and any(d["field"] == "deploy.unit" for d in errors), errors
    # the commands that take --unit refuse it before connecting (the inventory points nowhere)
    code2, _, err = run_cli(capsys, "history", "--host", HOST, f"--unit={unit}", "--inventory", str(inv))
    observe(request, f"validate: {errors[0]['rule']} deploy.unit; history --unit: exit {code2}")
    if "/" in unit or unit in ("", ".", "..") or "\n" in unit or " " in unit or "$" in unit or "%" in unit:
        assert code2 == 2 and "unit" in err


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_words_in_an_imported_command_line(name: str, tmp_path: Path, request: pytest.FixtureRequest,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """hostile text in a command line given to `import --command`: a located error, or a profile that
    holds it exactly and renders only the template's lines"""
    import shlex

    value = HOSTILE[name]
    inv = tmp_path / "inventory.toml"
    inv.write_text(toml_inventory(BASE_INVENTORY))
    command = (f"SGLANG_NOTE={shlex.quote(value)} nohup /root/ml-env/bin/python3 -m sglang.launch_server "
               f"--model-path /m --served-model-name={shlex.quote(value)} > log 2>&1 &")
    out_file = tmp_path / "imported.toml"
    code, _, err = run_cli(capsys, "import", HOST, "--command", command, "--output", str(out_file),
                           "--inventory", str(inv))
    assert code in (0, 1, 2) and "Traceback" not in err, err[-2000:]
    if code == 2:
        observe(request, f"refused: {err.strip().splitlines()[-1][:160]}")
        assert "line " in err or "argument " in err
        return
    data = tomllib.loads(out_file.read_text())
    assert data["server"]["served_model_name"] == value and data["env"]["SGLANG_NOTE"] == value
    if code == 1:
        observe(request, "imported exactly; validation refuses it: " + "; ".join(
            line.split(": ", 1)[1][:80] for line in err.splitlines() if " error: " in line)[:200])
        return
    code, unit, err = run_cli(capsys, "render", str(out_file), "--inventory", str(inv))
    assert code == 0, err[-2000:]
    observe(request, "imported exactly; unit " + ("; ".join(unit_shape_problems(unit)) or "has only the "
                                                  "template's lines"))
    assert not unit_shape_problems(unit)


@pytest.mark.parametrize("secret", [
    ("server", "api_key", "sk-test-0123456789abcdef"),
    ("server", "admin_api_key", "sk-admin-0123456789abcdef"),
    ("env", "HF_TOKEN", "hf_0123456789abcdefABCDEF"),
    ("env", "OPENAI_API_KEY", "sk-0123456789abcdef"),
    ("env", "hf_token", "hf_0123456789abcdefABCDEF"),
    ("env", "HF_AUTH", "hf_0123456789abcdefABCDEFghij"),  # a credential under an innocent name
])
def test_secret_in_profile_is_refused(secret: tuple[str, str, str], tmp_path: Path,
                                      request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]) -> None:
    """a token or API key in a profile: refused (SGD021), never rendered"""
    table, key, value = secret
    inv = tmp_path / "inventory.toml"
    inv.write_text(toml_inventory(BASE_INVENTORY))
    profile = tmp_path / "p.toml"
    server = {**SERVER, key: value} if table == "server" else SERVER
    profile.write_text(profile_text(base(), server, {key: value} if table == "env" else None))
    code, out, _ = run_cli(capsys, "validate", str(profile), "--inventory", str(inv), "--format", "json")
    rules = [(d["rule"], d["field"]) for d in json.loads(out)["profiles"][0]["diagnostics"]]
    observe(request, f"{table}.{key}: exit {code} {rules}")
    assert code == 1 and ("SGD021", f"{table}.{key}") in rules
    code, unit, _ = run_cli(capsys, "render", str(profile), "--inventory", str(inv))
    assert code == 1 and value not in unit


def test_hostile_address_never_reaches_a_shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               request: pytest.FixtureRequest,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """inventory addresses with ssh options or shell syntax: a clean refusal (exit 2), nothing run"""
    real = socket.getaddrinfo

    def loopback_only(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise socket.gaierror(socket.EAI_NONAME, f"not resolved in tests: {str(host)[:40]}")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", loopback_only)
    seen = []
    for address in ["-oProxyCommand=touch /tmp/sgdeploy-pwned", "127.0.0.1; touch /tmp/sgdeploy-pwned",
                    "$(touch /tmp/sgdeploy-pwned)", "ü😀", "a" * 100_000]:
        inv = tmp_path / "inventory.toml"
        inv.write_text(toml_inventory({"hosts": {HOST: {**BASE_INVENTORY["hosts"][HOST], "address": address}}}))
        profile = tmp_path / "p.toml"
        profile.write_text(profile_text(base(), SERVER))
        code, out, err = run_cli(capsys, "history", "--host", HOST, "--unit", "sglang", "--inventory", str(inv))
        seen.append(code)
        assert code == 2, (address[:50], out, err[-500:])
        assert not Path(PWNED).exists()
    observe(request, f"history against each address: exits {seen}; nothing run locally")


# --------------------------------------------------------------------------- on a real host
PORT = free_port()
DUMPER = "/usr/local/bin/argv-dump-hostile"
DUMPER_SCRIPT = """#!/usr/bin/python3
import json, os, sys
print(json.dumps({"argv": sys.argv, "env": dict(os.environ)}, ensure_ascii=True), flush=True)
"""


@pytest.fixture(scope="module")
def hs() -> Iterator[HostSet]:
    with booted_or_skipped([HostSpec.like(HOST, sim=SimSettings(startup_s=1.0, release_delay_s=0.5))]) as hosts:
        hosts.ssh(HOST, f"cat > {DUMPER} && chmod 755 {DUMPER}; mkdir -p /etc/systemd/journald.conf.d; "
                  "printf '[Journal]\\nLineMax=4M\\nRateLimitBurst=0\\n' > /etc/systemd/journald.conf.d/x.conf; "
                  "systemctl restart systemd-journald", input=DUMPER_SCRIPT)
        yield hosts


def run_unit(hs: HostSet, name: str, unit_text: str) -> str:
    """Install a rendered unit on the host as it is, start it, return its journal once it is done."""
    (hs[HOST].root / f"etc/systemd/system/{name}.service").write_text(unit_text)
    script = (f"systemctl daemon-reload; timeout 20 systemctl start {name}.service; "
              f"for i in $(seq 100); do systemctl is-active -q {name}.service || break; sleep 0.05; done; "
              f"sleep 0.3; journalctl -u {name}.service -o cat --no-pager; systemctl stop {name}.service; "
              f"rm -f /etc/systemd/system/{name}.service; systemctl daemon-reload")
    return hs.ssh(HOST, script, check=False, timeout=60).stdout


@pytest.mark.hosts
def test_host_name_cannot_inject_into_the_unit(hs: HostSet, tmp_path: Path, request: pytest.FixtureRequest,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """inventory host name with a newline, applied to a real host: nothing extra runs"""
    name = f"ct129\n[Service]\nExecStartPre=/bin/touch {PWNED}\n#"
    inv = inventory_via(hs.inventory_path, tmp_path / "inventory.toml", HOST, rename=name)
    profile = tmp_path / "p.toml"
    profile.write_text(profile_text(base(host=name, unit="hostile-name", python=DUMPER),
                                    {"model_path": "/root/models/Qwen3-8B", "port": PORT}))
    code, _, _ = run_cli(capsys, "validate", str(profile), "--inventory", str(inv))
    if code == 0:
        code, unit, _ = run_cli(capsys, "render", str(profile), "--inventory", str(inv))
        run_unit(hs, "hostile-name", unit)
    ran = hs.ssh(HOST, f"test -e {PWNED} && echo yes || echo no").stdout.strip()
    hs.ssh(HOST, f"rm -f {PWNED}", check=False)
    observe(request, f"validate exit {code}; ExecStartPre from the host name ran on the host: {ran}")
    assert ran == "no"


@pytest.mark.hosts
def test_long_and_odd_values_reach_the_process_exactly(hs: HostSet, tmp_path: Path,
                                                       request: pytest.FixtureRequest,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """100 kB, specifier, $VAR and unicode values through a real apply: the process gets them exactly"""
    values = {k: v for k, v in HOSTILE.items() if k not in ("newline", "cr", "nul")}
    server = {"model_path": "/root/models/Qwen3-8B", "port": PORT, "served_model_name": values["long"],
              "chat_template": values["specifiers"] + values["vars"], "revision": values["shell"] + values["subst"],
              "tokenizer_path": values["unicode"]}
    env = {f"SGD_{k.upper()}": v for k, v in values.items()}
    profile = tmp_path / "odd.toml"
    profile.write_text(profile_text(base(unit="hostile-odd", python=DUMPER, ready_timeout_s=5), server, env))
    inv = inventory_via(hs.inventory_path, tmp_path / "inventory.toml", HOST)
    code, out, err = run_cli(capsys, "validate", str(profile), "--inventory", str(inv))
    assert code == 0, out + err
    code, unit, err = run_cli(capsys, "render", str(profile), "--inventory", str(inv))
    assert code == 0, err
    journal = run_unit(hs, "hostile-odd", unit)
    line = next((ln for ln in journal.splitlines() if ln.startswith('{"argv"')), None)
    assert line, f"the dumper never ran: {journal[-2000:]}"
    dump = json.loads(line)
    argv = dump["argv"]
    got = {argv[i].lstrip("-"): argv[i + 1] for i in range(3, len(argv) - 1, 2)}
    assert got["served-model-name"] == values["long"]
    assert got["chat-template"] == values["specifiers"] + values["vars"]
    assert got["revision"] == values["shell"] + values["subst"]
    assert got["tokenizer-path"] == values["unicode"]
    assert {k: dump["env"].get(k) for k in env} == env
    assert not Path(PWNED).exists() and hs.ssh(HOST, f"test -e {PWNED}", check=False).returncode != 0
    observe(request, f"rendered unit run under systemd: argv and environment byte-exact, {len(line)} bytes dumped")


@pytest.mark.hosts
def test_env_file_secret_stays_on_the_host(hs: HostSet, tmp_path: Path, request: pytest.FixtureRequest,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """secrets through deploy.env_file: used via EnvironmentFile=, never in the unit, records, journal or ps"""
    secret = "hf_SECRETfaultsuite0123456789"
    hs.ssh(HOST, "mkdir -p /etc/sglang && umask 077 && cat > /etc/sglang/secret.env",
           input=f"HF_TOKEN={secret}\nSGLANG_API_KEY={secret}\n")
    profile = tmp_path / "secret.toml"
    profile.write_text(profile_text(base(unit="hostile-secret", env_file="/etc/sglang/secret.env"),
                                    {"model_path": "/root/models/Qwen3-8B", "port": PORT}))
    inv = inventory_via(hs.inventory_path, tmp_path / "inventory.toml", HOST)
    code, out, _ = run_cli(capsys, "apply", str(profile), "--inventory", str(inv), "--json", "--settle", "1")
    result = json.loads(out)
    assert code == 0, result["message"]
    try:
        pid = hs.ssh(HOST, "systemctl show -p MainPID --value hostile-secret.service").stdout.strip()
        environ = hs.ssh(HOST, f"tr '\\0' '\\n' < /proc/{pid}/environ").stdout
        assert f"HF_TOKEN={secret}" in environ.splitlines()
        unit = hs.ssh(HOST, "cat /etc/systemd/system/hostile-secret.service").stdout
        assert "EnvironmentFile=/etc/sglang/secret.env" in unit.splitlines()
        places = {
            "unit file": unit,
            "records": hs.ssh(HOST, "cat -v /var/lib/sgdeploy/hostile-secret/*/* 2>/dev/null").stdout,
            "journal": hs.journal(HOST, "hostile-secret"),
            "ps": hs.ssh(HOST, "ps -eo args ww").stdout,
            "apply --json": out,
            "history --json": run_cli(capsys, "history", str(profile), "--inventory", str(inv), "--json")[1],
            "status --json": run_cli(capsys, "status", str(profile), "--inventory", str(inv), "--json")[1],
        }
        leaked = [where for where, text in places.items() if secret in text]
        observe(request, f"the process has it; checked {', '.join(places)}; leaked in: {leaked or 'none'}")
        assert not leaked
    finally:
        hs.ssh(HOST, "systemctl stop hostile-secret.service", check=False)
