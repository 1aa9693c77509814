#!/usr/bin/env bash
# Where the time of SGLang's own check goes on a GPU host, with SGLang installed the way pip
# normally installs it (bytecode compiled) rather than the --no-compile copy of
# bench/h200_sglang_check.sh: the interpreter's settings, `import torch`, `import
# sglang.srt.server_args` (cold, then warm), and the whole check program, three times each.
# Run from the repository root with the SGLang wheel and the pure-Python packages its import needs
# (for the host's Python) under .whl/; writes $OUT/check-import-cost.txt.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; exec > >(tee "$OUT/check-import-cost.txt") 2>&1
echo "== interpreter: $(python3 -V 2>&1); PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE-unset}; nproc $(nproc)"
python3 -c "import sys, torch, os; print('dont_write_bytecode', sys.flags.dont_write_bytecode); print('torch', torch.__version__, os.path.dirname(torch.__file__))"
# unpacked, not pip-installed: the wheel is tagged cp311 and the host may run another Python
mkdir -p /tmp/site && for w in .whl/*.whl; do python3 -m zipfile -e "$w" /tmp/site || exit 1; done
export PYTHONPATH=/tmp/site HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
echo "torch's bytecode files: $(find "$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')" -name '*.pyc' | wc -l)"
t() { python3 -c 'import subprocess, sys, time; s = time.monotonic(); r = subprocess.run(sys.argv[1:], capture_output=True); print(f"{time.monotonic() - s:.2f} s" + ("" if r.returncode == 0 else f" (exit {r.returncode}: {r.stderr.decode()[-300:]})"))' "$@"; }
for i in 1 2; do echo "import torch, no bytecode #$i: $(t python3 -c 'import torch')"; done
for i in 1 2; do echo "import sglang.srt.server_args, no bytecode for SGLang #$i: $(t python3 -c 'import sglang.srt.server_args')"; done
unset PYTHONDONTWRITEBYTECODE
( time python3 -m compileall -q -j 0 /tmp/site >/dev/null ) 2>&1 | grep real | sed 's/^/compileall SGLang: /'
for i in 1 2 3; do echo "import sglang.srt.server_args, SGLang compiled #$i: $(t python3 -c 'import sglang.srt.server_args')"; done
# as on a host whose packages pip installed (with bytecode): compile the interpreter's own
# site-packages too, into a cache folder of our own (the image's may be read-only)
export PYTHONPYCACHEPREFIX=/tmp/pycache
mapfile -t sites < <(python3 -c 'import site; print("\n".join(site.getsitepackages()))')
( time python3 -m compileall -q -j 0 /tmp/site "${sites[@]}" >/dev/null ) 2>&1 | grep real | sed 's/^/compileall everything: /'
for i in 1 2 3; do echo "import sglang.srt.server_args, everything compiled #$i: $(t python3 -c 'import sglang.srt.server_args')"; done
M=/tmp/models/tiny-llama; mkdir -p $M
cat > $M/config.json <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
 "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 1000,
 "max_position_embeddings": 4096, "rms_norm_eps": 1e-06, "torch_dtype": "bfloat16", "tie_word_embeddings": false}
JSON
req=$(python3 -c "import json,base64; print(base64.b64encode(json.dumps({'argv': ['--model-path', '$M']}).encode()).decode())")
for i in 1 2 3; do
  python3 - "$req" < sgdeploy/sglangcheck/program.py > /tmp/verdict.$i 2>/dev/null
  echo "check program #$i: $(grep -o '"accepted": [a-z]*' /tmp/verdict.$i | head -1); $(grep -o '"timings[^}]*}' /tmp/verdict.$i | head -1)"
done
for i in 1 2; do echo "import torch, compiled #$i: $(t python3 -c 'import torch')"; done
python3 -X importtime -c "import sglang.srt.server_args" 2> /tmp/importtime.txt
sort -t'|' -k2 -n -r /tmp/importtime.txt | head -25
