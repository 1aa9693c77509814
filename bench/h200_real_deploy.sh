#!/usr/bin/env bash
# sgdeploy against a real SGLang server on a real GPU: the H200 of the device tool.
#
# Here (a machine that reaches PyPI and Debian): `bash bench/h200_real/build_parts.sh` builds .h200/
# (SGLang 0.5.11's serving closure, sgdeploy's wheels, a Debian tree) and splits it into parts.
# There (the GPU machine, which reaches nothing; each call carries at most 64 MiB and a machine
# idle for 30 s is given back bare), one stage per call, from the repository root:
#   STAGE=carry bash bench/h200_real_deploy.sh       moves the carried .h200/parts/* to /opt/carry
#   STAGE=prepare ...    joins and unpacks the parts; SGLang's venv /opt/sgl (exactly the closure:
#                        bench/h200_check_real_install.sh's setup); sgdeploy's venv /opt/sgd; the
#                        models (bench/h200_real/models.py); boots the systemd host
#                        (bench/h200_real/host.sh); writes the inventory and profiles to /opt/h200run
#   STAGE=swap ...       MODEL_SET's models in place of the machine's (the units stopped first)
#   STAGE=scenario PHASE=1|2|...|10|bar|rest|small|readahead|short ...   runs sgdeploy as a user would (bench/h200_real/scenario.py);
#                        SGLANG_RELEASE names the carried release in the inventory (PHASE=8, the
#                        weight-cache daemon, needs 0.5.17+: build the parts with the same variable)
# Every stage starts over where a marker says it has not finished, so a machine given back is
# rebuilt by running the stages again. What each stage saw goes to $OUT as one tar.gz.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
STAGE=${STAGE:?STAGE=carry|prepare|swap|scenario}
CARRY=/opt/carry RUN=/opt/h200run MODELS=/opt/models SGL=/opt/sgl SGD=/opt/sgd
PARTIAL_OF=${PARTIAL_OF:-llama-8b}  # the model whose partial download PHASE=4 applies
LOG=$RUN/out; mkdir -p "$CARRY/parts" "$LOG"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# Kept off on every lent machine, and in every unit rendered here ([env] of the profiles)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
say() { echo "== $(date -u +%T) $*"; }
timed() { local s=$SECONDS; "$@"; local rc=$?; say "$1 ${2:-}: rc=$rc in $((SECONDS - s)) s"; return $rc; }

carry() {  # whichever parts this call carried; the last one may travel with STAGE=prepare
    [[ -d .h200/parts ]] && find .h200/parts -name 'carry.tar.*' -exec mv -t "$CARRY/parts/" {} +
    ls -l "$CARRY/parts"
}

unpack() {
    [[ -f $CARRY/.unpacked ]] && return 0
    cat "$CARRY"/parts/carry.tar.* | tar -C "$CARRY" -xf - && touch "$CARRY/.unpacked" \
        && rm -f "$CARRY"/parts/carry.tar.* && du -sh "$CARRY"/*
}

sglang_venv() {
    [[ -f $SGL/.done ]] && return 0
    STAGE=setup COMPILE=0 VENV=$SGL WHEELS=$CARRY/wheels OUT=$LOG/setup \
        bash bench/h200_check_real_install.sh > "$LOG/sglang-venv.txt" 2>&1 || {
        tail -30 "$LOG/sglang-venv.txt"; return 1; }
    tail -8 "$LOG/sglang-venv.txt"
    # the console scripts of the image's distributions are not mirrored; a venv made by pip has
    # bin/ninja, which SGLang's JIT kernels run while the server starts
    # (ninja >= 1.11.1 puts its binary in the scripts folder itself, so take the image's)
    cp -f "$(dirname "$(command -v python3)")/ninja" "$SGL/bin/ninja" && "$SGL/bin/ninja" --version
    # bytecode beside the sources, as pip install leaves it (the setup's own went to a prefix)
    env -u PYTHONPYCACHEPREFIX "$SGL/bin/python3" -m compileall -q -j 0 \
        "$("$SGL/bin/python3" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" >/dev/null
    touch "$SGL/.done"
}

sgdeploy_venv() {  # the wheel built from the tree of this call, as a user installs it
    [[ -x $SGD/bin/python3 ]] || python3 -m venv --without-pip "$SGD" || return 1
    rm -rf /tmp/sgd-dist && python3 -m pip wheel -q --no-index --no-deps --find-links "$CARRY/sgd-wheels" \
        -w /tmp/sgd-dist . && python3 -m pip --python "$SGD/bin/python3" install -q --no-index \
        --force-reinstall --find-links "$CARRY/sgd-wheels" /tmp/sgd-dist/sgdeploy-*.whl \
        && "$SGD/bin/sgdeploy" --version
}

models() {
    [[ -f $MODELS/.done ]] && return 0
    # MODEL_SET=small-llama when only PHASE=4 runs (it needs no 8B model)
    "$SGL/bin/python3" bench/h200_real/models.py "$MODELS" ${MODEL_SET:-small-llama llama-8b} || return 1
    # a partial download: every file of $PARTIAL_OF, its last shard cut to a third
    local from=$MODELS/$PARTIAL_OF to=$MODELS/$PARTIAL_OF-partial last
    mkdir -p "$to" && ln -sf "$from"/* "$to/" && last=$(ls "$from"/*.safetensors | tail -1) \
        && rm "$to/${last##*/}" && head -c $(( $(stat -c %s "$last") / 3 )) "$last" > "$to/${last##*/}" \
        && touch "$MODELS/.done"
    du -sh "$MODELS"/*
}

cuda_home_line() {  # SGLang's JIT kernels find nvcc through CUDA_HOME, PATH or /usr/local/cuda
    local nvcc; nvcc=$(command -v nvcc) || return 0
    echo "CUDA_HOME = \"$(dirname "$(dirname "$(readlink -f "$nvcc")")")\""
}

profile() {  # $1 name, $2 model, then extra [server] lines; HARDENING=strict for a sandboxed unit,
             # ENV_LINES extra [env] lines
    local name=$1 model=$2; shift 2
    cat > "$RUN/profiles/$name.toml" <<EOF
# The H200 run of bench/h200_real_deploy.sh: $name
[deploy]
host = "h200"
unit = "sglang"
python = "$SGL/bin/python3"
ready_timeout_s = 900
model_architecture = "LlamaForCausalLM"
hardening = "${HARDENING:-none}"

[env]
$(cuda_home_line)
NCCL_NVLS_ENABLE = "0"
TORCH_SYMM_MEM_DISABLE_MULTICAST = "1"
NVSHMEM_DISABLE_NVLS = "1"
${ENV_LINES:-}

[server]
model_path = "$MODELS/$model"
host = "127.0.0.1"
port = 30000
# FA3 (sgl_kernel's 1 GB flash_ops) and flashinfer's cubins are not carried: triton attention
# and the pytorch sampler run without them
attention_backend = "triton"
sampling_backend = "pytorch"
cuda_graph_max_bs = 32
$(printf '%s\n' "$@")
EOF
}

gpu_facts() {  # the lent GPU may be an H200 or an H100: the inventory says which, as nvidia-smi does
    IFS=, read -r GPU_NAME GPU_MIB < <(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits | head -1)
    GPU_MIB=${GPU_MIB// /}
    GPU_GIB=$(( (GPU_MIB + 512) / 1024 ))
    # The smallest mem_fraction_static that SGD511 lets through for llama-8b (its weights and
    # 0.6 GiB), which is less than the weights plus the CUDA context the server has before it
    # loads them (~1.3 GiB on the H200): the KV cache gets nothing, and SGLang stops after start
    KV_OOM_FRACTION=$(python3 -c "import glob, math, os, sys
w = sum(os.path.getsize(f) for f in glob.glob('$MODELS/llama-8b/*.safetensors')) / 2**30
print(math.ceil((w + 0.6) / $GPU_GIB * 1000) / 1000)")
}

run_dir() {
    mkdir -p "$RUN/profiles"
    gpu_facts
    cat > "$RUN/inventory.toml" <<EOF
[hosts.h200]
address = "127.0.0.1"
port = 2222
user = "root"
identity_file = "$RUN/key"
known_hosts = "$RUN/known_hosts"
gpu = "$GPU_NAME"
compute_capability = "9.0"
gpu_count = 1
gpu_memory_gib = $GPU_GIB
sglang_version = "${SGLANG_RELEASE:-0.5.11}"
EOF
    # BIG_MODEL=llama-20b (MODEL_SET="llama-20b" in prepare): today's restart and the daemon's with
    # ~40 GB of weights (issue #37's model); llama-8b otherwise
    local big=${BIG_MODEL:-llama-8b}
    profile big-a "$big" 'mem_fraction_static = 0.8' 'max_running_requests = 64'
    profile big-b "$big" 'mem_fraction_static = 0.8' 'max_running_requests = 128'
    # passes validation and SGLang's own check; on the GPU the KV cache gets no room beside the
    # weights and the CUDA context
    profile big-oom llama-8b "mem_fraction_static = $KV_OOM_FRACTION" 'max_running_requests = 128'
    # refused by sgdeploy before anything stops (SGD511): 5 % of the memory cannot hold the weights
    # passes validation and SGLang's own check (neither reads the weights); the last shard is cut
    profile partial "$PARTIAL_OF-partial" 'mem_fraction_static = 0.8' 'max_running_requests = 64'
    profile big-tiny llama-8b 'mem_fraction_static = 0.05' 'max_running_requests = 128'
    # PHASE=5: the same launches in a strict unit (docs/hardening.md)
    HARDENING=strict profile hard-a llama-8b 'mem_fraction_static = 0.8' 'max_running_requests = 64'
    HARDENING=strict profile hard-b llama-8b 'mem_fraction_static = 0.8' 'max_running_requests = 128'
    profile soft-a llama-8b 'mem_fraction_static = 0.8' 'max_running_requests = 64'
    # PHASE=8: clients of the weight-cache daemon (SGLANG_RELEASE=0.5.17 or later)
    profile wc-a "$big" 'mem_fraction_static = 0.8' 'max_running_requests = 64' 'weight_cache_mode = "client"'
    profile wc-b "$big" 'mem_fraction_static = 0.8' 'max_running_requests = 128' 'weight_cache_mode = "client"'
    # PHASE=9 and 10 (issue #37's levers): today's unit exactly (SGLang's crash diagnostics on, as
    # before sgdeploy turned them off), and the daemon with each server-side lever and all of them
    local today='SGLANG_PYSPY_DUMP_BEFORE_CRASH = "1"
SGLANG_CUDA_COREDUMP_BEFORE_CRASH = "1"' wc='weight_cache_mode = "client"' x
    for x in a:64 b:128; do
        ENV_LINES=$today profile "today-${x%:*}" "$big" 'mem_fraction_static = 0.8' "max_running_requests = ${x#*:}"
        profile "wcw-${x%:*}" "$big" 'mem_fraction_static = 0.8' "max_running_requests = ${x#*:}" "$wc" \
            'skip_server_warmup = true'
        profile "wcp-${x%:*}" "$big" 'mem_fraction_static = 0.8' "max_running_requests = ${x#*:}" "$wc" \
            'disable_prefill_cuda_graph = true'
        profile "wcx-${x%:*}" "$big" 'mem_fraction_static = 0.8' "max_running_requests = ${x#*:}" "$wc" \
            'skip_server_warmup = true' 'disable_prefill_cuda_graph = true'
        # the prefill graphs kept up to 512 tokens (30 sizes of 0.5.17's 58 up to 8192) instead of none
        profile "wcs-${x%:*}" "$big" 'mem_fraction_static = 0.8' "max_running_requests = ${x#*:}" "$wc" \
            'skip_server_warmup = true' 'cuda_graph_max_bs_prefill = 512'
    done
}

facts() {
    { nvidia-smi; nvidia-smi --query-gpu=index,uuid,name,memory.used,memory.total,compute_cap,driver_version --format=csv
      uname -a; nproc; free -g; df -h / /dev/shm; "$SGL/bin/python3" -c 'import sglang, torch; print("sglang", sglang.__version__, "torch", torch.__version__)'
    } > "$LOG/machine.txt" 2>&1
}

prepare() {
    carry
    timed unpack || return 1
    timed sglang_venv || return 1
    timed sgdeploy_venv || return 1
    timed models || return 1
    run_dir; facts
    timed bash bench/h200_real/host.sh start || return 1
    ssh_check
}

on_host() {  # each argument a command on the systemd host, over SSH as sgdeploy goes there
    "$SGD/bin/python3" - "$RUN" "$@" <<'PY'
import paramiko, sys
run = sys.argv[1]
c = paramiko.SSHClient(); c.load_host_keys(f"{run}/known_hosts")
c.connect("127.0.0.1", 2222, "root", key_filename=f"{run}/key", timeout=10)
for cmd in sys.argv[2:]:
    _, o, e = c.exec_command(cmd)
    print(f"host$ {cmd}\n{o.read().decode()}{e.read().decode()}", end="")
PY
}

ssh_check() {
    on_host "systemctl is-system-running" "nvidia-smi -L" "flock --version | head -1" \
        "/opt/sgl/bin/python3 -c 'import torch; print(torch.cuda.get_device_name())'"
}

swap() {  # MODEL_SET's models in place of those on the machine (PHASE=small after llama-20b's
          # phases: the disk holds one of them beside the closure): the units stopped first
    on_host "systemctl stop sglang.service sglang-weights.service; systemctl reset-failed" || return 1
    rm -rf "${MODELS:?}"/* "$MODELS/.done" && timed models && df -h /
}

scenario() {
    timed sgdeploy_venv || return 1
    run_dir
    cd "$RUN" || return 1
    # SIGINT well inside the call's limit: the scenario still keeps the journals, and $OUT its tar
    OUT_TAR=$OUT/h200-real-steps${PHASE:-}.tar.gz PATH=$SGD/bin:$PATH timed timeout -s INT "${SCENARIO_LIMIT_S:-570}" \
        "$SGD/bin/python3" "$OLDPWD/bench/h200_real/scenario.py" "$RUN" "$LOG" "${PHASE:-1}"
    cd "$OLDPWD" || return 1
}

rc=0
# STAGE=prepare+scenario runs both in one call (PHASE for the scenario)
for stage in ${STAGE//+/ }; do
    case $stage in
        carry) carry || rc=$? ;;
        prepare) prepare 2>&1 | tee "$LOG/prepare.txt"; rc=${PIPESTATUS[0]} ;;
        swap) swap 2>&1 | tee -a "$LOG/swap.txt"; rc=${PIPESTATUS[0]} ;;
        scenario) scenario 2>&1 | tee -a "$LOG/scenario.txt"; rc=${PIPESTATUS[0]} ;;
        *) echo "unknown STAGE $stage"; exit 2 ;;
    esac
    ((rc == 0)) || break
done
[[ $STAGE != carry ]] && tar -C "$LOG" -czf "$OUT/h200-real-${STAGE//+/-}${PHASE:-}.tar.gz" \
    --exclude='setup/*.whl' . 2>/dev/null
exit $rc
