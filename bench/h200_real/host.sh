#!/usr/bin/env bash
# Boots a systemd host on the GPU machine (a Firecracker VM with no systemd and no sshd) that
# sgdeploy reaches over SSH on 127.0.0.1:$PORT, with the H200 visible inside.
#
# The host's root is an overlay: the VM's own / (bound without its submounts) as the lower layer,
# so the host has the image's Python 3.12, torch, CUDA and whatever was installed under /opt before
# it boots (SGLang's venv, the models); the upper and work layers on /dev/shm. The files of a
# Debian bookworm tree that the VM lacks (systemd, journald, sshd, dbus) are copied in without
# overwriting, with Debian's passwd/group/shadow/gshadow. systemd-nspawn runs from a chroot of the
# Debian tree: called through Debian's loader from the VM's userland it segfaults, and without /sys
# bound recursively it cannot find cgroup2.
#
# Usage: bash bench/h200_real/host.sh start|stop   (DEBIAN_TAR, STATE, PORT from the environment)
set -euo pipefail
DEBIAN_TAR=${DEBIAN_TAR:-/opt/carry/debian.tar.gz}
STATE=${STATE:-/opt/h200run}           # the key, known_hosts and boot log land here
PORT=${PORT:-2222}
TREE=/opt/debian                       # the Debian tree nspawn runs from
OV=/dev/shm/h200host                   # lower, upper, work, merged
MERGED=$OV/merged

running() {
    [[ -f $STATE/nspawn.pid ]] && kill -0 "$(cat "$STATE/nspawn.pid")" 2>/dev/null
}

start() {
    # Once up, $TREE has /proc, /sys and /dev bound in: a second start would copy the live /proc
    # into the overlay (on /dev/shm) until memory runs out. An up host is left as it is.
    if running; then echo "host: already up (pid $(cat "$STATE/nspawn.pid"))"; return 0; fi
    mkdir -p "$STATE" "$TREE" $OV/{lower,upper,work,merged}
    [[ -x $TREE/usr/bin/systemd-nspawn ]] || tar -C "$TREE" -xzf "$DEBIAN_TAR"
    mountpoint -q $OV/lower || mount --bind / $OV/lower
    mountpoint -q $MERGED || mount -t overlay overlay \
        -o lowerdir=$OV/lower,upperdir=$OV/upper,workdir=$OV/work $MERGED
    cp -an --one-file-system "$TREE/." "$MERGED/"
    cp "$TREE"/etc/{passwd,group,shadow,gshadow} "$MERGED/etc/"
    rm -f "$MERGED/etc/machine-id"; : > "$MERGED/etc/machine-id"
    # the driver's tools and libraries, where a GPU host has them (PATH and the loader's path)
    ln -sf /usr/local/nvidia/bin/nvidia-smi "$MERGED/usr/local/bin/nvidia-smi"
    echo /usr/local/nvidia/lib64 > "$MERGED/etc/ld.so.conf.d/000-nvidia.conf"
    if [[ -d /usr/local/nvidia ]]; then  # the loader's cache must list the driver's libraries
        mountpoint -q "$MERGED/usr/local/nvidia" || mount --bind /usr/local/nvidia "$MERGED/usr/local/nvidia"
    fi
    chroot "$MERGED" /sbin/ldconfig
    printf 'Port %s\nListenAddress 127.0.0.1\n' "$PORT" > "$MERGED/etc/ssh/sshd_config.d/10-port.conf"
    chroot "$MERGED" /usr/bin/ssh-keygen -A >/dev/null
    [[ -f $STATE/key ]] || chroot "$MERGED" /usr/bin/ssh-keygen -q -t ed25519 -N '' -f /root/h200-key
    [[ -f $STATE/key ]] || { cp "$MERGED/root/h200-key" "$STATE/key"; cp "$MERGED/root/h200-key.pub" "$STATE/key.pub"; }
    mkdir -p "$MERGED/root/.ssh"; chmod 700 "$MERGED/root/.ssh"
    cp "$STATE/key.pub" "$MERGED/root/.ssh/authorized_keys"
    echo "[127.0.0.1]:$PORT $(cut -d' ' -f1,2 "$MERGED/etc/ssh/ssh_host_ed25519_key.pub")" > "$STATE/known_hosts"
    # nspawn from a chroot of the Debian tree
    mountpoint -q "$TREE" || mount --bind "$TREE" "$TREE"
    for d in proc sys dev; do mountpoint -q "$TREE/$d" || mount --rbind /$d "$TREE/$d"; done
    mountpoint -q "$TREE/run" || mount -t tmpfs tmpfs "$TREE/run"
    mkdir -p "$TREE/usr/local/nvidia" "$TREE/machine"
    local binds=()
    if [[ -d /usr/local/nvidia ]]; then
        mountpoint -q "$TREE/usr/local/nvidia" || mount --bind /usr/local/nvidia "$TREE/usr/local/nvidia"
        binds+=(--bind-ro=/usr/local/nvidia)
    fi
    mountpoint -q "$TREE/machine" || mount --bind $MERGED "$TREE/machine"
    for n in /dev/nvidia0 /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-uvm-tools; do
        [[ -e $n ]] && binds+=(--bind="$n")
    done
    setsid chroot "$TREE" /usr/bin/systemd-nspawn --boot --register=no --keep-unit -q \
        -D /machine -M h200host "${binds[@]}" \
        > "$STATE/boot.log" 2>&1 < /dev/null &
    echo $! > "$STATE/nspawn.pid"
    local t0=$SECONDS
    until python3 - "$PORT" <<'PY' 2>/dev/null
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1)
assert s.recv(64).startswith(b"SSH-")
PY
    do
        if (( SECONDS - t0 > 90 )); then echo "host: no sshd after 90 s"; tail -30 "$STATE/boot.log"; return 1; fi
        sleep 0.5
    done
    echo "host: sshd answers on 127.0.0.1:$PORT after $((SECONDS - t0)) s"
}

stop() {
    [[ -f $STATE/nspawn.pid ]] && kill "$(cat "$STATE/nspawn.pid")" 2>/dev/null || true
    sleep 3
    for m in "$TREE/machine" "$TREE/usr/local/nvidia" "$TREE/run" "$TREE/dev" "$TREE/sys" "$TREE/proc" "$TREE" $MERGED $OV/lower; do
        mountpoint -q "$m" && umount -R -l "$m"
    done
    true
}

"${1:-start}"
