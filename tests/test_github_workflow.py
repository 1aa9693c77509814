"""The example GitHub Actions workflow (examples/github/sgdeploy.yml).

actionlint (with ShellCheck for its `run:` scripts) lints it as CI would. Then its `run:` steps
are run the way a runner runs them (`bash -e`, the workflow's and the step's environment,
`GITHUB_STEP_SUMMARY`, `continue-on-error`, `if:`) in a pull-request checkout that drops
`speculative_num_steps` and misspells a flag: the annotations, the job summary and the job's
failure are what a reviewer would see. Only `uses:` steps and the install step are left out
(the test runs the sgdeploy of this checkout; tests/test_wheel.py installs the built wheel).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
WORKFLOW = REPO / "examples" / "github" / "sgdeploy.yml"
BIN = Path(sys.executable).parent
REFERENCE = "profiles/qwen36-mtp3.toml"
IDENTITY = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}


def actionlint(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    assert shutil.which("shellcheck"), "shellcheck is missing: run scripts/setup"
    return subprocess.run([str(BIN / "actionlint"), "-no-color", *args], input=stdin, capture_output=True,
                          text=True, timeout=120, cwd=REPO)


def test_actionlint_passes_the_example() -> None:
    done = actionlint("-verbose", str(WORKFLOW))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Found total 0 errors" in done.stderr
    assert "shellcheck" not in done.stderr  # ShellCheck was found and ran on the run: scripts


def test_actionlint_is_live() -> None:
    """The same linter refuses what the example avoids: an untrusted expression in a script,
    an unquoted expansion, an outcome of a step that does not exist."""
    text = WORKFLOW.read_text()
    injected = text.replace('"origin/$BASE_REF"', '"origin/${{ github.head_ref }}"')
    assert '"github.head_ref" is potentially untrusted' in actionlint("-", stdin=injected).stdout
    unquoted = text.replace('>> "$GITHUB_STEP_SUMMARY"', ">> $GITHUB_STEP_SUMMARY")
    assert "SC2086" in actionlint("-", stdin=unquoted).stdout
    wrong_id = text.replace("steps.validate.outcome", "steps.validation.outcome")
    assert 'property "validation" is not defined' in actionlint("-", stdin=wrong_id).stdout


# --------------------------------------------------------------------------- running the steps
EXPRESSION = re.compile(r"\$\{\{\s*(.+?)\s*\}\}")


@dataclass
class Job:
    """The outcome of running a job's steps: per step id or name, outcome and output."""

    failed: bool = False
    outcomes: dict[str, str] = field(default_factory=dict)
    output: dict[str, str] = field(default_factory=dict)
    summary: str = ""


def evaluate(expression: str, job: Job, github: dict[str, str]) -> Any:
    """The few expressions the example uses; another one fails the test until it is taught here."""
    if expression.startswith("github."):
        return github[expression.removeprefix("github.")]
    if expression == "always()":
        return True
    match = re.fullmatch(r"steps\.(\w+)\.outcome (==|!=) '(\w+)'", expression)
    assert match, f"the test does not know the expression {expression!r}"
    step, op, value = match.groups()
    return (job.outcomes[step] == value) == (op == "==")


def substitute(text: str, job: Job, github: dict[str, str]) -> str:
    return EXPRESSION.sub(lambda m: str(evaluate(m.group(1), job, github)), text)


def run_job(workflow: dict[str, Any], checkout: Path, github: dict[str, str], skip: set[str]) -> Job:
    (name, spec), = workflow["jobs"].items()
    job, summary = Job(), checkout.parent / f"summary-{name}.md"
    summary.write_text("")
    base_env = {k: v for k, v in os.environ.items() if k not in ("SGDEPLOY_INVENTORY", "PYTHONPATH")}
    base_env.update({k: str(v) for k, v in workflow.get("env", {}).items()},
                    PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", GITHUB_STEP_SUMMARY=str(summary), CI="true")
    for step in spec["steps"]:
        key = step.get("id") or step.get("name") or step.get("uses", "")
        condition = str(step.get("if", "success()"))
        if "run" not in step or step.get("name") in skip:
            continue
        if not (evaluate(condition, job, github) if condition != "success()" else not job.failed):
            job.outcomes[key] = "skipped"
            continue
        env = {**base_env, **{k: substitute(str(v), job, github) for k, v in step.get("env", {}).items()}}
        script = checkout.parent / "step.sh"
        script.write_text(substitute(step["run"], job, github))
        done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=checkout,
                              env=env, capture_output=True, text=True, timeout=300)
        job.output[key] = done.stdout + done.stderr
        job.outcomes[key] = "success" if done.returncode == 0 else "failure"
        if done.returncode != 0 and not step.get("continue-on-error"):
            job.failed = True
    job.summary = summary.read_text()
    return job


def git(repo: Path, *args: str) -> None:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=60,
                          env={**os.environ, **IDENTITY})
    assert done.returncode == 0, done.stderr


@pytest.fixture
def pull_request(tmp_path: Path) -> Path:
    """A clone whose origin/main holds the example profiles; the branch checked out is the change."""
    base = tmp_path / "base"
    shutil.copytree(REPO / "profiles", base / "profiles")
    shutil.copy(REPO / "inventory.toml", base / "inventory.toml")
    git(base, "init", "-q", "-b", "main")
    git(base, "add", "-A")
    git(base, "commit", "-q", "-m", "start")
    checkout = tmp_path / "checkout"
    git(tmp_path, "clone", "-q", str(base), str(checkout))
    git(checkout, "checkout", "-q", "-b", "change")
    return checkout


def commit(checkout: Path, path: str, old: str, new: str) -> None:
    text = (checkout / path).read_text()
    assert old in text
    (checkout / path).write_text(text.replace(old, new))
    git(checkout, "commit", "-q", "-am", "change")


def workflow_run(checkout: Path) -> Job:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    return run_job(workflow, checkout, {"base_ref": "main"}, skip={"Install sgdeploy"})


def test_a_change_with_an_error_annotates_summarises_and_fails(pull_request: Path) -> None:
    commit(pull_request, REFERENCE, "speculative_num_steps = 3\n", "")
    commit(pull_request, "profiles/qwen3-8b-dense.toml", "mem_fraction_static", "mem_fraction_statik")
    job = workflow_run(pull_request)

    assert job.outcomes == {"validate": "failure", "What the change does to each server": "success",
                            "Fail on validation errors": "failure"}
    assert job.failed
    annotations = job.output["validate"].splitlines()
    assert any(line.startswith("::error file=profiles/qwen3-8b-dense.toml,line=") and "title=SGD010::" in line
               for line in annotations), annotations
    assert any(line.startswith(f"::error file={REFERENCE},line=") for line in annotations), annotations
    lines = job.summary.splitlines()
    assert lines[2:4] == ["> [!CAUTION]", "> **Flags removed** (the server will run without them):"]
    removed = [line for line in lines if line.startswith("> - ")]
    assert any(line.startswith(f"> - `{REFERENCE}` on **ct129**: `--speculative-num-steps 3`") for line in removed)
    # the misspelt flag is a flag removed too: the server would lose --mem-fraction-static
    assert any("`--mem-fraction-static 0.85`" in line for line in removed), removed


def test_a_clean_change_passes_with_its_summary(pull_request: Path) -> None:
    commit(pull_request, REFERENCE, "max_running_requests = 16", "max_running_requests = 24")
    job = workflow_run(pull_request)
    assert not job.failed, job.output
    assert job.outcomes["validate"] == "success" and job.outcomes["Fail on validation errors"] == "skipped"
    assert "`--max-running-requests`" in job.summary and "[!CAUTION]" not in job.summary
