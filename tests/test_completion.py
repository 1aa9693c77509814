"""Shell completion: the scripts `sgdeploy completion bash|zsh` print, run by the real shells.

bash: the script is sourced and its function called the way bash's programmable completion
calls it (COMP_WORDS, COMP_CWORD; `=` split off as readline does). zsh: an interactive zsh under
zpty loads the script after compinit and completes typed lines; compadd is wrapped to write the
matches to a file. Inventory names come from `sgdeploy __complete`, as in a user's shell.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sgdeploy import cli
from sgdeploy.cli.completion import names

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder like a checkout of profiles: profiles/, inventory.toml, another inventory, a log."""
    root = tmp_path_factory.mktemp("completion")
    shutil.copytree(REPO / "profiles", root / "profiles", ignore=shutil.ignore_patterns("README.md"))
    shutil.copy(REPO / "inventory.toml", root / "inventory.toml")
    (root / "lab.toml").write_text('[hosts.lab-1]\naddress = "10.0.0.1"\n[hosts.lab-2]\naddress = "10.0.0.2"\n'
                                   '[groups]\nlab = ["lab-1", "lab-2"]\n')
    (root / "server.log").write_text("")
    return root


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SGDEPLOY_INVENTORY", "PYTHONPATH")}
    return {**env, "PATH": f"{BIN}{os.pathsep}{env['PATH']}", **extra}


def script(shell: str) -> str:
    done = subprocess.run([str(BIN / "sgdeploy"), "completion", shell], capture_output=True, text=True,
                          timeout=60, env=environment())
    assert done.returncode == 0, done.stderr
    return done.stdout


# --------------------------------------------------------------------------- bash
BASH_HARNESS = r"""
source "$1"
complete -p sgdeploy
shift
for line in "$@"; do
    # split as readline does: on blanks, with `=` a word of its own
    read -ra COMP_WORDS <<< "${line//=/ = }"
    [[ $line == *" " ]] && COMP_WORDS+=("")
    COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    COMPREPLY=()
    _sgdeploy
    printf '%s\n' "::$line" "${COMPREPLY[@]}"
done
"""


def bash_complete(workdir: Path, *lines: str, **env: str) -> tuple[str, dict[str, list[str]]]:
    path = workdir / "sgdeploy.bash"
    path.write_text(script("bash"))
    done = subprocess.run(["bash", "--norc", "--noprofile", "-c", BASH_HARNESS, "bash", str(path), *lines],
                          cwd=workdir, capture_output=True, text=True, timeout=60, env=environment(**env))
    assert done.returncode == 0 and not done.stderr, done.stderr
    registration, *rest = done.stdout.splitlines()
    return registration, _matches(rest)


def _matches(output: list[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    current = ""
    for line in output:
        if line.startswith("::"):
            current = line[2:]
            found[current] = []
        elif line:
            found[current].append(line)
    return found


def test_bash_registers_the_function(workdir: Path) -> None:
    registration, _ = bash_complete(workdir)
    assert registration == "complete -F _sgdeploy sgdeploy"


def test_bash_commands_and_options(workdir: Path) -> None:
    _, found = bash_complete(workdir, "sgdeploy ", "sgdeploy va", "sgdeploy apply --no-", "sgdeploy validate --",
                             "sgdeploy validate --format ", "sgdeploy diff --format=", "sgdeploy completion ",
                             "sgdeploy validate --sglang 0.5.2")
    commands = found["sgdeploy "]
    assert {"validate", "diff", "render", "plan", "apply", "rollback", "history", "status", "probe", "logcheck",
            "import", "schema", "completion", "--version"} <= set(commands)
    assert "__complete" not in commands
    assert found["sgdeploy va"] == ["validate"]
    assert {"--no-canary", "--no-rollback"} <= set(found["sgdeploy apply --no-"])
    assert all(option.startswith("--no-") for option in found["sgdeploy apply --no-"])
    assert {"--inventory", "--format", "--sglang", "--changed", "--help"} <= set(found["sgdeploy validate --"])
    assert found["sgdeploy validate --format "] == ["text", "json", "github"]
    assert found["sgdeploy diff --format="] == ["text", "json", "markdown"]
    assert found["sgdeploy completion "] == ["bash", "zsh", "fish"]
    assert "0.5.23" in found["sgdeploy validate --sglang 0.5.2"]


def test_bash_profile_files(workdir: Path) -> None:
    _, found = bash_complete(workdir, "sgdeploy validate prof", "sgdeploy apply profiles/", "sgdeploy plan profiles/q",
                             "sgdeploy logcheck --profile profiles/d", "sgdeploy logcheck ser",
                             "sgdeploy validate profiles/qwen36-mtp3.toml profiles/d")
    assert found["sgdeploy validate prof"] == ["profiles"]
    assert sorted(found["sgdeploy apply profiles/"]) == [
        "profiles/deepseek-v3-h200.toml", "profiles/qwen3-8b-dense.toml", "profiles/qwen36-mtp3-strict.toml",
        "profiles/qwen36-mtp3.toml"]
    assert sorted(found["sgdeploy plan profiles/q"]) == ["profiles/qwen3-8b-dense.toml", "profiles/qwen36-mtp3-strict.toml",
                                                         "profiles/qwen36-mtp3.toml"]
    assert found["sgdeploy logcheck --profile profiles/d"] == ["profiles/deepseek-v3-h200.toml"]
    assert found["sgdeploy logcheck ser"] == ["server.log"]
    assert found["sgdeploy validate profiles/qwen36-mtp3.toml profiles/d"] == ["profiles/deepseek-v3-h200.toml"]


def test_bash_inventory_names(workdir: Path) -> None:
    _, found = bash_complete(workdir, "sgdeploy status --host ", "sgdeploy status --host h200",
                             "sgdeploy apply profiles/qwen36-mtp3.toml --host ",
                             "sgdeploy import ", "sgdeploy history --inventory lab.toml --host ",
                             "sgdeploy plan --inventory=lab.toml --host=lab",
                             "sgdeploy render profiles/qwen36-mtp3.toml ")
    assert found["sgdeploy status --host "] == ["ct129", "h200-01", "h200-02"]
    assert found["sgdeploy status --host h200"] == ["h200-01", "h200-02"]
    assert found["sgdeploy apply profiles/qwen36-mtp3.toml --host "] == ["ct129"]  # the profile's target
    assert found["sgdeploy import "] == ["ct129", "h200-01", "h200-02", "a6000", "h200"]  # hosts and groups
    assert found["sgdeploy history --inventory lab.toml --host "] == ["lab-1", "lab-2"]
    assert found["sgdeploy plan --inventory=lab.toml --host=lab"] == ["lab-1", "lab-2"]
    # the profile is given: options, not another profile
    assert "--host" in found["sgdeploy render profiles/qwen36-mtp3.toml "]


def test_bash_inventory_from_the_environment(workdir: Path) -> None:
    _, found = bash_complete(workdir, "sgdeploy status --host ", SGDEPLOY_INVENTORY="lab.toml")
    assert found["sgdeploy status --host "] == ["lab-1", "lab-2"]


# --------------------------------------------------------------------------- zsh
ZSH_HARNESS = r"""
zmodload zsh/zpty
out=$1 completion=$2; shift 2
zpty z zsh -f -i
zpty -w z "PS1=''; autoload -U compinit; compinit -u -D; source ${(q)completion}"
zpty -w z "compadd() { local -a __hits; builtin compadd -O __hits \"\$@\"; print -rl -- \$__hits >> ${(q)out}; }"
for line in "$@"; do
    zpty -w z "print -r -- ${(qq):-::$line} >> ${(q)out}"
    zpty -w z "$line"$'\t'
    zpty -w z $'\C-u'
done
zpty -w z "print -r -- ::done >> ${(q)out}"
for i in {1..200}; do grep -qx ::done $out 2>/dev/null && break; sleep 0.1; done
zpty -d z
"""


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed (scripts/setup installs it)")
def test_zsh_completes_commands_options_profiles_and_names(workdir: Path) -> None:
    path, out = workdir / "_sgdeploy", workdir / "zsh.out"
    path.write_text(script("zsh"))
    out.unlink(missing_ok=True)
    lines = ["sgdeploy ", "sgdeploy validate --f", "sgdeploy validate --format ", "sgdeploy apply profiles/",
             "sgdeploy status --host ", "sgdeploy apply profiles/deepseek-v3-h200.toml --host ",
             "sgdeploy history --inventory lab.toml --host ", "sgdeploy import "]
    done = subprocess.run(["zsh", "-f", "-c", ZSH_HARNESS, "zsh", str(out), str(path), *lines], cwd=workdir,
                          capture_output=True, text=True, timeout=120, env=environment())
    assert done.returncode == 0, done.stderr
    found = _matches(out.read_text().splitlines())
    assert "done" in found, found
    assert {"validate", "diff", "apply", "status", "import", "completion"} <= set(found["sgdeploy "])
    assert "--format" in found["sgdeploy validate --f"]
    assert sorted(found["sgdeploy validate --format "]) == ["github", "json", "text"]
    assert {"deepseek-v3-h200.toml", "qwen36-mtp3.toml"} <= set(found["sgdeploy apply profiles/"])
    assert found["sgdeploy status --host "] == ["ct129", "h200-01", "h200-02"]
    assert found["sgdeploy apply profiles/deepseek-v3-h200.toml --host "] == ["h200-02"]
    assert found["sgdeploy history --inventory lab.toml --host "] == ["lab-1", "lab-2"]
    assert found["sgdeploy import "] == ["ct129", "h200-01", "h200-02", "a6000", "h200"]


# --------------------------------------------------------------------------- __complete
def test_names_say_nothing_on_bad_input(tmp_path: Path) -> None:
    (tmp_path / "broken.toml").write_text("[hosts\n")
    assert names("hosts", str(tmp_path / "broken.toml"), None) == []
    assert names("hosts", str(tmp_path / "missing.toml"), str(tmp_path / "missing-profile.toml")) == []
    (tmp_path / "odd.toml").write_text('hosts = "x"\ngroups = 3\n')
    assert names("targets", str(tmp_path / "odd.toml"), None) == []


def test_hidden_subcommand(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("SGDEPLOY_INVENTORY", raising=False)
    assert cli.main(["__complete", "hosts", "--profile", "profiles/deepseek-v3-h200.toml"]) == 0
    assert capsys.readouterr().out == "h200-02\n"
    assert "__complete" not in cli.build_parser().format_help()


def test_completion_imports_nothing_heavy() -> None:
    """Completing a name starts the CLI: it must not load pydantic, Jinja or Fabric."""
    probe = ("import sys; from sgdeploy.cli import main; main(['__complete', 'targets']); "
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'pydantic', 'jinja2', 'fabric', 'paramiko'}))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env=environment())
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"


def test_bash_offers_no_inventory_or_hidden_folder_as_a_profile(workdir: Path) -> None:
    (workdir / ".git").mkdir(exist_ok=True)
    _, found = bash_complete(workdir, "sgdeploy validate ", "sgdeploy validate inv", "sgdeploy validate .")
    assert "inventory.toml" not in found["sgdeploy validate "] and "profiles" in found["sgdeploy validate "]
    assert found["sgdeploy validate inv"] == []
    assert ".git" not in found["sgdeploy validate ."]


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed (apt-get install fish)")
def test_fish_completes_commands_options_values_and_profiles(workdir: Path) -> None:
    script = subprocess.run([sys.executable, "-m", "sgdeploy", "completion", "fish"], capture_output=True,
                            text=True, check=True, env=environment()).stdout
    (workdir / "sgdeploy.fish").write_text(script)

    def complete(line: str) -> list[str]:
        done = subprocess.run(["fish", "--no-config", "-c", f"source sgdeploy.fish; complete -C {shlex.quote(line)}"],
                              cwd=workdir, capture_output=True, text=True, timeout=60, env=environment())
        assert done.returncode == 0, done.stderr
        return [line.split("\t")[0] for line in done.stdout.splitlines()]

    assert {"validate", "apply", "init", "completion"} <= set(complete("sgdeploy "))
    assert {"--inventory", "--strict", "--format"} <= set(complete("sgdeploy validate --"))
    assert complete("sgdeploy validate --format ") == ["github", "json", "text"]
    assert "profiles/qwen36-mtp3.toml" in complete("sgdeploy apply profiles/q")
    assert "0.5.23" in complete("sgdeploy validate --sglang 0.5.2")
