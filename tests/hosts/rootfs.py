"""Build and cache the Debian bookworm root filesystem the test hosts boot from.

The rootfs is built once with debootstrap and kept under CACHE_DIR as
``rootfs-<hash of the recipe>``.  It is rebuilt when missing or when the recipe
(the debootstrap command line and the customisation script below) changes.  The
build goes into a temporary directory that is renamed into place atomically, under
an exclusive ``flock`` so that two pytest processes never build at the same time.

Nothing SGLang- or GPU-specific lives in the cached rootfs: the simulators are
copied into each host's writable layer at boot, so editing them never forces a
rebuild.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

CACHE_DIR = Path(os.environ.get("SGDEPLOY_TESTHOSTS_CACHE", "/var/cache/sgdeploy-testhosts"))
SUITE = "bookworm"
MIRROR = os.environ.get("SGDEPLOY_TESTHOSTS_MIRROR", "http://deb.debian.org/debian")
PACKAGES = [
    "systemd",
    "systemd-sysv",
    "openssh-server",
    "dbus",
    "iproute2",
    "python3",
    "python3-yaml",  # SGLang reads --config with PyYAML, which every SGLang environment has
    "procps",
    "curl",
    "sudo",
]

# Logins other than root (the per-run key is added to each at boot): `deploy` may run anything
# as root through sudo without a password, `nosudo` may not.
SUDO_USER, SUDO_UID = "deploy", 1001
PLAIN_USER, PLAIN_UID = "nosudo", 1002

# Runs inside the fresh rootfs (chroot) after debootstrap.
CUSTOMIZE = r"""
set -eu
# host keys are generated per run by the test harness, never baked into the image
rm -f /etc/ssh/ssh_host_*
# nothing in a test host needs these; they only slow down boot
for u in apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer \
         e2scrub_reap.service fstrim.timer systemd-tmpfiles-clean.timer \
         console-getty.service getty@tty1.service ssh.socket; do
    ln -sf /dev/null /etc/systemd/system/$u
done
# journald: keep the journal in memory (fast, and per-boot like a fresh host)
mkdir -p /etc/systemd/journald.conf.d
printf '[Journal]\nStorage=volatile\nRateLimitIntervalSec=0\nRateLimitBurst=0\n' \
    > /etc/systemd/journald.conf.d/testhost.conf
rm -rf /var/log/journal
# sshd: no DNS, no host-key types we do not ship
mkdir -p /etc/ssh/sshd_config.d
printf 'UseDNS no\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n' \
    > /etc/ssh/sshd_config.d/00-testhost.conf
mkdir -p /root/.ssh && chmod 700 /root/.ssh
passwd -d root >/dev/null
useradd -m -u @SUDO_UID@ -s /bin/bash @SUDO_USER@
useradd -m -u @PLAIN_UID@ -s /bin/bash @PLAIN_USER@
# no password at all ('*', not locked '!', not empty: sudo must never accept an empty one)
usermod -p '*' @SUDO_USER@; usermod -p '*' @PLAIN_USER@
printf '@SUDO_USER@ ALL=(ALL:ALL) NOPASSWD: ALL\n' > /etc/sudoers.d/@SUDO_USER@
chmod 440 /etc/sudoers.d/@SUDO_USER@
apt-get clean
rm -rf /var/lib/apt/lists/* /usr/share/doc/* /usr/share/man/* /usr/share/locale/*
"""

CUSTOMIZE = (CUSTOMIZE.replace("@SUDO_USER@", SUDO_USER).replace("@SUDO_UID@", str(SUDO_UID))
             .replace("@PLAIN_USER@", PLAIN_USER).replace("@PLAIN_UID@", str(PLAIN_UID)))

RECIPE_VERSION = "4"


def recipe_hash() -> str:
    h = hashlib.sha256()
    for part in (RECIPE_VERSION, SUITE, MIRROR, ",".join(PACKAGES), CUSTOMIZE):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def rootfs_path() -> Path:
    return CACHE_DIR / f"rootfs-{recipe_hash()}"


def _log(msg: str) -> None:
    print(f"[testhosts] {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _mounted_as_lower(tree: Path) -> bool:
    """Whether an overlay mount on this machine uses `tree` as its lower layer."""
    try:
        mounts = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return True
    return f"lowerdir={tree}," in mounts or f"lowerdir={tree} " in mounts or f"lowerdir={tree}:" in mounts


def ensure_rootfs(*, quiet: bool = False) -> Path:
    """Return the cached rootfs, building it first if needed (about a minute)."""
    final = rootfs_path()
    if (final / ".complete").exists():
        return final
    with _lock(CACHE_DIR / "build.lock"):
        if (final / ".complete").exists():  # another process built it meanwhile
            return final
        if shutil.which("debootstrap") is None:
            raise RuntimeError("debootstrap is not installed (apt-get install debootstrap)")
        tmp = CACHE_DIR / f".build-{recipe_hash()}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        debs = CACHE_DIR / "debs"
        debs.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        _log(f"building rootfs {final.name} with debootstrap (once; about a minute)")
        cmd = [
            "debootstrap",
            "--variant=minbase",
            f"--cache-dir={debs}",
            f"--include={','.join(PACKAGES)}",
            SUITE,
            str(tmp),
            MIRROR,
        ]
        out = None if not quiet else subprocess.DEVNULL
        try:
            subprocess.run(cmd, check=True, stdout=out, stderr=out)
            subprocess.run(["chroot", str(tmp), "/bin/sh", "-c", CUSTOMIZE], check=True)
            (tmp / ".complete").write_text(recipe_hash() + "\n")
            if final.exists():  # an incomplete leftover
                shutil.rmtree(final)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _log(f"rootfs ready in {time.monotonic() - t0:.1f}s: {final}")
        # old recipes' trees are dead weight, unless hosts booted from one still run
        for old in CACHE_DIR.glob("rootfs-*"):
            if old != final and not _mounted_as_lower(old):
                shutil.rmtree(old, ignore_errors=True)
        return final
