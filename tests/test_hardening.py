"""deploy.hardening = "strict": the sandbox a profile gets, its exposure, and what it keeps working."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from sgdeploy.deploy.hardening import unit_sandbox
from sgdeploy.deploy.render import render_unit
from sgdeploy.host.facts import facts_command, parse_facts
from sgdeploy.profile.model import Profile, load_profile
from sgdeploy.sglang.catalog import load_catalog
from sgdeploy.sglang.sandbox import written_paths

ROOT = Path(__file__).resolve().parents[1]
STRICT = ROOT / "profiles" / "qwen36-mtp3-strict.toml"
REFERENCE = ROOT / "profiles" / "qwen36-mtp3.toml"
CATALOG = load_catalog("0.5.11")


def profile(deploy: str = "", server: str = "", env: str = "") -> Profile:
    text = (f'[deploy]\nhost = "h"\npython = "/opt/sgl/bin/python3"\nhardening = "strict"\n{deploy}\n'
            f'[env]\n{env}\n[server]\nmodel_path = "/srv/models/m"\n{server}\n')
    return Profile.model_validate(tomllib.loads(text))


def exposure(unit_text: str, folder: Path) -> float:
    path = folder / "sglang.service"
    path.write_text(unit_text, encoding="utf-8")
    done = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--no-pager", str(path)],
                          capture_output=True, text=True, check=False, timeout=60)
    last = done.stdout.strip().splitlines()[-1]
    return float(last.split(":", 1)[1].split()[0])


needs_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")


@needs_analyze
def test_the_strict_reference_unit_is_rated_at_most_4_5(tmp_path: Path) -> None:
    strict = render_unit(load_profile(STRICT), CATALOG, "ct129").text
    plain = render_unit(load_profile(REFERENCE), CATALOG, "ct129").text
    assert exposure(strict, tmp_path) <= 4.5
    assert exposure(plain, tmp_path) > 9  # the unhardened unit, for comparison: UNSAFE


def test_the_default_is_unhardened_and_strict_runs_as_sglang() -> None:
    plain = load_profile(REFERENCE).model
    assert plain is not None and plain.deploy.hardening == "none" and plain.deploy.run_as is None
    assert unit_sandbox(plain) is None
    strict = profile()
    assert strict.deploy.run_as == "sglang"
    assert profile(deploy='user = "llm"').deploy.run_as == "llm"


def test_caches_go_to_the_unit_cache_folder_unless_env_says_otherwise() -> None:
    sandbox = unit_sandbox(profile())
    assert sandbox is not None
    assert sandbox.cache_directory == "/var/cache/sgdeploy/sglang"
    assert sandbox.cache_directory_setting == "sgdeploy/sglang"
    assert dict(sandbox.environment)["HOME"] == "/var/cache/sgdeploy/sglang"
    own = unit_sandbox(profile(env='HOME = "/srv/home"\nTRITON_CACHE_DIR = "/srv/triton"'))
    assert own is not None
    assert "HOME" not in dict(own.environment)
    assert own.read_write_paths == ("/srv/home", "/srv/triton")


def test_folders_the_launch_writes_become_writable() -> None:
    sandbox = unit_sandbox(profile(deploy='writable_paths = ["/data/out"]',
                                   server='download_dir = "/data/dl"\ncrash_dump_folder = "/var/crash/sgl"',
                                   env='HF_HOME = "/var/cache/sgdeploy/sglang/hf"'))
    assert sandbox is not None
    # a folder inside the cache folder needs nothing more
    assert sandbox.read_write_paths == ("/data/dl", "/data/out", "/var/crash/sgl")
    found = written_paths({"download_dir": "/data/dl", "model_path": "/srv/m", "log_level": "info"},
                          {"TMPDIR": "/scratch", "OTHER": "/x"})
    assert [(w.field, w.path) for w in found] == [("server.download_dir", "/data/dl"), ("env.TMPDIR", "/scratch")]


def test_a_path_under_home_makes_home_read_only_not_hidden() -> None:
    assert unit_sandbox(profile()).protect_home == "yes"  # type: ignore[union-attr]
    moved = profile(server='tokenizer_path = "/home/alice/tok"')
    assert unit_sandbox(moved).protect_home == "read-only"  # type: ignore[union-attr]


def test_the_device_list_is_the_nvidia_groups_plus_rdma_between_nodes() -> None:
    single = unit_sandbox(profile())
    assert single is not None and single.device_paths == ()
    assert set(single.device_groups) == {"nvidia-frontend", "nvidia", "nvidia-uvm", "nvidia-caps", "nvidia-nvlink",
                                         "nvidia-nvswitch", "nvidia-caps-imex-channels"}
    multi = unit_sandbox(profile(server="nnodes = 2\nnode_rank = 0"))
    assert multi is not None and "infiniband_verbs" in multi.device_groups
    assert multi.device_paths == ("/dev/infiniband/rdma_cm",)


def test_the_rendered_strict_unit() -> None:
    text = render_unit(load_profile(STRICT), CATALOG, "ct129").text
    for line in ("User=sglang", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes",
                 "DevicePolicy=closed", "DeviceAllow=char-nvidia-uvm rw", "NoNewPrivileges=yes",
                 "CapabilityBoundingSet=", "CacheDirectory=sgdeploy/sglang", "UMask=0077",
                 "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
                 'Environment="HOME=/var/cache/sgdeploy/sglang"'):
        assert line in text.splitlines(), line
    # what SGLang's JIT needs stays: writable and executable memory, the venv's ninja on PATH
    assert "MemoryDenyWriteExecute" not in text and "SystemCallFilter" not in text


def test_facts_say_whether_the_unit_user_exists() -> None:
    command = facts_command("sglang", "/opt/sgl/bin/python3", "/srv/m", 30000, user="sglang")
    assert 'id -u "$sgd_user"' in command
    missing = parse_facts("@@sgdeploy:begin user@@\n|exists=0\n@@sgdeploy:end user rc=0@@\n")
    present = parse_facts("@@sgdeploy:begin user@@\n|exists=1\n@@sgdeploy:end user rc=0@@\n")
    assert (missing.user_exists, present.user_exists, parse_facts("").user_exists) == (False, True, None)
