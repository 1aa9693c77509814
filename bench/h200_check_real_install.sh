#!/usr/bin/env bash
# What SGLang's own check costs on a GPU host where `pip install sglang==0.5.11` made the
# environment: the check program (import, parse + resolve, check) five times on a default launch,
# five times with explicit flags and once with `--speculative-algorithm NEXTN`, `import torch` and
# `import sglang.srt.server_args` three times each, `-X importtime` of the import and of the whole
# check, which modules and shared objects the check loads (sgl_kernel, flashinfer, CUTLASS DSL), and
# whether it ever holds GPU memory while another process holds all but ~6 GiB of GPU 0
# (nvidia-smi sampled every 0.2 s).
#
# The environment. The image's own site-packages hold ~200 distributions, many that SGLang does not
# depend on (scikit-learn, jax, ...) and that transformers and torch import when they are
# present, and it lacks sglang-kernel and flashinfer. So the check runs in a venv without the system
# site-packages (`python3 -m venv --without-pip`, the image's Python 3.12) holding exactly the
# dependency closure of sglang==0.5.11 on that image, as pip resolves it there (the image's version
# of a package where it satisfies every pin, as pip keeps an installed one; the listed version
# otherwise):
#   - from the image, symlinked file by file from its dist-info RECORD (the IMAGE list below);
#   - installed from $WHEELS with pip (the closure's other 101 distributions: sglang 0.5.11 cp312,
#     sglang-kernel 0.4.2, flashinfer-python/-cubin 0.6.8.post1, nvidia-cutlass-dsl 4.4.2,
#     apache-tvm-ffi, cuda-python 13.4.4, transformers 5.6.0, tokenizers 0.22.2, numpy 2.3.5
#     (mistral-common needs <2.4 on Python 3.12), timm 1.0.16, xgrammar, torchcodec, ...);
#     185 distributions in all.
# One pin of our own: kernels==0.14.1. SGLang does not pin `kernels`, and pip takes the newest
# (0.17.2), but from 0.15 on kernels' LayerRepository wants a revision or a version, and
# transformers 5.6.0 builds its hub-kernel table without either when it is imported, so
# `import sglang` fails ("ValueError: Either a revision or a version must be specified.", seen on
# the H200 with 0.17.2). 0.14.1 is the newest kernels that transformers 5.6.0 imports with.
# Three wheels are trimmed of files the check never opens (`zip -d`; the TRIMMED list, verified at
# the end under an audit hook: no open, listing, dlopen, mapping or import of any of them):
#   sglang-kernel     sgl_kernel/flash_ops.abi3.so (1.0 GB, FA3) and sgl_kernel/sm100/ (loaded on
#                     GPUs other than compute capability 9.0)
#   flashinfer-cubin  the 10,560 *.cubin files (precompiled kernels, read when a kernel runs)
#   xgrammar          xgrammar/lib/libxgrammar.a (a static library for C++ builds)
# Bytecode: compiled for everything (site-packages and the standard library), as pip leaves it,
# in a cache of our own (PYTHONPYCACHEPREFIX, as bench/h200_check_import_cost.sh; Python then reads
# bytecode only from there).
#
# The wheels: the closure comes from `pip install --dry-run --report` for sglang==0.5.11 (cp312,
# manylinux x86_64) with the image's `pip list` as constraints, dropping each constraint that
# conflicts (timm, transformers, tokenizers, cuda-bindings, cuda-core, numpy) and adding
# kernels==0.14.1; what the image lacks comes from `pip download --no-deps --only-binary=:all:
# --python-version 3.12 --platform manylinux_2_N_x86_64 ...` into .whl2/, trimmed there with
# `zip -d`, and reaches the machine as one tar split into 55 MiB parts, unpacked into $WHEELS.
#
# Run from the repository root on the GPU machine, with the wheels in $WHEELS (default
# /tmp/wheels): `bash bench/h200_check_real_install.sh` (STAGE=setup builds the venv only,
# STAGE=measure measures in a venv built before; default both). Writes to $OUT:
#   check-real-install.txt            everything printed, in order (setup log first)
#   check-real-install.jsonl          one verdict per run with its timings and wall time
#   check-real-install.importtime.txt -X importtime: top 40 of the import and of the whole check,
#                                     and the share of sgl_kernel, flashinfer, cutlass, ...
#   check-real-install.pip-list.txt   the distributions the venv's Python sees
#   check-real-install.loaded.txt     what the check loaded (modules, shared objects) and whether
#                                     it touched any trimmed file
#   check-real-install.gpu.txt        the nvidia-smi samples during checks next to the holder
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
STAGE=${STAGE:-all}
WHEELS=${WHEELS:-/tmp/wheels}
VENV=${VENV:-/tmp/sgvenv}
SETUP_LOG=/tmp/check-real-install.setup.txt
PROGRAM=${PROGRAM:-sgdeploy/sglang/check/program.py}
export PYTHONUNBUFFERED=1 PYTHONPYCACHEPREFIX=/tmp/pycache
unset PYTHONDONTWRITEBYTECODE PYTHONPATH PYTHONHOME

# The closure's distributions taken from the image (pip keeps these: each satisfies every pin).
IMAGE_CLOSURE='torch==2.11.0 cuda-toolkit==13.0.2 nvidia-cudnn-cu13==9.19.0.56 nvidia-cusparselt-cu13==0.8.0
nvidia-nccl-cu13==2.28.9 nvidia-nvshmem-cu13==3.4.5 torchaudio==2.11.0 triton==3.6.0 anyio==4.15.1
httpx==0.28.1 httpcore==1.0.9 huggingface-hub==1.33.0 click==8.5.0 hf-xet==1.6.0
nvidia-cublas==13.1.0.3 nvidia-cuda-cupti==13.0.85 nvidia-cuda-nvrtc==13.0.88
nvidia-cuda-runtime==13.0.96 nvidia-cufft==12.0.0.61 nvidia-cufile==1.15.1.6 nvidia-curand==10.4.0.35
nvidia-cusolver==12.0.4.66 nvidia-cusparse==12.6.3.3 nvidia-nvjitlink==13.0.88 nvidia-nvtx==13.0.85
setuptools==81.0.0 typing-extensions==4.16.0 urllib3==2.7.0 cuda-pathfinder==1.8.1 filelock==3.32.5
fsspec==2026.7.0 h11==0.16.0 idna==3.19 lxml==6.1.3 attrs==26.1.0 networkx==3.6.1 packaging==26.3
pillow==12.3.0 prometheus-client==0.26.0 pyyaml==6.0.3 regex==2026.9.3 requests==2.34.2
charset-normalizer==3.5.1 certifi==2026.7.22 safetensors==0.8.0 grpcio==1.84.0 protobuf==7.36.2
sympy==1.14.0 mpmath==1.3.0 tiktoken==0.14.0 tqdm==4.70.1 aiohttp==3.14.3 multidict==6.9.1
yarl==1.25.1 aiohappyeyeballs==2.7.1 aiosignal==1.4.0 frozenlist==1.8.0 propcache==0.5.4 build==1.6.1
cloudpickle==3.1.2 pyarrow==25.0.1 einops==0.8.2 annotated-doc==0.0.5 psutil==7.2.2 pygments==2.21.0
jinja2==3.1.6 markupsafe==3.0.3 rich==15.0.0 markdown-it-py==4.2.0 mdurl==0.1.2 ninja==1.13.2
nvidia-ml-py==13.610.43 pandas==3.0.6 python-dateutil==2.9.0.post0 six==1.17.0 pyproject-hooks==1.3.3
scipy==1.18.1 sentencepiece==0.2.2 tabulate==0.10.0 torchvision==0.26.0 typer==0.27.2
shellingham==1.5.4 uvloop==0.23.0 xxhash==4.0.1'
IMAGE=${IMAGE:-$IMAGE_CLOSURE}
# Files left out of the carried wheels (glob patterns relative to site-packages).
TRIMMED='sgl_kernel/flash_ops.* sgl_kernel/sm100 sgl_kernel/sm100/* flashinfer_cubin/cubins/*.cubin
xgrammar/lib/libxgrammar.a'

setup() {
  echo "== setup $(date -u +%FT%TZ): image python $(command -v python3) ($(python3 -V 2>&1)), nproc $(nproc)"
  echo "wheels in $WHEELS: $(ls "$WHEELS"/*.whl | wc -l) files, $(du -sh "$WHEELS" | cut -f1)"
  rm -rf "$VENV" /tmp/pycache
  python3 -m venv --without-pip "$VENV" || return 1
  local vpy="$VENV/bin/python3"
  echo "venv: $(cat "$VENV/pyvenv.cfg" | tr '\n' ';')"
  # the closure's other distributions, installed by pip into the venv (no bytecode yet: below)
  local s0=$SECONDS
  if ! python3 -m pip --python "$vpy" install -q --no-deps --no-index --no-compile --no-cache-dir \
      "$WHEELS"/*.whl > /tmp/pip-install.log 2>&1; then
    sed 's/^/pip install: /' /tmp/pip-install.log | tail -20
    echo "pip install: FAILED"; return 1
  fi
  sed 's/^/pip install: /' /tmp/pip-install.log | tail -5
  echo "pip install: $((SECONDS - s0)) s for $(ls "$WHEELS"/*.whl | wc -l) wheels"
  # the image's distributions of the closure, file by file from their RECORD
  IMAGE="$IMAGE" VSITE=$("$vpy" -c 'import sysconfig; print(sysconfig.get_path("purelib"))') python3 - <<'PY'
import importlib.metadata as md, os, sys
vsite = os.environ["VSITE"]
made = clash = outside = absent = 0
for spec in os.environ["IMAGE"].split():
    name, want = spec.split("==")
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        print(f"mirror: {name} NOT IN THE IMAGE"); continue
    if dist.version != want:
        print(f"mirror: {name} {dist.version} in the image, closure says {want}")
    base = os.path.normpath(str(dist.locate_file("")))
    files = dist.files
    if files is None:
        print(f"mirror: {name} has no RECORD"); continue
    for f in files:
        src = os.path.normpath(str(dist.locate_file(f)))
        rel = os.path.relpath(src, base)
        if rel.startswith(".."):
            outside += 1; continue  # console scripts and the like
        if "__pycache__" in rel.split(os.sep) or rel.endswith(".pyc"):
            continue
        dst = os.path.join(vsite, rel)
        if os.path.lexists(dst):
            if os.path.realpath(dst) != os.path.realpath(src):
                clash += 1
                if clash <= 10:
                    print(f"mirror: {rel} already installed from a wheel; kept that one")
            continue
        if not os.path.exists(src):
            absent += 1
            if absent <= 10:
                print(f"mirror: {name}: {rel} listed in RECORD but absent")
            continue
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        os.symlink(src, dst)
        made += 1
print(f"mirror: {made} files linked from the image, {clash} clashes, {outside} outside site-packages, {absent} absent")
PY
  "$vpy" - > "$OUT/check-real-install.pip-list.txt" <<'PY'
import importlib.metadata as md, sys
d = sorted({(x.metadata["Name"], x.version) for x in md.distributions()}, key=lambda t: t[0].lower())
print(f"# {len(d)} distributions seen by {sys.executable} (Python {sys.version.split()[0]}), sys.path:")
print("# " + " ".join(sys.path))
for n, v in d:
    print(f"{n}=={v}")
PY
  echo "venv sees $(grep -vc '^#' "$OUT/check-real-install.pip-list.txt") distributions"
  python3 -m pip --python "$vpy" check 2>&1 | sed 's/^/pip check: /' | head -20
  # COMPILE=0: the caller compiles bytecode its own way (bench/h200_real_deploy.sh: beside the sources)
  [ "${COMPILE:-1}" = 1 ] || return 0
  local stdlib; stdlib=$("$vpy" -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')
  ( time "$vpy" -m compileall -q -j 0 "$("$vpy" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" \
      "$stdlib" >/dev/null ) 2>&1 | grep real | sed 's/^/compileall: /'
  echo "bytecode files: $(find /tmp/pycache -name '*.pyc' | wc -l)"
  cp "$OUT/check-real-install.pip-list.txt" /tmp/check-real-install.pip-list.txt
}

if [ "$STAGE" != measure ]; then
  set -o pipefail
  setup 2>&1 | tee "$SETUP_LOG" || { echo "setup failed"; exit 1; }
  set +o pipefail
  [ "$STAGE" = setup ] && exit 0
fi
exec > >(tee "$OUT/check-real-install.txt") 2>&1
cat "$SETUP_LOG"
cp /tmp/check-real-install.pip-list.txt "$OUT/" 2>/dev/null
export PATH="$VENV/bin:$PATH" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
echo "== measure $(date -u +%FT%TZ): python3 is $(command -v python3)"
python3 -c 'import sys, torch; print("prefix", sys.prefix, "| torch", torch.__version__, torch.__file__); print("sys.path", sys.path)'
t() { python3 -c 'import subprocess, sys, time; s = time.monotonic(); r = subprocess.run(sys.argv[1:], capture_output=True); print(f"{time.monotonic() - s:.2f} s" + ("" if r.returncode == 0 else f" (exit {r.returncode}: {r.stderr.decode()[-400:]})"))' "$@"; }
for i in 1 2 3; do echo "import torch #$i: $(t python3 -c 'import torch')"; done
for i in 1 2 3; do echo "import sglang.srt.server_args #$i: $(t python3 -c 'import sglang.srt.server_args')"; done
M=/tmp/models/tiny-llama; mkdir -p $M
cat > $M/config.json <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
 "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 1000,
 "max_position_embeddings": 4096, "rms_norm_eps": 1e-06, "torch_dtype": "bfloat16", "tie_word_embeddings": false}
JSON
smi_apps() { nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits; }
smi_used() { nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv,noheader,nounits | head -1; }
req() { python3 -c "import json,base64,sys; print(base64.b64encode(json.dumps({'argv': sys.argv[1:]}).encode()).decode())" "$@"; }
JSONL="$OUT/check-real-install.jsonl"; : > "$JSONL"
SAMPLE=0
check() {  # $1 = case name, the rest = server flags; SAMPLE=1: sample nvidia-smi every 0.2 s meanwhile
  local name=$1; shift
  local s="/tmp/samples.$name"; : > "$s"
  local t0; t0=$(date +%s.%N)
  python3 - "$(req "$@")" < "$PROGRAM" > "/tmp/verdict.$name" 2> "/tmp/stderr.$name" &
  local pid=$!
  if [ "$SAMPLE" = 1 ]; then
    while kill -0 $pid 2>/dev/null; do
      echo "$(date +%s.%N) used=$(smi_used | cut -d, -f2 | tr -d ' ') apps=$(smi_apps | cut -d, -f1,3 | tr -d ' ' | tr '\n' ';')" >> "$s"
      sleep 0.2
    done
  fi
  wait $pid; local rc=$?
  local t1; t1=$(date +%s.%N)
  python3 - "$name" "$pid" "$rc" "$t0" "$t1" "$s" "/tmp/verdict.$name" "/tmp/stderr.$name" "$@" >> "$JSONL" <<'PY'
import json, sys
name, pid, rc, t0, t1, samples, verdict, stderr, *argv = sys.argv[1:]
text = open(verdict).read()
v = json.loads(text.split("@@sgdeploy:sglang-check@@", 1)[1]) if "@@sgdeploy:sglang-check@@" in text else {}
row = {"case": name, "argv": argv, "pid": int(pid), "exit_code": int(rc), "wall_s": round(float(t1) - float(t0), 3),
       "accepted": v.get("accepted"), "stage": v.get("stage"), "error_type": v.get("error_type"),
       "error": (v.get("error") or None) and v["error"][:300], "sglang_version": v.get("sglang_version"),
       "timings": v.get("timings"), "cuda_initialized": v.get("cuda_initialized"),
       "gpu_memory_mib": v.get("gpu_memory_mib"), "changed": v.get("changed"),
       "warnings": v.get("warnings"), "stderr_tail": "" if v else open(stderr).read()[-800:]}
rows = open(samples).read().splitlines()
if rows:
    row.update(samples=len(rows), samples_listing_the_check=sum(f"{pid}," in r.split("apps=", 1)[1] for r in rows),
               memory_used_mib_during=sorted({r.split("used=")[1].split()[0] for r in rows}))
print(json.dumps(row))
PY
  tail -1 "$JSONL" | python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); print("== %s: exit %s wall %.2f s accepted=%s stage=%s %s cuda_initialized=%s gpu_memory_mib=%s%s%s" % (r["case"], r["exit_code"], r["wall_s"], r["accepted"], r["stage"], r["timings"], r["cuda_initialized"], r["gpu_memory_mib"], (" error=" + str(r["error"])) if r["error"] else "", (" samples=%s listing_the_check=%s used=%s" % (r["samples"], r["samples_listing_the_check"], r["memory_used_mib_during"])) if "samples" in r else ""))'
}
EXPLICIT=(--chunked-prefill-size 4096 --mem-fraction-static 0.8 --cuda-graph-max-bs 64)
for i in 1 2 3 4 5; do
  check "defaults-$i" --model-path $M
  if [ $i = 1 ] && grep -q '"stage": "import"' <(tail -1 "$JSONL"); then
    echo "the check failed to import SGLang: stopping"; tail -c 1500 /tmp/stderr.defaults-1; exit 1
  fi
done
for i in 1 2 3 4 5; do check "explicit-$i" --model-path $M "${EXPLICIT[@]}"; done
check "nextn" --model-path $M "${EXPLICIT[@]}" --speculative-algorithm NEXTN
python3 - "$JSONL" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def stat(xs):
    xs = [x for x in xs if x is not None]
    return f"median {statistics.median(xs):.2f} s ({min(xs):.2f} .. {max(xs):.2f}), n={len(xs)}" if xs else "-"
for group in ("defaults", "explicit", "all 11"):
    sel = [r for r in rows if group == "all 11" or r["case"].startswith(group)]
    print(f"== {group}: accepted {sum(bool(r['accepted']) for r in sel)}/{len(sel)}")
    for k in ("import_s", "parse_s", "resolve_s", "check_s", "total_s"):
        print(f"   {k:10} {stat([(r['timings'] or {}).get(k) for r in sel])}")
    print(f"   {'wall_s':10} {stat([r['wall_s'] for r in sel])}")
PY

# where the time goes: -X importtime of the import and of the whole check (a default launch)
python3 -X importtime -c "import sglang.srt.server_args" 2> /tmp/importtime.import.txt
python3 -X importtime - "$(req --model-path $M)" < "$PROGRAM" > /tmp/verdict.importtime 2> /tmp/importtime.check.txt
python3 - /tmp/importtime.import.txt /tmp/importtime.check.txt > "$OUT/check-real-install.importtime.txt" <<'PY'
import collections, sys
def parse(path):
    rows = []
    for line in open(path):
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cum_us, name = line[len("import time:"):].rstrip("\n").split("|")
        depth = (len(name) - len(name.lstrip(" ")) - 1) // 2
        rows.append((int(self_us), int(cum_us), depth, name.strip()))
    return rows
for label, path in (("import sglang.srt.server_args", sys.argv[1]), ("the whole check program (default launch)", sys.argv[2])):
    rows = parse(path)
    total = sum(r[0] for r in rows)
    print(f"## {label}: {len(rows)} modules, {total / 1e6:.2f} s of import (sum of self times)")
    print("## top 40 by cumulative time (us: self | cumulative | module)")
    for s, c, d, n in sorted(rows, key=lambda r: -r[1])[:40]:
        print(f"{s:10d} | {c:10d} | {'  ' * d}{n}")
    by_top = collections.defaultdict(lambda: [0, 0])
    for s, c, d, n in rows:
        by_top[n.split(".")[0]][0] += s; by_top[n.split(".")[0]][1] += 1
    print("## self time by top-level package (top 30): s, share, modules")
    for top, (s, k) in sorted(by_top.items(), key=lambda kv: -kv[1][0])[:30]:
        print(f"{s / 1e6:7.3f} s {100 * s / total:5.1f} %  {k:5d}  {top}")
    # -X importtime lists a module after the modules it imported (one level deeper): the parent of
    # a row is the next row one level up. A package's inclusive time is the cumulative time of its
    # rows whose parent is outside the package (what importing it cost, with what it pulled in).
    parent = [None] * len(rows)
    above = {}
    for i in range(len(rows) - 1, -1, -1):
        d = rows[i][2]
        parent[i] = above.get(d - 1)
        above[d] = rows[i][3]
    print("## the kernel packages and the big imports: self time (share), modules; inclusive time (first importer)")
    for top in ("sgl_kernel", "flashinfer", "flashinfer_cubin", "cutlass", "tvm_ffi", "cuda", "cudnn", "triton",
                "xgrammar", "torchcodec", "mistral_common", "kernels", "flash_attn", "torchvision", "transformers",
                "torch", "sglang"):
        inp = lambda n: n == top or n.startswith(top + ".")
        sel = [i for i, r in enumerate(rows) if inp(r[3])]
        if not sel:
            print(f"   {top}: not imported"); continue
        s = sum(rows[i][0] for i in sel)
        outer = [i for i in sel if parent[i] is None or not inp(parent[i])]
        inc = sum(rows[i][1] for i in outer)
        first = outer[0] if outer else sel[0]
        print(f"   {top}: {s / 1e6:.3f} s self ({100 * s / total:.1f} %), {len(sel)} modules; inclusive {inc / 1e6:.3f} s"
              f" ({100 * inc / total:.1f} %); first: {rows[first][3]} from {parent[first]}")
    print()
PY
head -45 "$OUT/check-real-install.importtime.txt"
grep -A18 "the kernel packages" "$OUT/check-real-install.importtime.txt"

# what the check loads: every file it opens or lists, every dlopen, import attempts, and at its
# exit /proc/self/maps and sys.modules (a default launch and NEXTN, under an audit hook)
cat > /tmp/auditwrap.py <<'PY'
import os, sys
D = os.environ["AUDIT_DIR"]; os.makedirs(D, exist_ok=True)
log = open(os.path.join(D, "events.txt"), "a", buffering=1)
busy = [False]
def hook(ev, args):
    if busy[0] or ev not in ("open", "ctypes.dlopen", "os.listdir", "os.scandir", "import"):
        return
    busy[0] = True
    try:
        log.write(f"{ev}\t{args[0] if args else None}\n")
    except Exception:
        pass
    busy[0] = False
def dump():
    busy[0] = True
    open(os.path.join(D, "maps.txt"), "w").write(open("/proc/self/maps").read())
    with open(os.path.join(D, "modules.txt"), "w") as o:
        for k, m in sorted(sys.modules.items()):
            o.write(f"{k}\t{getattr(m, '__file__', None)}\n")
real_exit = os._exit
def _exit(code):
    dump(); real_exit(code)
os._exit = _exit
sys.addaudithook(hook)
src = sys.stdin.read()
sys.argv = ["-"] + sys.argv[1:]
exec(compile(src, "<stdin>", "exec"), {"__name__": "__main__", "__file__": "<stdin>"})
PY
VSITE=$(python3 -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
for c in defaults nextn; do
  rm -rf /tmp/audit.$c
  if [ $c = defaults ]; then a=(--model-path "$M"); else a=(--model-path "$M" "${EXPLICIT[@]}" --speculative-algorithm NEXTN); fi
  AUDIT_DIR=/tmp/audit.$c python3 /tmp/auditwrap.py "$(req "${a[@]}")" < "$PROGRAM" > /tmp/verdict.audit.$c 2>/dev/null
  echo "== audit run $c: $(cut -c1-160 /tmp/verdict.audit.$c)"
done
VSITE="$VSITE" TRIMMED="$TRIMMED" python3 - > "$OUT/check-real-install.loaded.txt" <<'PY'
import collections, fnmatch, os
vsite = os.environ["VSITE"].rstrip("/") + "/"
pats = os.environ["TRIMMED"].split()
for c in ("defaults", "nextn"):
    d = f"/tmp/audit.{c}"
    ev = [l.rstrip("\n").split("\t", 1) for l in open(f"{d}/events.txt") if "\t" in l]
    mods = [l.split("\t")[0] for l in open(f"{d}/modules.txt")]
    maps = sorted({l.split()[-1] for l in open(f"{d}/maps.txt") if len(l.split()) >= 6 and ".so" in l.split()[-1]})
    rel = lambda p: p[len(vsite):] if p.startswith(vsite) else p
    print(f"## case {c}: {len(mods)} modules in sys.modules, {len(maps)} shared objects mapped, {len(ev)} audit events")
    touched = sorted({f"{e} {rel(p)}" for e, p in ev if e != "import" and any(fnmatch.fnmatch(rel(p), q) for q in pats)})
    imported_trimmed = sorted({p for e, p in ev if e == "import" and p.split(" ")[0] in ("sgl_kernel.flash_ops", "sgl_kernel.flash_attn")})
    mapped_trimmed = [m for m in maps if any(fnmatch.fnmatch(rel(m), q) for q in pats)]
    print(f"trimmed files opened/listed/dlopened: {touched or 'none'}")
    print(f"trimmed files mapped: {mapped_trimmed or 'none'}; import attempts of sgl_kernel.flash_ops/flash_attn: {imported_trimmed or 'none'}")
    cubin_walk = sorted({rel(p) for e, p in ev if e in ("os.scandir", "os.listdir") and "flashinfer_cubin" in str(p)})
    print(f"flashinfer_cubin directories listed: {cubin_walk[:10] or 'none'}")
    tops = collections.Counter(m.split(".")[0] for m in mods)
    print("modules per top-level package (top 40): " + ", ".join(f"{k} {n}" for k, n in tops.most_common(40)))
    for top in ("sgl_kernel", "flashinfer", "flashinfer_cubin", "cutlass", "tvm_ffi", "cuda", "xgrammar", "torchcodec",
                "mistral_common", "kernels", "flash_attn", "scipy", "sklearn", "torchao", "timm", "llguidance", "outlines"):
        sel = [m for m in mods if m == top or m.startswith(top + ".")]
        print(f"   {top}: {len(sel)} modules" + (f": {' '.join(sel[:60])}{' ...' if len(sel) > 60 else ''}" if sel else ""))
    print("shared objects mapped from site-packages (wheel: installed in the venv; image: the image's file, linked):")
    for m in maps:
        if m.startswith(vsite):
            print(f"   {rel(m)} (wheel, {os.path.getsize(m) / 2**20:.1f} MiB)")
        elif "/site-packages/" in m:
            print(f"   {m.split('/site-packages/', 1)[1]} (image, {os.path.getsize(m) / 2**20:.1f} MiB)")
    opened = collections.Counter(rel(p).split("/")[0] for e, p in ev if e == "open" and str(p).startswith(vsite))
    print("files opened under site-packages, per top-level entry (top 30): " + ", ".join(f"{k} {n}" for k, n in opened.most_common(30)))
    dl = sorted({rel(str(p)) for e, p in ev if e == "ctypes.dlopen"})
    print(f"ctypes.dlopen: {dl}")
    failed = sorted({p.split(' ')[0] for e, p in ev if e == "import"} - set(mods))
    print(f"import attempts that did not end in sys.modules ({len(failed)}): {' '.join(failed)}")
    print()
PY
cat "$OUT/check-real-install.loaded.txt" | cut -c1-1500

# next to a "running server": a process holding all but 6 GiB of GPU 0, nvidia-smi every 0.2 s
GPU="$OUT/check-real-install.gpu.txt"
echo "== GPU before the holder: $(smi_used)" | tee "$GPU"; smi_apps | tee -a "$GPU"
rm -f /tmp/holder.ready /tmp/holder.stop
python3 - <<'PY' &
import torch, time, os
free, total = torch.cuda.mem_get_info(0)
block = torch.empty(free - 6 * 2**30, dtype=torch.uint8, device="cuda:0")
open("/tmp/holder.ready", "w").write(str(os.getpid()))
while not os.path.exists("/tmp/holder.stop"):
    time.sleep(0.2)
PY
HOLDER=$!
for _ in $(seq 300); do [ -e /tmp/holder.ready ] && break; sleep 0.2; done
echo "== holder pid $HOLDER holds memory: $(smi_used)" | tee -a "$GPU"; smi_apps | tee -a "$GPU"
SAMPLE=1
check "holder-defaults" --model-path $M
check "holder-nextn" --model-path $M "${EXPLICIT[@]}" --speculative-algorithm NEXTN
SAMPLE=0
echo "== GPU with the holder, after the checks: $(smi_used)" | tee -a "$GPU"; smi_apps | tee -a "$GPU"
touch /tmp/holder.stop; wait $HOLDER
sleep 1; echo "== GPU after the holder: $(smi_used)" | tee -a "$GPU"; smi_apps | tee -a "$GPU"
for c in holder-defaults holder-nextn; do
  grep "\"case\": \"$c\"" "$JSONL" | python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); print("== %s (pid %s): %s samples, %s listing the check pid, memory.used MiB during: %s; verdict cuda_initialized=%s gpu_memory_mib=%s accepted=%s total_s=%s" % (r["case"], r["pid"], r.get("samples"), r.get("samples_listing_the_check"), r.get("memory_used_mib_during"), r["cuda_initialized"], r["gpu_memory_mib"], r["accepted"], (r["timings"] or {}).get("total_s")))' | tee -a "$GPU"
  echo "samples (time used=MiB apps=pid,MiB;...):" >> "$GPU"; cat "/tmp/samples.$c" >> "$GPU"
done
python3 -c "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0])"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
