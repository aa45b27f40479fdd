#!/usr/bin/env python3
"""`dtrain-ckpt verify` and `export` on copies of a checkpoint that h5py edited so that a
resume could not use it although every dataset still matches its checksum: a missing moment,
tensor (with its moments too) or step counter, an attribute of another HDF5 type or out of range, a dataset replaced
by a link, no checksum metadata. Each must fail
with the status given and a message naming the problem; the unedited copy verifies.

usage: check_structure.py TOOL FILE SCRATCH   (exit 77 = skipped: no h5py)
"""
import json
import os
import shutil
import subprocess
import sys

try:
    import h5py
    import numpy
except ImportError:
    print("h5py not available: skipped")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_checkpoint import put_nan  # noqa: E402  (with the documented checksum)

tool, source, scratch = sys.argv[1:4]


def drop(path):
    return lambda f: f.__delitem__(path)


def drop_attr(obj, name):
    return lambda f: f[obj].attrs.__delitem__(name)


def set_attr(obj, name, value):
    def edit(f):
        if name in f[obj].attrs:
            del f[obj].attrs[name]
        f[obj].attrs[name] = value
    return edit


def add_head(f):  # a separate head, copied from wte with its checksum and moments
    f.copy("/model/wte", "/model/lm_head.weight")
    f.require_group("/optimizer/lm_head.weight")
    for moment in ("exp_avg", "exp_avg_sq"):
        f.copy("/optimizer/wte/" + moment, "/optimizer/lm_head.weight/" + moment)


def soft_link(f):
    del f["/model/wpe"]
    f["/model/wpe"] = h5py.SoftLink("/optimizer/wpe/exp_avg")


cases = [  # (edit, command, status, text)
    (None, "verify", 0, "datasets match their checksums"),
    (drop("/optimizer/wte/exp_avg_sq"), "verify", 1, "tensor 'wte' has no /optimizer/wte/exp_avg_sq"),
    (drop("/model/wpe"), "verify", 1, "/optimizer/wpe/exp_avg belongs to no /model/wpe"),
    (lambda f: [f.__delitem__("/model/wpe"), f.__delitem__("/optimizer/wpe/exp_avg")], "verify", 1,
     "/optimizer/wpe/exp_avg_sq belongs to no /model/wpe"),
    (lambda f: [f.__delitem__(p) for p in ("/model/wpe", "/optimizer/wpe/exp_avg", "/optimizer/wpe/exp_avg_sq")],
     "verify", 1, "no dataset /model/wpe (/model describes a GPT of 1 layers, which has one)"),
    # A damaged layer count names the first block missing (it listed 12 x 10^15 names first).
    (set_attr("/model", "layers", numpy.int64(10**15)), "verify", 1,
     "no dataset /model/h.1.ln_1.weight (/model describes a GPT of 1000000000000000 layers"),
    (drop_attr("/", "step"), "verify", 1, "attribute 'step' is missing"),
    (drop_attr("/optimizer", "step"), "verify", 1, "attribute /optimizer 'step' is missing"),
    (soft_link, "verify", 2, "/model/wpe is a soft or external link"),
    # A checksum attribute of another type or range is the file's damage, named as such (the
    # file is read, not refused as unreadable); h5py's strings are variable-length ones,
    # shown as they are.
    (set_attr("/model/wte", "checksum", numpy.float64(1.0)), "verify", 1,
     "dataset /model/wte: attribute 'checksum' is not an integer"),
    (set_attr("/model/wte", "checksum", numpy.int64(-1)), "verify", 1, "dataset /model/wte: attribute 'checksum' is -1"),
    (set_attr("/model/wte", "checksum", numpy.float64(1.0)), "export", 2,
     "dataset /model/wte: attribute 'checksum' is not an integer"),
    (set_attr("/", "checksum_algorithm", "crc32"), "verify", 1, "unknown checksum algorithm 'crc32'"),
    (set_attr("/", "format", "dtrain-checkpoint"), "verify", 1, "attribute 'format' is not a fixed-length string"),
    # Attributes of the right value in another HDF5 type, or out of range: a resume refuses them.
    (set_attr("/", "format_version", numpy.bytes_(b"1")), "verify", 1,
     "attribute 'format_version' is not"),
    (set_attr("/model", "layers", numpy.float64(2.0)), "verify", 1, "/model: attribute 'layers' is not"),
    (set_attr("/", "run_config", numpy.int64(3)), "verify", 1, "attribute 'run_config' is not a fixed-length string"),
    (lambda f: [set_attr("/", "loss_scale", numpy.float64(-2.0))(f),
                set_attr("/", "loss_scale_clean_steps", numpy.int64(0))(f)], "verify", 1,
     "has a loss scale of -2 after 0 clean steps"),
    (lambda f: put_nan(f, "/model/wpe", 3), "verify", 1, "dataset /model/wpe holds nan at element 3, which a resume refuses"),
    # AdamW's settings, where stored, are ones a run could have used (a resume compares them).
    (set_attr("/optimizer", "beta1", numpy.float64("nan")), "verify", 1, "AdamW beta1 nan, which no run uses"),
    (set_attr("/optimizer", "eps", numpy.float64(0.0)), "verify", 1, "AdamW eps 0, which no run uses"),
    # The head agrees with the tying flag, which is 0 or 1 (a resume compares it as such).
    (set_attr("/model", "tie_embeddings", numpy.int64(7)), "verify", 1, "/model's tie_embeddings is 7, not 0 or 1"),
    (set_attr("/model", "layers", numpy.int64(-1)), "verify", 1, "/model's layers is -1, which no model has"),
    # Step counters without room to count on (one more step wrapped 2^63 - 1 negative).
    (set_attr("/", "step", numpy.int64(2 ** 62 + 1)), "verify", 1, "has a step of 4611686018427387905, past 2^62"),
    (set_attr("/optimizer", "step", numpy.int64(2 ** 63 - 1)), "verify", 1,
     "/optimizer has a step of 9223372036854775807, past 2^62"),
    (set_attr("/model", "tie_embeddings", numpy.int64(0)), "verify", 1, "no dataset /model/lm_head.weight"),
    (add_head, "verify", 1, "/model/lm_head.weight in a file whose /model says the head is tied"),
    (lambda f: [add_head(f), set_attr("/model", "tie_embeddings", numpy.int64(0))(f)], "verify", 0,
     "datasets match their checksums"),
    (drop_attr("/", "checksum_algorithm"), "export", 2, "no checksum_algorithm attribute"),
    (drop_attr("/", "format_version"), "verify", 1, "no format_version attribute"),
    (drop_attr("/model/wte", "checksum"), "export", 2, "dataset /model/wte has no checksum"),
]
failed = False
out_file = scratch + ".safetensors"
for edit, command, want, text in cases:
    shutil.copyfile(source, scratch)
    if edit:
        with h5py.File(scratch, "r+") as f:
            edit(f)
    args = [tool, command, scratch] + ([out_file] if command == "export" else [])
    run = subprocess.run(args, capture_output=True, text=True)
    out = (run.stdout + run.stderr).strip()
    ok = run.returncode == want and text in out and len(out.splitlines()) == 1
    if command == "export" and os.path.exists(out_file):
        ok = False  # nothing may be written
        os.remove(out_file)
    print(("ok  " if ok else "FAIL"), command, text, "->", run.returncode, out)
    failed |= not ok

# A string attribute that is not UTF-8 (a hand-edited file) still exports a header that is
# (safetensors' header is UTF-8 JSON): its stray byte as the character of its number.
shutil.copyfile(source, scratch)
with h5py.File(scratch, "r+") as f:
    raw = b"\xff0.2 \xc3\xa9"
    del f.attrs["library_version"]
    f.attrs.create("library_version", numpy.bytes_(raw), dtype=h5py.string_dtype("ascii", len(raw)))
run = subprocess.run([tool, "export", scratch, out_file], capture_output=True, text=True)
try:
    with open(out_file, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        shown = json.loads(f.read(size).decode("utf-8"))["__metadata__"]["library_version"]
    ok = run.returncode == 0 and shown == "\u00ff0.2 \u00e9"
except (OSError, ValueError, KeyError) as e:
    ok, shown = False, repr(e)
if os.path.exists(out_file):
    os.remove(out_file)
print(("ok  " if ok else "FAIL"), "export of a non-UTF-8 attribute ->", run.returncode, repr(shown))
failed |= not ok
sys.exit(1 if failed else 0)
