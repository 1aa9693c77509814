"""The demo: a local host that looks like ct129 (2x RTX A6000, SGLang 0.5.11), the reference
profile applied end to end, its status, then a profile that crashes during CUDA graph capture
and the automatic rollback. Only SGLang and the GPUs on the host are simulated."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.hosts import HostSpec, boot_hosts  # noqa: E402


def say(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def sgdeploy(*args: str, inventory: Path) -> int:
    command = [str(REPO / ".venv/bin/sgdeploy"), *args, "--inventory", str(inventory)]
    print("$ sgdeploy " + " ".join(args), flush=True)
    return subprocess.run(command, cwd=REPO).returncode


def main() -> int:
    say("booting a test host like ct129: real systemd, journald and sshd in systemd-nspawn")
    with boot_hosts([HostSpec.like("ct129")]) as hosts:
        hosts.make_model("ct129", "/root/models/Qwen3.6-27B", "Qwen3_5ForConditionalGeneration")
        hosts.configure_sim("ct129", failure="graph_capture", fail_when_arg=["--cuda-graph-max-bs=512"])
        inventory = hosts.inventory_path
        say("validate the reference profile against ct129's SGLang 0.5.11 and its SM86 GPUs")
        sgdeploy("validate", "profiles/qwen36-mtp3.toml", inventory=inventory)
        say("what SGLang 0.5.23 would say about the same profile (the upgrade check)")
        sgdeploy("validate", "profiles/qwen36-mtp3.toml", "--sglang", "0.5.23", inventory=inventory)
        say("plan, then apply the reference profile")
        sgdeploy("plan", "profiles/qwen36-mtp3.toml", inventory=inventory)
        if sgdeploy("apply", "profiles/qwen36-mtp3.toml", inventory=inventory) != 0:
            return 1
        say("status of the running deployment")
        sgdeploy("status", "profiles/qwen36-mtp3.toml", inventory=inventory)
        say("apply a profile whose server crashes while capturing CUDA graphs: automatic rollback")
        code = sgdeploy("apply", "scripts/demo/qwen36-mtp3-bs512.toml", inventory=inventory)
        print(f"(exit code {code}: 1 means the deployment failed and the previous one was restored)")
        say("history and status after the rollback")
        sgdeploy("history", "profiles/qwen36-mtp3.toml", inventory=inventory)
        return sgdeploy("status", "profiles/qwen36-mtp3.toml", inventory=inventory)


if __name__ == "__main__":
    raise SystemExit(main())
