#!/usr/bin/env python3
"""check_init_from.py MPIEXEC NPFLAG GPT CKPT_TOOL WORKDIR [OPTION...]: dtrain-gpt --init-from
against an independent reference.

A small GPT-2 is written the way Hugging Face's transformers writes one (model.safetensors:
linear weights [in, out] as its Conv1D keeps them, the attention's mask buffers, a
config.json beside it), and again as a tied nanoGPT compiled with torch.compile would be saved
(names under "_orig_mod.transformer.", linear weights [out, in], the shared embedding under
its head's name "_orig_mod.lm_head.weight" only, fp16 values). Its loss on one window of tokens is
computed here, in NumPy float64, from the Hugging Face tensors, following GPT-2's forward
(x @ W + b for Conv1D). dtrain-gpt --eval-only --init-from must give that loss in several
layouts, since every validation sample is that one window. Then: a checkpoint, its
dtrain-ckpt export and --resume evaluate alike, and its export --hf (Hugging Face's layout)
gives the reference's loss and reads back alike; a resumed run ignores --init-from; and
mismatched or damaged files are refused with a message naming the fix. With OPTIONs (e.g.
--device cuda, on the CUDA emulator) only the layouts run, each given them too.
Exits 77 (skipped) where NumPy is missing."""
import json
import os
import re
import shutil
import struct
import subprocess
import sys

try:
    import numpy as np
except ImportError:
    print("numpy not available: skipped")
    sys.exit(77)

mpiexec, npflag, gpt, tool, work = sys.argv[1:6]
extra = sys.argv[6:]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
L, H, C, V, P, T = 2, 4, 32, 75, 24, 16  # P positions in the file, T the run's --seq-len
rng = np.random.default_rng(7)


def hf_tensors(C=C):
    """GPT-2's tensors in Hugging Face's names and layout, large enough that GELU, softmax
    and LayerNorm gains are away from their linear regions."""
    t = {"wte.weight": rng.normal(0, 0.5, (V, C)), "wpe.weight": rng.normal(0, 0.3, (P, C))}
    for i in range(L):
        h = f"h.{i}."
        for ln in ("ln_1", "ln_2"):
            t[h + ln + ".weight"] = 1 + rng.normal(0, 0.2, C)
            t[h + ln + ".bias"] = rng.normal(0, 0.1, C)
        for name, fan_in, fan_out in (("attn.c_attn", C, 3 * C), ("attn.c_proj", C, C),
                                      ("mlp.c_fc", C, 4 * C), ("mlp.c_proj", 4 * C, C)):
            t[h + name + ".weight"] = rng.normal(0, 1.2 / np.sqrt(fan_in), (fan_in, fan_out))
            t[h + name + ".bias"] = rng.normal(0, 0.1, fan_out)
    t["ln_f.weight"] = 1 + rng.normal(0, 0.2, C)
    t["ln_f.bias"] = rng.normal(0, 0.1, C)
    return {k: v.astype(np.float32) for k, v in t.items()}


def load_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + n])
    if header.pop("__metadata__", {}).get("format") != "pt":  # transformers loads nothing else
        failures.append(f"{path}: its metadata does not say format pt")
    return {name: np.frombuffer(blob[8 + n + t["data_offsets"][0]:8 + n + t["data_offsets"][1]],
                                dtype="<f4").reshape(t["shape"]) for name, t in header.items()}


def write_safetensors(path, tensors, dtype="F32", metadata=None):
    np_type = {"F32": "<f4", "F16": "<f2"}[dtype]
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype=np_type).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def write_shard(path, tokens):  # llm.c's .bin: 256 int32 of header, then uint16 tokens
    head = np.zeros(256, dtype="<i4")
    head[:3] = (20240520, 1, len(tokens))
    with open(path, "wb") as f:
        f.write(head.tobytes() + np.asarray(tokens, dtype="<u2").tobytes())


def reference_loss(t, tokens, targets):
    """GPT-2's forward in float64 from Hugging Face's tensors."""
    t = {k: v.astype(np.float64) for k, v in t.items()}

    def ln(x, p):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-5) * t[p + ".weight"] + t[p + ".bias"]

    def conv1d(x, p):
        return x @ t[p + ".weight"] + t[p + ".bias"]

    n, hd = len(tokens), C // H
    x = t["wte.weight"][tokens] + t["wpe.weight"][:n]
    mask = np.triu(np.ones((n, n), dtype=bool), 1)
    for i in range(L):
        h = f"h.{i}."
        q, k, v = np.split(conv1d(ln(x, h + "ln_1"), h + "attn.c_attn"), 3, axis=-1)
        q, k, v = (a.reshape(n, H, hd).transpose(1, 0, 2) for a in (q, k, v))
        s = q @ k.transpose(0, 2, 1) / np.sqrt(hd)
        s[:, mask] = -np.inf
        s = np.exp(s - s.max(-1, keepdims=True))
        y = (s / s.sum(-1, keepdims=True)) @ v
        x = x + conv1d(y.transpose(1, 0, 2).reshape(n, C), h + "attn.c_proj")
        a = conv1d(ln(x, h + "ln_2"), h + "mlp.c_fc")
        a = 0.5 * a * (1 + np.tanh(np.sqrt(2 / np.pi) * (a + 0.044715 * a ** 3)))
        x = x + conv1d(a, h + "mlp.c_proj")
    logits = ln(x, "ln_f") @ t["wte.weight"].T
    m = logits.max(-1)
    lse = m + np.log(np.exp(logits - m[:, None]).sum(-1))
    return float((lse - logits[np.arange(n), targets]).mean())


hf = hf_tensors()
hf_dir = os.path.join(work, "gpt2")
os.makedirs(hf_dir, exist_ok=True)
buffers = {f"h.{i}.attn.bias": np.tril(np.ones((P, P), np.float32))[None, None] for i in range(L)}
write_safetensors(os.path.join(hf_dir, "model.safetensors"), {**hf, **buffers}, metadata={"format": "pt"})
config = {"model_type": "gpt2", "n_layer": L, "n_head": H, "n_embd": C, "n_positions": P, "vocab_size": V,
          "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05, "n_inner": None}
with open(os.path.join(hf_dir, "config.json"), "w") as f:
    json.dump(config, f)
# nanoGPT: nn.Linear weights [out, in], here in fp16 (the reference takes the same rounded
# values); saved from a compiled model, with the tied embedding under the head's name.
LINEAR = re.compile(r"\.(c_attn|c_proj|c_fc)\.weight$")
nano_as_hf = {k: v.astype(np.float16).astype(np.float32) for k, v in hf.items()}
nano = {("_orig_mod.lm_head.weight" if k == "wte.weight" else "_orig_mod.transformer." + k):
        (v.T if LINEAR.search(k) else v) for k, v in nano_as_hf.items()}
nano_path = os.path.join(work, "nanogpt.safetensors")
write_safetensors(nano_path, nano, dtype="F16")

window = rng.integers(0, V, T + 1)
write_shard(os.path.join(work, "val.bin"), window)
write_shard(os.path.join(work, "train.bin"), rng.integers(0, V, 4000))
expected = reference_loss(hf, window[:T], window[1:])
expected_fp16 = reference_loss(nano_as_hf, window[:T], window[1:])

def model_options(**changed):
    shape = {"layers": L, "heads": H, "d-model": C, "seq-len": T, "vocab": V}
    shape.update({k.replace("_", "-"): v for k, v in changed.items()})
    return [x for k, v in shape.items() for x in ("--" + k, str(v))]


model = model_options()
batches = ["--micro-batch", "2", "--eval-batches", "1"]
train_only = ["--data", os.path.join(work, "train.bin")] + batches
data_resumable = train_only + ["--val-data", os.path.join(work, "val.bin")]
data = data_resumable + ["--resume", "none"]
failures = []


def run(np_, args, expect_ok=True):
    metrics = os.path.join(work, "m.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [mpiexec, npflag, str(np_), gpt] + args + ["--metrics", metrics]
    r = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    out = r.stdout + r.stderr
    if expect_ok and r.returncode != 0:
        print(out)
        sys.exit(f"FAIL: {' '.join(args)} at {np_} ranks exited {r.returncode}")
    losses = [float(v) for v in re.findall(r"eval: val loss (\S+)", out)]
    if os.path.exists(metrics):
        losses += [json.loads(line)["val_loss"] for line in open(metrics) if "val_loss" in line]
    return r.returncode, out, losses


def check_loss(label, np_, args, want, tol):
    _, out, losses = run(np_, model + data + args + extra)
    if not losses:
        failures.append(f"{label}: no val_loss logged")
        return None
    gap = abs(losses[-1] - want) / want
    print(f"{label}: val_loss {losses[-1]:.7f}, reference {want:.7f}, relative gap {gap:.2e} (bound {tol})")
    if not gap <= tol:  # a NaN gap fails too
        failures.append(f"{label}: relative gap {gap:.3g} > {tol}")
    if "init: weights from" not in out:
        failures.append(f"{label}: no 'init: weights from' line")
    return losses[-1]


hf_file = os.path.join(hf_dir, "model.safetensors")
evaluate = ["--eval-only"]
check_loss("Hugging Face file, 1 rank", 1, evaluate + ["--init-from", hf_file], expected, 1e-5)
check_loss("Hugging Face file, tp 2 with sp", 2, evaluate + ["--init-from", hf_file, "--tp", "2",
                                                              "--sequence-parallel"], expected, 1e-5)
check_loss("Hugging Face file, pp 2", 2, evaluate + ["--init-from", hf_file, "--pp", "2"], expected, 1e-5)
check_loss("Hugging Face directory, ZeRO 2 over 2", 2, evaluate + ["--init-from", hf_dir, "--zero", "2"], expected, 1e-5)
check_loss("Hugging Face file, bf16 with fp32 masters in the fp32 arena, ZeRO 1 over 2", 2,
           evaluate + ["--init-from", hf_file, "--precision", "bf16", "--zero", "1", "--param-storage", "fp32"],
           expected, 2e-2)
check_loss("Hugging Face file, bf16 with 16-bit storage, 1 rank", 1,
           evaluate + ["--init-from", hf_file, "--precision", "bf16", "--param-storage", "16bit"], expected, 2e-2)
check_loss("compiled nanoGPT fp16 file, ZeRO 3 over 2", 2, evaluate + ["--init-from", nano_path, "--zero", "3"],
           expected_fp16, 1e-5)
if extra:
    if failures:
        sys.exit("FAIL:\n" + "\n".join(failures))
    print(f"ok: --init-from matches the reference in every layout with {' '.join(extra)}")
    sys.exit(0)

# Fine-tuning: train from the file and save; the checkpoint, its export and --resume then
# evaluate to the same loss, bit for bit.
ckpt_dir = os.path.join(work, "run")
code, out, _ = run(1, model + data_resumable + ["--init-from", hf_file, "--steps", "3", "--warmup-steps", "0",
                                           "--lr", "1e-3", "--save-dir", ckpt_dir, "--eval-every", "0"])
ckpt = os.path.join(ckpt_dir, "step_00000003.h5")
export = os.path.join(work, "step3.safetensors")
subprocess.run([tool, "export", ckpt, export], check=True, capture_output=True)
_, _, from_resume = run(1, model + data_resumable + evaluate + ["--resume", ckpt])
_, _, from_ckpt = run(1, model + data + evaluate + ["--init-from", ckpt])
_, _, from_export = run(1, model + data + evaluate + ["--init-from", export])
print(f"step 3: --resume {from_resume}, --init-from the checkpoint {from_ckpt}, its export {from_export}")
if not (from_resume and from_resume == from_ckpt == from_export):
    failures.append("a checkpoint, its export and --resume evaluate differently")
if from_resume and abs(from_resume[-1] - expected) < 1e-6:
    failures.append("three steps of training did not change the loss")
# dtrain-ckpt export --hf: the trained model as transformers keeps GPT-2. The reference's
# GPT-2 forward (Conv1D layout) on its tensors gives the checkpoint's loss, its config.json
# GPT-2's settings, and --init-from reads it back bit for bit.
hf_export = os.path.join(work, "step3_hf")
subprocess.run([tool, "export", "--hf", ckpt, hf_export], check=True, capture_output=True)
exported = load_safetensors(os.path.join(hf_export, "model.safetensors"))
exported_config = json.load(open(os.path.join(hf_export, "config.json")))
want_config = {"model_type": "gpt2", "n_layer": L, "n_head": H, "n_embd": C, "n_positions": T, "vocab_size": V,
               "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05, "n_inner": None,
               "tie_word_embeddings": True}
if any(exported_config.get(k, "missing") != v for k, v in want_config.items()):
    failures.append(f"export --hf: config.json {exported_config}, expected {want_config}")
if "lm_head.weight" in exported or any(not k.startswith("transformer.") for k in exported):
    failures.append(f"export --hf: tensors {sorted(exported)}")
as_hf = {k[len("transformer."):]: v for k, v in exported.items()}
hf_export_loss = reference_loss(as_hf, window[:T], window[1:]) if len(as_hf) == len(hf) else float("nan")
_, _, from_hf_export = run(1, model + data + evaluate + ["--init-from", hf_export])
gap = abs(hf_export_loss - from_resume[-1]) / from_resume[-1] if from_resume else float("nan")
print(f"export --hf of step 3: the reference's loss {hf_export_loss:.7f}, relative gap {gap:.2e} to --resume's; "
      f"--init-from it {from_hf_export}")
if not gap <= 1e-5 or from_hf_export != from_resume:
    failures.append(f"export --hf: reference loss gap {gap:.3g}, --init-from it {from_hf_export} against {from_resume}")
# A resumed run takes the checkpoint's weights, not --init-from's, and does not need the file
# (a preempted job whose scratch copy is gone).
os.rename(hf_file, hf_file + ".away")
code, out, _ = run(1, model + data_resumable + ["--init-from", hf_file, "--steps", "4", "--save-dir", ckpt_dir,
                                           "--eval-every", "0"], expect_ok=False)
os.rename(hf_file + ".away", hf_file)
if code != 0 or "is not read: the run resumes from" not in out or "at step 3" not in out:
    failures.append(f"a run with --init-from did not resume its --save-dir's checkpoint (exit {code}):\n{out[-1500:]}")

# Refusals: one message naming what the file holds and the fix, a non-zero exit.
bad_nan = dict(hf)
bad_nan["h.1.mlp.c_fc.bias"] = hf["h.1.mlp.c_fc.bias"].copy()
bad_nan["h.1.mlp.c_fc.bias"][5] = np.nan
write_safetensors(os.path.join(work, "nan.safetensors"), bad_nan)
with open(hf_file, "rb") as f:
    blob = f.read()
with open(os.path.join(work, "cut.safetensors"), "wb") as f:
    f.write(blob[:len(blob) - 100])
with open(os.path.join(work, "cut_in_header.safetensors"), "wb") as f:  # cut inside its JSON header
    f.write(blob[:100])
empty_wte = dict(hf)  # a wte of no rows: the file's damage, not "pass --vocab 0"
empty_wte["wte.weight"] = np.zeros((0, hf["wte.weight"].shape[1]), np.float32)
write_safetensors(os.path.join(work, "empty_wte.safetensors"), empty_wte)
untied = dict(hf)
untied["lm_head.weight"] = hf["wte.weight"] + 1
write_safetensors(os.path.join(work, "untied.safetensors"), untied)
other_gelu = os.path.join(work, "erf_gelu")
os.makedirs(other_gelu, exist_ok=True)
write_safetensors(os.path.join(other_gelu, "model.safetensors"), hf)
with open(os.path.join(other_gelu, "config.json"), "w") as f:
    json.dump({**config, "activation_function": "gelu"}, f)
# A head count no model has (it was wrapped to -1 and offered as "--heads -1"), and a
# config.json that is a directory (it read as a file with a JSON error at byte 0).
huge_heads = os.path.join(work, "huge_heads")
os.makedirs(huge_heads, exist_ok=True)
write_safetensors(os.path.join(huge_heads, "model.safetensors"), hf)
with open(os.path.join(huge_heads, "config.json"), "w") as f:
    json.dump({**config, "n_head": 2 ** 64 - 1}, f)
config_dir = os.path.join(work, "config_dir")
os.makedirs(os.path.join(config_dir, "config.json"), exist_ok=True)
write_safetensors(os.path.join(config_dir, "model.safetensors"), hf)
with open(os.path.join(work, "text.txt"), "w") as f:
    f.write("not a model at all\n")

hf_refusals = [
    (model_options(layers=3), r"holds a GPT of 2 layers, d-model 32, vocabulary 75, 24 positions.*pass --layers 2"),
    (model_options(heads=2), r"pass --heads 4"),
    (model_options(seq_len=32), r"--seq-len 32 is longer than its 24 positions"),
    (model + ["--tie-embeddings", "false"], r"pass --tie-embeddings true"),
]
refusals = [(options + ["--init-from", hf_file], pattern) for options, pattern in hf_refusals] + [
    (model + ["--init-from", os.path.join(work, name)], pattern) for name, pattern in (
        ("nan.safetensors", r"tensor 'h.1.mlp.c_fc.bias' holds nan at element 5"),
        ("cut.safetensors", r"lie outside the .* bytes of data \(a truncated file\?\)"),
        ("empty_wte.safetensors", r"holds a wte of \[0, 32\] and a wpe of \[24, 32\]: a vocabulary of 0 is no GPT's"),
        ("cut_in_header.safetensors", r"\(safetensors\) gives a header of [0-9]+ bytes, which the file of 100 bytes cannot hold"),
        ("untied.safetensors", r"its lm_head.weight is not its wte"),
        ("erf_gelu/model.safetensors", r"activation_function \"gelu\""),
        ("huge_heads", r"n_head is 18446744073709551615, not a number of heads"),
        ("config_dir", r"config.json' next to the weights is not a regular file"),
        ("text.txt", r"neither a dtrain checkpoint \(HDF5\) nor a safetensors file"),
        ("missing.safetensors", r"no such file"))] + [
    (model + ["--init-from", hf_file, "--resume", ckpt], r"--init-from starts a fresh run and --resume \S+ continues one"),
    (model + ["--init-from", work], r"is a directory without a model.safetensors")]
for args, pattern in refusals:
    code, out, _ = run(2, train_only + evaluate + args, expect_ok=False)
    errors = [line for line in out.splitlines() if "ERROR" in line]
    if code == 0 or not re.search(pattern, out) or len(errors) != 1:
        failures.append(f"{' '.join(args[-2:])}: exit {code}, {len(errors)} error lines, expected /{pattern}/:\n{out[-1500:]}")
    else:
        print(f"refused ({code}): {errors[0].strip()[:200]}")

# No shape shows the head count: where the file does not record it (no config.json), a
# --heads whose heads are not of size 64, GPT-2's, is warned about (drawn last, so the values
# above stay as they were).
wide_dir = os.path.join(work, "wide")
os.makedirs(wide_dir)
write_safetensors(os.path.join(wide_dir, "model.safetensors"), hf_tensors(C=64))
for heads, warned in ((4, True), (1, False)):
    _, out, _ = run(1, model_options(d_model=64, heads=heads) + data + evaluate + ["--init-from", wide_dir])
    said = "does not record its head count (no config.json beside it): --heads 4 is taken as given" in out
    if said != warned or (warned and "which would be --heads 1" not in out):
        failures.append(f"--heads {heads} on a file without its head count: warned {said}, expected {warned}")

if failures:
    sys.exit("FAIL:\n" + "\n".join(failures))
print("ok: --init-from matches the reference in every layout and refuses what does not fit")
