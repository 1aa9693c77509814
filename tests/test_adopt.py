"""`sgdeploy import`: SGLang's argv read like its argparse does, the profile written, the round trip.

The parser is checked against argparse itself: a parser built from the same catalog the way
SGLang builds its own (`allow_abbrev=True`), fed the same words, must agree on every value.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shlex
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sgdeploy import cli
from sgdeploy.cli.commands import apply as apply_command
from sgdeploy.deploy.adopt import (
    LaunchError,
    Observed,
    Target,
    finish_import,
    gpus_from,
    import_launch,
    import_text,
    observed_from_command,
    sglang_env,
    split_launch,
)
from sgdeploy.host.running import parse_servers, script
from sgdeploy.profile.validate import InventoryContext
from sgdeploy.sglang.argv import parse_server_argv
from sgdeploy.sglang.catalog import Flag, load_catalog

REPO = Path(__file__).resolve().parents[1]
INVENTORY = InventoryContext.load(REPO / "inventory.toml")
C11 = load_catalog("0.5.11")
C23 = load_catalog("0.5.23")

# The reference launch (profiles/qwen36-mtp3.toml) as someone types it: prefixes and `=` forms.
REFERENCE_ABBREVIATED = (
    "/root/ml-env/bin/python3 -m sglang.launch_server --model=/root/models/Qwen3.6-27B --host 0.0.0.0 "
    "--port=30000 --tp 2 --mem-frac 0.88 --context-len=131072 --max-running 16 --trust-remote "
    "--mamba-full 0.5 --mamba-sched=extra_buffer --reasoning-p qwen3 --tool-call qwen3_coder "
    "--speculative-algo NEXTN --speculative-num-steps=3 --speculative-eagle 1 --speculative-num-draft 4 "
    "--enforce-piecewise --enable-single-batch"
)


def reference_server() -> dict[str, object]:
    return tomllib.loads((REPO / "profiles/qwen36-mtp3.toml").read_text())["server"]


# --------------------------------------------------------------------------- argparse as the oracle
def argparse_like_sglang(catalog: object) -> argparse.ArgumentParser:
    """A parser built from the catalog as SGLang's add_cli_args builds its own."""
    parser = argparse.ArgumentParser(allow_abbrev=True, exit_on_error=False)
    for flag in catalog.flags.values():  # type: ignore[attr-defined]
        kw: dict[str, object] = {"dest": flag.field}
        if flag.boolean_optional:
            parser.add_argument(*[o for o in flag.options if o != flag.negative_option],
                                action=argparse.BooleanOptionalAction, **kw)
            continue
        if flag.is_switch:
            parser.add_argument(*flag.options, action="store_false" if flag.store_false else "store_true", **kw)
            continue
        if flag.nargs is not None:
            kw["nargs"] = flag.nargs
        parser.add_argument(*flag.options, **kw)
    return parser


def _oracle(words: list[str], catalog: object) -> dict[str, object] | None:
    parser = argparse_like_sglang(catalog)
    try:
        namespace, extras = parser.parse_known_args(words)
    except (argparse.ArgumentError, SystemExit):
        return None
    if extras:
        return None
    defaults = vars(parser.parse_args([]))
    return {k: v for k, v in vars(namespace).items() if v != defaults[k] or k in _given(words, catalog)}


def _given(words: list[str], catalog: object) -> set[str]:
    return set(parse_server_argv(words, catalog).server)  # type: ignore[arg-type]


def _as_strings(server: dict[str, object], catalog: object) -> dict[str, object]:
    """Parsed values as argparse without `type=` holds them: strings (switches stay booleans)."""
    out: dict[str, object] = {}
    for key, value in server.items():
        flag: Flag = catalog.get(key)  # type: ignore[attr-defined]
        out[key] = value if flag.is_switch else ([str(v) for v in value] if isinstance(value, list) else str(value))
    return out


@pytest.mark.parametrize("words", [
    "--tp 2 --mem-frac=0.8",
    "--model-path /m --model /n",
    "--context-len=100 --trust-remote --lora-strict --no-lora-strict-loading",
    "--cuda-graph-bs 1 2 4 --port 1",
    "--json-model-override-args {\"a\":1} --port=30000",
    "--enable-dp --dp 2",
    "--chat-template=--x --port 3",
    "--host -1",
])
def test_parser_agrees_with_argparse(words: str) -> None:
    argv = shlex.split(words)
    ours = parse_server_argv(argv, C11)
    oracle = _oracle(argv, C11)
    if oracle is None:
        assert not ours.ok
    else:
        assert ours.ok, ours.findings
        assert _as_strings(ours.server, C11) == {k: v for k, v in oracle.items() if k in ours.server}


_WORDS = st.sampled_from(["--tp", "--tp-size", "--mem-frac", "--mem-fraction-static=0.5", "--port", "8",
                          "--trust-remote-code", "--cuda-graph", "--cuda-graph-bs", "1", "2", "--model", "x",
                          "--no-lora-strict-loading", "--lora-strict", "--bogus", "", "-1", "a b", "--", "--host=",
                          "--enable-single", "--speculative-num-steps", "--reasoning-parser", "qwen3"])


@settings(max_examples=150, deadline=None)
@given(st.lists(_WORDS, max_size=8))
def test_parser_agrees_with_argparse_on_any_words(words: list[str]) -> None:
    ours = parse_server_argv(words, C11)
    oracle = _oracle(words, C11)
    if oracle is None:
        assert not ours.ok
        return
    # argparse without `type=` accepts words SGLang's typed parser refuses ('x' for an int)
    if ours.ok:
        assert _as_strings(ours.server, C11) == {k: v for k, v in oracle.items() if k in ours.server}


def test_abbreviations_and_equals_read_as_sglang_reads_them() -> None:
    parsed = parse_server_argv(shlex.split(REFERENCE_ABBREVIATED)[3:], C11)
    assert parsed.ok, parsed.findings
    assert parsed.server == reference_server()
    uses = {u.field: u for u in parsed.uses}
    assert uses["mem_fraction_static"].abbreviated and uses["mem_fraction_static"].option == "--mem-fraction-static"
    assert not uses["model_path"].abbreviated  # --model is an alias, not a prefix


def test_unknown_ambiguous_and_stray_words_are_reported_at_their_place() -> None:
    parsed = parse_server_argv(["--port", "1", "--cuda-graph", "8", "", "--mamba-scheduler-strategy", "x"], C23)
    messages = [(f.index, f.message) for f in parsed.findings]
    assert (2, "ambiguous option '--cuda-graph' could match --cuda-graph-bs-decode, --cuda-graph-bs-prefill, "
            "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill") in messages or any(
        i == 2 and "ambiguous" in m for i, m in messages)
    assert any(i == 4 and "unrecognized argument ''" in m for i, m in messages)
    assert any(i == 5 and "--mamba-scheduler-strategy" in m and "0.5.23" in m for i, m in messages)
    assert parsed.unknown == ["8", "", "--mamba-scheduler-strategy", "x"]
    assert parsed.server == {"port": 1}


def test_values_types_repeats_and_switches() -> None:
    parsed = parse_server_argv(["--tp", "2", "--tp", "4", "--mem-frac", "1", "--max-total-tokens", "128k",
                                "--trust-remote-code=yes", "--port", "two"], C23)
    assert parsed.server["tp_size"] == 4 and parsed.server["mem_fraction_static"] == 1
    assert any("more than once" in f.message and f.severity == "warning" for f in parsed.findings)
    assert any("ignored explicit argument 'yes'" in f.message for f in parsed.findings)
    assert any("invalid int value: 'two'" in f.message for f in parsed.findings)


# --------------------------------------------------------------------------- splitting a command line
@pytest.mark.parametrize(("argv", "entry", "interpreter", "first_flag"), [
    (["/v/bin/python3", "-m", "sglang.launch_server", "--tp", "2"], "launch_server", "/v/bin/python3", "--tp"),
    (["/v/bin/python3.11", "-u", "-X", "faulthandler", "-m", "sglang.launch_server", "--tp", "2"],
     "launch_server", "/v/bin/python3.11", "--tp"),
    (["/v/bin/python3", "/v/bin/sglang", "serve", "--tp", "2"], "serve", "/v/bin/python3", "--tp"),
    (["/v/bin/sglang", "serve", "--tp", "2"], "serve", "/v/bin/python3", "--tp"),
    (["/v/bin/python", "/v/bin/torchrun", "--nproc-per-node", "1", "-m", "sglang.launch_server", "--tp", "2"],
     "launch_server", "/v/bin/python", "--tp"),
    (["python3", "/v/lib/python3.11/site-packages/sglang/launch_server.py", "--tp", "2"],
     "launch_server", "python3", "--tp"),
])
def test_split_launch(argv: list[str], entry: str, interpreter: str, first_flag: str) -> None:
    launch = split_launch(argv)
    assert (launch.entry, launch.interpreter, launch.flags[0]) == (entry, interpreter, first_flag)


def test_split_launch_refuses_what_is_no_server() -> None:
    for argv in (["python3", "-m", "http.server"], [], ["/v/bin/python3", "-c", "x", "\udcff"]):
        with pytest.raises(LaunchError):
            split_launch(argv)


# --------------------------------------------------------------------------- the profile
def test_reference_launch_imports_to_the_reference_profile() -> None:
    observed = Observed(tuple(shlex.split(REFERENCE_ABBREVIATED)),
                        {"SGLANG_ENABLE_SPEC_V2": "1", "PATH": "/usr/bin", "HOME": "/root", "CUDA_HOME": "/c"},
                        cwd="/", user="root", pid=7)
    result = finish_import(observed, C11, Target("ct129"), INVENTORY)
    data = tomllib.loads(result.imported.text)
    assert data["server"] == reference_server()
    assert data["env"] == {"SGLANG_ENABLE_SPEC_V2": "1", "CUDA_HOME": "/c"}
    assert data["deploy"] == {"host": "ct129", "unit": "sglang", "python": "/root/ml-env/bin/python3"}
    assert result.validation.ok, result.validation.diagnostics
    assert result.roundtrip == []
    assert "tp_size = 2 # written as --tp" in result.imported.text
    assert "port = 30000 # = SGLang's default" in result.imported.text


def test_secrets_never_reach_the_profile() -> None:
    observed = Observed(("/v/bin/python3", "-m", "sglang.launch_server", "--model-path", "/m", "--api-key",
                         "sk-abcdefghijklmnopqrstuvwxyz"),
                        {"HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz0123", "SGLANG_X": "1"})
    result = finish_import(observed, C23, Target("ct129"), INVENTORY)
    text = result.imported.text
    assert "hf_abcdefghij" not in text and "sk-abcdefghij" not in text
    assert "HF_TOKEN" in text  # named in the env_file note
    assert result.imported.withheld_env == ["HF_TOKEN"]
    assert tomllib.loads(text)["deploy"]["env_file"] == "/etc/sgdeploy/sglang.env"
    assert tomllib.loads(text)["secrets"]["keys"] == ["api_key"]


KEY = "sk-" + "abcdefghijklmnopqrstuvwxyz"
ADMIN = "adm-" + "0123456789abcdef"


def test_secret_flags_become_a_secrets_section_and_the_notes_say_how() -> None:
    observed = Observed(("/v/bin/python3", "-m", "sglang.launch_server", "--model-path", "/m", "--api-k", KEY,
                         f"--admin-api-key={ADMIN}"), {"SGLANG_API_KEY": "x"}, user="svc")
    result = finish_import(observed, C23, Target("ct129", unit="qwen"), INVENTORY)
    report = import_text(result, "qwen.toml")
    for text in (result.imported.text, report):
        assert KEY not in text and ADMIN not in text
    data = tomllib.loads(result.imported.text)
    assert data["secrets"] == {"file": "/etc/sglang/qwen.secrets.yaml", "keys": ["api_key", "admin_api_key"]}
    assert "api_key" not in data["server"] and "admin_api_key" not in data["server"]
    assert result.validation.ok and result.roundtrip == [], (result.validation.diagnostics, result.roundtrip)
    note = next(line for line in report.splitlines() if "hold secrets" in line)
    assert ("create /etc/sglang/qwen.secrets.yaml on ct129 as root, owned by svc with mode 0600 (`install -D -m 600 "
            "-o svc /dev/null /etc/sglang/qwen.secrets.yaml`)") in note
    assert "`api-key: '<the --api-key value>'` and `admin-api-key: '<the --admin-api-key value>'`" in note
    assert "SGLANG_API_KEY is set" not in report  # the key it has comes from --api-key


def test_secrets_of_a_release_without_config_go_to_an_environment_file() -> None:
    observed = Observed(("/v/bin/python3", "-m", "sglang.launch_server", "--model-path", "/m", "--api-key", KEY,
                         "--admin-api-key", ADMIN), {"API_KEY": "x"})
    result = finish_import(observed, load_catalog("0.5.2"), Target("ct129"), INVENTORY)
    report = import_text(result, "p.toml")
    for text in (result.imported.text, report):  # 0.5.2 refuses --admin-api-key: its value is still a secret
        assert KEY not in text and ADMIN not in text
    assert tomllib.loads(result.imported.text)["secrets"] == {"file": "/etc/sglang/sglang.secrets.env",
                                                              "keys": ["api_key"]}
    assert "`api_key=<the --api-key value>`" in report and "the process list shows them" in report
    assert "--admin-api-key '<redacted>'" in result.imported.text
    assert "API_KEY is set in the server's environment, but SGLang reads no API_KEY" not in report


def test_an_api_key_variable_sglang_ignores_is_named() -> None:
    observed = Observed(("/v/bin/python3", "-m", "sglang.launch_server", "--model-path", "/m"), {"API_KEY": KEY})
    result = finish_import(observed, C23, Target("ct129"), INVENTORY)
    report = import_text(result, "p.toml")
    assert ("note: API_KEY is set in the server's environment, but SGLang reads no API_KEY: the server runs "
            "without api_key") in report
    assert KEY not in report + result.imported.text and "[secrets]" not in result.imported.text


@pytest.mark.parametrize("value", ['a "quoted" value', "two  spaces", "ünïcödé ✓", "$HOME and $$ and %s %%",
                                   "back\\slash", "tab\there", "trailing space "])
def test_hostile_values_survive_the_round_trip(value: str) -> None:
    observed = Observed(("/v/bin/python3", "-m", "sglang.launch_server", "--model-path", "/m",
                         "--served-model-name", value), {"SGLANG_NOTE": value})
    result = finish_import(observed, C23, Target("ct129"), INVENTORY)
    data = tomllib.loads(result.imported.text)
    assert data["server"]["served_model_name"] == value and data["env"]["SGLANG_NOTE"] == value
    assert result.roundtrip == []


def test_cuda_visible_devices_becomes_deploy_gpus() -> None:
    assert gpus_from("0,1") == [0, 1] and gpus_from("GPU-ab12,3") == ["GPU-ab12", 3] and gpus_from("all") is None
    observed = Observed(("/v/bin/python3", "-m", "sglang.launch_server", "--model-path", "/m", "--tp", "2"),
                        {"CUDA_VISIBLE_DEVICES": "2,3"})
    imported = import_launch(observed, C23, Target("ct129"))
    assert tomllib.loads(imported.text)["deploy"]["gpus"] == [2, 3]


def test_command_text_like_a_shell_reads_it() -> None:
    text = ("#!/bin/sh\ncd /srv/models && HF_HOME=/srv/hf nohup /v/bin/python3 -m sglang.launch_server \\\n"
            "  --model-path ./m --port=8000 --served-model-name 'a b' > /tmp/log 2>&1 &\n")
    observed = observed_from_command(text)
    assert observed.cwd == "/srv/models" and observed.environ == {"HF_HOME": "/srv/hf"}
    assert observed.argv == ("/v/bin/python3", "-m", "sglang.launch_server", "--model-path", "./m",
                             "--port=8000", "--served-model-name", "a b")
    with pytest.raises(LaunchError, match=r"No closing quotation|no SGLang server"):
        observed_from_command("python3 -m sglang.launch_server --model-path 'unterminated")


def test_cli_import_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "imported.toml"
    code = cli.main(["import", "ct129", "--command", REFERENCE_ABBREVIATED, "--output", str(out),
                     "--inventory", str(REPO / "inventory.toml")])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "round trip:" in err and "renders the same" in err
    assert cli.main(["validate", str(out), "--inventory", str(REPO / "inventory.toml")]) == 0
    assert cli.main(["import", "--command", "ls -l"]) == 2
    assert "no SGLang server" in capsys.readouterr().err
    code = cli.main(["import", "ct129", "--command", REFERENCE_ABBREVIATED + " --bogus-flag 1",
                     "--inventory", str(REPO / "inventory.toml")])
    err = capsys.readouterr().err
    assert code == 1 and "unrecognized argument '--bogus-flag'" in err


def test_cli_import_command_says_an_unclosed_quote_first_and_names_its_output(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["import", "--command", "python3 -m sglang.launch_server --model-path '/m/x --port 1"])
    err = capsys.readouterr().err
    assert code == 2
    assert "error: the command does not split as a shell line: line 1: No closing quotation" in err
    out = tmp_path / "mine.toml"
    cli.main(["import", "--command", "python3 -m sglang.launch_server --model-path /m/x", "-o", str(out)])
    err = capsys.readouterr().err
    assert f"{out}:" in err and "imported.toml" not in err
    cli.main(["import", "--command", "python3 -m sglang.launch_server --model-path /m/x"])
    err = capsys.readouterr().err
    assert "<stdout>:" in err
    # a bare interpreter: the profile is written with it, and the report says how to fix it
    assert "the launch ran 'python3' from its shell's PATH, which a unit does not have" in err
    assert "SGD003 error: deploy.python = \"python3\" is not an absolute path" in err


# --------------------------------------------------------------------------- the host script, on this machine
def test_running_script_reads_real_processes(tmp_path: Path) -> None:
    """The discovery script run for real against a process whose argv holds hostile words."""
    hostile = ["--served-model-name", "", "--chat-template", 'a "b" $x ü\nnext', "--port", "1",
               "--model-path=model dir"]
    env = {**os.environ, "SGLANG_TEST_VALUE": "x y $z", "HF_TOKEN": "hf_secretsecretsecretsecret"}
    (tmp_path / "model dir").mkdir()
    (tmp_path / "model dir" / "config.json").write_text('{"architectures": ["Qwen3_5ForConditionalGeneration"]}')
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "-m", "sglang.launch_server",
                              *hostile], env=env, cwd=tmp_path)
    try:
        for _ in range(50):
            out = subprocess.run(["sh", "-s", "--", "", ""], input=script(), capture_output=True, text=True,
                                 timeout=120).stdout
            found = parse_servers(out)
            mine = [s for s in found.servers if s.process.pid == child.pid]
            if mine:
                break
            time.sleep(0.1)
        assert mine, out[-2000:]
        process = mine[0].process
        assert process.argv[3:] == ("-m", "sglang.launch_server", *hostile)
        assert process.environ["SGLANG_TEST_VALUE"] == "x y $z"
        assert process.cwd == str(tmp_path) and process.python == sys.executable
        assert found.complete
        observed = Observed(process.argv, process.environ, cwd=process.cwd, model_configs=process.model_configs)
        text = import_launch(observed, C23, Target("ct129")).text
        assert 'model_architecture = "Qwen3_5ForConditionalGeneration"' in text
    finally:
        child.kill()
        child.wait()


def test_running_script_finds_a_server_a_shell_started(tmp_path: Path) -> None:
    """As on the H100 (tests/fixtures/h200-real/hand-bash-c.ps.txt): `ssh host 'cd /root && PATH=...
    setsid nohup python3 -m sglang.launch_server ... &'` leaves `bash -c '<the whole line>'` as the
    server's parent. The shell's one `-c` word mentions the launch but starts none: the server is
    its python child, with its own interpreter and SGLang version."""
    package = tmp_path / "site" / "sglang"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "launch_server.py").write_text("import time\ntime.sleep(60)\n")
    line = (f"cd {tmp_path} && PYTHONPATH={tmp_path / 'site'} {sys.executable} -m sglang.launch_server "
            f"--model-path {tmp_path}/m --port 30000 & wait")
    shell = subprocess.Popen(["bash", "-c", line])
    try:
        for _ in range(50):
            out = subprocess.run(["sh", "-s", "--", "", ""], input=script(), capture_output=True, text=True,
                                 timeout=120).stdout
            found = parse_servers(out)
            mine = [s for s in found.servers if str(tmp_path) in " ".join(s.process.argv)]
            if mine:
                break
            time.sleep(0.1)
        assert len(mine) == 1, out[-2000:]
        server = mine[0]
        assert server.process.argv[1:] == ("-m", "sglang.launch_server", "--model-path", f"{tmp_path}/m",
                                           "--port", "30000")
        assert server.process.python == sys.executable and server.wrapper is None
    finally:
        subprocess.run(["pkill", "-f", f"--model-path {tmp_path}/m"], check=False)
        shell.kill()
        shell.wait()


def test_parse_servers_picks_main_processes_and_survives_cut_output() -> None:
    import base64

    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    argv = "/v/bin/python3\0-m\0sglang.launch_server\0--port\0001\0"
    out = "\n".join([
        "@@tree@@", "10 (bash) S 1 1", "11 (python3) S 10 1", "12 (sglang::sched) S 11 1", "13 (x (y) z) S 11 1",
        "@@proc 11@@", f"cmdline={b64(argv)}", "cgroup=" + b64("0::/user.slice/session-1.scope\n"), "user=root",
        "@@proc 12@@", f"cmdline={b64(argv)}",
        "@@proc 13@@",  # exited between listing and reading: nothing to read
        "@@gpus@@", "0, GPU-aa, NVIDIA H200, 9.0, 143771, 1000, 00000000:01:00.0",
        "@@apps@@", "12, python3, 1000, GPU-aa",
    ])
    found = parse_servers(out)
    assert [s.process.pid for s in found.servers] == [11]
    assert found.servers[0].gpus == (0,) and found.servers[0].process.unit is None
    assert not found.complete
    assert parse_servers("").servers == [] and parse_servers("@@proc x@@\ngarbage\n@@end@@").complete


def test_unit_from_cgroup() -> None:
    from sgdeploy.host.running import _owning_unit, _unit_of

    tree = {33: (1, "sshd"), 40: (33, "sshd"), 41: (40, "bash"), 44: (41, "python3"), 50: (1, "run.sh"),
            51: (50, "python3"), 60: (1, "python3")}
    assert _owning_unit(44, "ssh", 33, tree) is None  # started from a login that sshd keeps in ssh.service
    assert _owning_unit(60, "ssh", 33, tree) is None  # ... and reparented to init by setsid
    assert _owning_unit(51, "hand", 50, tree) == "hand" and _owning_unit(51, "hand", 51, tree) == "hand"
    assert _owning_unit(51, "hand", None, tree) is None

    assert _unit_of("0::/system.slice/sglang-hand.service\n") == "sglang-hand"
    assert _unit_of("12:pids:/\n1:name=systemd:/system.slice/a.service\n") == "a"
    assert _unit_of("0::/user.slice/user-0.slice/session-4.scope\n") is None


def test_json_values_are_kept_as_written() -> None:
    raw = '{"b": 1,  "a": [1, 2]}'
    parsed = parse_server_argv(["--json-model-override-args", raw], C23)
    assert parsed.server["json_model_override_args"] == raw
    assert json.loads(parsed.server["json_model_override_args"]) == {"a": [1, 2], "b": 1}


# --------------------------------------------------------------------------- a unit file written by hand
HAND_UNIT = r"""# /etc/systemd/system/sglang-hand.service
[Unit]
Description=ExecStart=/not/this

[Service]
Environment="SGLANG_ENABLE_SPEC_V2=1" NCCL_DEBUG=WARN "LITERAL=$$x"
EnvironmentFile=-/etc/sglang/secrets.env
WorkingDirectory=/srv
User=svc
ExecStart=/v/bin/python3 -m sglang.launch_server --model-path /m \
    --served-model-name "a \"b\" $$HOME 100%% \x41" --port=8000
# a comment between
ExecStart=

# /etc/systemd/system/sglang-hand.service.d/override.conf
[Service]
ExecStart=-/v/bin/python3 -m sglang.launch_server --model-path /m2 --tp 2 'single quoted' --port 9
"""


def test_unit_file_is_read_the_way_systemd_reads_it() -> None:
    from sgdeploy.host.unitfile import parse_service, split_words

    service = parse_service(HAND_UNIT)
    assert service.exec_start == ["/v/bin/python3", "-m", "sglang.launch_server", "--model-path", "/m2", "--tp",
                                  "2", "single quoted", "--port", "9"]
    assert service.environment == {"SGLANG_ENABLE_SPEC_V2": "1", "NCCL_DEBUG": "WARN", "LITERAL": "$$x"}
    assert service.environment_files == ["/etc/sglang/secrets.env"]
    assert (service.working_directory, service.user) == ("/srv", "svc")
    first = parse_service(HAND_UNIT.split("ExecStart=\n")[0])
    assert first.exec_start[-3:] == ["--served-model-name", 'a "b" $HOME 100% A', "--port=8000"]
    assert split_words("a ${X}y") == ["a", "${X}y"]


@pytest.mark.parametrize("text", ["[Service]\nUser=x\n", "[Service]\nExecStart=/p 'open\n",
                                  "[Service]\nExecStart=@/p x -m sglang.launch_server\n", ""])
def test_unreadable_unit_files_are_located_errors(text: str) -> None:
    from sgdeploy.host.unitfile import UnitFileError, parse_service

    with pytest.raises(UnitFileError):
        parse_service(text)


def test_unknown_flags_say_what_became_of_them_and_stay_in_the_profile_as_a_comment() -> None:
    parsed = parse_server_argv(["--mamba-scheduler-strategy", "extra_buffer", "--port", "1"], C23)
    [unknown, value] = parsed.findings
    assert "SGLang had it up to 0.5.1" in unknown.hint and "mamba_radix_cache_strategy" in unknown.hint
    assert "a value of the refused '--mamba-scheduler-strategy'" in value.message
    later = parse_server_argv(["--cuda-graph-bs-decode", "8"], C11).findings[0]
    assert "newer SGLang than assumed" in later.hint
    observed = Observed(("/v/bin/python3", "-m", "sglang.launch_server", "--model-path", "/m",
                         "--mamba-scheduler-strategy", "extra_buffer"))
    imported = import_launch(observed, C23, Target("ct129"))
    assert "# not imported, SGLang 0.5.23 refuses them (see the import's report): --mamba-scheduler-strategy " \
           "extra_buffer" in imported.text


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("answer", "adopted"), [("y\n", True), ("\n", False)])
def test_apply_asks_on_a_terminal_before_adopting(answer: str, adopted: bool, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A refusal for a port held outside the unit (SGD705) asks; only a yes re-runs with --adopt."""
    runs: list[bool] = []

    def fake_apply(args: argparse.Namespace, dry_run: bool) -> int:
        runs.append(args.adopt)
        args._port_in_use = not args.adopt
        return 0 if args.adopt else 2

    monkeypatch.setattr(apply_command, "run_apply", fake_apply)
    monkeypatch.setattr(sys, "stdin", _Terminal(answer))
    code = cli.main(["apply", "p.toml"])
    assert runs == ([False, True] if adopted else [False]) and code == (0 if adopted else 2)
    assert "take over" in capsys.readouterr().err


def test_config_file_flags_are_named_not_guessed() -> None:
    observed = observed_from_command("/v/bin/python3 -m sglang.launch_server --model-path /m --config /etc/s.yaml")
    imported = import_launch(observed, C23, Target("ct129"))
    assert tomllib.loads(imported.text)["server"]["config"] == "/etc/s.yaml"
    assert any("reads more flags from that file" in note for note in imported.notes)


def test_a_server_that_exits_during_the_import_is_a_clear_result() -> None:
    from sgdeploy.deploy.adopt import choose_server

    gone = subprocess.Popen([sys.executable, "-c", "pass", "-m", "sglang.launch_server", "--port", "1"])
    gone.wait()
    out = subprocess.run(["sh", "-s", "--", str(gone.pid), ""], input=script(), capture_output=True, text=True,
                         timeout=120).stdout
    found = parse_servers(out)
    assert found.complete and all(s.process.pid != gone.pid for s in found.servers)
    with pytest.raises(LaunchError, match=rf"pid {gone.pid} on h is no SGLang server \(or it exited during"):
        choose_server(found, "h", gone.pid, None)


def test_import_keeps_the_variables_that_keep_nvlink_multicast_off() -> None:
    """The real hand launch (tests/fixtures/h200-real/adopt/hand-launch.txt) set all three; the first
    real import kept two, and the adopted unit ran without NVSHMEM_DISABLE_NVLS."""
    environ = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
               "GLOO_SOCKET_IFNAME": "eth0", "TORCHINDUCTOR_CACHE_DIR": "/var/cache/x", "HOME": "/root",
               "SSH_CONNECTION": "10.0.0.1 22", "TERM": "xterm"}
    assert sorted(sglang_env(environ)) == ["GLOO_SOCKET_IFNAME", "NCCL_NVLS_ENABLE", "NVSHMEM_DISABLE_NVLS",
                                           "TORCHINDUCTOR_CACHE_DIR", "TORCH_SYMM_MEM_DISABLE_MULTICAST"]
