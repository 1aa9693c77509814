#!/usr/bin/env bash
# What SGLang's own check costs on a GPU host whose packages pip installed the normal way (with
# bytecode), rather than the --no-compile copy of bench/h200_sglang_check.sh: `import torch`,
# `import sglang.srt.server_args`, and the whole check program (import, parse, resolve, check)
# five times on a default launch and five on one with explicit flags, with the GPU memory the
# check held. Run from the repository root with the SGLang wheel and the packages its import needs
# (for the host's Python) under .whl/; writes $OUT/check-import-cost.txt and
# $OUT/check-import-cost.jsonl (one verdict with its timings per run).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; exec > >(tee "$OUT/check-import-cost.txt") 2>&1
echo "== interpreter: $(python3 -V 2>&1); PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE-unset}; nproc $(nproc)"
unset PYTHONDONTWRITEBYTECODE
# Bytecode for everything, as `pip install` leaves it; in a cache folder of our own because the
# image's site-packages may be read-only (PYTHONPYCACHEPREFIX: Python reads it from there).
export PYTHONPYCACHEPREFIX=/tmp/pycache
# SGLang's wheel is tagged for CPython 3.11 (pure Python inside): unpacked; the rest pip-installed
wheels=(); for w in .whl/*.whl; do [[ $w == .whl/sglang-* ]] || wheels+=("$w"); done
( time python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site "${wheels[@]}" ) 2>&1 \
    | grep -v '^$' | sed 's/^/pip install: /'
for w in .whl/sglang-*.whl; do python3 -m zipfile -e "$w" /tmp/site || exit 1; done
mapfile -t sites < <(python3 -c 'import site; print("\n".join(site.getsitepackages()))')
( time python3 -m compileall -q -j 0 /tmp/site "${sites[@]}" >/dev/null ) 2>&1 | grep real | sed 's/^/compileall: /'
echo "bytecode files: $(find /tmp/pycache -name '*.pyc' | wc -l)"
python3 -m pip list 2>/dev/null > "$OUT/pip-list.txt"
export PYTHONPATH=/tmp/site HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
t() { python3 -c 'import subprocess, sys, time; s = time.monotonic(); r = subprocess.run(sys.argv[1:], capture_output=True); print(f"{time.monotonic() - s:.2f} s" + ("" if r.returncode == 0 else f" (exit {r.returncode}: {r.stderr.decode()[-400:]})"))' "$@"; }
for i in 1 2 3; do echo "import torch #$i: $(t python3 -c 'import torch')"; done
for i in 1 2 3; do echo "import sglang.srt.server_args #$i: $(t python3 -c 'import sglang.srt.server_args')"; done
M=/tmp/models/tiny-llama; mkdir -p $M
cat > $M/config.json <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
 "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 1000,
 "max_position_embeddings": 4096, "rms_norm_eps": 1e-06, "torch_dtype": "bfloat16", "tie_word_embeddings": false}
JSON
req() { python3 -c "import json,base64,sys; print(base64.b64encode(json.dumps({'argv': sys.argv[1:]}).encode()).decode())" "$@"; }
check() {  # $1 = case name, the rest = server flags
  local name=$1; shift
  local s; s=$(date +%s.%N)
  python3 - "$(req "$@")" < sgdeploy/sglang/check/program.py > "/tmp/verdict.$name" 2> "/tmp/stderr.$name"
  local rc=$? e; e=$(date +%s.%N)
  python3 - "$name" "$rc" "$s" "$e" "/tmp/verdict.$name" "/tmp/stderr.$name" >> "$OUT/check-import-cost.jsonl" <<'PY'
import json, sys
name, rc, s, e, verdict, stderr = sys.argv[1:]
text = open(verdict).read()
v = json.loads(text.split("@@sgdeploy:sglang-check@@", 1)[1]) if "@@sgdeploy:sglang-check@@" in text else {}
print(json.dumps({"case": name, "exit_code": int(rc), "wall_s": round(float(e) - float(s), 3),
                  "accepted": v.get("accepted"), "stage": v.get("stage"), "error": v.get("error"),
                  "timings": v.get("timings"), "cuda_initialized": v.get("cuda_initialized"),
                  "gpu_memory_mib": v.get("gpu_memory_mib"), "changed": sorted(v.get("changed", {})),
                  "stderr_tail": "" if v else open(stderr).read()[-600:]}))
PY
  echo "== $name: $(tail -1 "$OUT/check-import-cost.jsonl" | cut -c1-400)"
}
for i in 1 2 3 4 5; do check "defaults-$i" --model-path $M; done
for i in 1 2 3 4 5; do
  check "explicit-$i" --model-path $M --chunked-prefill-size 4096 --mem-fraction-static 0.8 --cuda-graph-max-bs 64
done
python3 -X importtime -c "import sglang.srt.server_args" 2> /tmp/importtime.txt
sort -t'|' -k2 -n -r /tmp/importtime.txt | head -40 > "$OUT/check-import-cost.importtime.txt"
head -20 "$OUT/check-import-cost.importtime.txt"
python3 -c "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0])"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
