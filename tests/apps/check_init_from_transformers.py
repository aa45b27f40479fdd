#!/usr/bin/env python3
"""check_init_from_transformers.py MPIEXEC NPFLAG GPT CKPT_TOOL WORKDIR: dtrain-gpt --init-from on a
GPT-2 that Hugging Face's transformers itself wrote, against transformers' own forward pass.

A small GPT2LMHeadModel with random weights (spread wider than GPT-2's initialisation, so that
the loss depends on every tensor) is saved by save_pretrained as model.safetensors with its
config.json. dtrain-gpt --eval-only --init-from must give the loss transformers computes on
the validation window (in float64), at 1 rank and split by TP 2 with sequence parallelism and
by PP 2, and --generate with --temperature 0 must give the tokens transformers' greedy
generate() gives. Then 6 training steps from the file (one window as the training data, a
constant learning rate, no clipping) must give the losses and gradient norms of torch's
AdamW on transformers' model in float64, at 1 rank, DP 2 (also with ZeRO 3), TP 2 and PP 2.
Last, the trained checkpoint exported by dtrain-ckpt export --hf must load with transformers'
from_pretrained and give dtrain's final validation loss. Exits 77 (skipped) where torch or transformers is missing."""
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

mpiexec, npflag, gpt, tool, work = sys.argv[1:6]
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

# Fine-tuning from the file, against torch's AdamW on transformers' model (float64): the
# training file is one window, so every sample is that window; a constant learning rate, no
# clipping, weight decay on the matrices and embeddings only, as dtrain-gpt applies it.
STEPS, LR, WD, BATCH = 6, 2e-3, 0.1, 2
write_shard(os.path.join(work, "one_window.bin"), window)
decay = [p for p in reference.parameters() if p.dim() >= 2]
other = [p for p in reference.parameters() if p.dim() < 2]
adamw = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": other, "weight_decay": 0.0}],
                          lr=LR, betas=(0.9, 0.95), eps=1e-8)
inputs, targets = torch.tensor([window[:T]] * BATCH), torch.tensor([window[1:]] * BATCH)
want_losses, want_norms = [], []
for _ in range(STEPS):
    adamw.zero_grad()
    loss = torch.nn.functional.cross_entropy(reference(inputs).logits.reshape(-1, V), targets.reshape(-1))
    loss.backward()
    want_losses.append(loss.item())
    want_norms.append(torch.sqrt(sum((p.grad ** 2).sum() for p in reference.parameters())).item())
    adamw.step()
train = ["--layers", str(L), "--heads", str(H), "--d-model", str(C), "--seq-len", str(T), "--vocab", str(V),
         "--data", os.path.join(work, "one_window.bin"), "--val-data", os.path.join(work, "val.bin"),
         "--init-from", hf_dir, "--steps", str(STEPS), "--warmup-steps", "1", "--lr", str(LR), "--min-lr", str(LR),
         "--weight-decay", str(WD), "--clip-grad", "0", "--log-every", "1", "--eval-every", "0", "--eval-batches", "1"]
for label, ranks, extra in [("1 rank", 1, ["--micro-batch", str(BATCH)]),
                            ("dp 2", 2, ["--micro-batch", str(BATCH // 2)]),
                            ("dp 2 with ZeRO 3", 2, ["--micro-batch", str(BATCH // 2), "--zero", "3"]),
                            ("tp 2", 2, ["--micro-batch", str(BATCH), "--tp", "2"]),
                            ("pp 2", 2, ["--micro-batch", str(BATCH), "--pp", "2"])]:
    metrics = os.path.join(work, "train_" + re.sub(r"\W", "_", label) + ".jsonl")
    save = ["--save-dir", os.path.join(work, "trained")] if label == "tp 2" else []
    r = subprocess.run([mpiexec, npflag, str(ranks), gpt] + train + extra + save + ["--metrics", metrics],
                       capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    if r.returncode != 0:
        sys.exit(f"FAIL: training, {label}, exited {r.returncode}:\n{r.stderr[-3000:]}")
    rows = [json.loads(line) for line in open(metrics)]
    losses, norms = [row["loss"] for row in rows], [row["grad_norm"] for row in rows]
    if len(losses) != STEPS:
        failures.append(f"training, {label}: {len(losses)} steps logged, {STEPS} expected")
        continue
    loss_gap = max(abs(a - b) / b for a, b in zip(losses, want_losses))
    norm_gap = max(abs(a - b) / b for a, b in zip(norms, want_norms))
    print(f"training {STEPS} steps, {label}: losses {losses[0]:.6f} .. {losses[-1]:.6f} (torch {want_losses[0]:.6f} .. "
          f"{want_losses[-1]:.6f}), largest relative gap {loss_gap:.2e}; gradient norms {norm_gap:.2e}")
    if not (loss_gap <= 1e-5 and norm_gap <= 1e-4):
        failures.append(f"training, {label}: relative gaps {loss_gap:.3g} (losses, bound 1e-5), "
                        f"{norm_gap:.3g} (gradient norms, bound 1e-4)")
    if save:
        trained_val_loss = rows[-1].get("val_loss")

# The model trained at TP 2, exported for transformers, loaded by it.
exported = os.path.join(work, "trained_hf")
subprocess.run([tool, "export", "--hf", os.path.join(work, "trained", f"step_{STEPS:08d}.h5"), exported],
               check=True, capture_output=True)
loaded = GPT2LMHeadModel.from_pretrained(exported).double().eval()
with torch.no_grad():
    hf_loss = torch.nn.functional.cross_entropy(loaded(torch.tensor([window[:T]])).logits[0],
                                                torch.tensor(window[1:])).item()
gap = abs(hf_loss - trained_val_loss) / trained_val_loss if trained_val_loss else float("nan")
print(f"export --hf of the model trained at tp 2, loaded by transformers: loss {hf_loss:.9f}, dtrain's "
      f"{trained_val_loss}, relative gap {gap:.2e}")
if not gap <= 1e-5:
    failures.append(f"export --hf: transformers' loss {hf_loss}, dtrain's {trained_val_loss}")

if failures:
    sys.exit("FAIL:\n" + "\n".join(failures))
print("ok: --init-from reads transformers' GPT-2 and computes its loss and greedy tokens, and trains as torch's AdamW")
