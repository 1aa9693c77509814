"""Makes the models of the H200 run: random weights written with transformers, and a byte-level BPE
tokenizer trained on the spot with `tokenizers`, so that `/generate` with text works.

    python models.py DEST [NAME ...]   # DEST/small-llama (~0.4 B), DEST/llama-8b (Llama-3-8B
                                       # shape); llama-20b (~38 GB) only when named

The weights are drawn on the GPU (seconds instead of minutes on the CPU) and saved as safetensors
shards, as a Hugging Face checkpoint is. Run with the interpreter that serves them (SGLang's venv),
so transformers writes a config that SGLang's own transformers reads.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import time

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast

VOCAB = 32000
SPECIAL = ["<unk>", "<s>", "</s>"]

SHAPES = {
    "small-llama": dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                        num_attention_heads=16, num_key_value_heads=8),
    # Meta-Llama-3-8B's shape with a 32k vocabulary: ~7 B parameters, ~14 GB of bf16
    "llama-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                     num_attention_heads=32, num_key_value_heads=8),
    # a 20B-class shape: ~19 B parameters, ~38 GB of bf16 (the daemon's measure on a model whose
    # loading dominates the restart; leaves ~20 GB of the 64 GB disk beside SGLang's closure)
    "llama-20b": dict(hidden_size=6144, intermediate_size=16384, num_hidden_layers=48,
                      num_attention_heads=48, num_key_value_heads=8),
}


def corpus(limit_bytes: int = 8 << 20):
    """Text to train the tokenizer on: the standard library's Python sources."""
    seen = 0
    for path in sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "**", "*.py"),
                                 recursive=True)):
        try:
            text = open(path, encoding="utf-8").read()
        except (UnicodeDecodeError, OSError):
            continue
        seen += len(text)
        yield text
        if seen > limit_bytes:
            return


def train_tokenizer(dest: str) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>")
    fast.save_pretrained(dest)
    return fast


def make_model(dest: str, name: str, tokenizer_dir: str) -> dict:
    out = os.path.join(dest, name)
    if os.path.exists(os.path.join(out, "config.json")):
        return {"model": name, "skipped": "exists"}
    t0 = time.monotonic()
    config = LlamaConfig(vocab_size=VOCAB, max_position_embeddings=8192, rms_norm_eps=1e-5,
                         rope_theta=500000.0, bos_token_id=1, eos_token_id=2,
                         tie_word_embeddings=False, torch_dtype="bfloat16", **SHAPES[name])
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
    made = time.monotonic()
    model.save_pretrained(out, max_shard_size="5GB", safe_serialization=True)
    for f in os.listdir(tokenizer_dir):
        with open(os.path.join(tokenizer_dir, f), "rb") as src, open(os.path.join(out, f), "wb") as dst:
            dst.write(src.read())
    params = sum(p.numel() for p in model.parameters())
    del model
    torch.cuda.empty_cache()
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    return {"model": name, "parameters": params, "bytes": size, "init_s": round(made - t0, 2),
            "save_s": round(time.monotonic() - made, 2)}


def main() -> None:
    dest = sys.argv[1]
    os.makedirs(dest, exist_ok=True)
    tok_dir = os.path.join(dest, "tokenizer")
    t0 = time.monotonic()
    if not os.path.exists(os.path.join(tok_dir, "tokenizer.json")):
        train_tokenizer(tok_dir)
    print(json.dumps({"tokenizer_s": round(time.monotonic() - t0, 2)}), flush=True)
    for name in sys.argv[2:] or ("small-llama", "llama-8b"):
        print(json.dumps(make_model(dest, name, tok_dir)), flush=True)


if __name__ == "__main__":
    main()
