"""Boot real systemd test hosts with systemd-nspawn and reach them over SSH on loopback.

Each host is a Debian bookworm container (``systemd-nspawn --boot``) running real
systemd, journald and sshd.  Its root is an overlayfs mount: the cached rootfs
(see rootfs.py) as the read-only lower layer and a per-host upper directory, so a
host costs a few milliseconds to create and nothing to throw away.  The containers
share the machine's network namespace; each sshd listens on 127.0.0.1 on its own
port.  SGLang and the GPUs are simulated (tests/hosts/payload).

A host with ``HostSpec(private_network=True)`` gets a network namespace of its own
instead (``ip netns add sgd-<run>-<name>``), joined to one bridge of the run by a
veth pair.  The run takes a free 169.254.N.0/24: the bridge (this machine) is .1,
the hosts are .2, .3, ...  Each such host's sshd listens on its own address, port
22; hosts of the run reach each other by address; nothing is forwarded or routed
beyond the bridge (no default route, no NAT).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import gzip
import ipaddress
import json
import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .rootfs import PLAIN_UID, PLAIN_USER, SUDO_UID, SUDO_USER, ensure_rootfs

HERE = Path(__file__).resolve().parent
PAYLOAD = HERE / "payload"
REPO = HERE.parent.parent
SHARED_SGLANG = Path(os.environ.get("SGDEPLOY_SHARED_SGLANG", "/work/shared/sglang"))
REPO_CATALOGS = REPO / "sgdeploy" / "sglang" / "catalogs"
RUN_ROOT = Path(os.environ.get("SGDEPLOY_TESTHOSTS_RUN", "/dev/shm/sgdeploy-testhosts"))

# Logins besides root on every host: one with passwordless sudo, one without.
LOGINS = {SUDO_USER: SUDO_UID, PLAIN_USER: PLAIN_UID}

FAILURES = (
    "cuda_oom",
    "kv_cache_oom",
    "graph_capture",
    "hang",
    "slow",
    "crash_after_ready",
    "port_in_use",
    "bad_argument",
    "nccl_init",
)


# --------------------------------------------------------------------------- specs


@dataclass
class SimSettings:
    """How the simulated SGLang on a host behaves (written to /etc/sglang-sim.toml)."""

    startup_s: float = 2.5  # launch -> ready line, spread over the startup phases
    tokens_per_s: float = 200.0  # per-request generation rate of /generate, /v1/completions
    release_delay_s: float = 2.0  # GPU memory stays visible in nvidia-smi this long after exit
    failure: str = ""  # one of FAILURES, or "" for a healthy server
    fail_when_arg: list[str] = field(default_factory=list)  # failure only if all these args given
    crash_after_ready_s: float = 2.0  # crash_after_ready: dies this long after ready
    slow_start_s: float = 20.0  # slow: startup_s becomes this
    hang_at: str = "load"  # hang: "load" (after Load weight begin) or "warmup" (bound, 503)
    mem_mib: int = 0  # GPU memory per rank when ready; 0 = mem_fraction_static * total
    orphan_children: bool = False  # scheduler children survive the main process (stray GPU use)
    resolve_hang_s: float = 0.0  # sglang.srt.server_args: resolution sleeps this long (a hung check)
    broken_import: str = ""  # sglang.srt.server_args: importing it raises ImportError(this)
    ready_endpoint: bool = True  # False: /ready answers 404 even on 0.5.2x (a build without it)
    log_wrapper: str = ""  # "pylog": every line inside a launcher's Python logging record
    sigterm_drain: bool = False  # SIGTERM drains: /health 503, in-flight requests finish (5 s polls), as when the main process alone gets it

    def to_toml(self) -> str:
        return _toml_table("sglang_sim", dataclasses.asdict(self))


@dataclass
class HostSpec:
    """One test host: what it claims to be (inventory) and how its simulators behave."""

    name: str
    gpu: str = "RTX A6000"  # inventory model name; nvidia-smi shows "NVIDIA <gpu>"
    compute_capability: str = "8.6"
    gpu_count: int = 2
    gpu_memory_mib: int = 49140  # what nvidia-smi reports as memory.total
    sglang_version: str = "0.5.11"
    sim: SimSettings = field(default_factory=SimSettings)
    port: int = 0  # sshd port on 127.0.0.1; 0 = pick a free one (ignored: private_network)
    private_network: bool = False  # own netns + address on the run's bridge; sshd on port 22

    @property
    def gpu_memory_gib(self) -> int:
        return round(self.gpu_memory_mib / 1024)

    @property
    def smi_name(self) -> str:
        return self.gpu if self.gpu.startswith("NVIDIA") else f"NVIDIA {self.gpu}"

    @classmethod
    def like(cls, preset: str, name: str | None = None, **overrides: object) -> HostSpec:
        base = PRESETS[preset]
        spec = dataclasses.replace(base, name=name or base.name, sim=SimSettings())
        return dataclasses.replace(spec, **overrides)  # type: ignore[arg-type]


PRESETS: dict[str, HostSpec] = {
    # the reference profile's host: 2x RTX A6000, SGLang 0.5.11
    "ct129": HostSpec("ct129", "RTX A6000", "8.6", 2, 49140, "0.5.11"),
    "h200": HostSpec("h200", "H200", "9.0", 2, 143771, "0.5.23"),
    "b200": HostSpec("b200", "B200", "10.0", 8, 183359, "0.5.23"),
    "a6000-new": HostSpec("a6000-new", "RTX A6000", "8.6", 2, 49140, "0.5.23"),
}


# --------------------------------------------------------------------------- helpers


def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {v!r} as TOML")


def _toml_table(name: str, d: dict[str, object]) -> str:
    lines = [f"[{name}]"]
    for k, v in d.items():
        if v is None:
            continue
        lines.append(f"{k} = {_toml_value(v)}")
    return "\n".join(lines) + "\n"


# max_position_embeddings of the real models' config.json (without it SGLang derives 2048 and
# refuses the reference profile's context_length)
MODEL_POSITIONS = {"Qwen3_5ForConditionalGeneration": 262144, "Qwen3ForCausalLM": 40960}
# the bf16 checkpoints' total_size, as their model.safetensors.index.json says (SGD511 reads it)
MODEL_BYTES = {"Qwen3_5ForConditionalGeneration": 55_578_000_000, "Qwen3ForCausalLM": 16_381_470_720}


# Below the kernel's ephemeral range (32768-60999), so outgoing connections never take it, and
# below 55536, since SGLang derives a gRPC port of --port + 10000 and refuses one above 65535.
FREE_PORTS = range(20000, 32000)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (a server port SGLang accepts)."""
    for port in random.sample(FREE_PORTS, 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free TCP port in {FREE_PORTS.start}-{FREE_PORTS.stop - 1}")


def _log(msg: str) -> None:
    print(f"[testhosts] {msg}", file=sys.stderr, flush=True)


def _catalog_ok(data: bytes) -> bool:
    try:
        d = json.loads(data)
        return all("field" in f and "flags" in f for f in d["flags"]) and bool(d["flags"])
    except (ValueError, KeyError, TypeError):
        return False


def find_catalog(version: str) -> bytes:
    """The flag catalog JSON of an SGLang version: the repo's bundled one, else the shared one."""
    for p in (REPO_CATALOGS / f"{version}.json.gz", REPO_CATALOGS / f"{version}.json"):
        if p.exists():
            data = p.read_bytes()
            data = gzip.decompress(data) if p.suffix == ".gz" else data
            if _catalog_ok(data):
                return data
    p = SHARED_SGLANG / f"flags-{version}.json"
    if p.exists():
        return p.read_bytes()
    raise FileNotFoundError(f"no SGLang flag catalog for version {version}")


def skip_reason() -> str | None:
    """None if this machine can boot test hosts, else the reason it cannot."""
    from .rootfs import rootfs_path

    if os.geteuid() != 0:
        return "test hosts need root (systemd-nspawn, overlay mounts)"
    for tool in ("systemd-nspawn", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if shutil.which("debootstrap") is None and not (rootfs_path() / ".complete").exists():
        return "debootstrap is not installed and no cached rootfs exists"
    if "overlay" not in Path("/proc/filesystems").read_text():
        return "the kernel has no overlay filesystem"
    return None


# --------------------------------------------------------------------------- hosts


@dataclass
class Host:
    spec: HostSpec
    port: int
    machine: str  # systemd-nspawn machine name (unique per run)
    dir: Path  # this host's run directory (upper, work, merged, boot.log)
    pid: int = 0  # the systemd-nspawn process
    host_key_line: str = ""
    ip: str = ""  # private_network: the host's address on the run's bridge
    netns: str = ""  # private_network: the network namespace (ip netns) it runs in
    veth: str = ""  # private_network: this machine's end of its veth pair

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def root(self) -> Path:
        """The host's root filesystem as seen from this machine (read and write)."""
        return self.dir / "merged"

    @property
    def address(self) -> str:
        """Where this machine reaches the host's sshd: its own address, else 127.0.0.1."""
        return self.ip or "127.0.0.1"


class HostSet:
    """Running test hosts, their SSH credentials and their inventory."""

    def __init__(self, run_dir: Path, hosts: list[Host]) -> None:
        self.run_dir = run_dir
        self.hosts = hosts
        self.key_path = run_dir / "id_ed25519"
        self.known_hosts_path = run_dir / "known_hosts"
        self.inventory_path = run_dir / "inventory.toml"
        self.boot_seconds = 0.0
        # private_network hosts: {"bridge", "subnet", "gateway"}; {} when the run has none
        self.network: dict[str, str] = {}
        self._closed = False

    # -- lookup
    def __getitem__(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    def __iter__(self) -> Iterator[Host]:
        return iter(self.hosts)

    def __len__(self) -> int:
        return len(self.hosts)

    def _host(self, host: Host | str) -> Host:
        return host if isinstance(host, Host) else self[host]

    # -- ssh
    def ssh_argv(self, host: Host | str, *, control: bool = True) -> list[str]:
        """argv prefix to run a command on a host: ssh -i KEY -o UserKnownHostsFile=... -p PORT."""
        h = self._host(host)
        argv = [
            "ssh",
            "-F", "/dev/null",
            "-i", str(self.key_path),
            "-o", f"UserKnownHostsFile={self.known_hosts_path}",
            "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", "StrictHostKeyChecking=yes",
            "-o", "IdentitiesOnly=yes",
            "-o", "BatchMode=yes",
            "-o", "ConnectTimeout=5",
            "-o", "LogLevel=ERROR",
            "-p", str(h.port),
        ]  # fmt: skip
        if control:
            argv += [
                "-o", "ControlMaster=auto",
                "-o", f"ControlPath={h.dir}/cm",
                "-o", "ControlPersist=120",
            ]  # fmt: skip
        return [*argv, f"root@{h.address}"]

    def ssh(
        self,
        host: Host | str,
        cmd: str,
        *,
        check: bool = True,
        timeout: float = 60,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a shell command on a host over SSH; returns the CompletedProcess (text)."""
        argv = [*self.ssh_argv(host), cmd]
        cp = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
        )  # fmt: skip
        if check and cp.returncode != 0:
            raise subprocess.CalledProcessError(cp.returncode, argv, cp.stdout, cp.stderr)
        return cp

    # -- simulators
    def configure_sim(self, host: Host | str, **changes: object) -> SimSettings:
        """Change the simulated SGLang's settings on a host (takes effect at the next launch)."""
        h = self._host(host)
        if "fail_when_arg" in changes and isinstance(changes["fail_when_arg"], str):
            changes["fail_when_arg"] = (
                [changes["fail_when_arg"]] if changes["fail_when_arg"] else []
            )
        if changes.get("failure") and changes["failure"] not in FAILURES:
            raise ValueError(f"unknown failure {changes['failure']!r}; one of {FAILURES}")
        h.spec.sim = dataclasses.replace(h.spec.sim, **changes)  # type: ignore[arg-type]
        _write_atomic(h.root / "etc/sglang-sim.toml", h.spec.sim.to_toml())
        return h.spec.sim

    def make_model(self, host: Host | str, path: str, architecture: str, **config: object) -> None:
        """Create a config-only model directory on a host (what the simulator reads)."""
        h = self._host(host)
        d = h.root / path.lstrip("/")
        d.mkdir(parents=True, exist_ok=True)
        cfg = {"architectures": [architecture], "model_type": "sim",
               "max_position_embeddings": MODEL_POSITIONS.get(architecture, 32768), **config}
        (d / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")

    def plant_stray(
        self, host: Host | str, gpu: int, mib: int, *, name: str = "python3", seconds: int = 3600
    ) -> int:
        """Start a process on the host that holds `mib` MiB on GPU `gpu`; returns its pid."""
        unit = f"stray-{uuid.uuid4().hex[:8]}"
        self.ssh(
            host,
            f"systemd-run --quiet --unit={unit} --collect /usr/local/bin/sim-gpu-hold "
            f"--gpu {gpu} --mib {mib} --name {shlex.quote(name)} --seconds {seconds}",
        )
        script = (
            f"for i in $(seq 200); do pid=$(systemctl show -p MainPID --value {unit}); "
            f'if [ "$pid" != 0 ] && [ -e /run/sim-gpu/$pid.json ]; then echo $pid; exit 0; fi; '
            "sleep 0.05; done; exit 1"
        )
        cp = self.ssh(host, script, check=False)
        if cp.returncode != 0:
            raise TimeoutError(f"stray process on {self._host(host).name} did not register")
        return int(cp.stdout.strip())

    def nvidia_smi(self, host: Host | str, args: str = "") -> str:
        return self.ssh(host, f"nvidia-smi {args}").stdout

    def wait_gpus_free(self, host: Host | str, timeout_s: float = 60) -> None:
        """Until no process holds GPU memory (a stopped server lets go of it only after its release delay)."""
        deadline = time.monotonic() + timeout_s
        query = "--query-gpu=memory.used --format=csv,noheader,nounits"
        while any(int(v) > 1024 for v in self.nvidia_smi(host, query).split()):
            if time.monotonic() > deadline:
                raise TimeoutError(self.nvidia_smi(host) + self.ssh(host, "ps -ef").stdout)
            time.sleep(0.3)

    def journal(self, host: Host | str, unit: str) -> str:
        return self.ssh(host, f"journalctl -u {shlex.quote(unit)} -o cat --no-pager").stdout

    # -- lifecycle
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        _teardown(
            self.run_dir, [h.__dict__ | {"dir": str(h.dir)} for h in self.hosts], self.network
        )


def _write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _keygen(path: Path, comment: str) -> str:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    return (path.with_suffix(".pub") if path.suffix else Path(f"{path}.pub")).read_text().strip()


def _gpu_toml(spec: HostSpec) -> str:
    return _toml_table(
        "gpu",
        {
            "name": spec.smi_name,
            "compute_capability": spec.compute_capability,
            "count": spec.gpu_count,
            "memory_mib": spec.gpu_memory_mib,
            "driver_version": "580.159.04",
            "cuda_version": "13.0",
        },
    )


def _dist_info(version: str) -> dict[str, str]:
    di = f"opt/sglang-sim/sglang-{version}.dist-info"
    return {
        f"{di}/METADATA": f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n"
        "Summary: SGLang (simulated for sgdeploy tests)\n",
        f"{di}/INSTALLER": "pip\n",
        f"{di}/top_level.txt": "sglang\n",
        f"{di}/entry_points.txt": "[console_scripts]\nsglang = sglang.cli.main:main\n",
    }


def _prepare_host(rootfs: Path, h: Host, client_pub: str, etc_hosts: str = "") -> None:
    for d in ("upper", "work", "merged"):
        (h.dir / d).mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            "mount", "-t", "overlay", "overlay", "-o",
            f"lowerdir={rootfs},upperdir={h.dir / 'upper'},workdir={h.dir / 'work'}",
            str(h.root),
        ],
        check=True,
    )  # fmt: skip
    root = h.root
    shutil.copytree(PAYLOAD, root, dirs_exist_ok=True, symlinks=True)
    spec = h.spec
    files = {
        "etc/hostname": f"{spec.name}\n",
        "etc/sim-gpu.toml": _gpu_toml(spec),
        "etc/sglang-sim.toml": spec.sim.to_toml(),
        "etc/ssh/sshd_config.d/10-testhost-port.conf": (
            f"Port {h.port}\nListenAddress {h.address}\nHostKey /etc/ssh/ssh_host_ed25519_key\n"
        ),
        "root/.ssh/authorized_keys": client_pub + "\n",
        **_dist_info(spec.sglang_version),
    }
    if etc_hosts:
        files["etc/hosts"] = etc_hosts
    for rel, text in files.items():
        _write_atomic(root / rel, text)
    os.chmod(root / "root/.ssh/authorized_keys", 0o600)
    for user, uid in LOGINS.items():  # sshd reads a user's keys with that user's rights
        ssh_dir = root / "home" / user / ".ssh"
        _write_atomic(ssh_dir / "authorized_keys", client_pub + "\n", 0o600)
        for path in (ssh_dir, ssh_dir / "authorized_keys"):
            os.chown(path, uid, uid)
        os.chmod(ssh_dir, 0o700)
    cat = root / f"opt/sglang-sim/catalogs/{spec.sglang_version}.json"
    cat.parent.mkdir(parents=True, exist_ok=True)
    cat.write_bytes(find_catalog(spec.sglang_version))
    key = root / "etc/ssh/ssh_host_ed25519_key"
    pub = _keygen(key, f"root@{spec.name}")
    typ, b64 = pub.split()[:2]
    where = h.address if h.port == 22 else f"[{h.address}]:{h.port}"
    h.host_key_line = f"{where} {typ} {b64}"
    # enable the simulated GPU driver's bookkeeping service
    wants = root / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    link = wants / "sim-gpu.service"
    if not link.is_symlink():
        link.symlink_to("/etc/systemd/system/sim-gpu.service")
    # config-only model directories a deployer's reference profiles point at
    for path, arch in (("root/models/Qwen3.6-27B", "Qwen3_5ForConditionalGeneration"),
                       ("root/models/Qwen3-8B", "Qwen3ForCausalLM")):
        (root / path).mkdir(parents=True, exist_ok=True)
        (root / path / "config.json").write_text(
            json.dumps({"architectures": [arch], "model_type": "sim",
                        "max_position_embeddings": MODEL_POSITIONS[arch]}) + "\n"
        )
        (root / path / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": MODEL_BYTES[arch]}, "weight_map": {}}) + "\n"
        )


def _start_nspawn(h: Host) -> None:
    with open(h.dir / "boot.log", "wb") as log:  # nspawn keeps its own copy of the descriptor
        proc = subprocess.Popen(
            [
                "systemd-nspawn", "--boot", "--quiet",
                "--register=no", "--keep-unit",
                "--console=read-only",
                "-D", str(h.root),
                "-M", h.machine,
                f"--hostname={h.spec.name}",
                *([f"--network-namespace-path=/run/netns/{h.netns}"] if h.netns else []),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    h.pid = proc.pid
    # reaped in _teardown via os.waitpid; keep the Popen from warning on GC
    proc.returncode = 0


def _wait_port(address: str, port: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        with socket.socket() as s:
            s.settimeout(0.2)
            try:
                s.connect((address, port))
                if s.recv(4).startswith(b"SSH"):
                    return
            except OSError:
                pass
        time.sleep(0.02)
    raise TimeoutError(f"sshd on {address}:{port} did not come up")


# --------------------------------------------------------------------------- network

NET_PREFIX = "169.254."  # link-local: never routed; the run takes one free /24 of it
NET_THIRD = [n for n in range(100, 250) if n != 169]  # 169.254.169.254 is cloud metadata


def _ip(args: list[str], *, batch: str | None = None, check: bool = True) -> str:
    argv = ["ip", *args] if batch is None else ["ip", *args, "-batch", "-"]
    cp = subprocess.run(argv, input=batch, capture_output=True, text=True)
    if check and cp.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {cp.stderr.strip()}\n{batch or ''}")
    return cp.stdout


def _used_thirds() -> set[int]:
    """Third octets of 169.254.N.x already on this machine (addresses or routes)."""
    text = _ip(["-4", "-o", "addr", "show"]) + _ip(["-4", "route", "show", "table", "all"])
    used = set()
    for word in text.split():
        if word.startswith(NET_PREFIX):
            with contextlib.suppress(ValueError, IndexError):
                used.add(int(word.split("/")[0].split(".")[2]))
    return used


def _net_names(run_id: str, hosts: list[Host]) -> dict[str, str]:
    """Name the run's bridge and each private host's netns and veth (names only)."""
    i = 0
    for h in hosts:
        if h.spec.private_network:
            h.netns = f"sgd-{run_id}-{h.name}"
            h.veth = f"sgd-{run_id}-{i}"  # IFNAMSIZ: at most 15 characters
            i += 1
    return {"bridge": f"sgd-{run_id}"} if i else {}


def _net_up(run_dir: Path, hosts: list[Host], network: dict[str, str]) -> None:
    """Create the run's bridge (with a free 169.254.N.0/24), a netns and veth per private host."""
    private = [h for h in hosts if h.netns]
    if not private:
        return
    br = network["bridge"]
    RUN_ROOT.mkdir(parents=True, exist_ok=True)
    with open(RUN_ROOT / ".net.lock", "w") as lock:
        # one run at a time picks and claims its /24 (the bridge's address claims it)
        fcntl.flock(lock, fcntl.LOCK_EX)
        used = _used_thirds()
        free = [n for n in NET_THIRD if n not in used]
        if not free:
            raise RuntimeError(f"no free {NET_PREFIX}N.0/24 left for a private test network")
        n = free[int(run_dir.name, 16) % len(free)]
        net = ipaddress.ip_network(f"{NET_PREFIX}{n}.0/24")
        gw = str(net.network_address + 1)
        network.update(subnet=str(net), gateway=gw)
        _ip(
            [],
            batch=f"link add {br} type bridge stp_state 0 forward_delay 0\n"
            f"link set {br} addrgenmode none\n"
            f"addr add {gw}/24 dev {br}\n"
            f"link set {br} up\n",
        )
    for i, h in enumerate(private):
        h.ip = str(net.network_address + 2 + i)
    _ip(
        [],
        batch="".join(
            f"netns add {h.netns}\n"
            f"link add {h.veth} type veth peer name eth0 netns {h.netns}\n"
            f"link set {h.veth} addrgenmode none\n"
            f"link set {h.veth} master {br}\n"
            f"link set {h.veth} up\n"
            for h in private
        ),
    )
    for h in private:
        _ip(
            ["-n", h.netns],
            batch="link set lo up\n"
            "link set eth0 addrgenmode none\n"
            f"addr add {h.ip}/24 dev eth0\n"
            "link set eth0 up\n",
        )


def _net_down(hosts: list[dict[str, object]], network: dict[str, str]) -> None:
    """Delete exactly the netns, veths and bridge named in a run's state (those that exist)."""
    for h in hosts:
        ns = str(h.get("netns") or "")
        if ns.startswith("sgd-") and os.path.exists(f"/run/netns/{ns}"):
            _ip(["netns", "del", ns], check=False)
    links = [str(h.get("veth") or "") for h in hosts] + [network.get("bridge", "")]
    for name in links:
        if name.startswith("sgd-") and os.path.exists(f"/sys/class/net/{name}"):
            _ip(["link", "del", name], check=False)


def _etc_hosts(hosts: list[Host]) -> str:
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    lines += [f"{h.ip}\t{h.name}" for h in hosts if h.ip]
    return "\n".join(lines) + "\n"


def _save_state(
    run_dir: Path, hosts: list[Host], owner: str, network: dict[str, str] | None = None
) -> None:
    state = {
        "run_dir": str(run_dir),
        "owner": owner,
        "owner_pid": os.getpid(),
        "network": network or {},
        "hosts": [
            {
                "name": h.name,
                "machine": h.machine,
                "pid": h.pid,
                "port": h.port,
                "dir": str(h.dir),
                "ip": h.ip,
                "netns": h.netns,
                "veth": h.veth,
            }
            for h in hosts
        ],
    }
    _write_atomic(run_dir / "state.json", json.dumps(state, indent=1))


def _is_our_nspawn(pid: int, machine: str) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return bool(argv) and argv[0].endswith(b"systemd-nspawn") and machine.encode() in argv


def _children(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError):
        for t in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                out += [int(x) for x in (t / "children").read_text().split()]
    return out


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child of ours counts as gone
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _teardown(
    run_dir: Path, hosts: list[dict[str, object]], network: dict[str, str] | None = None
) -> None:
    """Stop exactly the nspawn processes, mounts and network devices listed, then remove the
    run directory."""
    for h in hosts:
        d = Path(str(h["dir"]))
        if (d / "cm").exists():
            subprocess.run(
                ["ssh", "-F", "/dev/null", "-o", f"ControlPath={d}/cm", "-O", "exit", "x"],
                capture_output=True,
                timeout=5,
            )
    pids = []
    for h in hosts:
        pid, machine = int(h["pid"]), str(h["machine"])  # type: ignore[call-overload]
        if pid and _is_our_nspawn(pid, machine):
            # killing the container's init ends its whole PID namespace; nspawn then exits
            # and removes its own mounts
            for child in _children(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)
            pids.append((pid, machine))
    deadline = time.monotonic() + 10
    for pid, machine in pids:
        while _pid_alive(pid) and time.monotonic() < deadline:
            _reap(pid)
            time.sleep(0.02)
        if _pid_alive(pid) and _is_our_nspawn(pid, machine):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        _reap(pid)
    for h in hosts:
        merged = Path(str(h["dir"])) / "merged"
        if os.path.ismount(merged):
            r = subprocess.run(["umount", str(merged)], capture_output=True)
            if r.returncode != 0:
                subprocess.run(["umount", "-l", str(merged)], capture_output=True)
    _net_down(hosts, network or {})
    shutil.rmtree(run_dir, ignore_errors=True)


def teardown_run(run_dir: Path) -> None:
    """Tear down a run from its state.json (for hosts left running by the CLI)."""
    state = json.loads((run_dir / "state.json").read_text())
    _teardown(run_dir, state["hosts"], state.get("network") or {})


@contextlib.contextmanager
def boot_hosts(
    specs: Sequence[HostSpec | str],
    *,
    timeout: float = 60,
    keep: bool = False,
) -> Iterator[HostSet]:
    """Boot the hosts, yield a HostSet, tear them down on exit (unless keep=True).

    A string in `specs` is a preset name (see PRESETS).
    """
    hs = start_hosts(specs, timeout=timeout)
    try:
        yield hs
    finally:
        if not keep:
            hs.close()


def start_hosts(
    specs: Sequence[HostSpec | str], *, timeout: float = 60, owner: str = "python"
) -> HostSet:
    """Boot the hosts and return the HostSet; the caller must call .close()."""
    reason = skip_reason()
    if reason:
        raise RuntimeError(reason)
    resolved: list[HostSpec] = []
    for s in specs:
        spec = HostSpec.like(s) if isinstance(s, str) else dataclasses.replace(s)
        spec.sim = dataclasses.replace(spec.sim)
        resolved.append(spec)
    names = [s.name for s in resolved]
    if len(set(names)) != len(names):
        raise ValueError(f"host names must be unique: {names}")
    rootfs = ensure_rootfs()
    t0 = time.monotonic()
    run_id = uuid.uuid4().hex[:8]
    run_dir = RUN_ROOT / run_id
    run_dir.mkdir(parents=True)
    hosts: list[Host] = []
    hs = HostSet(run_dir, hosts)
    try:
        client_pub = _keygen(hs.key_path, f"sgdeploy-testhosts-{run_id}")
        used: set[int] = set()
        for spec in resolved:
            if spec.private_network:
                port = 22  # in its own network namespace, at its own address
            else:
                port = spec.port or free_port()
                while port in used:
                    port = free_port()
                used.add(port)
            h = Host(spec, port, f"sgd-{run_id}-{spec.name}"[:64], run_dir / spec.name)
            hosts.append(h)
        hs.network = _net_names(run_id, hosts)
        if hs.network:
            _save_state(run_dir, hosts, owner, hs.network)  # names first: a crash leaves them
            _net_up(run_dir, hosts, hs.network)
            _save_state(run_dir, hosts, owner, hs.network)
        etc_hosts = _etc_hosts(hosts) if hs.network else ""
        threads = [
            threading.Thread(target=_prepare_host, args=(rootfs, h, client_pub, etc_hosts))
            for h in hosts
        ]
        errors: list[BaseException] = []

        def run_all(ts: list[threading.Thread]) -> None:
            for t in ts:
                t.start()
            for t in ts:
                t.join()

        # prepare in parallel (keygen + copies), then boot
        for t in threads:
            orig = t.run

            def wrapped(orig=orig) -> None:  # type: ignore[no-untyped-def]
                try:
                    orig()
                except BaseException as e:
                    errors.append(e)

            t.run = wrapped  # type: ignore[method-assign]
        run_all(threads)
        if errors:
            raise errors[0]
        hs.known_hosts_path.write_text("".join(h.host_key_line + "\n" for h in hosts))
        for h in hosts:
            _start_nspawn(h)
        _save_state(run_dir, hosts, owner, hs.network)
        hs.inventory_path.write_text(inventory_toml(hs))
        deadline = time.monotonic() + timeout

        def wait(h: Host) -> None:
            try:
                _wait_port(h.address, h.port, deadline)
                left = max(1.0, deadline - time.monotonic())
                cp = hs.ssh(h, "systemctl is-system-running --wait", check=False, timeout=left)
                state = cp.stdout.strip()
                if state not in ("running", "degraded"):
                    raise RuntimeError(f"{h.name}: system state {state!r}: {cp.stderr.strip()}")
            except BaseException as e:
                errors.append(e)

        run_all([threading.Thread(target=wait, args=(h,)) for h in hosts])
        if errors:
            logs = "\n".join(
                f"--- {h.name} boot.log\n"
                + (h.dir / "boot.log").read_text(errors="replace")[-3000:]
                for h in hosts
            )
            raise RuntimeError(f"test hosts did not boot: {errors[0]}\n{logs}")
        hs.boot_seconds = time.monotonic() - t0
        return hs
    except BaseException:
        hs.close()
        raise


def inventory_toml(hs: HostSet) -> str:
    """An sgdeploy inventory (SPEC section 3) for the hosts of a HostSet."""
    out = [f"# test hosts of run {hs.run_dir.name}; connect with the key and known_hosts below\n"]
    for h in hs.hosts:
        s = h.spec
        out.append(
            _toml_table(
                f"hosts.{s.name}",
                {
                    "address": h.address,
                    "port": h.port,
                    "user": "root",
                    "identity_file": str(hs.key_path),
                    "known_hosts": str(hs.known_hosts_path),
                    "gpu": s.gpu,
                    "compute_capability": s.compute_capability,
                    "gpu_count": s.gpu_count,
                    "gpu_memory_gib": s.gpu_memory_gib,
                    "sglang_version": s.sglang_version,
                },
            )
        )
    out.append(_toml_table("groups", {"all": [h.name for h in hs.hosts]}))
    return "\n".join(out)
