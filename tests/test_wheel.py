"""The built package, installed the way users install it, run from outside the checkout.

`python -m build` makes the sdist and then the wheel from that sdist (so both must carry what
the tool reads at run time); the wheel goes into a fresh virtualenv that sees nothing of this
repository, and every command runs from a folder holding only a copy of the profiles and the
inventory. The host test does one `plan`, one `apply`, then `status` and `history` on a real
systemd test host with it. `pipx install` of the same wheel runs the same way (offline, from the
wheels scripts/setup saves).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.hosts import HostSet, HostSpec, SimSettings, booted_or_skipped, free_port
from tests.variants import reference

REPO = Path(__file__).resolve().parents[1]
LOG = REPO / "tests" / "logs" / "fail-graph-capture.log"


@dataclass(frozen=True)
class Installed:
    """A virtualenv holding the built wheel, and an empty working folder outside the repository."""

    venv: Path
    workdir: Path
    wheel: Path

    def run(self, *args: str, module: bool = False) -> subprocess.CompletedProcess[str]:
        """`sgdeploy ARGS` (or `python -m sgdeploy ARGS`) in the working folder."""
        command = ["python", "-m", "sgdeploy"] if module else ["sgdeploy"]
        return self.python_run(*command, *args)

    def python_run(self, program: str, *args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SGDEPLOY_INVENTORY")}
        return subprocess.run([str(self.venv / "bin" / program), *args], cwd=self.workdir, env=env,
                              capture_output=True, text=True, timeout=300)


def _quiet_pip(venv: Path, *args: str) -> None:
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *args],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("wheel")
    dist = root / "dist"
    built = subprocess.run([sys.executable, "-m", "build", "--outdir", str(dist), str(REPO)],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    # a build that warns (a deprecated pyproject key, a licence table) would fail here first
    assert "warning" not in (built.stdout + built.stderr).lower(), built.stdout + built.stderr
    (wheel,) = dist.glob("sgdeploy-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    _quiet_pip(venv, str(wheel))
    workdir = root / "work"
    workdir.mkdir()
    shutil.copytree(REPO / "profiles", workdir / "profiles")
    shutil.copy(REPO / "inventory.toml", workdir / "inventory.toml")
    return Installed(venv, workdir, wheel)


def test_wheel_carries_the_templates_and_catalogs(installed: Installed) -> None:
    names = zipfile.ZipFile(installed.wheel).namelist()
    assert "sgdeploy/templates/sglang.service.j2" in names
    assert "sgdeploy/templates/sglang-weights.service.j2" in names  # the weight-cache daemon's unit
    assert "sgdeploy/py.typed" in names
    catalogs = [n for n in names if n.startswith("sgdeploy/sglang/catalogs/")]
    bundled = [p for p in (REPO / "sgdeploy" / "sglang" / "catalogs").rglob("*") if p.is_file()]
    assert len(catalogs) == len(bundled)
    assert "sgdeploy/sglang/catalogs/checks/0.5.23.json.gz" in names
    assert "sgdeploy/sglang/data/check_sites.toml" in names
    metadata = zipfile.ZipFile(installed.wheel).read(
        next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in metadata


def test_installed_package_is_not_the_checkout(installed: Installed) -> None:
    done = installed.python_run("python", "-c", "import sgdeploy; print(sgdeploy.__file__)")
    assert str(installed.venv) in done.stdout and str(REPO) not in done.stdout


def test_validate_render_schema_logcheck_from_another_folder(installed: Installed) -> None:
    validate = installed.run("validate")
    assert validate.returncode == 0, validate.stdout + validate.stderr
    assert "4 profile(s) checked" in validate.stdout

    render = installed.run("render", "profiles/qwen36-mtp3.toml")
    assert render.returncode == 0, render.stderr
    assert "ExecStart=" in render.stdout and '"--speculative-num-steps" "3"' in render.stdout

    schema = installed.run("schema")
    assert schema.returncode == 0, schema.stderr
    assert "properties" in json.loads(schema.stdout)

    logcheck = installed.run("logcheck", str(LOG), "--json")
    assert logcheck.returncode == 1, logcheck.stderr
    assert json.loads(logcheck.stdout)["failure"]["kind"] == "graph_capture_failed", logcheck.stdout


def test_python_dash_m_and_version(installed: Installed) -> None:
    as_module = installed.run("render", "profiles/qwen36-mtp3.toml", module=True)
    assert as_module.returncode == 0, as_module.stderr
    assert as_module.stdout == installed.run("render", "profiles/qwen36-mtp3.toml").stdout
    version = installed.run("--version")
    assert version.returncode == 0 and version.stdout.startswith("sgdeploy ")


def test_diff_import_and_completion_from_another_folder(installed: Installed) -> None:
    changed = installed.workdir / "changed.toml"
    changed.write_text((installed.workdir / "profiles" / "qwen36-mtp3.toml").read_text()
                       .replace("speculative_num_steps = 3\n", ""))
    diff = installed.run("diff", "profiles/qwen36-mtp3.toml", str(changed), "--format", "markdown")
    assert diff.returncode == 0, diff.stderr
    assert "`--speculative-num-steps 3`" in diff.stdout

    imported = installed.run("import", "ct129", "--command",
                             "/root/ml-env/bin/python3 -m sglang.launch_server --model-path /m --tp-size 2")
    assert imported.returncode == 0, imported.stderr
    assert 'host = "ct129"' in imported.stdout and "tp_size = 2" in imported.stdout

    completion = installed.run("completion", "bash")
    assert completion.returncode == 0 and "complete -F _sgdeploy sgdeploy" in completion.stdout
    names = installed.run("__complete", "targets")
    assert names.returncode == 0 and names.stdout.split() == ["ct129", "h200-01", "h200-02", "a6000", "h200"]


def test_pipx_install(installed: Installed, tmp_path: Path) -> None:
    """`pipx install WHEEL` the way a user does it, offline from scripts/setup's wheelhouse."""
    wheelhouse = REPO / ".cache" / "wheelhouse"
    assert (wheelhouse / ".done").is_file(), f"{wheelhouse} is missing: run scripts/setup"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SGDEPLOY_INVENTORY", "VIRTUAL_ENV")}
    env.update(PIPX_HOME=str(tmp_path / "pipx"), PIPX_BIN_DIR=str(tmp_path / "bin"),
               PIPX_MAN_DIR=str(tmp_path / "man"), PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheelhouse))
    done = subprocess.run([str(Path(sys.executable).parent / "pipx"), "install", str(installed.wheel)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    sgdeploy = str(tmp_path / "bin" / "sgdeploy")
    for args, code, expected in ((["validate"], 0, "4 profile(s) checked"),
                                 (["render", "profiles/qwen36-mtp3.toml"], 0, '"--speculative-num-steps" "3"'),
                                 (["logcheck", str(LOG)], 1, "graph_capture_failed"),
                                 (["--version"], 0, "sgdeploy 0.1.0")):
        run = subprocess.run([sgdeploy, *args], cwd=installed.workdir, env=env, capture_output=True, text=True,
                             timeout=120)
        assert run.returncode == code and expected in run.stdout + run.stderr, (args, run.stdout, run.stderr)


@pytest.fixture(scope="module")
def host() -> Iterator[HostSet]:
    fast = SimSettings(startup_s=1.0, release_delay_s=0.5)
    with booted_or_skipped([HostSpec.like("ct129", sim=fast)]) as hs:
        # the real model's maximum: plan and apply check context_length against config.json
        hs.make_model("ct129", "/root/models/Qwen3.6-27B", "Qwen3_5ForConditionalGeneration",
                      max_position_embeddings=262144)
        yield hs


@pytest.mark.hosts
def test_plan_and_apply_from_the_wheel(installed: Installed, host: HostSet) -> None:
    # SGLang before 0.5.16 refuses a port whose gRPC port (port + 10000) is past 65535 (SGD532)
    port = next(p for p in iter(free_port, None) if p <= 55535)
    profile = installed.workdir / "deploy.toml"
    profile.write_text(reference(port))
    inventory = str(host.inventory_path)

    plan = installed.run("plan", str(profile), "--inventory", inventory, "--json")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert json.loads(plan.stdout)["status"] == "planned"

    apply = installed.run("apply", str(profile), "--inventory", inventory, "--json", "--settle", "1")
    assert apply.returncode == 0, apply.stdout + apply.stderr
    assert json.loads(apply.stdout)["status"] == "ready"
    unit = host.ssh("ct129", "cat /etc/systemd/system/sglang.service").stdout
    assert '"--speculative-num-steps" "3"' in unit

    status = installed.run("status", str(profile), "--inventory", inventory, "--json")
    assert status.returncode == 0, status.stdout + status.stderr
    assert json.loads(status.stdout)["healthy"] is True
    history = installed.run("history", str(profile), "--inventory", inventory, "--json")
    assert history.returncode == 0, history.stderr
    assert [d["outcome"] for d in json.loads(history.stdout)["deployments"]] == ["ready"]
