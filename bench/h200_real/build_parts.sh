#!/usr/bin/env bash
# Builds, on a machine that reaches PyPI and Debian's mirror, everything the H200 run of
# bench/h200_real_deploy.sh carries to the GPU machine (which reaches nothing), into .h200/
# (ignored by git):
#   wheels/      SGLang 0.5.11's serving closure as pip resolves it on the GPU image, minus the
#                84 distributions the image already has (sglang-0.5.11-wheels.txt, read off the
#                venv of bench/h200_check_real_install.sh), trimmed of files a server with the
#                triton attention backend and the pytorch sampler never opens (below)
#   sgd-wheels/  sgdeploy's dependencies and its build backend, for the operator's side
#   debian.tar.gz  a Debian bookworm minbase tree with systemd, systemd-container, openssh-server
#                and dbus: the systemd host booted there with systemd-nspawn
#   parts/       all of it as one tar split into 50 MiB parts, one part per call of the device
#                tool (64 MiB per call, the repository included)
# Run from the repository root as root: bash bench/h200_real/build_parts.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
D=.h200
mkdir -p $D/wheels $D/sgd-wheels $D/parts
PLATFORMS=()
for p in manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_24_x86_64 manylinux_2_27_x86_64 \
         manylinux_2_28_x86_64 manylinux_2_31_x86_64 manylinux_2_34_x86_64 manylinux_2_35_x86_64 \
         manylinux1_x86_64 linux_x86_64 any; do PLATFORMS+=(--platform "$p"); done
# pip is asked per distribution (four at a time), so a pin it cannot find is named and the rest
# still come
export D PLATFORMS_LINE="${PLATFORMS[*]}"
# SGLANG_RELEASE=0.5.17 takes sglang-0.5.17-wheels.txt (the weight-cache daemon; the newest
# release whose closure runs on the image's torch 2.11), into .h200/ all the same: move the
# other release's .h200/wheels and .h200/parts aside first
grep -v '^#' "bench/h200_real/sglang-${SGLANG_RELEASE:-0.5.11}-wheels.txt" | grep . | xargs -P 4 -I{} bash -c '
    spec={}; name=${spec%%==*}
    ls "$D/wheels/" | grep -qi "^${name//-/[-_]}-" && exit 0
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp $PLATFORMS_LINE -d "$D/wheels" "$spec" 2>/dev/null \
        || echo "NOT FOUND: $spec"'

# Trimmed: FA3 (1 GB; the run uses --attention-backend triton), the Blackwell ops (the H200 is
# compute capability 9.0), flashinfer's precompiled cubins (--sampling-backend pytorch; flashinfer
# kernels are not run) and a static library for C++ builds.
trim() {  # $1 = wheel glob, the rest = zip patterns
    local whl; whl=$(ls $D/wheels/$1 2>/dev/null | head -1) || true
    [[ -n $whl ]] || return 0
    shift
    zip -q -d "$whl" "$@" >/dev/null 2>&1 || true
}
trim 'sglang_kernel-*.whl' 'sgl_kernel/flash_ops*' 'sgl_kernel/sm100/*'
trim 'flashinfer_cubin-*.whl' 'flashinfer_cubin/cubins/*'
trim 'xgrammar-*.whl' 'xgrammar/lib/libxgrammar.a'

# sgdeploy as a user installs it: its dependencies, and hatchling to build its wheel there from
# the tree that travels with each call (so a fix made here is what runs there)
if [[ ! -f $D/sgd-wheels/.done ]]; then
    python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
        "${PLATFORMS[@]}" -d $D/sgd-wheels \
        $(python3 -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"])') \
        hatchling 2> >(grep -v "is ignored" >&2)
    touch $D/sgd-wheels/.done
fi

if [[ ! -f $D/debian.tar.gz ]]; then
    rm -rf $D/debian
    debootstrap --variant=minbase \
        --include=systemd,systemd-sysv,systemd-container,openssh-server,dbus,sudo,procps,iproute2,curl,util-linux \
        bookworm $D/debian http://deb.debian.org/debian >/dev/null
    chroot $D/debian /bin/sh -eu <<'SH'
rm -f /etc/ssh/ssh_host_*
for u in apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer \
         fstrim.timer systemd-tmpfiles-clean.timer console-getty.service getty@tty1.service \
         ssh.socket systemd-networkd.service systemd-resolved.service; do
    ln -sf /dev/null /etc/systemd/system/$u
done
mkdir -p /etc/ssh/sshd_config.d /root/.ssh
printf 'UseDNS no\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n' \
    > /etc/ssh/sshd_config.d/00-h200.conf
chmod 700 /root/.ssh
apt-get clean
rm -rf /var/lib/apt/lists/* /usr/share/doc/* /usr/share/man/* /usr/share/locale/*
SH
    tar -C $D/debian -czf $D/debian.tar.gz .
    rm -rf $D/debian
fi

rm -f $D/parts/*
tar -C $D -cf - debian.tar.gz sgd-wheels wheels | split -b 50M -d -a 2 - $D/parts/carry.tar.
ls -l $D/parts
du -sh $D/wheels $D/sgd-wheels $D/debian.tar.gz
