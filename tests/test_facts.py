"""Host facts: parsers on captured output, the facts command run for real, idle decisions."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sgdeploy.host.facts import (
    APPS_QUERY_FIELDS,
    DEFAULT_IDLE_BASELINE_MIB,
    FactParseError,
    GpuInfo,
    GpuProcess,
    HostFacts,
    IdleVerdict,
    check_unit_name,
    facts_command,
    gpus_idle,
    listening_ports_proc,
    listening_ports_ss,
    lock_holder_pid,
    parse_compute_apps,
    parse_df_available,
    parse_facts,
    parse_key_values,
    parse_query_gpu,
    parse_unit_state,
    split_sections,
    state_dir,
)
from sgdeploy.sglang.gpus import (
    GPU_MODELS,
    compute_capability_for,
    gpu_memory_gib_for,
    gpu_model_for,
)

FIXTURES = Path(__file__).parent / "fixtures"
H200 = FIXTURES / "h200"  # captured with tests/fixtures/h200/capture.sh
SHARED = FIXTURES / "nvidia-smi-h200"  # copied from shared/fixtures/nvidia-smi-h200

UUID = "GPU-0e6c7052-814e-3e73-433d-990cf024f8b6"
SHARED_UUID = "GPU-19941676-ad11-9619-7f5d-92dad1829175"
# The shared noheader captures used a different query than sgdeploy's.
SHARED_NOHEADER_FIELDS = (
    "index",
    "uuid",
    "name",
    "compute_cap",
    "memory.total",
    "memory.used",
    "memory.free",
    "utilization.gpu",
)
SHARED_APPS_FIELDS = ("gpu_uuid", "pid", "process_name", "used_memory")


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


# --- nvidia-smi csv -----------------------------------------------------------------------------

H200_GPU_USED = {"idle": 0, "ctx": 527, "busy": 123407, "after": 0}
H200_APPS = {"idle": (), "ctx": ((480, 518),), "busy": ((480, 123398),), "after": ()}


@pytest.mark.parametrize("state", sorted(H200_GPU_USED))
@pytest.mark.parametrize("variant", ["query-gpu.csv", "query-gpu.noheader.nounits.csv"])
def test_query_gpu_h200(state: str, variant: str) -> None:
    (gpu,) = parse_query_gpu(read(H200 / f"{state}.{variant}"))
    assert gpu == GpuInfo(
        index=0,
        uuid=UUID,
        name="NVIDIA H200",
        compute_capability="9.0",
        memory_total_mib=143771,
        memory_used_mib=H200_GPU_USED[state],
        pci_bus_id="00000000:00:06.0",
    )


@pytest.mark.parametrize("state", sorted(H200_APPS))
@pytest.mark.parametrize("variant", ["compute-apps.csv", "compute-apps.noheader.nounits.csv"])
def test_compute_apps_h200(state: str, variant: str) -> None:
    apps = parse_compute_apps(read(H200 / f"{state}.{variant}"))
    assert tuple((p.pid, p.used_memory_mib) for p in apps) == H200_APPS[state]
    assert all(p.process_name == "python3" and p.gpu_uuid == UUID for p in apps)


@pytest.mark.parametrize(("state", "used"), [("idle", 0), ("busy", 19601), ("after", 0)])
def test_query_gpu_shared_fixtures(state: str, used: int) -> None:
    with_header = parse_query_gpu(read(SHARED / f"{state}.query-gpu.csv"))
    no_header = parse_query_gpu(
        read(SHARED / f"{state}.query-gpu.noheader.csv"), SHARED_NOHEADER_FIELDS
    )
    assert with_header == no_header
    (gpu,) = with_header
    assert (gpu.uuid, gpu.compute_capability, gpu.memory_used_mib) == (SHARED_UUID, "9.0", used)
    assert gpu.pci_bus_id is None  # not in that query


@pytest.mark.parametrize(("state", "count"), [("idle", 0), ("busy", 1), ("after", 0)])
def test_compute_apps_shared_fixtures(state: str, count: int) -> None:
    with_header = parse_compute_apps(read(SHARED / f"{state}.compute-apps.csv"))
    no_header = parse_compute_apps(
        read(SHARED / f"{state}.compute-apps.noheader.csv"), SHARED_APPS_FIELDS
    )
    assert with_header == no_header
    assert len(with_header) == count
    if count:
        assert with_header[0] == GpuProcess(428, "python3", 19592, SHARED_UUID)


def test_query_gpu_not_available_values_and_table_fallback() -> None:
    text = (
        "index, uuid, name, compute_cap, memory.total [MiB], memory.used [MiB], pci.bus_id\n"
        "0, GPU-a, NVIDIA RTX A6000, [N/A], 49140 MiB, [Not Supported], 00000000:01:00.0  \n"
        "1, GPU-b, NVIDIA GeForce RTX 4090, [Not Supported], [N/A], 3 MiB, N/A\n"
    )
    a, b = parse_query_gpu(text)
    assert (a.compute_capability, a.memory_total_mib, a.memory_used_mib) == ("8.6", 49140, None)
    assert a.pci_bus_id == "00000000:01:00.0"  # trailing spaces dropped
    assert (b.compute_capability, b.memory_total_mib, b.pci_bus_id) == ("8.9", None, None)


def test_compute_apps_name_with_comma_and_unattributed_memory() -> None:
    text = "123, /opt/my, odd/python, [N/A], GPU-a\n"
    (p,) = parse_compute_apps(text, APPS_QUERY_FIELDS)
    assert p == GpuProcess(123, "/opt/my, odd/python", None, "GPU-a")


@pytest.mark.parametrize(
    "text",
    [
        "0, GPU-a, NVIDIA H200, 9.0, 143771\n",  # too few fields
        "x, GPU-a, NVIDIA H200, 9.0, 1, 2, 3\n",  # index not a number
        "0, GPU-a, NVIDIA H200, 9.0, lots, 2, 3\n",  # memory not MiB
        "0, [N/A], NVIDIA H200, 9.0, 1, 2, 3\n",  # no uuid
    ],
)
def test_query_gpu_rejects_malformed_rows(text: str) -> None:
    with pytest.raises(FactParseError):
        parse_query_gpu(text)


def test_nvidia_smi_invalid_field_message_is_on_stdout() -> None:
    # What an old driver does with compute_cap: rc 2 and this on stdout (see capture.sh).
    assert read(H200 / "invalid-field.stdout.txt").startswith('Field "no_such_field" is not')


# --- systemctl show -----------------------------------------------------------------------------

ACTIVE_UNIT = """\
ActiveState=active
SubState=running
MainPID=81234
ExecMainStatus=0
ExecMainCode=0
LoadState=loaded
FragmentPath=/etc/systemd/system/sglang.service
ActiveEnterTimestampMonotonic=912345678
InvocationID=0c8f3f0e1f9b4d6f9a1f7d2b6c4e8a10
NRestarts=2
"""

MISSING_UNIT = """\
ActiveState=inactive
SubState=dead
MainPID=0
ExecMainStatus=0
ExecMainCode=0
LoadState=not-found
FragmentPath=
ActiveEnterTimestampMonotonic=0
InvocationID=
NRestarts=0
"""

FAILED_UNIT = (
    MISSING_UNIT.replace("not-found", "loaded")
    .replace("ActiveState=inactive", "ActiveState=failed")
    .replace("ExecMainStatus=0", "ExecMainStatus=1")
    .replace("ExecMainCode=0", "ExecMainCode=1")
)


def test_unit_state_active() -> None:
    unit = parse_unit_state(ACTIVE_UNIT)
    assert unit.exists and unit.active
    assert (unit.main_pid, unit.n_restarts, unit.fragment_path) == (
        81234,
        2,
        "/etc/systemd/system/sglang.service",
    )
    assert unit.active_enter_timestamp_monotonic == 912345678
    assert unit.invocation_id == "0c8f3f0e1f9b4d6f9a1f7d2b6c4e8a10"


def test_unit_state_not_found() -> None:
    unit = parse_unit_state(MISSING_UNIT)
    assert not unit.exists and not unit.active
    assert (unit.main_pid, unit.fragment_path, unit.invocation_id) == (None, None, None)
    assert unit.active_enter_timestamp_monotonic is None


def test_unit_state_failed_keeps_exit_status() -> None:
    unit = parse_unit_state(FAILED_UNIT)
    assert (unit.active_state, unit.exec_main_status, unit.exec_main_code) == ("failed", 1, 1)


def test_unit_state_needs_load_state() -> None:
    with pytest.raises(FactParseError):
        parse_unit_state("Failed to get properties: Access denied\n")


def test_key_values_keeps_equals_in_values_and_skips_noise() -> None:
    assert parse_key_values("Environment=A=1 B=2\nnot a pair\n=x\nK=\n") == {
        "Environment": "A=1 B=2",
        "K": "",
    }


# --- kernel locks ---------------------------------------------------------------------------

PROC_LOCKS = """\
1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234 0 EOF
1: -> FLOCK  ADVISORY  WRITE 5151 fd:01:1234 0 EOF
2: POSIX  ADVISORY  WRITE 77 00:1a:99 0 EOF
3: OFDLCK ADVISORY  READ  -1 08:02:555 0 EOF
"""


@pytest.mark.parametrize(
    ("file_id", "pid"),
    [("fd01:1234", 4242), ("1a:99", 77), ("802:555", -1), ("fd01:1235", None), ("", None)],
)
def test_lock_holder_pid(file_id: str, pid: int | None) -> None:
    assert lock_holder_pid(PROC_LOCKS, file_id) == pid


def test_lock_held_and_free() -> None:
    lock = section("lock", 0, "id=fd01:1234\n--\npid=4242 user=ci")
    held = parse_facts(lock + section("proc_locks", 0, PROC_LOCKS))
    assert (held.locked, held.lock_pid, held.lock_holder) == (True, 4242, "pid=4242 user=ci")
    free = parse_facts(lock + section("proc_locks", 0, ""))
    assert (free.lock_present, free.locked, free.lock_pid) == (True, False, None)
    assert free.lock_holder == "pid=4242 user=ci"  # the last holder's note stays in the file


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="no /proc/locks")
def test_lock_holder_pid_against_this_kernel(tmp_path: Path) -> None:
    lock = tmp_path / "lock"
    lock.write_text("me\n")
    file_id = subprocess.run(
        ["stat", "-c", "%D:%i", str(lock)], capture_output=True, text=True, check=True
    ).stdout.strip()
    with lock.open() as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        assert lock_holder_pid(Path("/proc/locks").read_text(), file_id) == os.getpid()
    assert lock_holder_pid(Path("/proc/locks").read_text(), file_id) is None


# --- listening sockets, df ---------------------------------------------------------------------

SS_OUTPUT = """\
LISTEN 0      4096         0.0.0.0:30000      0.0.0.0:*
LISTEN 0      128    127.0.0.53%lo:53         0.0.0.0:*
LISTEN 0      511             [::]:8080          [::]:*
LISTEN 0      4096               *:9100             *:*
"""


def test_listening_ports_ss() -> None:
    assert listening_ports_ss(SS_OUTPUT) == {30000, 53, 8080, 9100}
    header = "State Recv-Q Send-Q Local Address:Port Peer Address:Port\n"
    assert listening_ports_ss(header + SS_OUTPUT) == {30000, 53, 8080, 9100}


def test_port_holders_name_pid_user_and_command() -> None:
    from sgdeploy.host.facts import PortHolder, parse_port_holders

    text = "pid=812 user=root\ncmd=/usr/bin/python3 -m http.server 30000 \npid=9 user=\ncmd=\n"
    assert parse_port_holders(text) == (PortHolder(812, "root", "/usr/bin/python3 -m http.server 30000"),
                                        PortHolder(9, None, ""))
    assert PortHolder(812, "root", "nginx: master").describe() == "pid 812 (nginx: master, user root)"


def test_listening_ports_proc_from_h200() -> None:
    sections, _ = split_sections(read(H200 / "busy.facts.txt"))
    # 127.0.0.1:30000 (the test server) and the VM's own agent on 2024; TIME_WAIT rows skipped.
    assert listening_ports_proc(sections["listen_proc"].stdout) == {30000, 2024}


def test_listening_ports_proc_ipv6() -> None:
    row = (
        "   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A "
        "00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0\n"
    )
    assert listening_ports_proc(row) == {8080}


def test_df_available() -> None:
    text = (
        "Filesystem     1024-blocks     Used Available Capacity Mounted on\n"
        "/dev/vda         264212084 16881616  67091956      21% /\n"
    )
    assert parse_df_available(text) == 67091956 * 1024
    with pytest.raises(FactParseError):
        parse_df_available("Filesystem 1024-blocks Used Available Capacity Mounted on\n")


# --- parse_facts on real output ----------------------------------------------------------------


def test_facts_h200_busy() -> None:
    facts = parse_facts(read(H200 / "busy.facts.txt"))
    assert facts.hostname == "vm" and facts.kernel is not None
    assert facts.nvidia_smi_found is True
    assert [g.uuid for g in facts.gpus] == [UUID]
    assert facts.gpu_processes == (GpuProcess(480, "python3", 123398, UUID),)
    assert (facts.python_ok, facts.python_version, facts.sglang_version) == (True, "3.12.3", None)
    assert (facts.model_dir_present, facts.model_config_present) == (True, True)
    assert facts.model_architectures == ("Qwen3ForCausalLM",)
    assert facts.model_architecture == "Qwen3ForCausalLM"
    assert (facts.port, facts.port_listening) == (30000, True)
    assert facts.deployments == ("20261130T092248Z-1a2b3c", "20261130T101500Z-4d5e6f")
    assert facts.last_good == "20261130T092248Z-1a2b3c"
    # The capture held the lock with `flock -o` (pid 476) while this snapshot ran.
    assert (facts.lock_present, facts.locked, facts.lock_pid) == (True, True, 476)
    assert facts.lock_holder == "pid=4242 user=ci host=laptop started=2026-11-30T10:15:00Z"
    assert facts.unit_dir_free_bytes == 67090528 * 1024
    # The capture VM has no systemd and no ss: one error, and the /proc fallback served.
    assert facts.unit is None
    assert [e.section for e in facts.errors] == ["unit"]
    error = facts.error("unit")
    assert error is not None and error.message.startswith("command not found")


@pytest.mark.parametrize("state", ["idle", "after"])
def test_facts_h200_idle(state: str) -> None:
    facts = parse_facts(read(H200 / f"{state}.facts.txt"))
    assert facts.gpus[0].memory_used_mib == 0 and facts.gpu_processes == ()
    assert (facts.model_dir_present, facts.model_config_present) == (False, False)
    assert facts.model_architecture is None
    assert facts.port_listening is False
    assert (facts.deployments, facts.last_good, facts.lock_present) == ((), None, False)
    assert facts.locked is False
    assert gpus_idle(facts).idle


def test_facts_h200_context_only_process() -> None:
    facts = parse_facts(read(H200 / "ctx.facts.txt"))
    # A bare CUDA context costs 518 MiB: below the baseline, yet the process is listed.
    verdict = gpus_idle(facts)
    assert not verdict.idle
    assert verdict.holders[0].used_memory_mib == 518 < DEFAULT_IDLE_BASELINE_MIB


# --- parse_facts on failures -------------------------------------------------------------------


def section(name: str, rc: int | None, out: str = "", err: str = "") -> str:
    lines = [f"@@sgdeploy:begin {name}@@"]
    lines += [f"|{line}" for line in out.splitlines()]
    lines += [f"!{line}" for line in err.splitlines()]
    if rc is not None:
        lines.append(f"@@sgdeploy:end {name} rc={rc}@@")
    return "\n".join(lines) + "\n"


def test_failed_sections_do_not_spoil_the_others() -> None:
    driver_down = (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running."
    )
    output = (
        "Welcome to ct129! (a login banner)\n"
        + section("request", 0, "port=30000")
        + section("host", 0, "Linux ct129 6.8.0 x86_64 GNU/Linux\nct129")
        + section("gpus", 9, driver_down)
        + section("gpus_legacy", 9, driver_down)
        + section("gpu_apps", 9, driver_down)
        + section("python", 0, "/root/ml-env/bin/python3\n3.12.3")
        + section("sglang", 0, "0.5.23")
        + section("model", 0, 'dir=1\nconfig=1\nconfig_error="JSONDecodeError: Expecting value"')
        + section("listen_ss", 0, SS_OUTPUT)
        + section("unit", 0, ACTIVE_UNIT)
        + section(
            "state",
            2,
            "",
            "ls: cannot open directory '/var/lib/sgdeploy/sglang': Permission denied",
        )
        + section("last_good", 0, "/var/lib/sgdeploy/sglang/20261101T000000Z-aaaaaa/")
        + section("lock", 0, "id=fd01:1234\n--\n")
        + section("disk", None, "Filesystem 1024-blocks")
    )
    facts = parse_facts(output)
    assert facts.nvidia_smi_found is True and facts.gpus == ()
    assert facts.sglang_version == "0.5.23" and facts.python_ok
    assert facts.model_config_present is True and facts.model_architecture is None
    assert facts.port_listening is True
    assert facts.unit is not None and facts.unit.active
    assert facts.deployments == ()
    assert facts.last_good == "20261101T000000Z-aaaaaa"  # a link's target: its last part
    assert facts.lock_present and facts.locked is None and facts.lock_holder is None
    assert facts.unit_dir_free_bytes is None
    messages = {e.section: e.message for e in facts.errors}
    assert set(messages) == {"gpus", "gpu_apps", "model", "state", "disk"}
    assert "couldn't communicate with the NVIDIA driver" in messages["gpus"]
    assert "Permission denied" in messages["state"]
    assert messages["disk"] == "output cut off before the section ended"


def test_no_nvidia_smi_is_a_fact_not_a_crash() -> None:
    missing = "sh: 1: nvidia-smi: not found"
    facts = parse_facts(section("gpus", 127, err=missing) + section("gpu_apps", 127, err=missing))
    assert facts.nvidia_smi_found is False
    assert facts.gpus == () and facts.gpu_processes == ()
    assert [(e.section, e.message) for e in facts.errors] == [("gpus", "nvidia-smi not found")]


def test_old_driver_falls_back_to_the_legacy_query() -> None:
    bad_field = 'Field "compute_cap" is not a valid field to query.\n\n'
    legacy = "0, GPU-a, NVIDIA A100-SXM4-40GB, 40960, 4, 00000000:07:00.0\n"
    facts = parse_facts(
        section("gpus", 2, bad_field) + section("gpus_legacy", 0, legacy) + section("gpu_apps", 0)
    )
    assert facts.errors == ()
    assert facts.gpus[0].compute_capability == "8.0"  # from the table


def test_python_missing_skips_sglang_and_model_probe() -> None:
    facts = parse_facts(
        section("python", 127, err="interpreter not found: /root/venv/bin/python3")
        + section("model", 0, "dir=1\nconfig=1")
    )
    assert not facts.python_ok and facts.sglang_version is None
    assert facts.model_config_present is True and facts.model_architecture is None
    error = facts.error("python")
    assert error is not None and "interpreter not found" in error.message


def test_sglang_not_installed_is_not_an_error() -> None:
    facts = parse_facts(section("python", 0, "/usr/bin/python3\n3.11.9") + section("sglang", 3))
    assert facts.python_ok and facts.sglang_version is None and facts.errors == ()


def test_sglang_probe_timeout() -> None:
    facts = parse_facts(section("python", 0, "/usr/bin/python3\n3.11.9") + section("sglang", 124))
    error = facts.error("sglang")
    assert error is not None and error.message == "timed out"


def test_marker_lookalikes_inside_output_are_content() -> None:
    lock = "id=\n--\n@@sgdeploy:end lock rc=0@@\n@@sgdeploy:begin gpus@@"
    facts = parse_facts(section("lock", 0, lock))
    assert facts.lock_holder == "@@sgdeploy:end lock rc=0@@\n@@sgdeploy:begin gpus@@"
    assert facts.gpus == () and facts.errors == ()


def test_unparseable_section_is_an_error() -> None:
    facts = parse_facts(section("gpus", 0, "garbage") + section("host", 0, "Linux x\nx"))
    assert facts.hostname == "x"
    error = facts.error("gpus")
    assert error is not None and error.message.startswith("unparseable output")


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("", "no facts sections in the output"),
        ("@@sgdeploy:fatal no temporary directory@@\n", "no temporary directory"),
    ],
)
def test_script_level_failures(output: str, message: str) -> None:
    assert parse_facts(output).errors[0].message == message


def test_truncated_section_followed_by_another() -> None:
    sections, _ = split_sections(section("host", None, "Linux") + section("disk", 0, "x"))
    assert sections["host"].rc is None and sections["disk"].rc == 0


# --- the facts command, run for real -----------------------------------------------------------

TOOLS = ("sh", "uname", "hostname", "mktemp", "mkdir", "rm", "cat", "ls", "df", "readlink")


def fake_path(tmp: Path, extra: dict[str, str] | None = None) -> str:
    """A PATH with only basic tools and python3, plus the given fake scripts."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    (bin_dir / "python3").symlink_to(sys.executable)
    for name, body in (extra or {}).items():
        script = bin_dir / name
        script.write_text("#!/bin/sh\n" + body, encoding="utf-8")
        script.chmod(0o755)
    return str(bin_dir)


def run_facts(command: str, path: str, cwd: Path | None = None) -> str:
    done = subprocess.run(
        ["/bin/sh", "-c", command],
        cwd=cwd,
        env={"PATH": path, "LC_ALL": "C"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_facts_command_degrades_without_gpu_tools(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    out = run_facts(facts_command("sglang", "python3", str(model), 30000), fake_path(tmp_path))
    facts = parse_facts(out)
    assert facts.nvidia_smi_found is False and facts.gpus == ()
    assert facts.unit is None
    assert {e.section for e in facts.errors} == {"gpus", "unit"}
    # Every other section still ran.
    assert facts.hostname and facts.python_ok and facts.python_version
    assert facts.model_architecture == "LlamaForCausalLM"
    assert facts.port == 30000 and facts.listening_ports is not None  # /proc fallback
    assert facts.unit_dir_free_bytes is None or facts.unit_dir_free_bytes >= 0


SMI_FAKE = f"""\
case "$*" in
  *--query-gpu=*) cat {H200 / "busy.query-gpu.noheader.nounits.csv"} ;;
  *--query-compute-apps=*) cat {H200 / "busy.compute-apps.noheader.nounits.csv"} ;;
  *) exit 2 ;;
esac
"""
SYSTEMCTL_FAKE = "cat <<'EOF'\n" + MISSING_UNIT + "EOF\n"


def test_facts_command_with_fake_tools(tmp_path: Path) -> None:
    path = fake_path(tmp_path, {"nvidia-smi": SMI_FAKE, "systemctl": SYSTEMCTL_FAKE})
    facts = parse_facts(run_facts(facts_command("sglang", "/no/such/python", "/no/model", 1), path))
    assert facts.gpus[0].memory_used_mib == 123407
    assert gpus_idle(facts).holders[0].pid == 480
    assert facts.unit is not None and not facts.unit.exists
    assert not facts.python_ok and facts.model_dir_present is False
    assert {e.section for e in facts.errors} == {"python"}


def test_facts_command_without_gpu_query(tmp_path: Path) -> None:
    out = run_facts(
        facts_command("sglang", "python3", "/m", 22, gpu_query=False), fake_path(tmp_path)
    )
    facts = parse_facts(out)
    assert facts.nvidia_smi_found is None and facts.error("gpus") is None


HOSTILE = st.text(
    alphabet=st.characters(exclude_characters="\0", exclude_categories=["Cs"]),
    max_size=40,
) | st.sampled_from(
    ["$(touch CANARY)", "`touch CANARY`", "'; touch CANARY; '", '"; touch CANARY; "', "\n-x", "-"]
)


@settings(max_examples=60, deadline=None)
@given(python=HOSTILE, model=HOSTILE)
def test_facts_command_parses_with_any_values(python: str, model: str) -> None:
    command = facts_command("sglang", python, model, 8080)
    done = subprocess.run(["/bin/sh", "-n", "-c", command], capture_output=True, check=False)
    assert done.returncode == 0, done.stderr


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(name=HOSTILE)
def test_hostile_model_path_is_data(tmp_path: Path, name: str) -> None:
    root = tmp_path / f"case{len(list(tmp_path.iterdir()))}"
    root.mkdir()
    model = root / "models" / name.replace("/", "_")
    if model.name in ("", ".", ".."):
        return
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"architectures": ["X"]}')
    command = facts_command("sglang", "python3", str(model), 8080, gpu_query=False)
    # Run in `root`: a "touch CANARY" that escaped its quotes would land there.
    facts = parse_facts(run_facts(command, fake_path(root), cwd=root))
    assert facts.model_architecture == "X"
    assert not (root / "CANARY").exists()


@pytest.mark.parametrize("unit", ["../etc", "a/b", "", ".", "x y", "a;b"])
def test_hostile_unit_names_are_refused(unit: str) -> None:
    with pytest.raises(ValueError):
        facts_command(unit, "python3", "/m", 80)


def test_unit_names_and_state_dir() -> None:
    assert state_dir("sglang") == state_dir("sglang.service") == "/var/lib/sgdeploy/sglang"
    assert check_unit_name("sglang@0.service") == "sglang@0.service"
    assert "sgd_unit=sglang.service" in facts_command("sglang", "python3", "/m", 80)


@pytest.mark.parametrize("port", [0, 65536, -1])
def test_bad_ports_are_refused(port: int) -> None:
    with pytest.raises(ValueError):
        facts_command("sglang", "python3", "/m", port)


# --- idleness ----------------------------------------------------------------------------------


def gpu(index: int, used: int | None, uuid: str | None = None) -> GpuInfo:
    return GpuInfo(index, uuid or f"GPU-{index}", "NVIDIA H200", "9.0", 143771, used)


def test_idle_from_fixtures() -> None:
    idle = parse_query_gpu(read(H200 / "idle.query-gpu.csv"))
    busy = parse_query_gpu(read(H200 / "busy.query-gpu.csv"))
    apps = parse_compute_apps(read(H200 / "busy.compute-apps.csv"))
    assert gpus_idle(idle, ()) == IdleVerdict(idle=True)
    verdict = gpus_idle(busy, apps, [0])
    assert not verdict.idle and verdict.residue == ()
    assert verdict.describe() == "GPU 0: pid 480 (python3) holds 123398 MiB"


def timeline(path: Path) -> list[tuple[float, str]]:
    """(time, row) of a release timeline: `epoch MiB apps=N`, or `epoch END how`."""
    rows = []
    for line in read(path).splitlines():
        stamp, _, rest = line.partition(" ")
        if stamp.replace(".", "").isdigit():
            rows.append((float(stamp), rest))
    return rows


@pytest.mark.parametrize("how", ["exit", "kill", "term"])
def test_release_timeline_on_h200(how: str) -> None:
    rows = timeline(H200 / f"release.{how}.timeline.txt")
    end = next(t for t, r in rows if r.startswith("END"))
    after = [(t - end, r.split()) for t, r in rows if t > end]
    verdicts = [
        gpus_idle(
            [gpu(0, int(mib), UUID)], [GpuProcess(1, "python3", None, UUID)] * (apps != "apps=0")
        )
        for _, (mib, apps) in after
    ]
    first_idle = next(dt for (dt, _), v in zip(after, verdicts, strict=True) if v.idle)
    assert first_idle < 0.5  # released in well under a second
    # Once idle, it stays idle.
    assert all(v.idle for (dt, _), v in zip(after, verdicts, strict=True) if dt >= first_idle)
    if how != "exit":
        # Right after a signal the process is gone from the list but its memory is not.
        assert verdicts[0].residue and not verdicts[0].holders


def test_shared_release_timeline_is_idle_throughout() -> None:
    for _, row in timeline(SHARED / "release.timeline.txt"):
        mib, apps = row.split()
        assert apps == "apps=0"
        assert gpus_idle([gpu(0, int(mib))], ()).idle


def test_nvml_reserved_memory_is_below_the_baseline() -> None:
    # NVML's v1 memory call counts the driver reservation as used on an idle H200.
    import json

    used = json.loads(read(SHARED / "idle.nvml.json"))["gpus"][0]["mem_used"]
    assert used // (1 << 20) == 615 < DEFAULT_IDLE_BASELINE_MIB
    assert gpus_idle([gpu(0, used // (1 << 20))], ()).idle


def test_residue_unknown_and_selection() -> None:
    gpus = [gpu(0, 0), gpu(1, 40000), gpu(2, 20), gpu(3, None)]
    procs = [GpuProcess(7, "sglang::scheduler", 300, "GPU-2")]
    v = gpus_idle(gpus, procs, [0, "GPU-1", "9", "GPU-nope"])
    assert not v.idle
    assert [r.gpu_index for r in v.residue] == [1]
    assert v.holders == ()  # the process is on GPU 2, not selected
    assert v.unknown == ("9", "GPU-nope")
    assert "GPU 1: 40000 MiB used by no listed process (baseline 1024 MiB)" in v.describe()
    assert "no GPU 9 on this host" in v.describe()
    assert gpus_idle(gpus, procs, [0, 3]).idle  # unknown memory is not held against a GPU
    assert gpus_idle(gpus, procs, [2]).holders[0].process_name == "sglang::scheduler"
    assert gpus_idle(gpus, (), [1], baseline_mib=50000).idle


def test_idle_accepts_host_facts() -> None:
    facts = HostFacts(gpus=(gpu(0, 0),), gpu_processes=(GpuProcess(1, "p", None, "GPU-0"),))
    v = gpus_idle(facts)
    assert not v.idle and v.describe() == "GPU 0: pid 1 (p) holds ? MiB"
    assert gpus_idle(facts, ()).idle


# --- GPU table ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "cc", "gib"),
    [
        ("NVIDIA H200", "9.0", 141),
        ("NVIDIA H200 NVL", "9.0", 141),
        ("NVIDIA H100 80GB HBM3", "9.0", 80),
        ("NVIDIA H100 PCIe", "9.0", 80),
        ("NVIDIA H100 NVL", "9.0", 94),
        ("NVIDIA A100-SXM4-80GB", "8.0", 80),
        ("NVIDIA A100-SXM4-40GB", "8.0", 40),
        ("NVIDIA A100 80GB PCIe", "8.0", 80),
        ("NVIDIA A10", "8.6", 24),
        ("NVIDIA A10G", "8.6", 24),
        ("NVIDIA RTX A6000", "8.6", 48),
        ("RTX A6000", "8.6", 48),
        ("A6000", "8.6", 48),
        ("NVIDIA L4", "8.9", 24),
        ("NVIDIA L40S", "8.9", 48),
        ("NVIDIA B200", "10.0", 180),
        ("NVIDIA GeForce RTX 4090", "8.9", 24),
        ("NVIDIA GeForce RTX 3090", "8.6", 24),
        ("NVIDIA GeForce RTX 3090 Ti", "8.6", 24),
        ("NVIDIA RTX 6000 Ada Generation", "8.9", 48),
        ("Quadro RTX 6000", "7.5", 24),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0", 96),
        ("Tesla V100-SXM2-16GB", "7.0", 16),
        ("Tesla T4", "7.5", 16),
        ("nvidia h100-sxm5-80gb", "9.0", 80),
    ],
)
def test_gpu_table(name: str, cc: str, gib: int) -> None:
    assert compute_capability_for(name) == cc
    assert gpu_memory_gib_for(name) == gib


@pytest.mark.parametrize("name", ["", "NVIDIA", "Radeon RX 7900", "NVIDIA A1000000"])
def test_gpu_table_unknown(name: str) -> None:
    assert gpu_model_for(name) is None and compute_capability_for(name) is None
    assert gpu_memory_gib_for(name) is None


def test_gpu_table_keys_are_normalized() -> None:
    for key, model in GPU_MODELS.items():
        assert gpu_model_for(key) is model
        assert model.compute_capability.count(".") == 1 and model.memory_gib
