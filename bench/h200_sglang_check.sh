#!/usr/bin/env bash
# The H200 evidence for SGLang's own verdict (docs/host-facts.md, docs/performance.md).
#
# On a GPU machine with torch: install the carried SGLang wheels (.whl/), fill most of GPU 0
# with another process (the "running server"), then run sgdeploy's check program several times
# while nvidia-smi is sampled, and write what was seen to $OUT:
#   compute-apps-holder.csv      nvidia-smi --query-compute-apps while the holder holds memory
#   nvidia-smi-q-holder.xml      nvidia-smi -q -x at the same moment
#   ps-holder.txt                ps -o pid,user,comm,args of the holder
#   sglang-check-h200.jsonl      one line per check: its verdict, timings, and the samples taken during it
#   sglang-check-h200.log        everything printed, in order
set -u
PROGRAM=${PROGRAM:-sgdeploy/sglang/check/program.py}  # run from the repository root
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LOG="$OUT/sglang-check-h200.log"; exec > >(tee -a "$LOG") 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1
M=/tmp/models/tiny-llama; mkdir -p $M
cat > $M/config.json <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
 "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 1000,
 "max_position_embeddings": 4096, "rms_norm_eps": 1e-06, "torch_dtype": "bfloat16", "tie_word_embeddings": false}
JSON
smi_apps() { nvidia-smi --query-compute-apps=pid,process_name,used_memory,gpu_uuid --format=csv,noheader,nounits; }
smi_used() { nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv,noheader,nounits | head -1; }
echo "== GPU before: $(smi_used)"; smi_apps
# where the import time goes (the check's largest part)
( time python3 -c "import torch" ) 2>&1 | grep real | sed 's/^/import torch: /'
( time python3 -c "import torch; torch.cuda.get_device_capability()" ) 2>&1 | grep real | sed 's/^/import torch + device capability: /'
python3 -X importtime -c "import sglang.srt.server_args" 2> /tmp/importtime.txt
sort -t'|' -k2 -n -r /tmp/importtime.txt | head -60 > "$OUT/importtime-top.txt"; head -25 "$OUT/importtime-top.txt"
# the "running server": holds all but 6 GiB of GPU 0 until told to stop
python3 - <<'PY' &
import torch, time, os
free, total = torch.cuda.mem_get_info(0)
block = torch.empty(free - 6 * 2**30, dtype=torch.uint8, device="cuda:0")
open("/tmp/holder.ready", "w").write(str(os.getpid()))
while not os.path.exists("/tmp/holder.stop"):
    time.sleep(0.2)
PY
HOLDER=$!
for _ in $(seq 200); do [ -e /tmp/holder.ready ] && break; sleep 0.2; done
echo "== holder pid $HOLDER holds memory: $(smi_used)"
smi_apps | tee "$OUT/compute-apps-holder.csv"
nvidia-smi -q -x > "$OUT/nvidia-smi-q-holder.xml"
ps -o pid,user,comm,args -p "$HOLDER" | tee "$OUT/ps-holder.txt"
req() { python3 -c "import json,base64,sys; print(base64.b64encode(json.dumps({'argv': sys.argv[1:]}).encode()).decode())" "$@"; }
check() {  # $1 = case name, the rest = server flags
  local name=$1; shift
  local s="/tmp/samples.$name"; : > "$s"
  local t0; t0=$(date +%s.%N)
  python3 - "$(req "$@")" < "$PROGRAM" > "/tmp/verdict.$name" 2>"/tmp/stderr.$name" &
  local pid=$!
  while kill -0 $pid 2>/dev/null; do
    echo "$(date +%s.%N) used=$(smi_used | cut -d, -f2 | tr -d ' ') apps=$(smi_apps | cut -d, -f1,3 | tr -d ' ' | tr '\n' ';')" >> "$s"
    sleep 0.2
  done
  wait $pid; local rc=$?
  local t1; t1=$(date +%s.%N)
  python3 - "$name" "$pid" "$rc" "$t0" "$t1" "$s" "/tmp/verdict.$name" "/tmp/stderr.$name" "$@" >> "$OUT/sglang-check-h200.jsonl" <<'PY'
import json, sys
name, pid, rc, t0, t1, samples, verdict, stderr, *argv = sys.argv[1:]
text = open(verdict).read()
v = json.loads(text.split("@@sgdeploy:sglang-check@@", 1)[1]) if "@@sgdeploy:sglang-check@@" in text else None
rows = open(samples).read().splitlines()
seen = [r for r in rows if f"{pid}," in r.split("apps=", 1)[1]]
print(json.dumps({"case": name, "argv": argv, "pid": int(pid), "exit_code": int(rc),
                  "wall_s": round(float(t1) - float(t0), 3), "verdict": v,
                  "samples": len(rows), "samples_listing_the_check": len(seen),
                  "memory_used_mib_during": sorted({r.split("used=")[1].split()[0] for r in rows}),
                  "stderr_tail": open(stderr).read()[-1500:]}))
PY
  echo "== $name rc=$rc: $(tail -1 "$OUT/sglang-check-h200.jsonl" | cut -c1-600)"
}
check cold-defaults --model-path $M
check defaults --model-path $M
check explicit --model-path $M --chunked-prefill-size 4096 --mem-fraction-static 0.8 --cuda-graph-max-bs 64 --speculative-algorithm NEXTN
check context-too-long --model-path $M --context-length 1000000
SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 check context-allowed-by-env --model-path $M --context-length 1000000
check unknown-flag --model-path $M --no-such-flag 1
check defaults-again --model-path $M
echo "== GPU during holder, after checks: $(smi_used)"; smi_apps
touch /tmp/holder.stop; wait $HOLDER
sleep 1; echo "== GPU after: $(smi_used)"; smi_apps
python3 -c "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0])"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
