#!/usr/bin/env python3
"""check_init_from_transformers.py MPIEXEC NPFLAG GPT WORKDIR: dtrain-gpt --init-from on a
GPT-2 that Hugging Face's transformers itself wrote, against transformers' own forward pass.

A small GPT2LMHeadModel with random weights (spread wider than GPT-2's initialisation, so that
the loss depends on every tensor) is saved by save_pretrained as model.safetensors with its
config.json. dtrain-gpt --eval-only --init-from must give the loss transformers computes on
the validation window (in float64), at 1 rank and split by TP 2 with sequence parallelism and
by PP 2, and --generate with --temperature 0 must give the tokens transformers' greedy
generate() gives. Exits 77 (skipped) where torch or transformers is missing."""
import json
import os
import re
import shutil
import struct
import subprocess
import sys

try:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
except ImportError:
    print("torch or transformers is not available: skipped")
    sys.exit(77)

mpiexec, npflag, gpt, work = sys.argv[1:5]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
L, H, C, V, P, T = 2, 4, 64, 300, 48, 32  # P positions in the model, T the run's --seq-len (V > 256: ids are printed)
torch.manual_seed(3)
config = GPT2Config(vocab_size=V, n_positions=P, n_embd=C, n_layer=L, n_head=H, resid_pdrop=0.0,
                    embd_pdrop=0.0, attn_pdrop=0.0)
model = GPT2LMHeadModel(config)
with torch.no_grad():
    for name, p in model.named_parameters():
        p.copy_(1.0 + 0.2 * torch.randn_like(p) if name.endswith("ln_1.weight") or name.endswith("ln_2.weight")
                or name.endswith("ln_f.weight") else 0.15 * torch.randn_like(p))
model.eval()
hf_dir = os.path.join(work, "gpt2-small")
model.save_pretrained(hf_dir, safe_serialization=True)
with open(os.path.join(hf_dir, "model.safetensors"), "rb") as f:
    names = sorted(json.loads(f.read(struct.unpack("<Q", f.read(8))[0])).keys())
print(f"transformers wrote {len(names)} tensors: {', '.join(n for n in names if '.h.' not in n and 'h.' != n[:2])} ...")


def write_shard(path, tokens):  # llm.c's .bin: 256 int32 of header, then uint16 tokens
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253)))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))


g = torch.Generator().manual_seed(5)
window = torch.randint(0, V, (T + 1,), generator=g).tolist()
write_shard(os.path.join(work, "val.bin"), window)
write_shard(os.path.join(work, "train.bin"), torch.randint(0, V, (2000,), generator=g).tolist())
reference = model.double()
with torch.no_grad():
    logits = reference(torch.tensor([window[:T]])).logits[0]
    expected = torch.nn.functional.cross_entropy(logits, torch.tensor(window[1:])).item()
    prompt = window[:5]
    greedy = reference.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False,
                                pad_token_id=0)[0, len(prompt):].tolist()

common = ["--layers", str(L), "--heads", str(H), "--d-model", str(C), "--seq-len", str(T), "--vocab", str(V),
          "--data", os.path.join(work, "train.bin"), "--val-data", os.path.join(work, "val.bin"),
          "--micro-batch", "1", "--eval-batches", "1", "--eval-only", "--init-from", hf_dir]
failures = []
for label, ranks, extra in [("1 rank", 1, []), ("tp 2 with sp", 2, ["--tp", "2", "--sequence-parallel"]),
                            ("pp 2", 2, ["--pp", "2"])]:
    r = subprocess.run([mpiexec, npflag, str(ranks), gpt] + common + extra + [
        "--generate", "12", "--temperature", "0", "--prompt", " ".join(map(str, prompt))],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    if r.returncode != 0:
        sys.exit(f"FAIL: {label} exited {r.returncode}:\n{r.stderr[-3000:]}")
    m = re.search(r"eval: val loss (\S+)", r.stderr + r.stdout)
    loss = float(m.group(1)) if m else float("nan")
    tokens = [int(x) for x in r.stdout.split()]
    gap = abs(loss - expected) / expected
    print(f"{label}: val loss {loss:.9f}, transformers {expected:.9f}, relative gap {gap:.2e}; "
          f"greedy tokens {'as' if tokens == greedy else 'NOT as'} transformers' generate()")
    if not gap <= 1e-5:
        failures.append(f"{label}: relative gap {gap:.3g} > 1e-5")
    if tokens != greedy:
        failures.append(f"{label}: generated {tokens}, transformers {greedy}")

if failures:
    sys.exit("FAIL:\n" + "\n".join(failures))
print("ok: --init-from reads transformers' GPT-2 and computes its loss and greedy tokens")
