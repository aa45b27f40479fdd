#!/usr/bin/env python3
"""check_resume_refuses.py TOOL GPT CONFIG FILE DIR: copies of the checkpoint FILE that h5py
edited into values HDF5 would convert without a word (an unsigned step past int64, a negative
sample count, /model/wpe stored as float64 with its checksum intact). A resume must refuse
each (exit 1) naming the problem, where it used to clamp the counts or convert the values,
and `TOOL verify` must refuse it too (exit 1); counts in range stored in other integer types
(a checksum as int64, as h5py stores a Python int; a sample count past 10^19) must still
verify and resume; a NaN whose checksum was made to match, a tying flag of -1, another
optimiser's state or a negative second moment is refused. Exits 77 (skipped) without h5py."""
import os
import shutil
import subprocess
import sys

try:
    import h5py
    import numpy
except ImportError:
    print("h5py is not available: skipped")
    sys.exit(77)

tool, gpt, config, src, work = sys.argv[1:6]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)


def set_attr(obj, name, value):
    def edit(f):
        del f[obj].attrs[name]
        f[obj].attrs[name] = value
    return edit


def wpe_as_float64(f):
    values, checksum = f["model/wpe"][()], f["model/wpe"].attrs["checksum"]
    del f["model/wpe"]
    f.create_dataset("model/wpe", data=values.astype("<f8"))
    f["model/wpe"].attrs["checksum"] = checksum


def same_value_as(obj, name, kind):
    def edit(f):
        value = int(f[obj].attrs[name])
        del f[obj].attrs[name]
        f[obj].attrs[name] = kind(value)
    return edit


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_checkpoint import checksum, put_nan  # noqa: E402  (with the documented checksum)


def negative_second_moment(f):
    data = f["optimizer/wpe/exp_avg_sq"][...]
    data.flat[5] = -1.0
    f["optimizer/wpe/exp_avg_sq"][...] = data
    f["optimizer/wpe/exp_avg_sq"].attrs["checksum"] = numpy.uint64(checksum(data))


cases = [  # (name, edit, what the resume says; None: it resumes)
    ("step_uint64", set_attr("/optimizer", "step", numpy.uint64(2**64 - 1)),
     "/optimizer: attribute 'step' is 18446744073709551615, outside int64"),
    ("negative_samples", set_attr("/", "consumed_samples", numpy.int64(-7)),
     "attribute 'consumed_samples' is -7, outside uint64"),
    ("wpe_float64", wpe_as_float64, "dataset /model/wpe is float64, not float32"),
    # Values no run writes: a NaN (it resumed, then "diverged"), a tying flag of -1.
    ("nan_weight", lambda f: put_nan(f, "model/wpe", 3), "dataset /model/wpe holds nan: a checkpoint to resume holds none"),
    ("tie_minus_one", set_attr("/model", "tie_embeddings", numpy.int64(-1)), "tie_embeddings is -1, not 0 or 1"),
    # Another optimiser's state; a negative second moment (the next update was NaN).
    ("optimizer_sgd", set_attr("/optimizer", "type", numpy.bytes_(b"sgd")),
     "/optimizer holds the state of optimiser 'sgd'; this library resumes AdamW's"),
    ("negative_exp_avg_sq", negative_second_moment,
     "dataset /optimizer/wpe/exp_avg_sq holds a negative second moment"),
    # A sample count past 10^19 is still a uint64.
    ("samples_past_1e19", set_attr("/", "consumed_samples", numpy.uint64(10**19)), None),
    # Values in range stored in other integer types (h5py stores a Python int as int64) load.
    ("step_uint64_in_range", same_value_as("/optimizer", "step", numpy.uint64), None),
    ("checksum_int64", same_value_as("/model/wpe", "checksum", numpy.int64), None),
    ("samples_int32", same_value_as("/", "consumed_samples", numpy.int32), None),
]
failures = []
for name, edit, says in cases:
    path = os.path.join(work, name + ".h5")
    shutil.copy(src, path)
    with h5py.File(path, "r+") as f:
        edit(f)
    for what, cmd, text in (("verify", [tool, "verify", path], "FAILED" if says else "ok: "),
                            ("resume", [gpt, "--config", config, "--steps", "6", "--resume", path],
                             says or "done: 6 steps")):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        out = r.stdout + r.stderr
        want = 1 if says else 0
        if r.returncode != want or text not in out:
            failures.append(f"{what} of {name}: exit {r.returncode}, expected {want} with '{text}':\n{out[-800:]}")
        else:
            print(f"{what} {'refused' if says else 'took'} {name}")

if failures:
    print("FAIL:\n" + "\n".join(failures))
    sys.exit(1)
print("ok: counts and values HDF5 would convert are refused, counts in range of other types taken")
